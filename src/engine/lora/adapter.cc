#include "engine/lora/adapter.h"

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <utility>

#include "engine/model/safetensors.h"

namespace aicloud::engine {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr std::string_view kModuleNames[kNumLoraModules] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                            "gate_proj", "up_proj", "down_proj"};
constexpr std::string_view kTensorPrefix = "base_model.model.";
constexpr std::string_view kSuffixA = ".lora_A.weight";
constexpr std::string_view kSuffixB = ".lora_B.weight";

Status Invalid(std::string_view source, std::string_view field, const std::string& problem) {
  return InvalidArgumentError(std::string(source) + ": " + std::string(field) + ": " + problem);
}
Status Unsupported(std::string_view source, std::string_view field, const std::string& problem) {
  return UnimplementedError(std::string(source) + ": " + std::string(field) + ": " + problem);
}

bool Absent(const json& doc, std::string_view key) {
  auto it = doc.find(key);
  return it == doc.end() || it->is_null();
}

// An option that must be absent, null, false or empty; UNIMPLEMENTED naming it otherwise.
Status RequireUnset(const json& doc, std::string_view source, std::string_view key, std::string_view why) {
  if (Absent(doc, key)) return OkStatus();
  const json& v = doc.at(key);
  const bool unset = (v.is_boolean() && !v.get<bool>()) || ((v.is_object() || v.is_array()) && v.empty());
  if (unset) return OkStatus();
  return Unsupported(source, key, std::string(why) + " (got " + v.dump() + ")");
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string SupportedList() {
  std::string s;
  for (std::string_view n : kModuleNames) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

// A target_modules list entry names a module by its full name or a dotted suffix of it; the last
// component must be a module the engine can adapt.
Status CheckTargetEntry(std::string_view source, size_t i, const std::string& entry) {
  const std::string field = "target_modules[" + std::to_string(i) + "]";
  if (entry.empty()) return Invalid(source, field, "empty module name");
  const size_t dot = entry.rfind('.');
  const std::string_view last = dot == std::string::npos ? std::string_view(entry) : std::string_view(entry).substr(dot + 1);
  if (!ParseLoraModule(last)) {
    return Unsupported(source, field, "\"" + entry + "\" is not a module the engine adapts (supported: " + SupportedList() + ")");
  }
  return OkStatus();
}

// Parsed tensor name: base_model.model.model.layers.{i}.{self_attn|mlp}.{module}.lora_{A|B}.weight.
struct TensorName {
  int64_t layer = 0;
  LoraModule module = LoraModule::kQ;
  bool is_a = true;
};

StatusOr<TensorName> ParseTensorName(std::string_view source, const std::string& name) {
  auto bad = [&](const std::string& why) { return Invalid(source, name, why); };
  auto unsupported = [&](const std::string& why) { return Unsupported(source, name, why); };
  if (name.find("lora_magnitude_vector") != std::string::npos) {
    return unsupported("DoRA magnitude vectors are not supported");
  }
  if (name.find("lora_embedding_") != std::string::npos) return unsupported("LoRA on embeddings is not supported");
  if (name.rfind(kTensorPrefix, 0) != 0) {
    return bad("not a PEFT LoRA tensor name (expected base_model.model.model.layers.{i}.<module>.lora_A.weight)");
  }
  std::string_view rest = std::string_view(name).substr(kTensorPrefix.size());
  TensorName t;
  if (EndsWith(rest, kSuffixA)) {
    rest.remove_suffix(kSuffixA.size());
  } else if (EndsWith(rest, kSuffixB)) {
    t.is_a = false;
    rest.remove_suffix(kSuffixB.size());
  } else if (EndsWith(rest, ".bias")) {
    return unsupported("trained biases are not supported (bias must be \"none\", lora_bias false)");
  } else if (EndsWith(rest, ".weight")) {
    return unsupported("a full copy of a module (modules_to_save) is not supported");
  } else {
    return bad("not a LoRA tensor (expected a name ending in .lora_A.weight or .lora_B.weight)");
  }
  // rest = model.layers.{i}.{parent}.{module}
  constexpr std::string_view kLayers = "model.layers.";
  if (rest.rfind(kLayers, 0) != 0) {
    return unsupported("\"" + std::string(rest) + "\" is not a decoder-layer module the engine adapts (supported: " +
                       SupportedList() + ")");
  }
  rest.remove_prefix(kLayers.size());
  const size_t dot = rest.find('.');
  const std::string_view digits = rest.substr(0, dot);
  if (dot == std::string_view::npos || digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return bad("no layer index after model.layers.");
  }
  t.layer = std::stoll(std::string(digits));
  rest.remove_prefix(dot + 1);
  const size_t dot2 = rest.find('.');
  const std::string_view parent = rest.substr(0, dot2);
  const std::string_view module = dot2 == std::string_view::npos ? std::string_view() : rest.substr(dot2 + 1);
  const std::optional<LoraModule> m = ParseLoraModule(module);
  if (!m || LoraModuleParent(*m) != parent) {
    return unsupported("\"" + std::string(rest) + "\" is not a module the engine adapts (supported: self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj)");
  }
  t.module = *m;
  return t;
}

StatusOr<json> ReadJsonFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path.string() + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    return InvalidArgumentError(path.string() + ": not valid JSON: " + e.what());
  }
}

