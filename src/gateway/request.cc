#include "gateway/request.h"

#include <algorithm>
#include <limits>
#include <optional>

namespace aicloud::gateway {

namespace {

using nlohmann::json;

constexpr int64_t kMaxTokensBound = 100'000'000;

void AppendContent(const json& content, RequestInfo* info) {
  if (content.is_string()) {
    info->prompt_text.append(content.get_ref<const std::string&>());
  } else if (content.is_array()) {  // [{"type": "text", "text": "..."}, {"type": "image_url", ...}]
    for (const json& part : content) {
      if (!part.is_object()) continue;
      auto text = part.find("text");
      if (text != part.end() && text->is_string()) {
        info->prompt_text.append(text->get_ref<const std::string&>());
      } else {
        info->extra_prompt_tokens += kImageTokensBound;  // an image (or audio, file) part
      }
    }
  }
}

// Bytes of a field a chat template renders into the prompt as JSON (tools, a tool call...).
int64_t JsonBytes(const json& body, const char* field) {
  auto it = body.find(field);
  return it == body.end() || it->is_null() ? 0 : static_cast<int64_t>(it->dump().size());
}

// A completion prompt or an embedding input: a string, a list of strings, token ids, or a list
// of token-id lists.
void AppendPrompt(const json& p, RequestInfo* info) {
  if (p.is_string()) {
    info->prompt_text.append(p.get_ref<const std::string&>());
  } else if (p.is_array()) {
    int64_t prompts = 0;  // a list of strings or of token-id lists is that many prompts
    for (const json& x : p) {
      if (x.is_string()) info->prompt_text.append(x.get_ref<const std::string&>()), ++prompts;
      else if (x.is_number_integer()) ++info->prompt_token_ids;
      else if (x.is_array()) info->prompt_token_ids += static_cast<int64_t>(x.size()), ++prompts;
    }
    info->prompts = std::max<int64_t>(1, prompts);
  }
}

}  // namespace

const char* EndpointName(Endpoint e) {
  switch (e) {
    case Endpoint::kChat: return "chat/completions";
    case Endpoint::kCompletions: return "completions";
    case Endpoint::kEmbeddings: return "embeddings";
  }
  return "?";
}

int64_t RequestInfo::PromptTokensUpperBound() const {
  return static_cast<int64_t>(prompt_text.size()) + prompt_token_ids + extra_prompt_tokens +
         8 * static_cast<int64_t>(messages) + 16;
}

StatusOr<RequestInfo> ParseRequestInfo(const json& body, Endpoint endpoint) {
  RequestInfo info;
  auto m = body.find("model");
  if (m == body.end() || !m->is_string() || m->get_ref<const std::string&>().empty()) {
    return InvalidArgumentError("model: required, a string");
  }
  info.model = m->get<std::string>();
  if (auto s = body.find("stream"); s != body.end() && !s->is_null()) {
    if (!s->is_boolean()) return InvalidArgumentError("stream: must be a boolean");
    info.stream = s->get<bool>();
  }
  if (auto so = body.find("stream_options"); so != body.end() && so->is_object()) {
    auto iu = so->find("include_usage");
    if (iu != so->end() && !iu->is_null()) {
      if (!iu->is_boolean()) return InvalidArgumentError("stream_options.include_usage: must be a boolean");
      info.include_usage = iu->get<bool>();
    }
  }
  for (const char* field : {"max_completion_tokens", "max_tokens"}) {
    auto t = body.find(field);
    if (t == body.end() || t->is_null()) continue;
    // Bounded so that prompt + max_tokens * n (a budget reservation) cannot overflow.
    if (!t->is_number_integer() || t->get<int64_t>() < 0 || t->get<int64_t>() > kMaxTokensBound) {
      return InvalidArgumentError(std::string(field) + ": must be an integer from 0 to " + std::to_string(kMaxTokensBound));
    }
    info.max_tokens = t->get<int64_t>();
    break;
  }
  if (auto n = body.find("n"); n != body.end() && !n->is_null()) {
    if (!n->is_number_integer() || n->get<int64_t>() < 1 || n->get<int64_t>() > 128) {
      return InvalidArgumentError("n: must be an integer from 1 to 128");
    }
    info.n = n->get<int64_t>();
  }
  switch (endpoint) {
    case Endpoint::kChat: {
      auto msgs = body.find("messages");
      if (msgs == body.end() || !msgs->is_array()) return InvalidArgumentError("messages: required, a list");
      for (const json& msg : *msgs) {
        if (!msg.is_object()) return InvalidArgumentError("messages: each message must be an object");
        ++info.messages;
        if (auto r = msg.find("role"); r != msg.end() && r->is_string()) info.prompt_text.append(r->get_ref<const std::string&>());
        info.prompt_text.push_back('\n');
        if (auto c = msg.find("content"); c != msg.end()) AppendContent(*c, &info);
        info.prompt_text.push_back('\n');
        info.extra_prompt_tokens += JsonBytes(msg, "tool_calls") + JsonBytes(msg, "function_call") + JsonBytes(msg, "name");
      }
      for (const char* field : {"tools", "functions", "tool_choice", "response_format"}) {
        info.extra_prompt_tokens += JsonBytes(body, field);
      }
      break;
    }
    case Endpoint::kCompletions:
      if (auto p = body.find("prompt"); p != body.end()) AppendPrompt(*p, &info);
      break;
    case Endpoint::kEmbeddings:
      if (auto p = body.find("input"); p != body.end()) AppendPrompt(*p, &info);
      info.max_tokens = 0;
      break;
  }
  return info;
}

std::vector<uint64_t> PrefixHashes(std::string_view text, size_t block_bytes, int max_blocks) {
  std::vector<uint64_t> out;
  if (block_bytes == 0) return out;
  uint64_t prev = 0xcbf29ce484222325ull;  // FNV offset basis
  for (size_t at = 0; at + block_bytes <= text.size() && static_cast<int>(out.size()) < max_blocks; at += block_bytes) {
    uint64_t h = prev;
    for (size_t i = at; i < at + block_bytes; ++i) {
      h ^= static_cast<unsigned char>(text[i]);
      h *= 0x100000001b3ull;  // FNV prime
    }
    out.push_back(h);
    prev = h;
  }
  return out;
}

std::optional<TokenUsage> UsageOf(const json& body) {
  if (!body.is_object()) return std::nullopt;
  auto u = body.find("usage");
  if (u == body.end() || !u->is_object()) return std::nullopt;
  // An engine's numbers, read without trusting their types (a string or a negative count would
  // throw or lower the spend).
  auto count = [&](const char* key) -> int64_t {
    auto it = u->find(key);
    return it != u->end() && it->is_number_integer() ? std::max<int64_t>(0, it->get<int64_t>()) : 0;
  };
  TokenUsage t;
  t.prompt_tokens = count("prompt_tokens");
  t.completion_tokens = count("completion_tokens");
  return t;
}

namespace {

// SAX events of one document; keeps the top-level "usage" object's two counts, last one winning
// as in a parsed document, with UsageOf's rules for their types.
class UsageSax {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  std::optional<TokenUsage> result() const { return top_object_ && has_usage_ ? std::optional(usage_) : std::nullopt; }

