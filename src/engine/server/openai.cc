#include "engine/server/openai.h"

#include <charconv>
#include <string>

namespace aicloud::engine {
namespace {

using json = nlohmann::ordered_json;

Status Bad(const std::string& param, const std::string& what) {
  return InvalidArgumentError(param + ": " + what);
}

// Reads an optional number field into *out; INVALID_ARGUMENT when present with another type.
template <typename T>
Status Number(const json& b, const char* name, T* out) {
  auto it = b.find(name);
  if (it == b.end() || it->is_null()) return OkStatus();
  if (!it->is_number()) return Bad(name, "must be a number, got " + std::string(it->type_name()));
  if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) return Bad(name, "must be an integer");
    *out = it->get<T>();
  } else {
    *out = static_cast<T>(it->get<double>());
  }
  return OkStatus();
}

Status Bool(const json& b, const char* name, bool* out) {
  auto it = b.find(name);
  if (it == b.end() || it->is_null()) return OkStatus();
  if (!it->is_boolean()) return Bad(name, "must be true or false");
  *out = it->get<bool>();
  return OkStatus();
}

// The fields common to both endpoints.
Status Common(const json& b, const Tokenizer& tok, GenerateRequest* r) {
  if (!b.is_object()) return Bad("body", "expected a JSON object");
  auto model = b.find("model");
  if (model == b.end() || !model->is_string()) return Bad("model", "required, a string");
  r->model = model->get<std::string>();
  SamplingParams& s = r->sampling;
  Status st;
  if (!(st = Number(b, "temperature", &s.temperature)).ok()) return st;
  if (!(st = Number(b, "top_p", &s.top_p)).ok()) return st;
  if (!(st = Number(b, "top_k", &s.top_k)).ok()) return st;
  if (!(st = Number(b, "min_p", &s.min_p)).ok()) return st;
  if (!(st = Number(b, "presence_penalty", &s.presence_penalty)).ok()) return st;
  if (!(st = Number(b, "frequency_penalty", &s.frequency_penalty)).ok()) return st;
  if (!(st = Number(b, "repetition_penalty", &s.repetition_penalty)).ok()) return st;
  if (!(st = Number(b, "min_tokens", &s.min_tokens)).ok()) return st;
  if (!(st = Bool(b, "ignore_eos", &s.ignore_eos)).ok()) return st;
  if (!(st = Bool(b, "skip_special_tokens", &r->skip_special_tokens)).ok()) return st;
  if (!(st = Bool(b, "stream", &r->stream)).ok()) return st;
  if (auto seed = b.find("seed"); seed != b.end() && !seed->is_null()) {
    if (!seed->is_number_integer()) return Bad("seed", "must be an integer");
    s.seed = static_cast<uint64_t>(seed->get<int64_t>());
  }
  if (auto so = b.find("stream_options"); so != b.end() && !so->is_null()) {
    if (!so->is_object()) return Bad("stream_options", "must be an object");
    if (!(st = Bool(*so, "include_usage", &r->include_usage)).ok()) return st;
  }
  if (auto n = b.find("n"); n != b.end() && !n->is_null()) {
    if (!n->is_number_integer()) return Bad("n", "must be an integer");
    const int64_t v = n->get<int64_t>();
    if (v < 1 || v > kMaxChoices) return Bad("n", "must be in [1, " + std::to_string(kMaxChoices) + "], got " + std::to_string(v));
    r->n = static_cast<int32_t>(v);
  }
  if (auto bo = b.find("best_of"); bo != b.end() && !bo->is_null() &&
                                   !(bo->is_number_integer() && bo->get<int64_t>() == 1)) {
    return Bad("best_of", "only best_of = 1 is supported");
  }
  if (auto lb = b.find("logit_bias"); lb != b.end() && !lb->is_null()) {
    if (!lb->is_object()) return Bad("logit_bias", "must be an object mapping token ids to biases");
    if (lb->size() > 1024) return Bad("logit_bias", "at most 1024 tokens");
    for (const auto& [key, value] : lb->items()) {
      int32_t id = -1;
      const char* end = key.data() + key.size();
      auto [ptr, ec] = std::from_chars(key.data(), end, id);
      if (key.empty() || ec != std::errc() || ptr != end || id < 0 || id >= tok.VocabSize()) {
        return Bad("logit_bias", "key '" + key + "' is not a token id of this model (0.." + std::to_string(tok.VocabSize() - 1) + ")");
      }
      if (!value.is_number()) return Bad("logit_bias", "the bias of token " + key + " must be a number");
      const double bias = value.get<double>();
      if (!(bias >= -100 && bias <= 100)) return Bad("logit_bias", "the bias of token " + key + " must be in [-100, 100]");
      s.logit_bias.emplace_back(id, static_cast<float>(bias));
    }
  }
  if (auto stop = b.find("stop"); stop != b.end() && !stop->is_null()) {
    if (stop->is_string()) {
      r->stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > 4) return Bad("stop", "at most 4 stop strings");
      for (const json& x : *stop) {
        if (!x.is_string()) return Bad("stop", "must be a string or a list of strings");
        r->stop.push_back(x.get<std::string>());
      }
    } else {
      return Bad("stop", "must be a string or a list of strings");
    }
  }
  if (auto ids = b.find("stop_token_ids"); ids != b.end() && !ids->is_null()) {
    if (!ids->is_array()) return Bad("stop_token_ids", "must be a list of token ids");
    for (const json& x : *ids) {
      if (!x.is_number_integer()) return Bad("stop_token_ids", "must be a list of token ids");
      s.stop_token_ids.push_back(x.get<int32_t>());
    }
  }
  return OkStatus();
}

