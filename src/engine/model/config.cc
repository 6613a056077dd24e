#include "engine/model/config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <numbers>
#include <sstream>

#include <fmt/format.h>

namespace aicloud::engine {
namespace {

using nlohmann::json;

// Upper bounds far above any released model; they keep every derived product (parameter counts,
// tensor byte sizes) inside int64 and turn typos like an extra zero into clear errors.
constexpr int64_t kMaxWidth = int64_t{1} << 20;      // hidden, intermediate, head_dim
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = int64_t{1} << 14;
constexpr int64_t kMaxVocab = int64_t{1} << 26;
constexpr int64_t kMaxPositions = int64_t{1} << 30;

struct Family {
  std::string_view model_type;
  std::string_view architecture;
};
constexpr Family kFamilies[] = {
    {"llama", "LlamaForCausalLM"},
    {"qwen2", "Qwen2ForCausalLM"},
    {"mistral", "MistralForCausalLM"},
};

Status Invalid(std::string_view source, std::string_view field, const std::string& problem) {
  return InvalidArgumentError(fmt::format("{}: {}: {}", source, field, problem));
}
Status Unsupported(std::string_view source, std::string_view field, const std::string& problem) {
  return UnimplementedError(fmt::format("{}: {}: {}", source, field, problem));
}

std::string Describe(const json& v) {
  if (v.is_string()) return fmt::format("the string \"{}\"", v.get<std::string>());
  if (v.is_number_float() || v.is_boolean()) return v.dump();
  return std::string("a ") + v.type_name();
}

// A field that is missing or null.
bool Absent(const json& doc, std::string_view key) {
  auto it = doc.find(key);
  return it == doc.end() || it->is_null();
}

// A positive integer no larger than `max`; `fallback` when absent or null (required otherwise).
// `label` names the field in errors when it differs from `key` (nested objects).
StatusOr<int64_t> GetSize(const json& doc, std::string_view source, std::string_view key,
                          int64_t max, std::optional<int64_t> fallback = std::nullopt,
                          std::string_view label = {}) {
  if (label.empty()) label = key;
  if (Absent(doc, key)) {
    if (fallback) return *fallback;
    return Invalid(source, label, "missing (a positive integer is required)");
  }
  const json& v = doc.at(key);
  if (!v.is_number_integer()) {
    return Invalid(source, label, "must be a positive integer, got " + Describe(v));
  }
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u == 0) return Invalid(source, label, "must be positive, got 0");
    if (u > static_cast<uint64_t>(max)) {
      return Invalid(source, label, fmt::format("{} is larger than the supported {}", u, max));
    }
    return static_cast<int64_t>(u);
  }
  const int64_t i = v.get<int64_t>();
  if (i <= 0) return Invalid(source, label, fmt::format("must be positive, got {}", i));
  if (i > max) return Invalid(source, label, fmt::format("{} is larger than the supported {}", i, max));
  return i;
}

// A finite positive number.
StatusOr<double> GetPositive(const json& doc, std::string_view source, std::string_view key,
                             std::optional<double> fallback, std::string_view label = {}) {
  if (label.empty()) label = key;
  if (Absent(doc, key)) {
    if (fallback) return *fallback;
    return Invalid(source, label, "missing (a positive number is required)");
  }
  const json& v = doc.at(key);
  if (!v.is_number()) return Invalid(source, label, "must be a number, got " + Describe(v));
  const double d = v.get<double>();
  if (!std::isfinite(d) || d <= 0) return Invalid(source, label, fmt::format("must be positive, got {}", d));
  return d;
}

StatusOr<bool> GetBool(const json& doc, std::string_view source, std::string_view key, bool fallback) {
  if (Absent(doc, key)) return fallback;
  const json& v = doc.at(key);
  if (!v.is_boolean()) return Invalid(source, key, "must be true or false, got " + Describe(v));
  return v.get<bool>();
}

