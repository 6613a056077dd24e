#include "gateway/request.h"

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <simdjson.h>
#include <xxhash.h>

#include "core/json_depth.h"
#include "gateway/json_text.h"
#include "http/usage_header.h"

namespace aicloud::gateway {

namespace {

namespace dom = simdjson::dom;
using nlohmann::json;

constexpr int64_t kMaxTokensBound = 100'000'000;
// Documents up to this size are parsed with the thread's parser, which keeps the capacity of the
// largest it parsed (about 14 bytes per byte of text, with the kept copy of the text: at most
// ~3.7 MiB per thread); larger ones get a parser of their own, allocated and freed for them.
constexpr size_t kKeepParserBytes = size_t{256} << 10;
// simdjson's default nesting limit; nlohmann's dump recurses once per level, so a text nested
// deeper never reaches it (RewriteDocument, Renormalized).
constexpr int kMaxDepth = static_cast<int>(simdjson::DEFAULT_MAX_DEPTH);

struct ThreadParser {
  dom::parser parser;
  std::string padded;  // the text, with the zone simdjson may read past its end
  // The document of `padded`, when its last parse succeeded: RewriteBody of the text
  // ParseRequestInfo just read uses it instead of parsing the same bytes again.
  std::optional<dom::element> document;
  int64_t reuses = 0;  // rewrites that used `document` (request_internal::DocumentReuses)
};

// Not in ParseJson: a template's thread_local is one per instantiation.
ThreadParser& ThisThreadsParser() {
  thread_local ThreadParser t;
  return t;
}

// Parses `text` (after a UTF-8 byte order mark, which document parsers skip too) and hands the
// result — a document or an error — to `use`, which must not parse again on this thread before it
// is done with the document.
template <class Use>
auto ParseJson(std::string_view text, Use&& use) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  if (text.size() > kKeepParserBytes) {
    dom::parser parser;
    simdjson::padded_string copy(text);
    return use(parser.parse(copy));
  }
  ThreadParser& t = ThisThreadsParser();
  t.document.reset();
  t.padded.reserve(text.size() + simdjson::SIMDJSON_PADDING);
  t.padded.assign(text.data(), text.size());
  simdjson::simdjson_result<dom::element> doc = t.parser.parse(t.padded.data(), t.padded.size(), /*realloc_if_needed=*/false);
  if (doc.error() == simdjson::SUCCESS) t.document = doc.value_unsafe();
  return use(doc);
}

// The document of `text` if this thread's parser read exactly these bytes last (ParseRequestInfo
// just did), else nothing. The bytes are compared, so an edit in between cannot be missed.
std::optional<dom::element> LastDocumentOf(std::string_view text) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  ThreadParser& t = ThisThreadsParser();
  if (!t.document || text.size() > kKeepParserBytes || std::string_view(t.padded) != text) return std::nullopt;
  ++t.reuses;
  return t.document;
}

// The value of the LAST member named `key`, as a parsed document keeps it (and as the engines,
// which read the body after the gateway, see it).
std::optional<dom::element> Member(dom::object o, std::string_view key) {
  std::optional<dom::element> v;
  for (dom::key_value_pair kv : o) {
    if (kv.key == key) v = kv.value;
  }
  return v;
}

// The values of the members named in `keys`, read in one pass over `o`: slot i holds the LAST
// member named keys[i], as Member would find it.
template <size_t N>
std::array<std::optional<dom::element>, N> Members(dom::object o, const std::array<std::string_view, N>& keys) {
  std::array<std::optional<dom::element>, N> out;
  for (dom::key_value_pair kv : o) {
    for (size_t i = 0; i < N; ++i) {
      if (kv.key == keys[i]) {
        out[i] = kv.value;
        break;
      }
    }
  }
  return out;
}

bool IsNull(const std::optional<dom::element>& v) { return !v || v->is_null(); }

// A signed integer, as the field's type allows it (an unsigned one above INT64_MAX is not).
std::optional<int64_t> Integer(dom::element v) {
  return v.type() == dom::element_type::INT64 ? std::optional(int64_t(v)) : std::nullopt;
}