int64_t RoundUp8(int64_t n) { return (n + 7) / 8 * 8; }

constexpr float kMaxHalf = 65504.0f;  // the largest finite IEEE half

// PEFT's rule for a target_modules list entry: the full name, or a suffix after a dot.
bool MatchesEntry(const std::string& key, const std::string& entry) {
  return key == entry || (key.size() > entry.size() && EndsWith(key, entry) && key[key.size() - entry.size() - 1] == '.');
}

}  // namespace

// --- modules ----------------------------------------------------------------------------------

std::string_view LoraModuleName(LoraModule m) { return kModuleNames[static_cast<int>(m)]; }

std::optional<LoraModule> ParseLoraModule(std::string_view name) {
  for (int i = 0; i < kNumLoraModules; ++i) {
    if (kModuleNames[i] == name) return static_cast<LoraModule>(i);
  }
  return std::nullopt;
}

std::string_view LoraModuleParent(LoraModule m) {
  return static_cast<int>(m) <= static_cast<int>(LoraModule::kO) ? "self_attn" : "mlp";
}

std::string LoraModuleKey(int64_t layer, LoraModule m) {
  return "model.layers." + std::to_string(layer) + "." + std::string(LoraModuleParent(m)) + "." +
         std::string(LoraModuleName(m));
}

LoraModuleShape ModuleShape(const ModelConfig& c, LoraModule m) {
  switch (m) {
    case LoraModule::kQ:
      return {c.hidden_size, c.q_dim()};
    case LoraModule::kK:
    case LoraModule::kV:
      return {c.hidden_size, c.kv_dim()};
    case LoraModule::kO:
      return {c.q_dim(), c.hidden_size};
    case LoraModule::kGate:
    case LoraModule::kUp:
      return {c.hidden_size, c.intermediate_size};
    case LoraModule::kDown:
      return {c.intermediate_size, c.hidden_size};
  }
  return {};
}

Status CheckLoraBase(const ModelConfig& model, const ModelConfig& adapter_base) {
  if (model.num_hidden_layers != adapter_base.num_hidden_layers) {
    return InvalidArgumentError("LoRA adapters were checked against a base model of " +
                                std::to_string(adapter_base.num_hidden_layers) + " layers, the model has " +
                                std::to_string(model.num_hidden_layers));
  }
  for (LoraModule m : kAllLoraModules) {
    const LoraModuleShape a = ModuleShape(model, m), b = ModuleShape(adapter_base, m);
    if (a.in != b.in || a.out != b.out) {
      return InvalidArgumentError("LoRA adapters were checked against a base model whose " +
                                  std::string(LoraModuleName(m)) + " is [" + std::to_string(b.in) + " -> " +
                                  std::to_string(b.out) + "], the model's is [" + std::to_string(a.in) + " -> " +
                                  std::to_string(a.out) + "]");
    }
  }
  return OkStatus();
}

// --- adapter_config.json ----------------------------------------------------------------------

float LoraConfig::Scale() const {
  const double r = static_cast<double>(rank);
  return static_cast<float>(use_rslora ? alpha / std::sqrt(r) : alpha / r);
}

bool LoraConfig::Targets(const std::string& key) const {
  if (target_regex) return std::regex_match(key, std::regex(*target_regex));
  for (const std::string& t : target_modules) {
    if (MatchesEntry(key, t)) return true;
  }
  return false;
}

