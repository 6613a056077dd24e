// Which instruction set the kernels run with.
//
// Every kernel has a portable scalar version and, where it pays, an AVX2+FMA+F16C version
// compiled with a function-level target attribute (no global -mavx2), so one binary runs on any
// x86-64 and uses the wide version when the CPU has it. The scalar versions are also the
// references the tests compare the vector versions against; tests switch between the two with
// ScopedIsa.
#pragma once

namespace aicloud::engine::kernels {

enum class Isa {
  kScalar,  // portable C++
  kAvx2,    // AVX2 + FMA + F16C (Haswell, Zen 1 and later)
};

// What this CPU supports (detected once).
Isa DetectedIsa();

// What the kernels use now: DetectedIsa() unless a ScopedIsa is alive. Cheap (one relaxed load).
Isa ActiveIsa();

const char* IsaName(Isa isa);

// Forces the kernels onto `isa` (clamped to DetectedIsa()) while alive. For tests and
// benchmarks; not meant to be used while other threads run kernels. Scopes nest.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa);
  ~ScopedIsa();
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  Isa previous_;
};

}  // namespace aicloud::engine::kernels