void AppendContent(dom::element content, RequestInfo* info) {
  if (content.is_string()) {
    info->prompt_text.append(std::string_view(content));
  } else if (content.is_array()) {  // [{"type": "text", "text": "..."}, {"type": "image_url", ...}]
    for (dom::element part : dom::array(content)) {
      if (!part.is_object()) continue;
      std::optional<dom::element> text = Member(dom::object(part), "text");
      if (text && text->is_string()) {
        info->prompt_text.append(std::string_view(*text));
      } else {
        info->extra_prompt_tokens += kImageTokensBound;  // an image (or audio, file) part
      }
    }
  }
}

// Bytes of a field a chat template renders into the prompt as JSON (tools, a tool call...).
int64_t JsonBytes(const std::optional<dom::element>& v) {
  return IsNull(v) ? 0 : static_cast<int64_t>(simdjson::minify(*v).size());
}

// A completion prompt or an embedding input: a string, a list of strings, token ids, or a list
// of token-id lists.
void AppendPrompt(dom::element p, RequestInfo* info) {
  if (p.is_string()) {
    info->prompt_text.append(std::string_view(p));
  } else if (p.is_array()) {
    int64_t prompts = 0;  // a list of strings or of token-id lists is that many prompts
    for (dom::element x : dom::array(p)) {
      if (x.is_string()) info->prompt_text.append(std::string_view(x)), ++prompts;
      else if (x.is_int64() || x.is_uint64()) ++info->prompt_token_ids;
      else if (x.is_array()) info->prompt_token_ids += static_cast<int64_t>(dom::array(x).size()), ++prompts;
    }
    info->prompts = std::max<int64_t>(1, prompts);
  }
}

// The members RequestInfoOf reads, in the order of kBodyKeys.
enum BodyKey : size_t {
  kModel, kStream, kStreamOptions, kMaxCompletionTokens, kMaxTokens, kN, kMessages, kTools, kFunctions,
  kToolChoice, kResponseFormat, kPrompt, kInput, kBodyKeyCount
};
constexpr std::array<std::string_view, kBodyKeyCount> kBodyKeys = {
    "model", "stream", "stream_options", "max_completion_tokens", "max_tokens", "n", "messages", "tools",
    "functions", "tool_choice", "response_format", "prompt", "input"};
enum MessageKey : size_t { kRole, kContent, kToolCalls, kFunctionCall, kName, kMessageKeyCount };
constexpr std::array<std::string_view, kMessageKeyCount> kMessageKeys = {"role", "content", "tool_calls",
                                                                         "function_call", "name"};

