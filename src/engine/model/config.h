// ModelConfig: the shape and hyper-parameters of a Llama-family decoder, read from a Hugging Face
// `config.json`, plus the RoPE inverse-frequency table the attention kernels consume.
//
//   StatusOr<ModelConfig> c = LoadModelConfig(dir / "config.json");
//   if (!c.ok()) return c.status();  // INVALID_ARGUMENT: ".../config.json: num_key_value_heads: ..."
//   std::vector<float> inv_freq = RopeInverseFrequencies(*c);  // head_dim / 2 entries
//
// Accepted families (same tensor layout, pre-norm, RMSNorm, SwiGLU MLP, rotate-half RoPE, GQA):
//   llama   (LlamaForCausalLM; `attention_bias` adds biases to q, k, v and o)
//   qwen2   (Qwen2ForCausalLM; q, k and v always carry a bias, o never does)
//   mistral (MistralForCausalLM; `sliding_window` is recorded, the engine must honour it)
// Anything else, and any option that changes the computation in a way the engine does not
// implement (non-SiLU activation, MLP biases, unknown RoPE scaling), is refused at parse time so a
// model never loads and silently computes the wrong thing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/kernels/dtype.h"

namespace aicloud::engine {

// `rope_scaling` of config.json (or `rope_parameters` in newer files).
struct RopeScaling {
  enum class Type {
    kNone,    // null or "default"
    kLinear,  // position interpolation: every frequency divided by `factor`
    kLlama3,  // Llama 3.1's piecewise rule, see RopeInverseFrequencies
  };
  Type type = Type::kNone;
  double factor = 1.0;
  // kLlama3 only.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
};

std::string_view RopeScalingTypeName(RopeScaling::Type type);

// Thread-compatible value type. All sizes are positive after a successful parse.
struct ModelConfig {
  std::string architecture;  // "LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"
  std::string model_type;    // "llama", "qwen2", "mistral"
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // == num_attention_heads without GQA
  int64_t head_dim = 0;             // hidden_size / num_attention_heads unless given
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q_proj, k_proj, v_proj have a `.bias`
  bool o_bias = false;    // o_proj has a `.bias` (llama with attention_bias)
  int64_t sliding_window = 0;  // 0: full attention
  std::vector<int64_t> bos_token_ids;  // usually one; empty when absent/null
  std::vector<int64_t> eos_token_ids;  // Llama 3.1 lists several
  std::optional<DType> torch_dtype;    // the dtype the weights were saved in, when stated

  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  // Parameters the tensors of a checkpoint with this config hold (lm_head counted once if tied).
  int64_t ParameterCount() const;

  // The config.json a Hugging Face loader accepts; ParseModelConfig(ToJson()) gives back an equal
  // config.
  nlohmann::json ToJson() const;
};

// Parses and validates a config.json document. `source` names it in errors
// ("<source>: <field>: <problem>"). INVALID_ARGUMENT for malformed or inconsistent values,
// UNIMPLEMENTED for well-formed options the engine does not support (other architectures,
// activations, RoPE scaling types).
StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& doc,
                                       std::string_view source = "config.json");
// Reads `path` (NOT_FOUND when missing) and parses it.
StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& path);
// Checks the invariants ParseModelConfig guarantees on a config built in code (sizes positive,
// heads divide, token ids inside the vocabulary, ...).
Status ValidateModelConfig(const ModelConfig& config, std::string_view source = "config.json");

// The RoPE inverse frequencies, head_dim / 2 of them, for rotate-half RoPE: dimension pair i
// rotates by position * inv_freq[i] radians.
//
//   base:   inv_freq[i] = rope_theta ^ (-2i / head_dim)
//   linear: inv_freq[i] = base[i] / factor
//   llama3: with wavelen = 2*pi / base[i], L = original_max_position_embeddings,
//           low_wavelen = L / low_freq_factor, high_wavelen = L / high_freq_factor:
//             wavelen < high_wavelen          -> base[i]              (high frequencies kept)
//             wavelen > low_wavelen           -> base[i] / factor     (low frequencies scaled)
//             otherwise, smooth = (L / wavelen - low_freq_factor) /
//                                 (high_freq_factor - low_freq_factor)
//                                          -> (1 - smooth) * base[i] / factor + smooth * base[i]
// Computed in double and rounded to float once.
std::vector<float> RopeInverseFrequencies(const ModelConfig& config);

}  // namespace aicloud::engine