// bos_token_id / eos_token_id: null, an id, or a list of ids.
StatusOr<std::vector<int64_t>> GetTokenIds(const json& doc, std::string_view source,
                                           std::string_view key) {
  std::vector<int64_t> ids;
  if (Absent(doc, key)) return ids;
  const json& v = doc.at(key);
  auto one = [&](const json& e) -> Status {
    if (!e.is_number_integer() || (!e.is_number_unsigned() && e.get<int64_t>() < 0)) {
      return Invalid(source, key, "must be a token id (a non-negative integer) or a list of them, got " +
                                      Describe(e));
    }
    if (e.is_number_unsigned() && e.get<uint64_t>() > static_cast<uint64_t>(kMaxVocab)) {
      return Invalid(source, key, fmt::format("token id {} is out of range", e.get<uint64_t>()));
    }
    ids.push_back(e.get<int64_t>());
    return OkStatus();
  };
  if (v.is_array()) {
    for (const json& e : v) AICLOUD_RETURN_IF_ERROR(one(e));
  } else {
    AICLOUD_RETURN_IF_ERROR(one(v));
  }
  return ids;
}

StatusOr<std::optional<DType>> GetTorchDType(const json& doc, std::string_view source) {
  // Newer transformers releases write "dtype"; older ones "torch_dtype".
  std::string_view key = Absent(doc, "torch_dtype") ? "dtype" : "torch_dtype";
  if (Absent(doc, key)) return std::optional<DType>();
  const json& v = doc.at(key);
  if (!v.is_string()) return Invalid(source, key, "must be a string, got " + Describe(v));
  std::string s = v.get<std::string>();
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  if (s == "float32" || s == "float") return std::optional<DType>(DType::kF32);
  if (s == "float16" || s == "half") return std::optional<DType>(DType::kF16);
  if (s == "bfloat16") return std::optional<DType>(DType::kBF16);
  return Invalid(source, key, fmt::format("\"{}\" is not float32, float16 or bfloat16", s));
}

StatusOr<RopeScaling> GetRopeScaling(const json& v, std::string_view source, std::string_view key) {
  RopeScaling r;
  if (v.is_null()) return r;
  if (!v.is_object()) return Invalid(source, key, "must be null or an object, got " + Describe(v));
  std::string type_key = fmt::format("{}.rope_type", key);
  const json* type = nullptr;
  if (!Absent(v, "rope_type")) {
    type = &v.at("rope_type");
  } else if (!Absent(v, "type")) {
    type = &v.at("type");
    type_key = fmt::format("{}.type", key);
  } else {
    return Invalid(source, type_key, "missing (\"default\", \"linear\" or \"llama3\")");
  }
  if (!type->is_string()) return Invalid(source, type_key, "must be a string, got " + Describe(*type));
  const std::string name = type->get<std::string>();
  const std::string prefix = fmt::format("{}.", key);
  auto positive = [&](std::string_view field) {
    return GetPositive(v, source, field, std::nullopt, prefix + std::string(field));
  };
  if (name == "default") return r;
  if (name == "linear") {
    r.type = RopeScaling::Type::kLinear;
    StatusOr<double> f = positive("factor");
    if (!f.ok()) return f.status();
    r.factor = *f;
    return r;
  }
  if (name == "llama3") {
    r.type = RopeScaling::Type::kLlama3;
    StatusOr<double> f = positive("factor");
    if (!f.ok()) return f.status();
    StatusOr<double> lo = positive("low_freq_factor");
    if (!lo.ok()) return lo.status();
    StatusOr<double> hi = positive("high_freq_factor");
    if (!hi.ok()) return hi.status();
    r.factor = *f;
    r.low_freq_factor = *lo;
    r.high_freq_factor = *hi;
    StatusOr<int64_t> orig = GetSize(v, source, "original_max_position_embeddings", kMaxPositions,
                                     std::nullopt, prefix + "original_max_position_embeddings");
    if (!orig.ok()) return orig.status();
    r.original_max_position_embeddings = *orig;
    return r;
  }
  return Unsupported(source, type_key,
                     fmt::format("\"{}\" is not supported (supported: default, linear, llama3)", name));
}

}  // namespace

