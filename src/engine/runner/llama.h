// LlamaModel: the Llama-family forward pass (RMSNorm, rotary embeddings, grouped-query attention
// over the paged KV cache, SwiGLU) on the CPU kernels, for one step of any mix of sequences.
//
//   StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
//   StatusOr<std::unique_ptr<LlamaModel>> model = LlamaModel::Load(**ckpt, {.weights = kQ8});
//   StatusOr<KvCache> cache = KvCache::Create((*model)->config(), /*num_blocks=*/512,
//                                             /*block_size=*/16, DType::kF16);
//   ForwardBatch b{.tokens = ids, .positions = pos, .slots = slots, .attention = att,
//                  .logit_rows = last};
//   Status s = (*model)->Forward(pool, b, *cache, logits.data());  // [last.size()][vocab]
//
// A step is a flat list of tokens. Each carries its position in its sequence, the KV slot its
// key and value go to, and the attention view of its sequence (block table, and how many
// positions it sees: its own position + 1). Prefill chunks, single decode tokens and many
// sequences mix freely in one step; rows of `logit_rows` get logits. The block manager (kv/)
// decides blocks and slots; the model only reads and writes them.
//
// Weights are copied out of the mapped checkpoint at load into the kernels' formats, with
// q/k/v and gate/up fused so a decode step makes 4 matrix products per layer instead of 7:
// `weights` = nullopt keeps each tensor's stored type (F32/F16/BF16); kF32/kF16/kBF16 convert;
// kQ8 quantizes every matrix, LM head included, to int8 blocks. Norm weights and biases become
// float.
//
// Thread-compatible: Forward uses scratch buffers of the model, so one thread steps a model at
// a time (the engine's loop). The weights are immutable after Load.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/kernels/attention.h"
#include "engine/kernels/matrix.h"
#include "engine/kernels/ops.h"
#include "engine/kernels/thread_pool.h"
#include "engine/lora/apply.h"
#include "engine/lora/registry.h"
#include "engine/model/checkpoint.h"
#include "engine/model/config.h"

namespace aicloud::engine {

// The paged K/V storage of every layer: for layer l, a K pool and a V pool of `num_blocks`
// blocks in the layout kernels::KvCacheView documents. Move-only; owns its memory.
class KvCache {
 public:
  // Bytes one block costs over all layers (K and V).
  static int64_t BytesPerBlock(const ModelConfig& config, int64_t block_size, DType type);
  // INVALID_ARGUMENT for a non-positive size or a type other than F32/F16; RESOURCE_EXHAUSTED
  // when the memory cannot be had.
  static StatusOr<KvCache> Create(const ModelConfig& config, int64_t num_blocks,
                                  int64_t block_size, DType type);

  kernels::KvCacheView layer(int64_t l) const { return layers_[static_cast<size_t>(l)]; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  DType type() const { return type_; }
  int64_t bytes() const { return static_cast<int64_t>(bytes_); }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  int64_t num_blocks_ = 0;
  int64_t block_size_ = 0;
  DType type_ = DType::kF32;
  size_t bytes_ = 0;
  std::unique_ptr<std::byte[], Free> memory_;
  std::vector<kernels::KvCacheView> layers_;
};

struct ModelLoadOptions {
  std::optional<kernels::WeightFormat> weights;  // nullopt: as stored
};

// One step's tokens; all spans have one entry per token except logit_rows.
struct ForwardBatch {
  std::span<const int32_t> tokens;
  std::span<const int32_t> positions;
  std::span<const int64_t> slots;                       // KV slot of each token
  std::span<const kernels::AttentionToken> attention;  // its sequence's view, causal
  std::span<const int32_t> logit_rows;                  // tokens whose logits are wanted
  // LoRA adapter id of each token (kBaseAdapterId = 0: the base model), as Request::adapter_id
  // and LoraPin::adapter_id() give it; empty: every token runs the base model.
  std::span<const int32_t> adapters;
};

class LlamaModel {
 public:
  // Loads every tensor the config needs (Checkpoint::Validate first), converting as asked.
  // The checkpoint may be closed afterwards. Errors name the tensor.
  static StatusOr<std::unique_ptr<LlamaModel>> Load(const Checkpoint& checkpoint,
                                                    const ModelLoadOptions& options);

  const ModelConfig& config() const { return config_; }
  int64_t vocab_size() const { return config_.vocab_size; }
  // Bytes of weights held (after conversion).
  int64_t weight_bytes() const;
  kernels::WeightFormat matrix_format() const { return format_; }

  // The adapters tokens may name in ForwardBatch::adapters; nullptr: none. The registry must
  // outlive the model's use of it; INVALID_ARGUMENT when it was made for another model shape.
  Status SetLoras(const LoraRegistry* registry);

  // Runs the step: writes every token's K/V into `cache` at its slot, and the logits of each
  // logit_rows[i] to logits + i * vocab_size(). INVALID_ARGUMENT (nothing computed) for spans of
  // different lengths, a token id outside the vocabulary, a slot outside the cache, or an
  // attention view the kernels would read out of bounds.
  Status Forward(kernels::ThreadPool& pool, const ForwardBatch& batch, KvCache& cache,
                 float* logits);

  // Final hidden states (after the last norm) of the listed rows instead of logits:
  // out + i * hidden_size. For embeddings.
  Status ForwardHidden(kernels::ThreadPool& pool, const ForwardBatch& batch, KvCache& cache,
                       float* out);

 private:
  struct Layer {
    std::vector<float> attn_norm, mlp_norm;
    kernels::Matrix qkv, o, gate_up, down;
    std::vector<float> qkv_bias, o_bias;  // empty when the model has none
  };
  LlamaModel() = default;
  Status Check(const ForwardBatch& batch, const KvCache& cache) const;
  // Groups the step's tokens by adapter into lora_ (empty when no token has one).
  Status PrepareLoras(const ForwardBatch& batch);
  // Runs the layers; leaves the final-normed hidden states of logit_rows in final_.
  void Run(kernels::ThreadPool& pool, const ForwardBatch& batch, KvCache& cache);

  ModelConfig config_;
  kernels::WeightFormat format_ = kernels::WeightFormat::kF32;
  kernels::Matrix embed_;
  kernels::Matrix lm_head_;  // empty when tied: embed_ is the head
  std::vector<float> final_norm_;
  std::vector<Layer> layers_;
  std::unique_ptr<kernels::RopeTable> rope_;  // cos/sin per position, built at load
  const LoraRegistry* loras_ = nullptr;
  LoraBatch lora_;  // this step's

  // Scratch, grown as needed.
  std::vector<float> x_, h_, qkv_, attn_, gu_, act_, final_;
};

}  // namespace aicloud::engine
