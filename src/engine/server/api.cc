#include "engine/server/api.h"

#include <openssl/evp.h>

#include <bit>
#include <cstdlib>

#include <chrono>
#include <cmath>
#include <random>
#include <string>

#include "auth/auth.h"
#include "core/json_depth.h"
#include "engine/server/tool_calls.h"
#include "http/usage_header.h"

namespace aicloud::engine {
namespace {

using nlohmann::json;

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string RandomId(const char* prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* kHex = "0123456789abcdef";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += kHex[rng() & 15];
  return s;
}

// The embeddings API's base64 form: the vector's little-endian float32 bytes in standard
// base64 (what the OpenAI SDKs ask for by default and decode as a Float32Array).
std::string Base64Floats(const std::vector<float>& v) {
  static_assert(std::endian::native == std::endian::little, "the wire format is little-endian float32");
  const size_t bytes = v.size() * sizeof(float);
  std::string out((bytes + 2) / 3 * 4 + 1, '\0');
  const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                      reinterpret_cast<const unsigned char*>(v.data()), static_cast<int>(bytes));
  out.resize(static_cast<size_t>(written));
  return out;
}

// Bodies nest no deeper than this (core/json_depth.h): copying or dumping a parsed document
// recurses once per level.
constexpr int kMaxJsonDepth = 64;

StatusOr<json> ParseJson(const http::Request& req) {
  if (!JsonNestsWithin(req.body, kMaxJsonDepth)) {
    return InvalidArgumentError("body: nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return InvalidArgumentError("body: not valid JSON");
  if (!body.is_object()) return InvalidArgumentError("body: expected a JSON object");
  return body;
}

json LogprobsJson(const Engine& e, const std::vector<SampleResult>& samples, bool chat) {
  if (chat) {
    json content = json::array();
    for (const SampleResult& s : samples) {
      json top = json::array();
      for (const TokenLogprob& t : s.top_logprobs) {
        top.push_back({{"token", std::string(e.tokenizer().TokenBytes(t.token))}, {"logprob", t.logprob}});
      }
      content.push_back({{"token", std::string(e.tokenizer().TokenBytes(s.token))}, {"logprob", s.logprob},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), lps = json::array(), tops = json::array();
  for (const SampleResult& s : samples) {
    tokens.push_back(std::string(e.tokenizer().TokenBytes(s.token)));
    lps.push_back(s.logprob);
    json top = json::object();
    for (const TokenLogprob& t : s.top_logprobs) top[std::string(e.tokenizer().TokenBytes(t.token))] = t.logprob;
    tops.push_back(top);
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}};
}

json Usage(int64_t prompt, int64_t completion, int64_t cached) {
  json u = {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  if (cached > 0) u["prompt_tokens_details"] = {{"cached_tokens", cached}};
  return u;
}

// One choice's output gathered for a non-streamed answer.
struct Gathered {
  std::string text;
  std::vector<SampleResult> samples;
  std::string finish_reason;
  int32_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

http::Response ClientGone() {
  // nginx's 499 "client closed request": nobody reads it, but logs and metrics see it.
  return http::Response::Json(499, {{"error", {{"message", "the client closed the connection before the answer"},
                                               {"type", "client_closed_request"},
                                               {"param", nullptr},
                                               {"code", nullptr}}}});
}

// "call_" and 24 alphanumerics, the form OpenAI's tool call ids take.
std::string ToolCallId() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* kAlnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string s = "call_";
  for (int i = 0; i < 24; ++i) s += kAlnum[rng() % 62];
  return s;
}

// The finish_reason of a choice that called tools: OpenAI answers "tool_calls" when the model
// chose to (auto) or had to call one of several (required), and "stop" for a named function.
std::string ToolFinishReason(const std::string& finish, ToolChoiceMode mode) {
  if (finish != "stop") return finish;
  return mode == ToolChoiceMode::kNamed ? "stop" : "tool_calls";
}

http::Response Generate(Engine* e, http::Request& req, bool chat) {
  if (!JsonNestsWithin(req.body, kMaxJsonDepth)) {
    return OpenAiError(InvalidArgumentError("body: nested deeper than " + std::to_string(kMaxJsonDepth) + " levels"));
  }
  nlohmann::ordered_json body = nlohmann::ordered_json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return OpenAiError(InvalidArgumentError("body: not valid JSON"));
  if (!body.is_object()) return OpenAiError(InvalidArgumentError("body: expected a JSON object"));
  const RequestContext ctx{e->tokenizer(), e->chat_template(), e->max_model_len(), e->grammars()};
  StatusOr<GenerateRequest> g = chat ? ParseChat(body, ctx) : ParseCompletion(body, ctx);
  if (!g.ok()) return OpenAiError(g.status());
  const bool stream = g->stream, include_usage = g->include_usage, want_logprobs = g->sampling.logprobs.has_value();
  const std::string model = g->model;
  const int32_t n = g->n;
  const ToolChoiceMode tool_mode = g->tool_mode;
  const ToolCallFormat tool_format = g->tool_format;
  auto signal = std::make_shared<StreamSignal>();
  StatusOr<std::vector<std::shared_ptr<Stream>>> s = e->SubmitChoices(std::move(*g), n, signal);
  if (!s.ok()) return OpenAiError(s.status());
  std::vector<std::shared_ptr<Stream>> outs = std::move(*s);
  auto cancel_all = [outs] {
    for (const auto& o : outs) o->Cancel();
  };
  const std::string id = RandomId(chat ? "chatcmpl-" : "cmpl-");
  const int64_t created = NowSeconds();

  if (!stream) {
    std::vector<Gathered> got(outs.size());
    uint64_t seen = 0;
    for (size_t left = outs.size(); left > 0;) {
      // A client that went away (the server noticed its connection close) frees its sequences'
      // batch slots and KV blocks at the next step instead of generating for nobody.
      if (req.client_gone && req.client_gone->cancelled()) {
        cancel_all();
        return ClientGone();
      }
      bool any = false;
      for (size_t i = 0; i < outs.size(); ++i) {
        Delta d;
        if (!got[i].finish_reason.empty() || !outs[i]->Next(&d, std::chrono::milliseconds(0))) continue;
        any = true;
        if (!d.error.ok()) {
          cancel_all();
          return OpenAiError(d.error);
        }
        got[i].text += d.text;
        got[i].samples.insert(got[i].samples.end(), d.samples.begin(), d.samples.end());
        if (d.finish_reason) {
          got[i].finish_reason = *d.finish_reason;
          got[i].prompt_tokens = d.prompt_tokens;
          got[i].completion_tokens = d.completion_tokens;
          got[i].cached_tokens = d.cached_tokens;
          --left;
        }
      }
      if (!any) signal->Wait(&seen, std::chrono::milliseconds(200));
    }
    json choices = json::array();
    int64_t completion = 0, cached = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const Gathered& c = got[i];
      json choice = {{"index", i}, {"finish_reason", c.finish_reason}};
      if (chat) {
        choice["message"] = {{"role", "assistant"}, {"content", c.text}};
        if (tool_mode != ToolChoiceMode::kNone) {
          ParsedOutput parsed = ParseToolCalls(tool_format, c.text);
          if (!parsed.calls.empty()) {
            json calls = json::array();
            for (const ParsedToolCall& call : parsed.calls) {
              calls.push_back({{"id", ToolCallId()},
                               {"type", "function"},
                               {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
            }
            choice["message"]["content"] = parsed.content.empty() ? json(nullptr) : json(parsed.content);
            choice["message"]["tool_calls"] = std::move(calls);
            choice["finish_reason"] = ToolFinishReason(c.finish_reason, tool_mode);
          }
        }
      } else {
        choice["text"] = c.text;
      }
      choice["logprobs"] = want_logprobs ? LogprobsJson(*e, c.samples, chat) : json(nullptr);
      choices.push_back(std::move(choice));
      completion += c.completion_tokens;
      cached += c.cached_tokens;
    }
    // The prompt is the client's once, whatever n is; the choices after the first read it from
    // the prefix cache.
    const int64_t prompt = got[0].prompt_tokens;
    http::Response r = http::Response::Json(200, {{"id", id},
                                                  {"object", chat ? "chat.completion" : "text_completion"},
                                                  {"created", created},
                                                  {"model", model},
                                                  {"choices", std::move(choices)},
                                                  {"usage", Usage(prompt, completion, cached)}});
    // The gateway charges these without parsing the body (http/usage_header.h).
    r.headers.emplace_back(http::kUsageHeader, http::UsageHeaderValue({prompt, completion}));
    return r;
  }

  http::Response r;
  r.content_type = "text/event-stream";
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.stream = [e, outs, signal, cancel_all, id, created, model, chat, include_usage, want_logprobs, tool_mode,
              tool_format](http::StreamWriter& w) {
    auto send = [&](const json& j) { return w.Write("data: " + j.dump() + "\n\n"); };
    auto chunk = [&](json choice) {
      return json{{"id", id},
                  {"object", chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", created},
                  {"model", model},
                  {"choices", json::array({std::move(choice)})}};
    };
    if (chat) {
      for (size_t i = 0; i < outs.size(); ++i) {
        if (!send(chunk({{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                         {"finish_reason", nullptr}}))) {
          cancel_all();
          return;
        }
      }
    }
    std::vector<bool> finished(outs.size(), false);
    // Chat with tools: each choice's text goes through a parser that turns tool calls into
    // tool_calls deltas (name first, then argument pieces) and passes the rest on as content.
    std::vector<std::unique_ptr<ToolCallStreamParser>> parsers(outs.size());
    std::vector<int32_t> calls_seen(outs.size(), 0);
    std::vector<std::vector<SampleResult>> pending_samples(outs.size());
    if (chat && tool_mode != ToolChoiceMode::kNone) {
      for (auto& p : parsers) p = std::make_unique<ToolCallStreamParser>(tool_format);
    }
    auto tool_deltas = [&](size_t i, const std::vector<ToolCallStreamParser::Event>& events, json* logprobs) -> bool {
      for (const ToolCallStreamParser::Event& ev : events) {
        json delta;
        switch (ev.kind) {
          case ToolCallStreamParser::Event::Kind::kContent:
            if (ev.text.empty()) continue;
            delta = {{"content", ev.text}};
            break;
          case ToolCallStreamParser::Event::Kind::kCallStart:
            ++calls_seen[i];
            delta = {{"tool_calls", json::array({{{"index", ev.index},
                                                   {"id", ToolCallId()},
                                                   {"type", "function"},
                                                   {"function", {{"name", ev.name}, {"arguments", ""}}}}})}};
            break;
          case ToolCallStreamParser::Event::Kind::kArguments:
            if (ev.text.empty()) continue;
            delta = {{"tool_calls", json::array({{{"index", ev.index}, {"function", {{"arguments", ev.text}}}}})}};
            break;
        }
        json choice = {{"index", i}, {"delta", std::move(delta)}, {"logprobs", *logprobs}, {"finish_reason", nullptr}};
        *logprobs = nullptr;  // once per engine delta
        if (!send(chunk(std::move(choice)))) return false;
      }
      return true;
    };
    int64_t prompt = 0, completion = 0, cached = 0;
    uint64_t seen = 0;
    for (size_t left = outs.size(); left > 0;) {
      if (w.closed()) {
        cancel_all();
        return;
      }
      bool any = false;
      for (size_t i = 0; i < outs.size(); ++i) {
        Delta d;
        if (finished[i] || !outs[i]->Next(&d, std::chrono::milliseconds(0))) continue;
        any = true;
        if (!d.error.ok()) {
          send({{"error", {{"message", std::string(d.error.message())}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}});
          cancel_all();
          w.Write("data: [DONE]\n\n");
          return;
        }
        if (parsers[i]) {
          // Logprobs of text the parser holds back wait for the next chunk that goes out.
          pending_samples[i].insert(pending_samples[i].end(), d.samples.begin(), d.samples.end());
          json logprobs = want_logprobs ? LogprobsJson(*e, pending_samples[i], chat) : json(nullptr);
          std::vector<ToolCallStreamParser::Event> events = parsers[i]->Push(d.text);
          if (d.finish_reason) {
            std::vector<ToolCallStreamParser::Event> rest = parsers[i]->Finish();
            events.insert(events.end(), rest.begin(), rest.end());
          }
          if (!tool_deltas(i, events, &logprobs)) {
            cancel_all();
            return;
          }
          if (logprobs.is_null()) pending_samples[i].clear();  // sent with a chunk
          if (d.finish_reason) {
            // As the unary answer: a call that turned out malformed makes the output text.
            const bool called = calls_seen[i] > 0 && !parsers[i]->malformed();
            const std::string finish = called ? ToolFinishReason(*d.finish_reason, tool_mode) : *d.finish_reason;
            if (!send(chunk({{"index", i}, {"delta", json::object()}, {"logprobs", logprobs}, {"finish_reason", finish}}))) {
              cancel_all();
              return;
            }
            finished[i] = true;
            --left;
            if (i == 0) prompt = d.prompt_tokens;
            completion += d.completion_tokens;
            cached += d.cached_tokens;
          }
          continue;
        }
        json choice = {{"index", i}, {"finish_reason", d.finish_reason ? json(*d.finish_reason) : json(nullptr)}};
        if (chat) {
          choice["delta"] = d.text.empty() && d.finish_reason ? json::object() : json{{"content", d.text}};
        } else {
          choice["text"] = d.text;
        }
        choice["logprobs"] = want_logprobs ? LogprobsJson(*e, d.samples, chat) : json(nullptr);
        if ((!d.text.empty() || d.finish_reason) && !send(chunk(std::move(choice)))) {
          cancel_all();
          return;
        }
        if (d.finish_reason) {
          finished[i] = true;
          --left;
          if (i == 0) prompt = d.prompt_tokens;
          completion += d.completion_tokens;
          cached += d.cached_tokens;
        }
      }
      if (!any) signal->Wait(&seen, std::chrono::milliseconds(200));
    }
    if (include_usage) {
      send({{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
            {"model", model}, {"choices", json::array()}, {"usage", Usage(prompt, completion, cached)}});
    }
    w.Write("data: [DONE]\n\n");
  };
  return r;
}

http::Response Embeddings(Engine* e, http::Request& req) {
  StatusOr<json> body = ParseJson(req);
  if (!body.ok()) return OpenAiError(body.status());
  const json& b = *body;
  if (!b.contains("model") || !b["model"].is_string()) return OpenAiError(InvalidArgumentError("model: required, a string"));
  if (b["model"] != e->model_name()) {
    return OpenAiError(NotFoundError("The model `" + b["model"].get<std::string>() + "` does not exist."));
  }
  bool base64 = false;
  if (auto f = b.find("encoding_format"); f != b.end() && !f->is_null()) {
    if (!f->is_string() || (*f != "float" && *f != "base64")) {
      return OpenAiError(InvalidArgumentError("encoding_format: must be \"float\" or \"base64\""));
    }
    base64 = *f == "base64";
  }
  if (!b.contains("input")) return OpenAiError(InvalidArgumentError("input: required"));
  const json& in = b["input"];
  std::vector<std::vector<int32_t>> inputs;
  auto add = [&](const json& x) -> Status {
    if (x.is_string()) {
      inputs.push_back(e->tokenizer().Encode(x.get<std::string>(), true));
      return OkStatus();
    }
    if (x.is_array()) {
      std::vector<int32_t> ids;
      for (const json& t : x) {
        if (!t.is_number_integer()) return InvalidArgumentError("input: must be a string, a list of strings, or token ids");
        ids.push_back(t.get<int32_t>());
      }
      inputs.push_back(std::move(ids));
      return OkStatus();
    }
    return InvalidArgumentError("input: must be a string, a list of strings, or token ids");
  };
  Status st;
  if (in.is_array() && !in.empty() && (in[0].is_string() || in[0].is_array())) {
    if (in.size() > 256) return OpenAiError(InvalidArgumentError("input: at most 256 inputs per request"));
    for (const json& x : in) {
      if (!(st = add(x)).ok()) return OpenAiError(st);
    }
  } else if (!(st = add(in)).ok()) {
    return OpenAiError(st);
  }
  StatusOr<std::vector<std::vector<float>>> v = e->Embed(inputs);
  if (!v.ok()) return OpenAiError(v.status());
  json data = json::array();
  int64_t tokens = 0;
  for (size_t i = 0; i < v->size(); ++i) {
    json embedding = base64 ? json(Base64Floats((*v)[i])) : json((*v)[i]);
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", std::move(embedding)}});
    tokens += static_cast<int64_t>(inputs[i].size());
  }
  http::Response r = http::Response::Json(200, {{"object", "list"}, {"data", data}, {"model", e->model_name()},
                                                {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}});
  r.headers.emplace_back(http::kUsageHeader, http::UsageHeaderValue({tokens, 0}));
  return r;
}

}  // namespace

void AddEngineRoutes(Engine* e, http::Router* router) {
  router->Add("GET", "/health", [e](http::Request&) {
    json body = json::object();
    if (!e->options().instance.empty()) body["instance"] = e->options().instance;
    return e->healthy() ? http::Response::Json(200, body)
                        : OpenAiError(UnavailableError("the engine stopped after an internal error"));
  });
  router->Add("GET", "/v1/models", [e](http::Request&) {
    json m = {{"id", e->model_name()},          {"object", "model"},      {"created", NowSeconds()},
              {"owned_by", "aicloud"},          {"root", e->options().model_dir}, {"parent", nullptr},
              {"max_model_len", e->max_model_len()}};
    json data = json::array({m});
    for (const LoraInfo& l : e->loras().List()) {
      data.push_back({{"id", l.name}, {"object", "model"}, {"created", NowSeconds()}, {"owned_by", "aicloud"},
                      {"root", l.dir.string()}, {"parent", l.parent}, {"max_model_len", e->max_model_len()}});
    }
    return http::Response::Json(200, {{"object", "list"}, {"data", data}});
  });
  router->Add("POST", "/v1/completions", [e](http::Request& r) { return Generate(e, r, false); });
  router->Add("POST", "/v1/chat/completions", [e](http::Request& r) { return Generate(e, r, true); });
  router->Add("POST", "/v1/embeddings", [e](http::Request& r) { return Embeddings(e, r); });
  router->Add("POST", "/tokenize", [e](http::Request& r) {
    StatusOr<json> b = ParseJson(r);
    if (!b.ok()) return OpenAiError(b.status());
    if (!b->contains("prompt") || !(*b)["prompt"].is_string()) return OpenAiError(InvalidArgumentError("prompt: required, a string"));
    const bool special = b->value("add_special_tokens", true);
    std::vector<int32_t> ids = e->tokenizer().Encode((*b)["prompt"].get<std::string>(), special);
    return http::Response::Json(200, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", e->max_model_len()}});
  });
  router->Add("POST", "/detokenize", [e](http::Request& r) {
    StatusOr<json> b = ParseJson(r);
    if (!b.ok()) return OpenAiError(b.status());
    std::vector<int32_t> ids;
    if (!b->contains("tokens") || !(*b)["tokens"].is_array()) return OpenAiError(InvalidArgumentError("tokens: required, a list of token ids"));
    for (const json& t : (*b)["tokens"]) {
      if (!t.is_number_integer()) return OpenAiError(InvalidArgumentError("tokens: required, a list of token ids"));
      ids.push_back(t.get<int32_t>());
    }
    return http::Response::Json(200, {{"prompt", e->tokenizer().Decode(ids, false)}});
  });
  // vLLM's runtime adapter endpoints. Without allow_runtime_lora_paths an adapter is one the
  // engine was started with, found by name; a caller's path is refused before anything looks at
  // the filesystem, so the answer says nothing about which paths exist on the node.
  router->Add("POST", "/v1/load_lora_adapter", [e](http::Request& r) {
    StatusOr<json> b = ParseJson(r);
    if (!b.ok()) return OpenAiError(b.status());
    if (!b->contains("lora_name") || !(*b)["lora_name"].is_string()) return OpenAiError(InvalidArgumentError("lora_name: required, a string"));
    if (b->contains("lora_path") && !(*b)["lora_path"].is_string()) return OpenAiError(InvalidArgumentError("lora_path: a string"));
    const std::string name = (*b)["lora_name"];
    const std::string asked = b->value("lora_path", std::string());
    std::string path;
    for (const auto& [n, dir] : e->options().loras) {
      if (n == name) path = dir;
    }
    if (!e->options().allow_runtime_lora_paths) {
      if (path.empty()) {
        return OpenAiError(InvalidArgumentError("lora_name: '" + name + "' is not one of the adapters this engine was "
                                                "started with; adapters are resolved by the platform"));
      }
      if (!asked.empty() && asked != path) {
        return OpenAiError(InvalidArgumentError("lora_path: this engine loads only the adapters it was started with; "
                                                "send lora_name alone"));
      }
    } else if (!asked.empty()) {
      path = asked;
    } else if (path.empty()) {
      return OpenAiError(InvalidArgumentError("lora_path: required for an adapter the engine was not started with"));
    }
    if (Status s = e->loras().Load(name, path); !s.ok()) return OpenAiError(s);
    return http::Response::Text(200, "Success: LoRA adapter '" + name + "' added successfully.");
  });
  router->Add("POST", "/v1/unload_lora_adapter", [e](http::Request& r) {
    StatusOr<json> b = ParseJson(r);
    if (!b.ok()) return OpenAiError(b.status());
    if (!b->contains("lora_name") || !(*b)["lora_name"].is_string()) return OpenAiError(InvalidArgumentError("lora_name: required, a string"));
    const std::string name = (*b)["lora_name"];
    if (Status s = e->loras().Unload(name); !s.ok()) return OpenAiError(s);
    return http::Response::Text(200, "Success: LoRA adapter '" + name + "' removed successfully.");
  });
  router->Add("GET", "/metrics", [e](http::Request&) {
    return http::Response::Text(200, e->metrics().Render(), "text/plain; version=0.0.4");
  });
}

namespace {

// Whether `r` carries "Authorization: Bearer <api_key>"; the comparison takes the same time
// wherever the first difference is.
bool Presents(const http::Request& r, const std::string& api_key) {
  const std::string_view header = r.HeaderView("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (header.size() <= kBearer.size() || header.substr(0, kBearer.size()) != kBearer) return false;
  return auth::ConstantTimeEquals(header.substr(kBearer.size()), api_key);
}

}  // namespace

StatusOr<std::unique_ptr<EngineServer>> EngineServer::Start(Engine* engine, http::ServerOptions options,
                                                            std::string api_key) {
  std::unique_ptr<EngineServer> s(new EngineServer());
  s->router_ = std::make_unique<http::Router>();
  AddEngineRoutes(engine, s->router_.get());
  http::Router* router = s->router_.get();
  options.thread_name = "engine";
  StatusOr<std::unique_ptr<http::Server>> server = http::Server::Start(
      std::move(options), [router, key = std::move(api_key)](http::Request& r) {
        if (!key.empty() && r.method == "GET" && r.path == "/health" && r.query.count("nonce") != 0) {
          // The proof that this engine holds the key, asked before a caller sends it
          // (control/replica_secret.h): HMAC(key, "aicloud replica proof\n" + nonce), nothing else.
          const std::string nonce = r.Query("nonce");
          if (nonce.empty() || nonce.size() > 128) {
            return OpenAiError(InvalidArgumentError("nonce: 1 to 128 characters"));
          }
          return http::Response::Json(200, {{"proof", auth::HmacSha256Hex(key, "aicloud replica proof\n" + nonce)}});
        }
        if (!key.empty() && !Presents(r, key)) {
          http::Response denied = OpenAiError(UnauthenticatedError(
              "this engine answers only callers that present its key as 'Authorization: Bearer <key>'"));
          denied.headers.emplace_back("WWW-Authenticate", "Bearer");
          return denied;
        }
        return router->Dispatch(r);
      });
  if (!server.ok()) return server.status();
  s->server_ = std::move(*server);
  return s;
}

StatusOr<bool> TlsFromEnvironment(http::ServerOptions* options) {
  const char* cert = std::getenv("AICLOUD_TLS_CERT_FILE");
  const char* key = std::getenv("AICLOUD_TLS_KEY_FILE");
  const bool has_cert = cert != nullptr && *cert != '\0', has_key = key != nullptr && *key != '\0';
  if (!has_cert && !has_key) return false;
  if (!has_cert || !has_key) {
    return InvalidArgumentError("AICLOUD_TLS_CERT_FILE and AICLOUD_TLS_KEY_FILE must be set together");
  }
  options->tls_cert_file = cert;
  options->tls_key_file = key;
  return true;
}

}  // namespace aicloud::engine
