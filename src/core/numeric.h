// Integer arithmetic that stops at the type's bounds instead of overflowing: counters summed from
// stored objects (which an operator may have edited) must not wrap around.
//
//   int64_t total = SaturatingAdd(stored_count, batch_count);   // INT64_MAX at most
#pragma once

#include <cstdint>
#include <limits>

namespace aicloud {

inline int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) {
    return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  }
  return r;
}

}  // namespace aicloud