StatusOr<LoraConfig> ParseLoraConfig(const json& doc, std::string_view source) {
  if (!doc.is_object()) return InvalidArgumentError(std::string(source) + ": not a JSON object");
  LoraConfig c;
  if (!Absent(doc, "peft_type")) {
    const json& p = doc.at("peft_type");
    if (!p.is_string() || p.get<std::string>() != "LORA") {
      return Unsupported(source, "peft_type", "only LORA adapters are supported (got " + p.dump() + ")");
    }
  }
  // r: positive integer, at most kMaxLoraRank.
  if (Absent(doc, "r")) return Invalid(source, "r", "missing (the rank, a positive integer)");
  const json& r = doc.at("r");
  if (!r.is_number_integer() || r.get<int64_t>() <= 0) {
    return Invalid(source, "r", "must be a positive integer, got " + r.dump());
  }
  c.rank = r.get<int64_t>();
  if (c.rank > kMaxLoraRank) {
    return Invalid(source, "r", std::to_string(c.rank) + " is larger than the supported " + std::to_string(kMaxLoraRank));
  }
  if (Absent(doc, "lora_alpha")) return Invalid(source, "lora_alpha", "missing (a number)");
  const json& a = doc.at("lora_alpha");
  if (!a.is_number() || !std::isfinite(a.get<double>())) {
    return Invalid(source, "lora_alpha", "must be a finite number, got " + a.dump());
  }
  c.alpha = a.get<double>();
  if (!Absent(doc, "use_rslora")) {
    if (!doc.at("use_rslora").is_boolean()) return Invalid(source, "use_rslora", "must be true or false");
    c.use_rslora = doc.at("use_rslora").get<bool>();
  }
  if (!Absent(doc, "fan_in_fan_out")) {
    const json& f = doc.at("fan_in_fan_out");
    if (!f.is_boolean()) return Invalid(source, "fan_in_fan_out", "must be true or false");
    if (f.get<bool>()) {
      return Unsupported(source, "fan_in_fan_out", "true (weights stored [in][out], GPT-2 Conv1D style) is not supported");
    }
  }
  if (!Absent(doc, "bias")) {
    const json& b = doc.at("bias");
    if (!b.is_string()) return Invalid(source, "bias", "must be a string");
    if (b.get<std::string>() != "none") {
      return Unsupported(source, "bias", "\"" + b.get<std::string>() + "\": only \"none\" is supported");
    }
  }
  AICLOUD_RETURN_IF_ERROR(RequireUnset(doc, source, "modules_to_save", "fully trained extra modules are not supported"));
  AICLOUD_RETURN_IF_ERROR(RequireUnset(doc, source, "use_dora", "DoRA is not supported"));
  AICLOUD_RETURN_IF_ERROR(RequireUnset(doc, source, "lora_bias", "a bias on lora_B is not supported"));
  AICLOUD_RETURN_IF_ERROR(RequireUnset(doc, source, "rank_pattern", "per-module ranks are not supported"));
  AICLOUD_RETURN_IF_ERROR(RequireUnset(doc, source, "alpha_pattern", "per-module alphas are not supported"));
  AICLOUD_RETURN_IF_ERROR(RequireUnset(doc, source, "layer_replication", "layer replication is not supported"));
  AICLOUD_RETURN_IF_ERROR(RequireUnset(doc, source, "target_parameters", "adapting parameters directly is not supported"));
  AICLOUD_RETURN_IF_ERROR(
      RequireUnset(doc, source, "trainable_token_indices", "trainable token embeddings are not supported"));

  if (Absent(doc, "target_modules")) return Invalid(source, "target_modules", "missing (a list of module names or a string)");
  const json& t = doc.at("target_modules");
  if (t.is_string()) {
    const std::string s = t.get<std::string>();
    if (s == "all-linear") {
      c.target_regex = ".*";
    } else {
      try {
        std::regex re(s);
      } catch (const std::regex_error& e) {
        return Invalid(source, "target_modules", "\"" + s + "\" is not a valid regular expression: " + e.what());
      }
      c.target_regex = s;
    }
  } else if (t.is_array()) {
    if (t.empty()) return Invalid(source, "target_modules", "empty list");
    for (size_t i = 0; i < t.size(); ++i) {
      if (!t[i].is_string()) return Invalid(source, "target_modules[" + std::to_string(i) + "]", "must be a string");
      const std::string e = t[i].get<std::string>();
      AICLOUD_RETURN_IF_ERROR(CheckTargetEntry(source, i, e));
      c.target_modules.push_back(e);
    }
  } else {
    return Invalid(source, "target_modules", "must be a list of module names or a string, got " + t.dump());
  }
  if (!Absent(doc, "base_model_name_or_path")) {
    const json& b = doc.at("base_model_name_or_path");
    if (!b.is_string()) return Invalid(source, "base_model_name_or_path", "must be a string");
    c.base_model_name_or_path = b.get<std::string>();
  }
  return c;
}

