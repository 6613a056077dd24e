// LoraAdapter: a PEFT LoRA adapter directory read, checked against the base model it will run on,
// and laid out for the batched kernels of apply.h.
//
//   StatusOr<std::unique_ptr<LoraAdapter>> a =
//       LoraAdapter::Load("adapters/sql", model.config(), {.max_rank = 16});
//   if (!a.ok()) return a.status();  // names the file and the field or tensor at fault
//   const LoraWeights* w = (*a)->weights(/*layer=*/3, LoraModule::kQ);  // nullptr: not adapted
//
// A LoRA adapter turns a linear layer y = W x into y = W x + scale * B (A x), with A [r][in],
// B [out][r] and a rank r far below in and out, so one base model can serve many fine-tunes for
// the price of a few percent more arithmetic each. scale is lora_alpha / r, or
// lora_alpha / sqrt(r) with use_rslora.
//
// The directory is what PEFT's save_pretrained writes:
//   adapter_config.json         r, lora_alpha, target_modules (a list of module names or name
//                               suffixes, or one string: a regular expression the full module
//                               name must match, or "all-linear"), use_rslora,
//                               base_model_name_or_path, ...
//   adapter_model.safetensors   base_model.model.model.layers.{i}.self_attn.{q,k,v,o}_proj.
//                               lora_{A,B}.weight and ....mlp.{gate,up,down}_proj.lora_{A,B}.weight
// Options that change the computation in ways the engine does not implement (fan_in_fan_out,
// bias other than "none", modules_to_save, DoRA, per-module rank or alpha patterns, adapted
// embeddings or lm_head, ...) are refused with UNIMPLEMENTED naming the field or tensor, so an
// adapter never loads and silently computes something else. Everything else is checked against
// the base ModelConfig (layer index, in and out features of each module including GQA's k/v
// width, rank against the engine's max_rank, A/B pairs complete, values finite) with
// INVALID_ARGUMENT naming the file and the tensor.
//
// Layout: A and B are stored transposed, A^T [in][rp] and B^T [rp][out], with the rank padded
// with zeros to rp = a multiple of 8. The shrink (u = A x) then reads one contiguous row of A^T
// per input feature for all ranks, and the expand (y += B u) one contiguous row of B^T per rank
// for all outputs: both are 8-wide fused multiply-adds with no horizontal sums, and every output
// is accumulated in a fixed order whatever the batch around it.
//
// Thread-compatible; immutable once built, so const access from many threads is safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/kernels/dtype.h"
#include "engine/model/config.h"

namespace aicloud::engine {

// The linear layers of a decoder layer an adapter can change, in model order.
enum class LoraModule : uint8_t { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kNumLoraModules = 7;
inline constexpr LoraModule kAllLoraModules[kNumLoraModules] = {
    LoraModule::kQ,    LoraModule::kK,  LoraModule::kV,   LoraModule::kO,
    LoraModule::kGate, LoraModule::kUp, LoraModule::kDown};

// "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj".
std::string_view LoraModuleName(LoraModule m);
std::optional<LoraModule> ParseLoraModule(std::string_view name);
// "self_attn" for q/k/v/o, "mlp" for gate/up/down: the parent in the module's full name.
std::string_view LoraModuleParent(LoraModule m);
// "model.layers.{layer}.self_attn.q_proj": the module's name in the base model.
std::string LoraModuleKey(int64_t layer, LoraModule m);

// In and out features of a module of a base model: q [hidden -> q_dim], k and v
// [hidden -> kv_dim], o [q_dim -> hidden], gate and up [hidden -> intermediate],
// down [intermediate -> hidden].
struct LoraModuleShape {
  int64_t in = 0;
  int64_t out = 0;
};
LoraModuleShape ModuleShape(const ModelConfig& config, LoraModule m);

// OK when adapters checked against `adapter_base` fit a model of `model`: the same number of
// layers and the same in/out features for every module. INVALID_ARGUMENT naming the first
// difference otherwise. For a runner handed a registry made for some config.
Status CheckLoraBase(const ModelConfig& model, const ModelConfig& adapter_base);

// The largest rank the engine accepts at all (the largest vLLM allows); LoraLoadOptions::max_rank
// is the operator's lower limit.
inline constexpr int64_t kMaxLoraRank = 512;

// The fields of adapter_config.json the engine uses. Value type.
struct LoraConfig {
  int64_t rank = 0;  // r
  double alpha = 0;  // lora_alpha
  bool use_rslora = false;
  // target_modules as a list: entries matching a module whose full name equals them or ends with
  // "." + them (PEFT's rule). Empty when target_modules is a string.
  std::vector<std::string> target_modules;
  // target_modules as a string: a regular expression the full module name must match entirely
  // (PEFT's rule); "all-linear" is stored as ".*" (every supported module).
  std::optional<std::string> target_regex;
  std::string base_model_name_or_path;  // informational; empty when null

