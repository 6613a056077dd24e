#include "engine/lora/random_adapter.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "core/rng.h"
#include "engine/kernels/matrix.h"
#include "engine/model/safetensors_writer.h"

namespace aicloud::engine {
namespace {

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

// Normal samples by Marsaglia's polar method.
float Normal(Rng& rng) {
  double u, v, s;
  do {
    u = 2.0 * rng.UniformDouble() - 1.0;
    v = 2.0 * rng.UniformDouble() - 1.0;
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  return static_cast<float>(u * std::sqrt(-2.0 * std::log(s) / s));
}

}  // namespace

Status InitRandomLora(const std::filesystem::path& dir, const ModelConfig& base, const InitLoraOptions& o) {
  namespace fs = std::filesystem;
  if (o.rank < 1 || o.rank > kMaxLoraRank) {
    return InvalidArgumentError("random LoRA: rank " + std::to_string(o.rank) + " is outside [1, " +
                                std::to_string(kMaxLoraRank) + "]");
  }
  if (o.targets.empty()) return InvalidArgumentError("random LoRA: no target modules");
  if (std::set<LoraModule>(o.targets.begin(), o.targets.end()).size() != o.targets.size()) {
    return InvalidArgumentError("random LoRA: a target module is listed twice");
  }
  if (o.dtype != DType::kF32 && o.dtype != DType::kF16 && o.dtype != DType::kBF16) {
    return InvalidArgumentError("random LoRA: tensors are written as F32, F16 or BF16");
  }
  if (!(o.b_std >= 0) || !std::isfinite(o.alpha)) return InvalidArgumentError("random LoRA: bad alpha or b_std");
  std::vector<int64_t> layers = o.layers;
  if (layers.empty()) {
    for (int64_t l = 0; l < base.num_hidden_layers; ++l) layers.push_back(l);
  }
  for (int64_t l : layers) {
    if (l < 0 || l >= base.num_hidden_layers) {
      return InvalidArgumentError("random LoRA: layer " + std::to_string(l) + " is outside the base model's " +
                                  std::to_string(base.num_hidden_layers) + " layers");
    }
  }
  std::error_code ec;
  if (fs::exists(dir / "adapter_config.json", ec) && !o.overwrite) {
    return AlreadyExistsError(dir.string() + ": already holds an adapter; overwrite it explicitly");
  }
  fs::create_directories(dir, ec);
  if (ec) return InternalError(dir.string() + ": cannot create: " + ec.message());

  // Values are generated up front: adapters are small (r * (in + out) per module and layer).
  std::vector<std::vector<std::byte>> storage;
  std::vector<TensorToWrite> tensors;
  const size_t elem = DTypeSize(o.dtype);
  for (int64_t l : layers) {
    for (LoraModule m : o.targets) {
      const LoraModuleShape s = ModuleShape(base, m);
      const std::string prefix = "base_model.model." + LoraModuleKey(l, m);
      for (const bool is_a : {true, false}) {
        const std::string name = prefix + (is_a ? ".lora_A.weight" : ".lora_B.weight");
        const int64_t rows = is_a ? o.rank : s.out, cols = is_a ? s.in : o.rank;
        Rng rng(o.seed ^ Fnv1a(name));
        std::vector<float> v(static_cast<size_t>(rows * cols));
        const double bound = 1.0 / std::sqrt(static_cast<double>(s.in));
        for (float& x : v) {
          x = is_a ? static_cast<float>((2.0 * rng.UniformDouble() - 1.0) * bound)
                   : static_cast<float>(o.b_std) * Normal(rng);
        }
        std::vector<std::byte> bytes(v.size() * elem);
        kernels::ConvertFromFloat(o.dtype, v.data(), bytes.data(), static_cast<int64_t>(v.size()));
        storage.push_back(std::move(bytes));
        tensors.push_back({.name = name, .dtype = o.dtype, .shape = {rows, cols}, .data = storage.back()});
      }
    }
  }
  AICLOUD_RETURN_IF_ERROR(WriteSafetensors(dir / "adapter_model.safetensors", tensors));

  nlohmann::json targets = nlohmann::json::array();
  for (LoraModule m : o.targets) targets.push_back(std::string(LoraModuleName(m)));
  nlohmann::json config = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"r", o.rank},
      {"lora_alpha", o.alpha},
      {"lora_dropout", 0.0},
      {"target_modules", targets},
      {"use_rslora", o.use_rslora},
      {"fan_in_fan_out", false},
      {"bias", "none"},
      {"modules_to_save", nullptr},
      {"init_lora_weights", true},
      {"inference_mode", true},
      {"base_model_name_or_path", o.base_model_name_or_path},
  };
  if (!o.layers.empty()) config["layers_to_transform"] = o.layers;
  return WriteFileAtomically(dir / "adapter_config.json", config.dump(2) + "\n");
}

}  // namespace aicloud::engine