// --- weights ----------------------------------------------------------------------------------

LoraWeights LoraWeights::FromFloat(int64_t in, int64_t out, int64_t rank, float scale, const float* a,
                                   const float* b, DType storage) {
  LoraWeights w;
  w.in_ = in;
  w.out_ = out;
  w.rank_ = rank;
  w.padded_rank_ = RoundUp8(rank);
  w.scale_ = scale;
  w.dtype_ = storage;
  const int64_t rp = w.padded_rank_;
  std::vector<float> at(static_cast<size_t>(in * rp), 0.0f), bt(static_cast<size_t>(rp * out), 0.0f);
  for (int64_t r = 0; r < rank; ++r) {
    for (int64_t k = 0; k < in; ++k) at[static_cast<size_t>(k * rp + r)] = a[r * in + k];
  }
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t r = 0; r < rank; ++r) bt[static_cast<size_t>(r * out + o)] = b[o * rank + r];
  }
  if (storage == DType::kF16) {
    w.a16_.resize(at.size());
    w.b16_.resize(bt.size());
    for (size_t i = 0; i < at.size(); ++i) w.a16_[i] = FloatToHalf(at[i]);
    for (size_t i = 0; i < bt.size(); ++i) w.b16_[i] = FloatToHalf(bt[i]);
  } else {
    w.dtype_ = DType::kF32;
    w.a32_ = std::move(at);
    w.b32_ = std::move(bt);
  }
  return w;
}

const void* LoraWeights::a_t() const {
  return dtype_ == DType::kF16 ? static_cast<const void*>(a16_.data()) : static_cast<const void*>(a32_.data());
}
const void* LoraWeights::b_t() const {
  return dtype_ == DType::kF16 ? static_cast<const void*>(b16_.data()) : static_cast<const void*>(b32_.data());
}

float LoraWeights::A(int64_t r, int64_t k) const {
  const size_t i = static_cast<size_t>(k * padded_rank_ + r);
  return dtype_ == DType::kF16 ? HalfToFloat(a16_[i]) : a32_[i];
}
float LoraWeights::B(int64_t o, int64_t r) const {
  const size_t i = static_cast<size_t>(r * out_ + o);
  return dtype_ == DType::kF16 ? HalfToFloat(b16_[i]) : b32_[i];
}

size_t LoraWeights::bytes() const {
  return (a32_.size() + b32_.size()) * sizeof(float) + (a16_.size() + b16_.size()) * sizeof(uint16_t);
}

// --- adapter ----------------------------------------------------------------------------------

LoraAdapter::LoraAdapter(LoraConfig config, int64_t num_layers)
    : config_(std::move(config)), num_layers_(num_layers), weights_(static_cast<size_t>(num_layers * kNumLoraModules)) {}

void LoraAdapter::Set(int64_t layer, LoraModule m, LoraWeights w) {
  weights_[static_cast<size_t>(layer * kNumLoraModules + static_cast<int>(m))] = std::move(w);
}

int64_t LoraAdapter::num_adapted() const {
  int64_t n = 0;
  for (const LoraWeights& w : weights_) n += w.rank() > 0;
  return n;
}

size_t LoraAdapter::bytes() const {
  size_t b = 0;
  for (const LoraWeights& w : weights_) b += w.bytes();
  return b;
}