  bool null() { return Value(); }
  bool boolean(bool) { return Value(); }
  bool number_integer(number_integer_t v) { return Count(std::max<int64_t>(0, v)); }
  bool number_unsigned(number_unsigned_t v) {
    return Count(v <= static_cast<number_unsigned_t>(std::numeric_limits<int64_t>::max()) ? static_cast<int64_t>(v) : 0);
  }
  bool number_float(number_float_t, const string_t&) { return Value(); }
  bool string(string_t&) { return Value(); }
  bool binary(binary_t&) { return Value(); }
  bool start_object(std::size_t) {
    if (depth_ == 2 && in_usage_) Count(0);  // a count that is an object counts 0
    if (depth_ == 0) top_object_ = true;
    if (depth_ == 1 && key_ == kUsage) {
      has_usage_ = true;  // a later "usage" replaces an earlier one, as in a document
      usage_ = {};
      in_usage_ = true;
    } else if (depth_ == 1) {
      NotUsage();
    }
    ++depth_;
    key_ = kOther;
    return true;
  }
  bool end_object() {
    if (--depth_ == 1) in_usage_ = false;
    return true;
  }
  bool start_array(std::size_t) {
    if (depth_ == 2 && in_usage_) Count(0);
    if (depth_ == 1) NotUsage();
    ++depth_;
    return true;
  }
  bool end_array() {
    --depth_;
    return true;
  }
  bool key(string_t& k) {
    if (depth_ == 1) key_ = k == "usage" ? kUsage : kOther;
    if (depth_ == 2 && in_usage_) key_ = k == "prompt_tokens" ? kPrompt : k == "completion_tokens" ? kCompletion : kOther;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    top_object_ = false;
    return false;
  }

 private:
  enum Key { kOther, kUsage, kPrompt, kCompletion };
  // A scalar at `depth_`: a top-level "usage" that is not an object cancels an earlier one; a
  // count of another type counts 0.
  bool Value() { return Count(0); }
  bool Count(int64_t v) {
    if (depth_ == 1) NotUsage();
    if (depth_ == 2 && in_usage_) {
      if (key_ == kPrompt) usage_.prompt_tokens = v;
      if (key_ == kCompletion) usage_.completion_tokens = v;
    }
    return true;
  }
  void NotUsage() {
    if (key_ == kUsage) has_usage_ = false;
  }

  int depth_ = 0;
  Key key_ = kOther;
  bool top_object_ = false, has_usage_ = false, in_usage_ = false;
  TokenUsage usage_;
};

}  // namespace

std::optional<TokenUsage> UsageOfText(std::string_view body) {
  UsageSax sax;
  if (!json::sax_parse(body.begin(), body.end(), &sax)) return std::nullopt;
  return sax.result();
}

}  // namespace aicloud::gateway
