// Sampler: picks a sequence's next token from the model's logits over the vocabulary.
//
//   SequenceSampling seq(params, seed, prompt_ids);   // one per request, lives with it
//   Sampler sampler;                                  // one per engine thread, reused
//   StatusOr<SampleResult> r = sampler.Sample(seq, logits_row);   // logits_row: vocab floats
//   seq.Append(r->token);
//
// The order of operations is vLLM's:
//   0. grammar: tokens the request's grammar does not allow now get logit -inf; min_tokens:
//      until that many tokens exist, EOS and stop tokens get logit -inf; logit_bias is added
//      to its tokens' logits;
//   1. penalties (SamplingParams): repetition over prompt + output, then frequency and presence
//      over output; only the seen tokens are touched, never the whole vocabulary;
//   2. temperature 0: the argmax (lowest id among ties), done;
//   3. temperature: p_i ~ exp(logit_i / T);
//   4. min_p: drop tokens with p_i < min_p x p_max;
//   5. top_k: keep the k most likely (ties broken towards the lower id);
//   6. top_p: keep the most-likely-first prefix whose mass (renormalised over what is left)
//      first reaches top_p, the token that crosses it included;
//   7. one categorical draw over the survivors, renormalised.
// top_k = 1 is therefore exactly greedy.
//
// Cost on a 50k vocabulary: nothing ever sorts the vocabulary. Greedy is a max pass and a find.
// Sampling without filters is a max pass, one vectorisable exp pass (a portable polynomial exp,
// ~2e-7 relative error, identical bits on every platform) summed per 256-token block, and a
// draw that walks one block. top_k is one pass with a bounded heap (nth_element over the
// values for k > 4096); top_p is a 1,024-bucket histogram of the candidates by logit plus a
// sort of the one bucket the cut falls in, so a flat distribution costs no more than a peaked
// one. bench/engine_sched_bench.cc measures each case.
//
// Reproducibility: the draw for generated token i uses a generator seeded from (seed, i)
// alone. Nothing carries over between calls, so a sequence's tokens are the same whether it is
// sampled alone or between other sequences, in any batch, and after a preemption.
//
// Logprobs are those of the model's distribution: log_softmax of the logits as given, before
// penalties, temperature and filters (vLLM's default "raw_logprobs").
//
// Thread-safety: a Sampler holds scratch buffers, so one per thread. SequenceSampling is a
// plain value owned by its request; Sample only reads it.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/sample/sampling_params.h"

namespace aicloud::engine {

// What a request's sampling needs besides the logits: its parameters, its seed, and the token
// history the penalties read. The scheduler keeps one per request.
class SequenceSampling {
 public:
  // `prompt` is only read here (kept as a set when the repetition penalty needs it).
  // `eos_token_ids` are the model's end tokens: with params.min_tokens > 0 they, and
  // params.stop_token_ids, are masked out until min_tokens tokens are generated (unless
  // ignore_eos, which leaves EOS alone).
  // REQUIRES: Validate(params).ok().
  SequenceSampling(SamplingParams params, uint64_t seed, std::span<const int32_t> prompt,
                   std::span<const int32_t> eos_token_ids = {});

  const SamplingParams& params() const { return params_; }
  uint64_t seed() const { return seed_; }
  // Tokens appended so far; the next Sample draws token number num_generated().
  int64_t num_generated() const { return num_generated_; }

  // Records a generated token (after each step).
  void Append(int32_t token);

  // Times `token` was generated (counted only when a penalty is on).
  int32_t OutputCount(int32_t token) const;
  // Distinct prompt tokens, sorted (kept only when the repetition penalty is on).
  std::span<const int32_t> prompt_set() const { return prompt_set_; }
  const std::unordered_map<int32_t, int32_t>& output_counts() const { return output_counts_; }
  // Tokens masked out while num_generated() < params().min_tokens.
  std::span<const int32_t> min_tokens_masked() const { return masked_; }
  bool MasksNow() const {
    return !masked_.empty() && num_generated_ < params_.min_tokens;
  }
  // With params().grammar: the tokens allowed next (keeping room to close within max_tokens);
  // nullptr when unconstrained. The pointer is valid until the next Append or ConstraintMask.
  const structured::TokenMask* ConstraintMask() const;
  // Whether a generated token was one the grammar did not allow (Append recorded it anyway);
  // only a caller that skipped the mask can cause it.
  bool constraint_violated() const { return constraint_violated_; }

 private:
  SamplingParams params_;
  uint64_t seed_ = 0;
  int64_t num_generated_ = 0;
  std::vector<int32_t> prompt_set_;
  std::unordered_map<int32_t, int32_t> output_counts_;
  std::vector<int32_t> masked_;
  // The grammar's position; Mask() fills a per-matcher buffer near the end of the budget, hence
  // mutable behind the const ConstraintMask().
  mutable std::optional<structured::GrammarMatcher> matcher_;
  bool constraint_violated_ = false;
};

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;
  bool operator==(const TokenLogprob&) const = default;
};

struct SampleResult {
  int32_t token = -1;
  // log p(token) under the model's distribution; NaN unless params.logprobs is set.
  float logprob = std::numeric_limits<float>::quiet_NaN();
  // The params.logprobs most likely tokens, most likely first, ties towards the lower id.
  std::vector<TokenLogprob> top_logprobs;
};

// One surviving candidate of the filtered distribution.
struct TokenProb {
  int32_t token = -1;
  double prob = 0;
};

class Sampler {
 public:
  Sampler();
  ~Sampler();
  Sampler(Sampler&&) noexcept;
  Sampler& operator=(Sampler&&) noexcept;

  // INVALID_ARGUMENT for empty logits, a NaN or +inf logit, or all logits -inf (after
  // penalties).
  StatusOr<SampleResult> Sample(const SequenceSampling& seq, std::span<const float> logits);

  // The distribution Sample draws from (steps 1-6 above): the surviving tokens with their
  // renormalised probabilities, most likely first, ties towards the lower id. Greedy gives the
  // argmax with probability 1. For tests and debugging; it sorts everything it returns.
  StatusOr<std::vector<TokenProb>> Distribution(const SequenceSampling& seq,
                                                std::span<const float> logits);

  // Step 1 alone, in place: what the penalties do to `logits`.
  static void ApplyPenalties(const SequenceSampling& seq, std::span<float> logits);

 private:
  struct Scratch;  // buffers reused between calls (sampler.cc)

  // Steps 1-6: leaves the survivors and their unnormalised weights in the scratch (in an order
  // that is a function of the logits and params only, not sorted) and their sum.
  Status Prepare(const SequenceSampling& seq, std::span<const float> logits);
  Status PrepareTopP(std::span<const float> x, float mx, double x_min, const SamplingParams& p);
  void Logprobs(int32_t n, int32_t token, std::span<const float> logits, SampleResult* out);

  std::unique_ptr<Scratch> s_;
};

}  // namespace aicloud::engine