  // alpha / r, or alpha / sqrt(r) with use_rslora.
  float Scale() const;
  // Whether the config's target_modules select the module `key` (a LoraModuleKey).
  bool Targets(const std::string& key) const;
};

// Parses an adapter_config.json document; `source` prefixes errors ("<source>: <field>: ...").
// INVALID_ARGUMENT for missing or malformed fields, UNIMPLEMENTED for options the engine does not
// implement.
StatusOr<LoraConfig> ParseLoraConfig(const nlohmann::json& doc, std::string_view source = "adapter_config.json");

// One adapted linear layer: scale * B (A x), stored as the file comment describes. Move-only
// value; F32 or F16 elements.
class LoraWeights {
 public:
  LoraWeights() = default;
  // Builds from row-major float A [rank][in] and B [out][rank], converting to `storage` (F32 or
  // F16). REQUIRES: in, out > 0; 0 < rank <= kMaxLoraRank; storage is kF32 or kF16.
  static LoraWeights FromFloat(int64_t in, int64_t out, int64_t rank, float scale, const float* a,
                               const float* b, DType storage);

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  int64_t rank() const { return rank_; }
  int64_t padded_rank() const { return padded_rank_; }
  float scale() const { return scale_; }
  DType dtype() const { return dtype_; }
  // A^T [in][padded_rank] and B^T [padded_rank][out], elements of dtype().
  const void* a_t() const;
  const void* b_t() const;
  // A[r][k] and B[o][r] as stored (after the conversion to dtype()), for references and tests.
  float A(int64_t r, int64_t k) const;
  float B(int64_t o, int64_t r) const;
  size_t bytes() const;

 private:
  int64_t in_ = 0, out_ = 0, rank_ = 0, padded_rank_ = 0;
  float scale_ = 0;
  DType dtype_ = DType::kF32;
  std::vector<float> a32_, b32_;
  std::vector<uint16_t> a16_, b16_;
};

struct LoraLoadOptions {
  int64_t max_rank = 16;        // larger adapters are refused (vLLM's --max-lora-rank)
  DType dtype = DType::kF32;    // storage of A and B: kF32, or kF16 (half the memory traffic)
};

class LoraAdapter {
 public:
  // Reads `dir`/adapter_config.json and `dir`/adapter_model.safetensors (NOT_FOUND when either
  // is missing) for a base model of `base`. The files are not needed afterwards.
  static StatusOr<std::unique_ptr<LoraAdapter>> Load(const std::filesystem::path& dir,
                                                     const ModelConfig& base,
                                                     const LoraLoadOptions& options);
  // An adapter with no adapted module yet, for weights built in code (tests, benchmarks).
  LoraAdapter(LoraConfig config, int64_t num_layers);

  // REQUIRES: 0 <= layer < num_layers(); w's shape fits the base model the caller has in mind.
  void Set(int64_t layer, LoraModule m, LoraWeights w);

  const LoraConfig& config() const { return config_; }
  int64_t num_layers() const { return num_layers_; }
  // nullptr when the module of that layer is not adapted. REQUIRES: 0 <= layer < num_layers().
  const LoraWeights* weights(int64_t layer, LoraModule m) const {
    const LoraWeights& w = weights_[static_cast<size_t>(layer * kNumLoraModules + static_cast<int>(m))];
    return w.rank() > 0 ? &w : nullptr;
  }
  // (layer, module) pairs adapted.
  int64_t num_adapted() const;
  size_t bytes() const;

 private:
  LoraConfig config_;
  int64_t num_layers_ = 0;
  std::vector<LoraWeights> weights_;  // [layer * kNumLoraModules + module]; rank 0 = absent
};

}  // namespace aicloud::engine
