// Internal test helpers: seeded random data and the ISA list the tests sweep.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "engine/kernels/cpu.h"

namespace aicloud::engine::kernels::testing {

inline std::vector<float> RandomVector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// The ISAs this machine can run: scalar always, AVX2 when present.
inline std::vector<Isa> TestIsas() {
  std::vector<Isa> isas{Isa::kScalar};
  if (DetectedIsa() == Isa::kAvx2) isas.push_back(Isa::kAvx2);
  return isas;
}

}  // namespace aicloud::engine::kernels::testing
