// Test-only: the small base model and the two adapters the LoRA fixtures in tests/engine/data/
// were computed from, shared by lora_reference_test.cc (the adapters on a forward pass written in
// the test) and lora_model_test.cc (the same through LlamaModel).
//
// The base model is runner/llama_test.cc's "plain" model, option for option, so
// tests/engine/data/reference_plain.json is its base-model fixture. Regenerating the LoRA
// fixtures:
//   AICLOUD_KEEP_MODELS=/tmp/ref build/src/engine/lora/engine_lora_test --gtest_filter='*PyTorch*'
//   for a in a b; do
//     /usr/bin/python3 tests/engine/lora_reference.py /tmp/ref/plain --adapter /tmp/ref/lora_$a
//         --prompt 15496,11,995,0,314,716,257,1332,13,40,588,50256,3 --greedy 12
//         > tests/engine/data/lora_plain_$a.json          (one command line)
//   done
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/lora/random_adapter.h"
#include "engine/model/random_checkpoint.h"
#include "engine/model/test_models.h"

namespace aicloud::engine {

inline const std::string kLoraTestSource = AICLOUD_SOURCE_DIR;

inline InitCheckpointOptions LoraTestBaseModel() { return PlainTestModel(kLoraTestSource); }

struct LoraTestAdapter {
  std::string name;     // directory name and fixture suffix: tests/engine/data/lora_plain_<x>.json
  InitLoraOptions options;
};

// "a": rank 8 on the attention projections, F32 tensors, scale alpha / r = 2.
// "b": rank 16 with rsLoRA (scale 32 / sqrt(16) = 8) on v and the MLP, BF16 tensors.
inline std::vector<LoraTestAdapter> LoraTestAdapters() {
  return {
      {"lora_a",
       {.rank = 8, .alpha = 16, .targets = {LoraModule::kQ, LoraModule::kK, LoraModule::kV, LoraModule::kO},
        .seed = 21, .b_std = 0.1, .dtype = DType::kF32, .base_model_name_or_path = "plain"}},
      {"lora_b",
       {.rank = 16, .alpha = 32, .targets = {LoraModule::kV, LoraModule::kGate, LoraModule::kUp, LoraModule::kDown},
        .use_rslora = true, .seed = 22, .b_std = 0.03, .dtype = DType::kBF16, .base_model_name_or_path = "plain"}},
  };
}

inline std::vector<int32_t> LoraTestPrompt() { return {15496, 11, 995, 0, 314, 716, 257, 1332, 13, 40, 588, 50256, 3}; }

// Where the test writes the model and adapters: AICLOUD_KEEP_MODELS when set (to regenerate the
// fixtures from them), else `tmp`.
inline std::filesystem::path LoraTestRoot(const std::filesystem::path& tmp) {
  if (const char* keep = std::getenv("AICLOUD_KEEP_MODELS")) return keep;
  return tmp;
}

}  // namespace aicloud::engine