Status Finish(GenerateRequest* r, const Tokenizer& tok, int64_t max_model_len, std::optional<int64_t> max_tokens) {
  if (r->prompt.empty()) return Bad(r->chat ? "messages" : "prompt", "the prompt is empty");
  const int64_t room = max_model_len - static_cast<int64_t>(r->prompt.size());
  if (room < 1) {
    return Bad(r->chat ? "messages" : "prompt",
               "this model's maximum context length is " + std::to_string(max_model_len) + " tokens; the prompt has " +
                   std::to_string(r->prompt.size()));
  }
  if (max_tokens) {
    if (*max_tokens < 1) return Bad("max_tokens", "must be at least 1");
    if (*max_tokens > room) {
      return Bad("max_tokens", "this model's maximum context length is " + std::to_string(max_model_len) +
                                   " tokens; the prompt has " + std::to_string(r->prompt.size()) + " and " +
                                   std::to_string(*max_tokens) + " were asked for");
    }
    r->sampling.max_tokens = static_cast<int32_t>(*max_tokens);
  } else {
    r->sampling.max_tokens = static_cast<int32_t>(r->chat ? room : std::min<int64_t>(16, room));
  }
  for (int32_t id : r->prompt) {
    if (id < 0 || id >= tok.VocabSize()) return Bad("prompt", "token id " + std::to_string(id) + " is outside the vocabulary");
  }
  Status v = Validate(r->sampling, tok.VocabSize());
  if (!v.ok() && v.message().starts_with("sampling: ")) {
    // "sampling: top_p must be ..." -> "top_p: must be ...", so error.param names the field.
    std::string m(v.message().substr(10));
    const size_t space = m.find(' ');
    if (space != std::string::npos) m = m.substr(0, space) + ": " + m.substr(space + 1);
    return Status(v.code(), m);
  }
  return v;
}

// The grammar of the output, from response_format / guided_* or a forced tool call.
Status Constrain(const json& b, const RequestContext& ctx, const ToolRequest* tools, GenerateRequest* r) {
  StatusOr<OutputConstraint> c = ParseOutputConstraint(b);
  if (!c.ok()) return c.status();
  const bool forced = tools != nullptr && (tools->mode == ToolChoiceMode::kRequired || tools->mode == ToolChoiceMode::kNamed);
  if (c->kind != OutputConstraint::Kind::kNone && forced) {
    return Bad(c->field, "cannot be combined with tool_choice \"required\" or a named function");
  }
  if (c->kind == OutputConstraint::Kind::kNone && !forced) return OkStatus();
  const std::string field = forced ? "tool_choice" : c->field;
  if (ctx.grammars == nullptr) return Bad(field, "constrained output is not available on this engine");
  StatusOr<std::shared_ptr<structured::TokenGrammar>> g =
      forced ? ToolCallGrammar(*tools, r->tool_format, *ctx.grammars) : ConstraintGrammar(*c, *ctx.grammars);
  if (!g.ok()) return g.status();
  r->sampling.grammar = std::move(*g);
  r->constraint = forced ? "tool_call" : std::string(OutputConstraint::KindName(c->kind));
  return OkStatus();
}

}  // namespace