StatusOr<RequestInfo> RequestInfoOf(dom::object body, Endpoint endpoint) {
  RequestInfo info;
  const std::array<std::optional<dom::element>, kBodyKeyCount> field = Members(body, kBodyKeys);
  const std::optional<dom::element>& m = field[kModel];
  if (!m || !m->is_string() || std::string_view(*m).empty()) return InvalidArgumentError("model: required, a string");
  info.model = std::string(std::string_view(*m));
  if (const std::optional<dom::element>& s = field[kStream]; !IsNull(s)) {
    if (!s->is_bool()) return InvalidArgumentError("stream: must be a boolean");
    info.stream = bool(*s);
  }
  if (const std::optional<dom::element>& so = field[kStreamOptions]; !IsNull(so)) {
    if (!so->is_object()) return InvalidArgumentError("stream_options: must be an object");
    std::optional<dom::element> iu = Member(dom::object(*so), "include_usage");
    if (!IsNull(iu)) {
      if (!iu->is_bool()) return InvalidArgumentError("stream_options.include_usage: must be a boolean");
      info.include_usage = bool(*iu);
    }
  }
  for (BodyKey key : {kMaxCompletionTokens, kMaxTokens}) {
    const std::optional<dom::element>& t = field[key];
    if (IsNull(t)) continue;
    // Bounded so that prompt + max_tokens * n (a budget reservation) cannot overflow.
    std::optional<int64_t> v = Integer(*t);
    if (!v || *v < 0 || *v > kMaxTokensBound) {
      return InvalidArgumentError(std::string(kBodyKeys[key]) + ": must be an integer from 0 to " + std::to_string(kMaxTokensBound));
    }
    info.max_tokens = *v;
    break;
  }
  if (const std::optional<dom::element>& n = field[kN]; !IsNull(n)) {
    std::optional<int64_t> v = Integer(*n);
    if (!v || *v < 1 || *v > 128) return InvalidArgumentError("n: must be an integer from 1 to 128");
    info.n = *v;
  }
  switch (endpoint) {
    case Endpoint::kChat: {
      const std::optional<dom::element>& msgs = field[kMessages];
      if (!msgs || !msgs->is_array()) return InvalidArgumentError("messages: required, a list");
      for (dom::element msg : dom::array(*msgs)) {
        if (!msg.is_object()) return InvalidArgumentError("messages: each message must be an object");
        const std::array<std::optional<dom::element>, kMessageKeyCount> part = Members(dom::object(msg), kMessageKeys);
        ++info.messages;
        if (const std::optional<dom::element>& r = part[kRole]; r && r->is_string()) info.prompt_text.append(std::string_view(*r));
        info.prompt_text.push_back('\n');
        if (part[kContent]) AppendContent(*part[kContent], &info);
        info.prompt_text.push_back('\n');
        info.extra_prompt_tokens += JsonBytes(part[kToolCalls]) + JsonBytes(part[kFunctionCall]) + JsonBytes(part[kName]);
      }
      for (BodyKey key : {kTools, kFunctions, kToolChoice, kResponseFormat}) info.extra_prompt_tokens += JsonBytes(field[key]);
      break;
    }
    case Endpoint::kCompletions:
      if (field[kPrompt]) AppendPrompt(*field[kPrompt], &info);
      break;
    case Endpoint::kEmbeddings:
      if (field[kInput]) AppendPrompt(*field[kInput], &info);
      info.max_tokens = 0;
      break;
  }
  return info;
}

// simdjson refuses numbers beyond 64-bit integers and doubles (an integer with 30 digits) that
// other parsers read as floats; such a text is read once more through nlohmann's document, whose
// text those numbers leave as floats simdjson takes. nullopt when that does not help.
std::optional<std::string> Renormalized(simdjson::error_code e, std::string_view text, bool retried) {
  if (retried || e != simdjson::NUMBER_ERROR || !JsonNestsWithin(text, kMaxDepth)) return std::nullopt;
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return std::nullopt;
  return doc.dump();
}

StatusOr<RequestInfo> ReadRequestInfo(std::string_view body, Endpoint endpoint, bool retried) {
  return ParseJson(body, [&](simdjson::simdjson_result<dom::element> doc) -> StatusOr<RequestInfo> {
    if (std::optional<std::string> again = Renormalized(doc.error(), body, retried)) return ReadRequestInfo(*again, endpoint, true);
    if (doc.error()) return InvalidArgumentError(std::string("body: not valid JSON (") + simdjson::error_message(doc.error()) + ")");
    dom::object o;
    if (doc.get_object().get(o)) return InvalidArgumentError("body: expected a JSON object");
    return RequestInfoOf(o, endpoint);
  });
}

std::optional<TokenUsage> ReadUsage(std::string_view body, bool retried) {
  return ParseJson(body, [&](simdjson::simdjson_result<dom::element> doc) -> std::optional<TokenUsage> {
    if (std::optional<std::string> again = Renormalized(doc.error(), body, retried)) return ReadUsage(*again, true);
    dom::object o;
    if (doc.get_object().get(o)) return std::nullopt;
    std::optional<dom::element> u = Member(o, "usage");
    if (!u || !u->is_object()) return std::nullopt;
    // UsageOf's rules: a count that is not an integer counts 0, a negative one too (and an
    // unsigned one above INT64_MAX, which UsageOf's conversion makes negative).
    constexpr std::array<std::string_view, 2> kCounts = {"prompt_tokens", "completion_tokens"};
    const std::array<std::optional<dom::element>, 2> v = Members(dom::object(*u), kCounts);
    auto count = [](const std::optional<dom::element>& c) -> int64_t {
      return c && c->is_int64() ? std::max<int64_t>(0, int64_t(*c)) : 0;
    };
    return TokenUsage{count(v[0]), count(v[1])};
  });
}