std::string_view RopeScalingTypeName(RopeScaling::Type type) {
  switch (type) {
    case RopeScaling::Type::kNone: return "none";
    case RopeScaling::Type::kLinear: return "linear";
    case RopeScaling::Type::kLlama3: return "llama3";
  }
  return "?";
}

int64_t ModelConfig::ParameterCount() const {
  const int64_t h = hidden_size;
  int64_t per_layer = 2 * h                        // input and post-attention norms
                      + h * q_dim() + 2 * h * kv_dim() + q_dim() * h  // q, k, v, o
                      + 3 * h * intermediate_size;                    // gate, up, down
  if (qkv_bias) per_layer += q_dim() + 2 * kv_dim();
  if (o_bias) per_layer += h;
  int64_t total = vocab_size * h + num_hidden_layers * per_layer + h;
  if (!tie_word_embeddings) total += vocab_size * h;
  return total;
}

nlohmann::json ModelConfig::ToJson() const {
  json j;
  j["architectures"] = json::array({architecture});
  j["model_type"] = model_type;
  j["hidden_size"] = hidden_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["intermediate_size"] = intermediate_size;
  j["vocab_size"] = vocab_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  switch (rope_scaling.type) {
    case RopeScaling::Type::kNone:
      j["rope_scaling"] = nullptr;
      break;
    case RopeScaling::Type::kLinear:
      j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", rope_scaling.factor}};
      break;
    case RopeScaling::Type::kLlama3:
      j["rope_scaling"] = {
          {"rope_type", "llama3"},
          {"factor", rope_scaling.factor},
          {"low_freq_factor", rope_scaling.low_freq_factor},
          {"high_freq_factor", rope_scaling.high_freq_factor},
          {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
      break;
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  auto ids = [](const std::vector<int64_t>& v) -> json {
    if (v.empty()) return nullptr;
    if (v.size() == 1) return v[0];
    return v;
  };
  j["bos_token_id"] = ids(bos_token_ids);
  j["eos_token_id"] = ids(eos_token_ids);
  if (torch_dtype) {
    switch (*torch_dtype) {
      case DType::kF32: j["torch_dtype"] = "float32"; break;
      case DType::kF16: j["torch_dtype"] = "float16"; break;
      case DType::kBF16: j["torch_dtype"] = "bfloat16"; break;
    }
  }
  if (model_type == "llama") {
    j["attention_bias"] = qkv_bias;
    j["mlp_bias"] = false;
  } else if (model_type == "qwen2") {
    j["use_sliding_window"] = false;
  } else if (model_type == "mistral") {
    j["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
  }
  j["attention_dropout"] = 0.0;
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  return j;
}

Status ValidateModelConfig(const ModelConfig& c, std::string_view source) {
  const std::pair<std::string_view, std::pair<int64_t, int64_t>> sizes[] = {
      {"hidden_size", {c.hidden_size, kMaxWidth}},
      {"num_hidden_layers", {c.num_hidden_layers, kMaxLayers}},
      {"num_attention_heads", {c.num_attention_heads, kMaxHeads}},
      {"num_key_value_heads", {c.num_key_value_heads, kMaxHeads}},
      {"head_dim", {c.head_dim, kMaxWidth}},
      {"intermediate_size", {c.intermediate_size, kMaxWidth}},
      {"vocab_size", {c.vocab_size, kMaxVocab}},
      {"max_position_embeddings", {c.max_position_embeddings, kMaxPositions}},
  };
  for (const auto& [name, value_max] : sizes) {
    if (value_max.first <= 0) return Invalid(source, name, fmt::format("must be positive, got {}", value_max.first));
    if (value_max.first > value_max.second) {
      return Invalid(source, name,
                     fmt::format("{} is larger than the supported {}", value_max.first, value_max.second));
    }
  }
  bool known = false;
  for (const Family& f : kFamilies) known |= f.model_type == c.model_type;
  if (!known) {
    return Unsupported(source, "model_type",
                       fmt::format("\"{}\" is not supported (supported: llama, qwen2, mistral)", c.model_type));
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return Invalid(source, "num_key_value_heads",
                   fmt::format("{} does not divide num_attention_heads {} (each KV head must serve a "
                               "whole number of query heads)",
                               c.num_key_value_heads, c.num_attention_heads));
  }
  if (c.head_dim % 2 != 0) {
    return Invalid(source, "head_dim", fmt::format("must be even for rotary embeddings, got {}", c.head_dim));
  }
  if (c.q_dim() > kMaxWidth * 4) {
    return Invalid(source, "num_attention_heads",
                   fmt::format("{} heads x head_dim {} is too wide", c.num_attention_heads, c.head_dim));
  }
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps)) {
    return Invalid(source, "rms_norm_eps", fmt::format("must be positive, got {}", c.rms_norm_eps));
  }
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) {
    return Invalid(source, "rope_theta", fmt::format("must be positive, got {}", c.rope_theta));
  }
  const RopeScaling& r = c.rope_scaling;
  if (r.type != RopeScaling::Type::kNone && !(r.factor > 0 && std::isfinite(r.factor))) {
    return Invalid(source, "rope_scaling.factor", fmt::format("must be positive, got {}", r.factor));
  }
  if (r.type == RopeScaling::Type::kLlama3) {
    if (!(r.high_freq_factor > r.low_freq_factor) || !(r.low_freq_factor > 0)) {
      return Invalid(source, "rope_scaling.high_freq_factor",
                     fmt::format("must be larger than low_freq_factor ({} vs {})", r.high_freq_factor,
                                 r.low_freq_factor));
    }
    if (r.original_max_position_embeddings <= 0) {
      return Invalid(source, "rope_scaling.original_max_position_embeddings", "must be positive");
    }
  }
  if (c.sliding_window < 0) return Invalid(source, "sliding_window", "must not be negative");
  for (const auto& [name, ids] : {std::pair<std::string_view, const std::vector<int64_t>*>{"bos_token_id", &c.bos_token_ids},
                                  {"eos_token_id", &c.eos_token_ids}}) {
    for (int64_t id : *ids) {
      if (id < 0 || id >= c.vocab_size) {
        return Invalid(source, name, fmt::format("token id {} is outside the vocabulary (vocab_size {})", id,
                                                 c.vocab_size));
      }
    }
  }
  return OkStatus();
}

StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& doc, std::string_view source) {
  if (!doc.is_object()) {
    return InvalidArgumentError(fmt::format("{}: must be a JSON object, got {}", source, Describe(doc)));
  }
  ModelConfig c;

  // Family: model_type and/or architectures, consistent with each other.
  const Family* family = nullptr;
  if (!Absent(doc, "model_type")) {
    const json& v = doc.at("model_type");
    if (!v.is_string()) return Invalid(source, "model_type", "must be a string, got " + Describe(v));
    const std::string t = v.get<std::string>();
    for (const Family& f : kFamilies) {
      if (f.model_type == t) family = &f;
    }
    if (!family) {
      return Unsupported(source, "model_type",
                         fmt::format("\"{}\" is not supported (supported: llama, qwen2, mistral)", t));
    }
  }
  if (!Absent(doc, "architectures")) {
    const json& v = doc.at("architectures");
    if (!v.is_array() || v.empty() || !v[0].is_string()) {
      return Invalid(source, "architectures", "must be a non-empty list of strings, got " + Describe(v));
    }
    const std::string a = v[0].get<std::string>();
    const Family* by_arch = nullptr;
    for (const Family& f : kFamilies) {
      if (f.architecture == a) by_arch = &f;
    }
    if (!by_arch) {
      return Unsupported(source, "architectures",
                         fmt::format("\"{}\" is not supported (supported: LlamaForCausalLM, "
                                     "Qwen2ForCausalLM, MistralForCausalLM)",
                                     a));
    }
    if (family && family != by_arch) {
      return Invalid(source, "architectures",
                     fmt::format("\"{}\" does not match model_type \"{}\"", a, family->model_type));
    }
    family = by_arch;
  }
  if (!family) return Invalid(source, "model_type", "missing (and no architectures either)");
  c.model_type = family->model_type;
  c.architecture = family->architecture;

  // Options that would change the computation in ways the engine does not implement.
  if (!Absent(doc, "hidden_act")) {
    const json& v = doc.at("hidden_act");
    if (!v.is_string()) return Invalid(source, "hidden_act", "must be a string, got " + Describe(v));
    if (v.get<std::string>() != "silu") {
      return Unsupported(source, "hidden_act",
                         fmt::format("\"{}\" is not supported (only silu)", v.get<std::string>()));
    }
  }
  StatusOr<bool> mlp_bias = GetBool(doc, source, "mlp_bias", false);
  if (!mlp_bias.ok()) return mlp_bias.status();
  if (*mlp_bias) return Unsupported(source, "mlp_bias", "MLP biases are not supported");
  if (!Absent(doc, "quantization_config")) {
    return Unsupported(source, "quantization_config",
                       "pre-quantized checkpoints are not supported (load F32/F16/BF16 weights)");
  }
  if (!Absent(doc, "partial_rotary_factor")) {
    StatusOr<double> p = GetPositive(doc, source, "partial_rotary_factor", std::nullopt);
    if (!p.ok()) return p.status();
    if (*p != 1.0) return Unsupported(source, "partial_rotary_factor", "only 1.0 (full rotary) is supported");
  }

  // Shapes.
  auto size = [&](std::string_view key, int64_t max, int64_t* out,
                  std::optional<int64_t> fallback = std::nullopt) -> Status {
    StatusOr<int64_t> v = GetSize(doc, source, key, max, fallback);
    if (!v.ok()) return v.status();
    *out = *v;
    return OkStatus();
  };
  AICLOUD_RETURN_IF_ERROR(size("hidden_size", kMaxWidth, &c.hidden_size));
  AICLOUD_RETURN_IF_ERROR(size("num_hidden_layers", kMaxLayers, &c.num_hidden_layers));
  AICLOUD_RETURN_IF_ERROR(size("num_attention_heads", kMaxHeads, &c.num_attention_heads));
  AICLOUD_RETURN_IF_ERROR(
      size("num_key_value_heads", kMaxHeads, &c.num_key_value_heads, c.num_attention_heads));
  AICLOUD_RETURN_IF_ERROR(size("intermediate_size", kMaxWidth, &c.intermediate_size));
  AICLOUD_RETURN_IF_ERROR(size("vocab_size", kMaxVocab, &c.vocab_size));
  AICLOUD_RETURN_IF_ERROR(
      size("max_position_embeddings", kMaxPositions, &c.max_position_embeddings, int64_t{2048}));
  if (Absent(doc, "head_dim")) {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return Invalid(source, "num_attention_heads",
                     fmt::format("{} does not divide hidden_size {} (and no head_dim is given)",
                                 c.num_attention_heads, c.hidden_size));
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  } else {
    AICLOUD_RETURN_IF_ERROR(size("head_dim", kMaxWidth, &c.head_dim));
  }

  StatusOr<double> eps = GetPositive(doc, source, "rms_norm_eps", 1e-6);
  if (!eps.ok()) return eps.status();
  c.rms_norm_eps = *eps;

  // RoPE: top-level rope_theta/rope_scaling, or the newer combined rope_parameters.
  const json* rope_params = nullptr;
  if (!Absent(doc, "rope_parameters")) {
    rope_params = &doc.at("rope_parameters");
    if (!rope_params->is_object()) {
      return Invalid(source, "rope_parameters", "must be an object, got " + Describe(*rope_params));
    }
  }
  StatusOr<double> theta = 10000.0;
  if (!Absent(doc, "rope_theta") || !rope_params) {
    theta = GetPositive(doc, source, "rope_theta", 10000.0);
  } else {
    theta = GetPositive(*rope_params, source, "rope_theta", 10000.0, "rope_parameters.rope_theta");
  }
  if (!theta.ok()) return theta.status();
  c.rope_theta = *theta;
  StatusOr<RopeScaling> scaling = RopeScaling{};
  if (doc.contains("rope_scaling")) {
    scaling = GetRopeScaling(doc.at("rope_scaling"), source, "rope_scaling");
  } else if (rope_params) {
    scaling = GetRopeScaling(*rope_params, source, "rope_parameters");
  }
  if (!scaling.ok()) return scaling.status();
  c.rope_scaling = *scaling;

  StatusOr<bool> tie = GetBool(doc, source, "tie_word_embeddings", false);
  if (!tie.ok()) return tie.status();
  c.tie_word_embeddings = *tie;

  if (c.model_type == "llama") {
    StatusOr<bool> bias = GetBool(doc, source, "attention_bias", false);
    if (!bias.ok()) return bias.status();
    c.qkv_bias = c.o_bias = *bias;
  } else if (c.model_type == "qwen2") {
    c.qkv_bias = true;
    StatusOr<bool> sw = GetBool(doc, source, "use_sliding_window", false);
    if (!sw.ok()) return sw.status();
    if (*sw) {
      return Unsupported(source, "use_sliding_window",
                         "per-layer sliding-window attention (max_window_layers) is not supported");
    }
  } else if (c.model_type == "mistral" && !Absent(doc, "sliding_window")) {
    StatusOr<int64_t> sw = GetSize(doc, source, "sliding_window", kMaxPositions);
    if (!sw.ok()) return sw.status();
    // A window covering every position is full attention.
    c.sliding_window = *sw >= c.max_position_embeddings ? 0 : *sw;
  }

  StatusOr<std::vector<int64_t>> bos = GetTokenIds(doc, source, "bos_token_id");
  if (!bos.ok()) return bos.status();
  c.bos_token_ids = std::move(*bos);
  StatusOr<std::vector<int64_t>> eos = GetTokenIds(doc, source, "eos_token_id");
  if (!eos.ok()) return eos.status();
  c.eos_token_ids = std::move(*eos);

  StatusOr<std::optional<DType>> dtype = GetTorchDType(doc, source);
  if (!dtype.ok()) return dtype.status();
  c.torch_dtype = *dtype;

  AICLOUD_RETURN_IF_ERROR(ValidateModelConfig(c, source));
  return c;
}

StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(fmt::format("{}: cannot open (no such file?)", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  json doc;
  try {
    doc = json::parse(text.str());
  } catch (const json::exception& e) {
    return InvalidArgumentError(fmt::format("{}: not valid JSON: {}", path.string(), e.what()));
  }
  return ParseModelConfig(doc, path.string());
}

std::vector<float> RopeInverseFrequencies(const ModelConfig& config) {
  const int64_t half = config.head_dim / 2;
  std::vector<float> out(static_cast<size_t>(half));
  const RopeScaling& r = config.rope_scaling;
  for (int64_t i = 0; i < half; ++i) {
    const double base = std::pow(config.rope_theta, -2.0 * static_cast<double>(i) /
                                                        static_cast<double>(config.head_dim));
    double f = base;
    if (r.type == RopeScaling::Type::kLinear) {
      f = base / r.factor;
    } else if (r.type == RopeScaling::Type::kLlama3) {
      const double l = static_cast<double>(r.original_max_position_embeddings);
      const double wavelen = 2 * std::numbers::pi / base;
      const double low_wavelen = l / r.low_freq_factor;
      const double high_wavelen = l / r.high_freq_factor;
      if (wavelen < high_wavelen) {
        f = base;
      } else if (wavelen > low_wavelen) {
        f = base / r.factor;
      } else {
        const double smooth = (l / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        f = (1 - smooth) * base / r.factor + smooth * base;
      }
    }
    out[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return out;
}

}  // namespace aicloud::engine
