#include "engine/structured/token_mask.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace aicloud::engine::structured {

void TokenMask::Reset(int32_t vocab_size) {
  bits.assign((static_cast<size_t>(vocab_size) + 63) / 64, 0);
  allowed.clear();
  count = 0;
}

void TokenMask::FinishSparseList(int32_t vocab_size) {
  allowed.clear();
  if (count > vocab_size / 32) return;
  allowed.reserve(count);
  for (size_t w = 0; w < bits.size(); ++w) {
    for (uint64_t word = bits[w]; word != 0; word &= word - 1) {
      allowed.push_back(static_cast<int32_t>(w * 64 + std::countr_zero(word)));
    }
  }
}

void TokenMask::Apply(std::span<float> logits) const {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t v = logits.size();
  float* x = logits.data();
  if (!allowed.empty()) {
    size_t next = 0;
    for (int32_t id : allowed) {
      std::fill(x + next, x + id, kNegInf);
      next = static_cast<size_t>(id) + 1;
    }
    if (next < v) std::fill(x + next, x + v, kNegInf);
    return;
  }
  for (size_t w = 0; w < bits.size(); ++w) {
    const uint64_t word = bits[w];
    const size_t base = w * 64;
    if (word == ~uint64_t{0}) continue;
    if (word == 0) {
      std::fill(x + base, x + std::min(base + 64, v), kNegInf);
      continue;
    }
    for (uint64_t off = ~word; off != 0; off &= off - 1) {
      const size_t t = base + std::countr_zero(off);
      if (t < v) x[t] = kNegInf;
    }
  }
  // Ids past the bits (never the case when sizes agree) are disallowed too.
  if (bits.size() * 64 < v) std::fill(x + bits.size() * 64, x + v, kNegInf);
}

}  // namespace aicloud::engine::structured
