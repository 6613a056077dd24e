// Checkpoint: a Hugging Face model directory (config.json + safetensors weights, single-file or
// sharded) opened for the engine: every tensor memory-mapped, looked up by name, and checked
// against the shapes the config implies.
//
//   StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open("models/smollm2-135m");
//   if (!ckpt.ok()) return ckpt.status();
//   AICLOUD_RETURN_IF_ERROR((*ckpt)->Validate());  // names the first missing/misshaped tensors
//   const ModelConfig& c = (*ckpt)->config();
//   StatusOr<const TensorView*> wq = (*ckpt)->Require("model.layers.0.self_attn.q_proj.weight",
//                                                     {c.q_dim(), c.hidden_size});
//
// Weights: `model.safetensors`, or `model.safetensors.index.json` whose `weight_map` maps each
// tensor to a shard file in the same directory (each shard opened once). Opening maps files and
// parses headers only; no weight byte is read, so it costs milliseconds for any model size.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/model/config.h"
#include "engine/model/safetensors.h"

namespace aicloud::engine {

// A tensor a model of some config needs.
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
};

// The tensors of a Llama-family model with `config`, in model order: embeddings, then per layer
// input_layernorm, q/k/v/o projections (and their biases when the config has them),
// post_attention_layernorm, gate/up/down projections, then model.norm and lm_head (unless tied).
// Linear weights are [out_features, in_features].
std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& config);

// Immutable after Open; const methods may be called from any thread. Owns the mapped files: the
// TensorViews it hands out live as long as the Checkpoint.
class Checkpoint {
 public:
  static constexpr std::string_view kSingleFile = "model.safetensors";
  static constexpr std::string_view kIndexFile = "model.safetensors.index.json";

  // Reads `dir`/config.json, then the weights. NOT_FOUND when the directory has no config or no
  // safetensors weights; the config's or the file's error otherwise (see ParseModelConfig,
  // SafetensorsFile::Open); DATA_LOSS for an index that names missing tensors or files outside the
  // directory.
  static StatusOr<std::unique_ptr<Checkpoint>> Open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  // One per weights file, in file-name order.
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  bool sharded() const { return sharded_; }

  // All loadable tensors, by name.
  const std::map<std::string, const TensorView*, std::less<>>& tensors() const { return tensors_; }
  // nullptr when absent.
  const TensorView* Find(std::string_view name) const;
  // After a tensor was copied out: its pages go back to the kernel (SafetensorsFile::DropPages).
  void DropPages(const TensorView* t) const;
  // The tensor, if present with exactly `shape`. NOT_FOUND naming the tensor when missing,
  // INVALID_ARGUMENT naming both shapes when different, UNIMPLEMENTED when its dtype is not loadable.
  StatusOr<const TensorView*> Require(std::string_view name, std::span<const int64_t> shape) const;
  StatusOr<const TensorView*> Require(std::string_view name, std::initializer_list<int64_t> shape) const {
    return Require(name, std::span<const int64_t>(shape.begin(), shape.size()));
  }

  // Every ExpectedTensors(config()) entry is present with its shape. The error lists up to ten
  // problems, one per line, and how many more there are; its code is the first problem's.
  Status Validate() const;

  // Tensors not among ExpectedTensors(config()) (e.g. a stale rotary_emb.inv_freq, or lm_head
  // in a tied checkpoint); the engine ignores them.
  std::vector<std::string> UnusedTensors() const;

  int64_t parameter_count() const;  // elements over all loadable tensors
  uint64_t tensor_bytes() const;    // their data bytes

 private:
  Checkpoint() = default;
  Status OpenSingle(const std::filesystem::path& file);
  Status OpenSharded(const std::filesystem::path& index);

  std::filesystem::path dir_;
  ModelConfig config_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*, std::less<>> tensors_;
  std::map<std::string, std::string, std::less<>> unsupported_;  // name -> dtype name
};

// Scans a tensor for NaN and infinities. INVALID_ARGUMENT naming the tensor, the first bad
// element's flat index and coordinates and what it holds; OK otherwise. Reads every byte, so it
// costs a pass over the data (about a second per GB).
Status CheckFinite(const TensorView& view);

}  // namespace aicloud::engine
