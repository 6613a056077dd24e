// InitRandomLora: writes a random LoRA adapter in PEFT's layout for a base model, so tests,
// benchmarks and demos can run adapters of real shapes without fine-tuning anything. The
// directory loads with LoraAdapter::Load (and with PEFT's PeftModel.from_pretrained).
//
//   InitLoraOptions o{.rank = 16, .alpha = 32, .targets = {LoraModule::kQ, LoraModule::kV}, .seed = 3};
//   Status s = InitRandomLora("/tmp/adapter-sql", model.config(), o);
//
// Files: adapter_model.safetensors with base_model.model.model.layers.{i}.<parent>.<module>.
// lora_A.weight [r, in] and ....lora_B.weight [out, r] for every listed layer and target, and
// adapter_config.json (written last, so an interrupted run leaves a directory Load refuses).
//
// Weights: A ~ uniform(-1/sqrt(in), 1/sqrt(in)), PEFT's initialisation of A; B ~ normal(0, b_std).
// PEFT starts B at zero, which makes a fresh adapter a no-op: a test could not tell an applied
// adapter from an ignored one, so B is small but not zero here. Each tensor draws from its own
// generator seeded by (seed, tensor name): the bytes depend only on the options and the shapes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/kernels/dtype.h"
#include "engine/lora/adapter.h"
#include "engine/model/config.h"

namespace aicloud::engine {

struct InitLoraOptions {
  int64_t rank = 8;
  double alpha = 16;
  std::vector<LoraModule> targets = {LoraModule::kQ, LoraModule::kV};
  bool use_rslora = false;
  uint64_t seed = 0;
  double b_std = 0.02;
  DType dtype = DType::kF32;            // of the tensors written: F32, F16 or BF16
  std::vector<int64_t> layers;          // adapted layers; empty: all
  std::string base_model_name_or_path;  // recorded in adapter_config.json
  bool overwrite = false;               // replace an adapter already in the directory
};

// INVALID_ARGUMENT for a bad option (rank outside [1, kMaxLoraRank], no or duplicate targets, a
// layer outside the base model); ALREADY_EXISTS when `dir` holds an adapter and !overwrite; the
// I/O error otherwise.
Status InitRandomLora(const std::filesystem::path& dir, const ModelConfig& base, const InitLoraOptions& options);

}  // namespace aicloud::engine
