#include "engine/kernels/cpu.h"

#include <atomic>

namespace aicloud::engine::kernels {
namespace {

Isa Detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    return Isa::kAvx2;
  }
#endif
  return Isa::kScalar;
}

std::atomic<Isa>& Active() {
  static std::atomic<Isa> active{DetectedIsa()};
  return active;
}

}  // namespace

Isa DetectedIsa() {
  static const Isa detected = Detect();
  return detected;
}

Isa ActiveIsa() { return Active().load(std::memory_order_relaxed); }

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
  }
  return "?";
}

ScopedIsa::ScopedIsa(Isa isa) : previous_(ActiveIsa()) {
  if (isa == Isa::kAvx2 && DetectedIsa() != Isa::kAvx2) isa = Isa::kScalar;
  Active().store(isa, std::memory_order_relaxed);
}

ScopedIsa::~ScopedIsa() { Active().store(previous_, std::memory_order_relaxed); }

}  // namespace aicloud::engine::kernels