StatusOr<GenerateRequest> ParseCompletion(const json& b, const RequestContext& ctx) {
  const Tokenizer& tok = ctx.tokenizer;
  const int64_t max_model_len = ctx.max_model_len;
  GenerateRequest r;
  if (Status s = Common(b, tok, &r); !s.ok()) return s;
  if (b.contains("echo") && b["echo"].is_boolean() && b["echo"].get<bool>()) return Bad("echo", "is not supported");
  if (b.contains("suffix") && !b["suffix"].is_null()) return Bad("suffix", "is not supported");
  for (const char* chat_only : {"tools", "tool_choice", "parallel_tool_calls"}) {
    if (auto f = b.find(chat_only); f != b.end() && !f->is_null()) {
      return Bad(chat_only, "only /v1/chat/completions takes tools");
    }
  }
  auto p = b.find("prompt");
  if (p == b.end() || p->is_null()) return Bad("prompt", "required");
  json prompt = *p;
  if (prompt.is_array() && prompt.size() == 1 && (prompt[0].is_string() || prompt[0].is_array())) prompt = prompt[0];
  if (prompt.is_string()) {
    r.prompt = tok.Encode(prompt.get<std::string>(), /*add_special_tokens=*/true);
  } else if (prompt.is_array()) {
    for (const json& x : prompt) {
      if (!x.is_number_integer()) return Bad("prompt", "must be a string, a list of token ids, or a one-element list of either (batches are not supported)");
      r.prompt.push_back(x.get<int32_t>());
    }
  } else {
    return Bad("prompt", "must be a string or a list of token ids");
  }
  if (auto lp = b.find("logprobs"); lp != b.end() && !lp->is_null()) {
    if (!lp->is_number_integer()) return Bad("logprobs", "must be an integer (0..20)");
    r.sampling.logprobs = lp->get<int32_t>();
  }
  std::optional<int64_t> max_tokens;
  if (auto mt = b.find("max_tokens"); mt != b.end() && !mt->is_null()) {
    if (!mt->is_number_integer()) return Bad("max_tokens", "must be an integer");
    max_tokens = mt->get<int64_t>();
  }
  if (Status s = Constrain(b, ctx, nullptr, &r); !s.ok()) return s;
  if (Status s = Finish(&r, tok, max_model_len, max_tokens); !s.ok()) return s;
  return r;
}

