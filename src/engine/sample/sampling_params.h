// SamplingParams: how one request picks its tokens and when it stops, with the semantics of
// vLLM's SamplingParams / the OpenAI API, validated before a request is admitted.
//
//   SamplingParams p;
//   p.temperature = 0.7f;
//   p.top_p = 0.9f;
//   p.seed = 42;                                   // reproducible whatever the batch
//   p.stop_token_ids = {128009};
//   if (Status s = Validate(p, vocab_size); !s.ok()) return s;   // INVALID_ARGUMENT: "top_p ..."
//
// Where each field acts:
//   - Sampler (sampler.h): temperature, top_k, top_p, min_p, seed, logit_bias, grammar, the
//     three penalties, logprobs.
//   - Scheduler (batch/): max_tokens, min_tokens, stop_token_ids, ignore_eos.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/structured/token_grammar.h"

namespace aicloud::engine {

struct SamplingParams {
  // Divides the logits. 0 = greedy: the argmax, lowest token id among equal logits, and every
  // other sampling field (top_k, top_p, min_p, seed) is ignored. >= 0.
  float temperature = 1.0f;
  // Keep only the k most likely tokens. 0 or -1 = off (vLLM uses -1, HF and llama.cpp 0); no
  // other negative value is valid. Values >= vocabulary size are off too.
  int32_t top_k = 0;
  // Nucleus sampling: keep the smallest most-likely-first set whose probability reaches top_p.
  // In (0, 1]; 1 = off.
  float top_p = 1.0f;
  // Keep tokens whose probability is >= min_p x the most likely token's. In [0, 1]; 0 = off.
  float min_p = 0.0f;
  // Seeds this request's draws. Token i is drawn from a generator seeded by (seed, i) only, so
  // a request's output never depends on the other requests in its batch or on preemptions.
  // Absent: the scheduler picks one from its own seeded generator.
  std::optional<uint64_t> seed;
  // HF/CTRL repetition penalty over every token seen so far (prompt and output): a positive
  // logit is divided by it, a negative one multiplied. > 0; 1 = off; > 1 discourages repeats.
  float repetition_penalty = 1.0f;
  // OpenAI penalties over generated tokens only: logit -= presence_penalty if the token was
  // generated at least once, and -= frequency_penalty x how many times. Each in [-2, 2].
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;

  // Stop after this many generated tokens. >= 1.
  int32_t max_tokens = 16;
  // EOS and stop_token_ids do not stop the request before this many tokens. [0, max_tokens].
  int32_t min_tokens = 0;
  // Generating any of these ends the request (the token is kept as the last output token).
  std::vector<int32_t> stop_token_ids;
  // Generate past the model's EOS tokens (trace replay, benchmarks).
  bool ignore_eos = false;
  // Return the sampled token's log-probability and this many most likely alternatives
  // (0 = the sampled token's only). Absent = none. [0, kMaxLogprobs].
  std::optional<int32_t> logprobs;
  // OpenAI's logit_bias: (token id, bias) pairs, each bias in [-100, 100], added to that token's
  // logit before the penalties and every filter (+-100 in practice forces or bans a token).
  // Logprobs stay those of the model's distribution, without the bias.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Constrained decoding (structured/token_grammar.h): every token is drawn among those this
  // grammar allows, and the output always completes within max_tokens (the grammar keeps room
  // to close). Shared by the requests that use the same schema or regex. Needs min_tokens 0 and
  // not ignore_eos (the grammar decides when the output ends); max_tokens must leave room for
  // the shortest complete output.
  std::shared_ptr<structured::TokenGrammar> grammar;

  bool HasPenalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
  bool IsGreedy() const { return temperature == 0.0f; }
};

inline constexpr int32_t kMaxLogprobs = 20;  // vLLM's default max_logprobs, OpenAI's limit

// OK, or INVALID_ARGUMENT naming the first bad field and its valid range. With vocab_size > 0,
// stop_token_ids must also be token ids of the vocabulary.
Status Validate(const SamplingParams& params, int32_t vocab_size = 0);

}  // namespace aicloud::engine