// BodyEdits made through an nlohmann document: the path for texts simdjson refuses.
StatusOr<std::string> RewriteDocument(std::string_view body, const BodyEdits& edits) {
  if (!JsonNestsWithin(body, kMaxDepth)) return InvalidArgumentError("body: nested deeper than " + std::to_string(kMaxDepth) + " levels");
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return InvalidArgumentError("body: expected a JSON object");
  if (edits.model) doc["model"] = *edits.model;
  if (edits.include_usage) {
    json& so = doc["stream_options"];
    if (!so.is_object()) so = json::object();
    so["include_usage"] = true;
  }
  if (edits.max_tokens) doc["max_tokens"] = *edits.max_tokens;
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

StatusOr<std::string> Rewrite(std::string_view body, const BodyEdits& edits) {
  auto write = [&](simdjson::simdjson_result<dom::element> doc) -> StatusOr<std::string> {
    if (doc.error() == simdjson::NUMBER_ERROR) return RewriteDocument(body, edits);
    dom::object o;
    if (doc.get_object().get(o)) return InvalidArgumentError("body: expected a JSON object");
    std::string out;
    out.reserve(body.size() + 96);
    out += '{';
    auto member = [&](std::string_view key) {
      if (out.size() > 1) out += ',';
      AppendJsonString(&out, key);
      out += ':';
    };
    std::optional<dom::element> stream_options;
    for (dom::key_value_pair kv : o) {
      if ((edits.model && kv.key == "model") || (edits.max_tokens && kv.key == "max_tokens")) continue;
      if (edits.include_usage && kv.key == "stream_options") {
        stream_options = kv.value;  // the last one counts
        continue;
      }
      member(kv.key);
      out += simdjson::minify(kv.value);
    }
    if (edits.model) {
      member("model");
      AppendJsonString(&out, *edits.model);
    }
    if (edits.include_usage) {
      member("stream_options");
      out += '{';
      if (stream_options && stream_options->is_object()) {
        for (dom::key_value_pair kv : dom::object(*stream_options)) {
          if (kv.key == "include_usage") continue;
          AppendJsonString(&out, kv.key);
          out += ':';
          out += simdjson::minify(kv.value);
          out += ',';
        }
      }
      out += "\"include_usage\":true}";
    }
    if (edits.max_tokens) {
      member("max_tokens");
      out += std::to_string(*edits.max_tokens);
    }
    out += '}';
    return out;
  };
  if (std::optional<dom::element> doc = LastDocumentOf(body)) return write(simdjson::simdjson_result<dom::element>(std::move(*doc)));
  return ParseJson(body, write);
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

StatusOr<RequestInfo> ParseRequestInfo(std::string_view body, Endpoint endpoint) {
  return ReadRequestInfo(body, endpoint, /*retried=*/false);
}

StatusOr<std::string> RewriteBody(std::string_view body, const BodyEdits& edits) { return Rewrite(body, edits); }

namespace request_internal {
int64_t DocumentReuses() { return ThisThreadsParser().reuses; }
}  // namespace request_internal

std::vector<uint64_t> PrefixHashes(std::string_view text, size_t block_bytes, int max_blocks) {
  std::vector<uint64_t> out;
  if (block_bytes == 0) return out;
  uint64_t prev = 0;
  for (size_t at = 0; at + block_bytes <= text.size() && static_cast<int>(out.size()) < max_blocks; at += block_bytes) {
    prev = XXH3_64bits_withSeed(text.data() + at, block_bytes, prev);
    out.push_back(prev);
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

std::optional<TokenUsage> UsageOfText(std::string_view body) { return ReadUsage(body, /*retried=*/false); }

std::optional<TokenUsage> UsageOfAnswer(const http::HeaderMap& headers, std::string_view body) {
  if (auto h = headers.find(http::kUsageHeader); h != headers.end()) {
    if (std::optional<http::UsageCounts> u = http::ParseUsageHeader(h->second)) {
      return TokenUsage{u->prompt_tokens, u->completion_tokens};
    }
  }
  return UsageOfText(body);
}

}  // namespace aicloud::gateway