StatusOr<std::unique_ptr<LoraAdapter>> LoraAdapter::Load(const fs::path& dir, const ModelConfig& base,
                                                         const LoraLoadOptions& options) {
  if (options.max_rank <= 0 || options.max_rank > kMaxLoraRank) {
    return InvalidArgumentError("max LoRA rank " + std::to_string(options.max_rank) + " must be in [1, " +
                                std::to_string(kMaxLoraRank) + "]");
  }
  if (options.dtype != DType::kF32 && options.dtype != DType::kF16) {
    return InvalidArgumentError("LoRA weights are stored as F32 or F16, not " + std::string(DTypeName(options.dtype)));
  }
  const fs::path config_path = dir / "adapter_config.json";
  StatusOr<json> doc = ReadJsonFile(config_path);
  if (!doc.ok()) return doc.status();
  const std::string config_source = config_path.string();
  StatusOr<LoraConfig> config = ParseLoraConfig(*doc, config_source);
  if (!config.ok()) return config.status();
  if (config->rank > options.max_rank) {
    return InvalidArgumentError(config_source + ": r: " + std::to_string(config->rank) +
                                " is larger than the engine's max LoRA rank " + std::to_string(options.max_rank));
  }

  const fs::path weights_path = dir / "adapter_model.safetensors";
  if (!fs::exists(weights_path) && fs::exists(dir / "adapter_model.bin")) {
    return UnimplementedError((dir / "adapter_model.bin").string() +
                              ": pickled PyTorch weights are not read; save the adapter with safe_serialization "
                              "(adapter_model.safetensors)");
  }
  StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(weights_path);
  if (!file.ok()) return file.status();
  const std::string source = weights_path.string();
  for (const auto& [name, dtype] : (*file)->unsupported()) {
    return Unsupported(source, name, "element type " + dtype + " is not supported (F32, F16 or BF16)");
  }

  // Pair the tensors per (layer, module).
  struct Pair {
    const TensorView* a = nullptr;
    const TensorView* b = nullptr;
  };
  std::map<std::pair<int64_t, int>, Pair> pairs;
  for (const TensorView& t : (*file)->tensors()) {
    StatusOr<TensorName> n = ParseTensorName(source, t.name);
    if (!n.ok()) return n.status();
    if (n->layer >= base.num_hidden_layers) {
      return Invalid(source, t.name,
                     "layer " + std::to_string(n->layer) + " is outside the base model's " +
                         std::to_string(base.num_hidden_layers) + " layers");
    }
    if (!config->Targets(LoraModuleKey(n->layer, n->module))) {
      return Invalid(source, t.name, "module is not among the adapter's target_modules");
    }
    Pair& p = pairs[{n->layer, static_cast<int>(n->module)}];
    (n->is_a ? p.a : p.b) = &t;
  }
  if (pairs.empty()) return InvalidArgumentError(source + ": no LoRA tensors");

  const float scale = config->Scale();
  auto adapter = std::make_unique<LoraAdapter>(*config, base.num_hidden_layers);
  for (const auto& [where, p] : pairs) {
    const LoraModule m = static_cast<LoraModule>(where.second);
    const std::string key = std::string(kTensorPrefix) + LoraModuleKey(where.first, m);
    if (p.a == nullptr) return Invalid(source, key + std::string(kSuffixB), "has no matching " + key + std::string(kSuffixA));
    if (p.b == nullptr) return Invalid(source, key + std::string(kSuffixA), "has no matching " + key + std::string(kSuffixB));
    const LoraModuleShape s = ModuleShape(base, m);
    const int64_t r = config->rank;
    const std::vector<int64_t> want_a = {r, s.in}, want_b = {s.out, r};
    if (p.a->shape != want_a) {
      return Invalid(source, p.a->name,
                     "shape " + ShapeString(p.a->shape) + ", expected " + ShapeString(want_a) + " ([r, in_features] of " +
                         std::string(LoraModuleName(m)) + " with r " + std::to_string(r) + ")");
    }
    if (p.b->shape != want_b) {
      return Invalid(source, p.b->name,
                     "shape " + ShapeString(p.b->shape) + ", expected " + ShapeString(want_b) +
                         " ([out_features, r] of " + std::string(LoraModuleName(m)) + " with r " + std::to_string(r) + ")");
    }
    const std::vector<float> a = TensorToFloat(*p.a);
    const std::vector<float> b = TensorToFloat(*p.b);
    for (const auto& [values, t] : {std::pair{&a, p.a}, std::pair{&b, p.b}}) {
      for (size_t i = 0; i < values->size(); ++i) {
        if (!std::isfinite((*values)[i])) {
          return Invalid(source, t->name, "element " + std::to_string(i) + " is not finite");
        }
        if (options.dtype == DType::kF16 && std::abs((*values)[i]) > kMaxHalf) {
          return Invalid(source, t->name,
                         "element " + std::to_string(i) + " (" + std::to_string((*values)[i]) +
                             ") does not fit F16 storage; store the adapter as F32");
        }
      }
    }
    adapter->Set(where.first, m, LoraWeights::FromFloat(s.in, s.out, r, scale, a.data(), b.data(), options.dtype));
  }
  if (!config->target_regex) {
    for (size_t i = 0; i < config->target_modules.size(); ++i) {
      bool found = false;
      for (const auto& [where, p] : pairs) {
        if (MatchesEntry(LoraModuleKey(where.first, static_cast<LoraModule>(where.second)), config->target_modules[i])) {
          found = true;
          break;
        }
      }
      if (!found) {
        return Invalid(config_source, "target_modules[" + std::to_string(i) + "]",
                       "\"" + config->target_modules[i] + "\" has no tensors in " + source);
      }
    }
  }
  return adapter;
}

}  // namespace aicloud::engine
