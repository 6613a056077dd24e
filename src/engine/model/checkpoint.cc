#include "engine/model/checkpoint.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include <fmt/format.h>

namespace aicloud::engine {
namespace {

Status IndexError(const std::filesystem::path& index, const std::string& problem) {
  return Status(StatusCode::kDataLoss, fmt::format("{}: {}", index.string(), problem));
}

// A shard must be a plain file name in the checkpoint directory: an index is user input and must
// not reach files elsewhere ("../../etc/passwd", "/dev/zero").
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// "[0, 17]" for flat index 17 of a [4, 32] tensor.
std::string Coordinates(const TensorView& view, size_t flat) {
  std::vector<int64_t> at(view.shape.size());
  for (size_t d = view.shape.size(); d-- > 0;) {
    const auto n = static_cast<size_t>(view.shape[d]);
    at[d] = static_cast<int64_t>(flat % n);
    flat /= n;
  }
  return ShapeString(at);
}

}  // namespace

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  std::vector<ExpectedTensor> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    out.push_back({p + "input_layernorm.weight", {h}});
    out.push_back({p + "self_attn.q_proj.weight", {c.q_dim(), h}});
    out.push_back({p + "self_attn.k_proj.weight", {c.kv_dim(), h}});
    out.push_back({p + "self_attn.v_proj.weight", {c.kv_dim(), h}});
    if (c.qkv_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {c.q_dim()}});
      out.push_back({p + "self_attn.k_proj.bias", {c.kv_dim()}});
      out.push_back({p + "self_attn.v_proj.bias", {c.kv_dim()}});
    }
    out.push_back({p + "self_attn.o_proj.weight", {h, c.q_dim()}});
    if (c.o_bias) out.push_back({p + "self_attn.o_proj.bias", {h}});
    out.push_back({p + "post_attention_layernorm.weight", {h}});
    out.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, h}});
    out.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, h}});
    out.push_back({p + "mlp.down_proj.weight", {h, c.intermediate_size}});
  }
  out.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}});
  return out;
}

StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return NotFoundError(fmt::format("{}: not a checkpoint directory (no such directory)", dir.string()));
  }
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  ckpt->dir_ = dir;
  const std::filesystem::path config = dir / "config.json";
  if (!std::filesystem::exists(config, ec)) {
    return NotFoundError(fmt::format("{}: no config.json (not a Hugging Face model directory?)", dir.string()));
  }
  StatusOr<ModelConfig> c = LoadModelConfig(config);
  if (!c.ok()) return c.status();
  ckpt->config_ = std::move(*c);

  if (std::filesystem::exists(dir / kSingleFile, ec)) {
    AICLOUD_RETURN_IF_ERROR(ckpt->OpenSingle(dir / kSingleFile));
  } else if (std::filesystem::exists(dir / kIndexFile, ec)) {
    AICLOUD_RETURN_IF_ERROR(ckpt->OpenSharded(dir / kIndexFile));
  } else {
    std::string hint;
    if (std::filesystem::exists(dir / "pytorch_model.bin", ec) ||
        std::filesystem::exists(dir / "pytorch_model.bin.index.json", ec)) {
      hint = "; pytorch_model.bin (pickle) weights are not loaded, convert them to safetensors";
    }
    return NotFoundError(fmt::format("{}: no {} or {}{}", dir.string(), kSingleFile, kIndexFile, hint));
  }
  return ckpt;
}

Status Checkpoint::OpenSingle(const std::filesystem::path& file) {
  StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(file);
  if (!f.ok()) return f.status();
  for (const TensorView& t : (*f)->tensors()) tensors_.emplace(t.name, &t);
  for (const auto& [name, dtype] : (*f)->unsupported()) unsupported_.emplace(name, dtype);
  files_.push_back(std::move(*f));
  return OkStatus();
}

Status Checkpoint::OpenSharded(const std::filesystem::path& index) {
  sharded_ = true;
  std::ifstream in(index, std::ios::binary);
  if (!in) return NotFoundError(fmt::format("{}: cannot open", index.string()));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    return IndexError(index, fmt::format("not valid JSON: {}", e.what()));
  }
  if (!doc.is_object() || !doc.contains("weight_map") || !doc["weight_map"].is_object()) {
    return IndexError(index, "weight_map (an object of tensor name -> shard file) is missing");
  }
  const nlohmann::json& weight_map = doc["weight_map"];
  std::map<std::string, SafetensorsFile*> shards;  // sorted: files_ ends in file-name order
  for (const auto& [tensor, shard] : weight_map.items()) {
    if (!shard.is_string() || !IsPlainFileName(shard.get<std::string>())) {
      return IndexError(index, fmt::format("weight_map['{}']: {} is not a file name in the checkpoint "
                                           "directory",
                                           tensor, shard.dump()));
    }
    shards.emplace(shard.get<std::string>(), nullptr);
  }
  for (auto& [name, file] : shards) {
    StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(dir_ / name);
    if (!f.ok()) {
      if (f.status().code() == StatusCode::kNotFound) {
        return IndexError(index, fmt::format("shard {} is missing ({})", name, f.status().message()));
      }
      return f.status();
    }
    file = f->get();
    files_.push_back(std::move(*f));
  }
  for (const auto& [tensor, shard] : weight_map.items()) {
    SafetensorsFile* file = shards.at(shard.get<std::string>());
    if (const TensorView* t = file->Find(tensor)) {
      tensors_.emplace(tensor, t);
    } else if (auto u = file->unsupported().find(tensor); u != file->unsupported().end()) {
      unsupported_.emplace(tensor, u->second);
    } else {
      return IndexError(index, fmt::format("weight_map puts tensor '{}' in {}, which has no such tensor",
                                           tensor, shard.get<std::string>()));
    }
  }
  return OkStatus();
}

