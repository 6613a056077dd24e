// libFuzzer target for the manifest parser and schema check: whatever bytes a client sends as a
// request body or `aicloud apply -f` reads must never crash, hang or leak.
//
// Build and run (clang only):
//   CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DAICLOUD_FUZZ=ON -DAICLOUD_BUILD_TESTS=OFF \
//       -DAICLOUD_BUILD_BENCH=OFF
//   cmake --build build-fuzz --target manifest_fuzz
//   build-fuzz/fuzz/manifest_fuzz -max_total_time=60 fuzz/corpus
// Without clang, ManifestMutationTest in src/control/api_test.cc runs the corpus plus seeded
// random mutations through the same calls.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "control/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto docs = aicloud::control::ParseManifests(text, "fuzz");
  if (!docs.ok()) return 0;
  for (const aicloud::control::Manifest& m : *docs) {
    aicloud::Status st = aicloud::control::ValidateObject(m.object);
    (void)aicloud::control::ValidationFieldOf(st);
  }
  return 0;
}
