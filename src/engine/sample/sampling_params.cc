#include "engine/sample/sampling_params.h"

#include <cmath>
#include <string>

namespace aicloud::engine {
namespace {

std::string Num(double v) {
  std::string s = std::to_string(v);
  // Trim "0.500000" to "0.5".
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  return s;
}

Status Bad(const std::string& field, const std::string& rule, double got) {
  return InvalidArgumentError("sampling: " + field + " must be " + rule + ", got " + Num(got));
}

}  // namespace

Status Validate(const SamplingParams& p, int32_t vocab_size) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) {
    return Bad("temperature", ">= 0 (0 = greedy)", p.temperature);
  }
  if (p.top_k < -1) return Bad("top_k", ">= 1, or 0 or -1 to disable", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) return Bad("top_p", "in (0, 1]", p.top_p);
  if (!(p.min_p >= 0 && p.min_p <= 1)) return Bad("min_p", "in [0, 1]", p.min_p);
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0) {
    return Bad("repetition_penalty", "> 0 (1 = off)", p.repetition_penalty);
  }
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2)) {
    return Bad("presence_penalty", "in [-2, 2]", p.presence_penalty);
  }
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2)) {
    return Bad("frequency_penalty", "in [-2, 2]", p.frequency_penalty);
  }
  if (p.max_tokens < 1) return Bad("max_tokens", ">= 1", p.max_tokens);
  if (p.min_tokens < 0 || p.min_tokens > p.max_tokens) {
    return Bad("min_tokens", "in [0, max_tokens=" + std::to_string(p.max_tokens) + "]",
               p.min_tokens);
  }
  if (p.logprobs && (*p.logprobs < 0 || *p.logprobs > kMaxLogprobs)) {
    return Bad("logprobs", "in [0, " + std::to_string(kMaxLogprobs) + "]", *p.logprobs);
  }
  for (int32_t t : p.stop_token_ids) {
    if (t < 0 || (vocab_size > 0 && t >= vocab_size)) {
      return Bad("stop_token_ids",
                 vocab_size > 0 ? "token ids in [0, " + std::to_string(vocab_size) + ")"
                                : "non-negative token ids",
                 t);
    }
  }
  for (const auto& [t, bias] : p.logit_bias) {
    if (t < 0 || (vocab_size > 0 && t >= vocab_size)) {
      return Bad("logit_bias",
                 vocab_size > 0 ? "keyed by token ids in [0, " + std::to_string(vocab_size) + ")"
                                : "keyed by non-negative token ids",
                 t);
    }
    if (!(bias >= -100 && bias <= 100)) return Bad("logit_bias", "values in [-100, 100]", bias);
  }
  if (p.grammar) {
    if (p.min_tokens > 0) {
      return Bad("min_tokens", "0 when the output is constrained (the grammar decides where it ends)", p.min_tokens);
    }
    if (p.ignore_eos) {
      return InvalidArgumentError("sampling: ignore_eos cannot be combined with a constrained output");
    }
    if (const int32_t need = p.grammar->MinTokens(); need > p.max_tokens) {
      return InvalidArgumentError("sampling: max_tokens must be at least " + std::to_string(need) +
                                  " for this constrained output (its shortest complete form), got " +
                                  std::to_string(p.max_tokens));
    }
    if (vocab_size > 0 && p.grammar->vocabulary().size() != vocab_size) {
      return InvalidArgumentError("sampling: grammar built for a vocabulary of " +
                                  std::to_string(p.grammar->vocabulary().size()) + " tokens, not " +
                                  std::to_string(vocab_size));
    }
  }
  return OkStatus();
}

}  // namespace aicloud::engine
