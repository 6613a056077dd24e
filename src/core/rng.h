// Rng: the one seeded pseudo-random generator the scheduler and simulator use, so every run is
// reproducible from its seed. Not thread-safe; give each thread its own.
#pragma once

#include <cstdint>

namespace aicloud {

// SplitMix64-seeded xoshiro256**: fast, good statistical quality, identical on every platform
// (unlike std:: distributions, whose output is implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { Seed(seed); }
  void Seed(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, n). REQUIRES: n > 0.
  uint64_t Uniform(uint64_t n);
  // Uniform in [0, 1).
  double UniformDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t s_[4];
};

}  // namespace aicloud
