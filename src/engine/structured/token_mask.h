// TokenMask: a set of allowed token ids over a model's vocabulary, applied to a logits row.
//
//   const TokenMask& mask = matcher.Mask(remaining);
//   mask.Apply(logits_row);           // -inf at every disallowed id, the rest untouched
//   if (mask.Allows(sampled)) ...
//
// Stored as a bitset; when few tokens are allowed (count <= vocab/32) also as a sorted id list,
// so Apply on a sparse mask touches each logit once without reading the bits.
//
// Thread-safety: a plain value; const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace aicloud::engine::structured {

struct TokenMask {
  std::vector<uint64_t> bits;    // size ceil(V/64); bit t set = token t allowed
  std::vector<int32_t> allowed;  // the allowed ids in increasing order when sparse, else empty
  int32_t count = 0;

  bool Allows(int32_t t) const {
    return t >= 0 && static_cast<size_t>(t >> 6) < bits.size() && ((bits[t >> 6] >> (t & 63)) & 1);
  }
  // Sets logits[t] = -inf for every disallowed t. REQUIRES: logits.size() == V.
  void Apply(std::span<float> logits) const;

  // An empty mask over `vocab_size` tokens.
  void Reset(int32_t vocab_size);
  void Set(int32_t t) {
    const uint64_t bit = uint64_t{1} << (t & 63);
    if (!(bits[t >> 6] & bit)) {
      bits[t >> 6] |= bit;
      ++count;
    }
  }
  void Clear(int32_t t) {
    const uint64_t bit = uint64_t{1} << (t & 63);
    if (bits[t >> 6] & bit) {
      bits[t >> 6] &= ~bit;
      --count;
    }
  }
  // Fills `allowed` from `bits` when count is at most vocab_size / 32 (clears it otherwise).
  void FinishSparseList(int32_t vocab_size);
  // Heap bytes held.
  int64_t MemoryBytes() const {
    return static_cast<int64_t>(bits.capacity() * sizeof(uint64_t) +
                                allowed.capacity() * sizeof(int32_t));
  }
};

}  // namespace aicloud::engine::structured
