// What the gateway reads from an OpenAI request body before forwarding it: the model, whether
// it streams, max_tokens, and the prompt text for the token estimate and prefix affinity.
//
// Token estimate (an upper bound, so budget reservations cannot be exceeded): every token of a
// byte-level BPE vocabulary covers at least one byte of text, so a prompt of B bytes encodes to
// at most B tokens; chat templates add a few special tokens per message (8 allowed) and per
// request (16). Token-id prompts count exactly. It overestimates English text about 4x: the
// reservation is returned at settlement, so this only matters to a request that would need the
// last few percent of a budget.
//
// Prefix hashes (for the prefix-aware routers): the prompt text — for chat, "role\ncontent\n"
// of each message in order — cut into fixed blocks of `block_bytes` bytes (256 bytes ≈ 64
// tokens, GIE's default block), each hashed with XXH3-64 seeded by the previous block's hash,
// so equal hashes mean equal prefixes (~1 us for 64 KiB; byte-wise FNV-1a took ~80). A trailing partial block is not hashed (it cannot be a
// full cached block on the engine either). At most `max_blocks` hashes.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "http/header_map.h"

namespace aicloud::gateway {

enum class Endpoint { kChat, kCompletions, kEmbeddings };
const char* EndpointName(Endpoint e);  // "chat/completions", ...

struct RequestInfo {
  std::string model;
  bool stream = false;
  bool include_usage = false;         // the client asked for stream_options.include_usage
  std::optional<int64_t> max_tokens;  // max_completion_tokens or max_tokens
  int64_t n = 1;                      // choices per prompt (completion tokens multiply)
  std::string prompt_text;            // see above
  int64_t prompt_token_ids = 0;       // prompts given as token ids
  int messages = 0;
  int64_t prompts = 1;                // completions: prompts in the request, each gets n choices
  // Prompt tokens outside the text above: tools, functions, response_format, tool_calls (their
  // JSON bytes, rendered into the prompt by chat templates) and images (kImageTokensBound each).
  int64_t extra_prompt_tokens = 0;

  // Completion tokens the answer may hold at most: max_tokens for each choice of each prompt.
  int64_t CompletionTokensBound(int64_t per_choice) const { return per_choice * n * prompts; }

  // Upper bound of prompt tokens (see above).
  int64_t PromptTokensUpperBound() const;
};

// Tokens assumed for one image part: vision encoders use up to a few thousand (a 2048x2048 image
// in 512-px tiles is 16 tiles x ~170 tokens; Llama-3.2-Vision ~6.4k for 4 tiles).
inline constexpr int64_t kImageTokensBound = 8192;

// INVALID_ARGUMENT naming the field ("model: required, a string") for what the gateway itself
// needs, or "body: ..." for text that is not a JSON object; everything else is left to the
// engine to judge. Of a member given twice the last counts, as in a parsed document. Read with
// simdjson, without building a document (a long prompt costs ~0.1 ns per byte, not ~20).
StatusOr<RequestInfo> ParseRequestInfo(std::string_view body, Endpoint endpoint);

// What the gateway changes in a body before sending it on: the engine's model name for an alias,
// include_usage asked for in a stream, max_tokens when a budget depends on it.
struct BodyEdits {
  std::optional<std::string> model;
  bool include_usage = false;
  std::optional<int64_t> max_tokens;
  bool any() const { return model || include_usage || max_tokens; }
};

// `body` (a JSON object, as ParseRequestInfo accepted it) with the edits made: the other members
// keep their order and values (written compactly); an edited member appears once, at the end,
// and stream_options keeps its other members. Written from the simdjson tape, not through a
// document. INVALID_ARGUMENT for a body that is not a JSON object.
StatusOr<std::string> RewriteBody(std::string_view body, const BodyEdits& edits);

namespace request_internal {
// For tests: rewrites on this thread that used the document ParseRequestInfo left (not parsing
// the same bytes again).
int64_t DocumentReuses();
}  // namespace request_internal

std::vector<uint64_t> PrefixHashes(std::string_view text, size_t block_bytes, int max_blocks);

struct TokenUsage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};
// The `usage` object of a completion response or of a stream's final chunk, if present.
std::optional<TokenUsage> UsageOf(const nlohmann::json& body);
// The same, read from the text with simdjson (the unary answer's path: the body is passed on as
// it came, only two numbers of it are needed). nullopt for malformed JSON.
std::optional<TokenUsage> UsageOfText(std::string_view body);
// The usage of a unary answer: the x-aicloud-usage header an aicloud engine sends
// (http/usage_header.h) when it is there and well-formed, else UsageOfText(body).
std::optional<TokenUsage> UsageOfAnswer(const http::HeaderMap& headers, std::string_view body);

}  // namespace aicloud::gateway