StatusOr<GenerateRequest> ParseChat(const json& b, const RequestContext& ctx) {
  const Tokenizer& tok = ctx.tokenizer;
  const ChatTemplate* chat = ctx.chat;
  const int64_t max_model_len = ctx.max_model_len;
  GenerateRequest r;
  r.chat = true;
  if (Status s = Common(b, tok, &r); !s.ok()) return s;
  if (chat == nullptr) return FailedPreconditionError("messages: this model has no chat template it can render; use /v1/completions");
  auto m = b.find("messages");
  if (m == b.end() || !m->is_array() || m->empty()) return Bad("messages", "required, a non-empty list");
  std::vector<ChatMessage> msgs;
  for (size_t i = 0; i < m->size(); ++i) {
    const json& x = (*m)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!x.is_object()) return Bad(at, "must be an object");
    if (!x.contains("role") || !x["role"].is_string()) return Bad(at + ".role", "required, a string");
    const std::string role = x["role"];
    if (role != "system" && role != "user" && role != "assistant" && role != "developer" && role != "tool") {
      return Bad(at + ".role", "unknown role \"" + role + "\"");
    }
    ChatMessage msg;
    msg.role = role == "developer" ? "system" : role;
    const json c = x.value("content", json());
    if (c.is_string()) {
      msg.content = c.get<std::string>();
    } else if (c.is_array()) {  // content parts: text only
      for (const json& part : c) {
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          return Bad(at + ".content", "only text content parts are supported");
        }
        msg.content += part["text"].get<std::string>();
      }
    } else if (c.is_null()) {
      msg.content_is_null = true;
    } else {
      return Bad(at + ".content", "must be a string or a list of text parts");
    }
    if (auto tc = x.find("tool_calls"); tc != x.end() && !tc->is_null()) {
      if (role != "assistant") return Bad(at + ".tool_calls", "only assistant messages carry tool calls");
      if (!tc->is_array()) return Bad(at + ".tool_calls", "must be a list");
      for (size_t k = 0; k < tc->size(); ++k) {
        const json& call = (*tc)[k];
        const std::string cat = at + ".tool_calls[" + std::to_string(k) + "]";
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
          return Bad(cat + ".function", "required, an object");
        }
        const json& f = call["function"];
        if (!f.contains("name") || !f["name"].is_string()) return Bad(cat + ".function.name", "required, a string");
        if (!f.contains("arguments") || !f["arguments"].is_string()) {
          return Bad(cat + ".function.arguments", "required, a string holding a JSON object");
        }
        if (call.contains("id") && !call["id"].is_null() && !call["id"].is_string()) return Bad(cat + ".id", "must be a string");
        const std::string call_id = call.contains("id") && call["id"].is_string() ? call["id"].get<std::string>() : "";
        msg.tool_calls.push_back({call_id, f["name"].get<std::string>(), f["arguments"].get<std::string>()});
      }
    } else if (msg.content_is_null && role != "assistant") {
      return Bad(at + ".content", "required for a " + role + " message");
    }
    if (auto id = x.find("tool_call_id"); id != x.end() && !id->is_null()) {
      if (!id->is_string()) return Bad(at + ".tool_call_id", "must be a string");
      msg.tool_call_id = *id;
    }
    if (auto name = x.find("name"); name != x.end() && !name->is_null()) {
      if (!name->is_string()) return Bad(at + ".name", "must be a string");
      msg.name = *name;
    }
    msgs.push_back(std::move(msg));
  }
  StatusOr<ToolRequest> tools = ParseToolRequest(b);
  if (!tools.ok()) return tools.status();
  r.tool_mode = tools->mode;
  r.tool_format = chat->tool_call_format();
  std::vector<nlohmann::ordered_json> rendered_tools;
  for (const FunctionTool& t : tools->tools) rendered_tools.push_back(t.raw);
  StatusOr<std::string> text = chat->RenderChat(msgs, rendered_tools, /*add_generation_prompt=*/true);
  if (!text.ok()) return text.status();
  r.prompt = tok.Encode(*text, /*add_special_tokens=*/false);
  if (auto lp = b.find("logprobs"); lp != b.end() && !lp->is_null()) {
    if (!lp->is_boolean()) return Bad("logprobs", "must be true or false");
    r.chat_logprobs = lp->get<bool>();
  }
  if (auto tl = b.find("top_logprobs"); tl != b.end() && !tl->is_null()) {
    if (!tl->is_number_integer()) return Bad("top_logprobs", "must be an integer (0..20)");
    if (!r.chat_logprobs) return Bad("top_logprobs", "needs logprobs: true");
    r.sampling.logprobs = tl->get<int32_t>();
  } else if (r.chat_logprobs) {
    r.sampling.logprobs = 0;
  }
  std::optional<int64_t> max_tokens;
  for (const char* name : {"max_completion_tokens", "max_tokens"}) {
    if (auto mt = b.find(name); mt != b.end() && !mt->is_null()) {
      if (!mt->is_number_integer()) return Bad(name, "must be an integer");
      max_tokens = mt->get<int64_t>();
      break;
    }
  }
  if (Status s = Constrain(b, ctx, &*tools, &r); !s.ok()) return s;
  if (Status s = Finish(&r, tok, max_model_len, max_tokens); !s.ok()) return s;
  return r;
}

http::Response OpenAiError(const Status& status, int retry_after_s) {
  const int code = http::HttpStatusOf(status);
  std::string message(status.message());
  nlohmann::json param = nullptr;
  if (code == 400) {
    const size_t colon = message.find(": ");
    if (colon != std::string::npos && colon < 64 && message.find(' ') >= colon) param = message.substr(0, colon);
  }
  nlohmann::json err = {{"message", message},
              {"type", code < 500 ? (code == 429 ? "rate_limit_error" : code == 404 ? "not_found_error" : "invalid_request_error")
                                  : "server_error"},
              {"param", param},
              {"code", nullptr}};
  http::Response r = http::Response::Json(code, {{"error", err}});
  if (code == 429 || code == 503) r.headers.emplace_back("Retry-After", std::to_string(retry_after_s));
  return r;
}

}  // namespace aicloud::engine
