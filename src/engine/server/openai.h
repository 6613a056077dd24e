// The OpenAI wire format of the engine: request bodies of /v1/completions and
// /v1/chat/completions turned into GenerateRequests, and errors in OpenAI's shape.
//
//   StatusOr<GenerateRequest> r = ParseCompletion(body, tokenizer, max_model_len);
//   if (!r.ok()) return OpenAiError(r.status());   // 400 {"error": {"message", "type", "param"}}
//
// Accepted fields follow OpenAI and vLLM's extensions: model, prompt (text, token ids, or a
// one-element list of either), messages (chat), max_tokens / max_completion_tokens, temperature,
// top_p, top_k, min_p, seed, stop (string or up to 4 strings), stop_token_ids, presence_penalty,
// frequency_penalty, repetition_penalty, min_tokens, ignore_eos, skip_special_tokens, logprobs
// (completions: 0..20; chat: true with top_logprobs 0..20), stream, stream_options.include_usage,
// n (1..16), logit_bias, user (ignored); response_format (text, json_object, json_schema) and
// vLLM's guided_json / guided_regex / guided_choice, enforced by constrained decoding; chat:
// tools, tool_choice, parallel_tool_calls, assistant tool_calls and tool messages
// (structured_output.h). Options this engine does not implement (best_of > 1, echo, suffix)
// are refused with 400 naming the parameter, never silently ignored.
// Other unknown fields are ignored, as vLLM does.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/sample/sampling_params.h"
#include "engine/server/structured_output.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "http/message.h"

namespace aicloud::engine {

struct GenerateRequest {
  std::string model;              // as the client named it: the base model or an adapter
  std::vector<int32_t> prompt;    // token ids
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings
  bool skip_special_tokens = true;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool chat = false;
  bool chat_logprobs = false;     // chat's logprobs: true
  int32_t n = 1;                  // choices, each its own request (Engine::SubmitChoices)
  // Chat with tools: kAuto, kRequired and kNamed read tool calls back out of the text in
  // tool_format (tool_calls.h); kNone leaves the text as the answer.
  ToolChoiceMode tool_mode = ToolChoiceMode::kNone;
  ToolCallFormat tool_format = ToolCallFormat::kHermes;
  // What constrains the output, for metrics: "json_schema", "json_object", "regex", "choice",
  // "tool_call"; "" when nothing does.
  std::string constraint;
};

// What parsing a request needs from the engine. `grammars` may be null: then a request that
// constrains its output is refused.
struct RequestContext {
  const Tokenizer& tokenizer;
  const ChatTemplate* chat = nullptr;
  int64_t max_model_len = 0;
  GrammarCache* grammars = nullptr;
};

inline constexpr int32_t kMaxChoices = 16;

// A Status whose message names the parameter: "param: problem". OpenAiError puts the part before
// the first ": " in error.param.
// `body` is the request as parsed with its key order kept (JSON schemas generate their
// properties in the order given).
StatusOr<GenerateRequest> ParseCompletion(const nlohmann::ordered_json& body, const RequestContext& ctx);
StatusOr<GenerateRequest> ParseChat(const nlohmann::ordered_json& body, const RequestContext& ctx);

// {"error": {"message", "type", "param", "code"}} with the HTTP status of the Status code;
// type "invalid_request_error" for 4xx, "server_error" otherwise. 429s carry Retry-After.
http::Response OpenAiError(const Status& status, int retry_after_s = 1);

}  // namespace aicloud::engine