void Checkpoint::DropPages(const TensorView* t) const {
  if (t == nullptr) return;
  for (const std::unique_ptr<SafetensorsFile>& f : files_) {
    if (f->Owns(*t)) return f->DropPages(*t);
  }
}

const TensorView* Checkpoint::Find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

StatusOr<const TensorView*> Checkpoint::Require(std::string_view name, std::span<const int64_t> shape) const {
  const TensorView* t = Find(name);
  if (!t) {
    if (auto u = unsupported_.find(name); u != unsupported_.end()) {
      return UnimplementedError(fmt::format("{}: tensor '{}' has dtype {}, which the engine does not load "
                                            "(F32, F16, BF16)",
                                            dir_.string(), name, u->second));
    }
    return NotFoundError(fmt::format("{}: missing tensor '{}' (expected shape {})", dir_.string(), name,
                                     ShapeString(shape)));
  }
  if (!std::equal(t->shape.begin(), t->shape.end(), shape.begin(), shape.end())) {
    return InvalidArgumentError(fmt::format("{}: tensor '{}' has shape {}, config.json implies {}",
                                            dir_.string(), name, ShapeString(t->shape),
                                            ShapeString(shape)));
  }
  return t;
}

Status Checkpoint::Validate() const {
  constexpr size_t kShown = 10;
  std::vector<Status> problems;
  for (const ExpectedTensor& e : ExpectedTensors(config_)) {
    StatusOr<const TensorView*> t = Require(e.name, e.shape);
    if (!t.ok()) problems.push_back(t.status());
  }
  if (problems.empty()) return OkStatus();
  if (problems.size() == 1) return problems[0];
  std::string m = fmt::format("{}: {} tensor problems:", dir_.string(), problems.size());
  const size_t prefix = dir_.string().size() + 2;  // each problem starts with "<dir>: "
  for (size_t i = 0; i < problems.size() && i < kShown; ++i) {
    m += "\n  " + problems[i].message().substr(prefix);
  }
  if (problems.size() > kShown) m += fmt::format("\n  ... and {} more", problems.size() - kShown);
  return Status(problems[0].code(), std::move(m));
}

std::vector<std::string> Checkpoint::UnusedTensors() const {
  std::set<std::string> expected;
  for (ExpectedTensor& e : ExpectedTensors(config_)) expected.insert(std::move(e.name));
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_) {
    if (!expected.count(name)) out.push_back(name);
  }
  for (const auto& [name, dtype] : unsupported_) {
    if (!expected.count(name)) out.push_back(name);
  }
  return out;
}

int64_t Checkpoint::parameter_count() const {
  int64_t n = 0;
  for (const auto& [name, t] : tensors_) n += static_cast<int64_t>(t->numel());
  return n;
}

uint64_t Checkpoint::tensor_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, t] : tensors_) n += t->nbytes;
  return n;
}

Status CheckFinite(const TensorView& view) {
  const auto* p = static_cast<const std::byte*>(view.data);
  const size_t n = view.numel();
  // Exponent all ones: infinity (mantissa 0) or NaN.
  size_t bad = n;
  bool nan = false;
  bool negative = false;
  switch (view.dtype) {
    case DType::kF32:
      for (size_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, p + 4 * i, 4);
        if ((u & 0x7f800000u) == 0x7f800000u) {
          bad = i;
          nan = (u & 0x007fffffu) != 0;
          negative = (u >> 31) != 0;
          break;
        }
      }
      break;
    case DType::kF16:
    case DType::kBF16: {
      const uint16_t exp = view.dtype == DType::kF16 ? 0x7c00u : 0x7f80u;
      for (size_t i = 0; i < n; ++i) {
        uint16_t u;
        std::memcpy(&u, p + 2 * i, 2);
        if ((u & exp) == exp) {
          bad = i;
          nan = (u & static_cast<uint16_t>(~exp & 0x7fffu)) != 0;
          negative = (u >> 15) != 0;
          break;
        }
      }
      break;
    }
  }
  if (bad == n) return OkStatus();
  return InvalidArgumentError(fmt::format("tensor '{}': element {} (at {}) is {}", view.name, bad,
                                          Coordinates(view, bad),
                                          nan ? "NaN" : (negative ? "-inf" : "+inf")));
}

}  // namespace aicloud::engine
