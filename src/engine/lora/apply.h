// Multi-LoRA for one forward step: LoraBatch groups the step's tokens by adapter, and ApplyLora
// adds every token's own adapter to the output of one linear layer, so requests for different
// adapters (and for the bare base model) share one step and one base matrix product.
//
//   LoraBatch lb;
//   AICLOUD_RETURN_IF_ERROR(lb.Reset(token_slots, slot_adapters));  // once per step
//   ...
//   MatMul(pool, h, n, wqkv.view(), qkv);                           // base result first
//   if (!lb.empty()) ApplyLora(pool, lb, layer, QkvTargets(config), h, H, qkv, W);
//
// The base model computes y = x W^T for all n tokens at once. For each token whose slot names an
// adapter, ApplyLora then adds scale * B (A x) of that adapter's module to the token's row of y.
// Tokens are gathered by adapter into tiles of up to kTileTokens (a segmented gather, the CPU
// form of Punica's SGMV): a tile's shrink u = scale * A x reads A once for all its tokens, and
// its expand y += B u reads B once. Tiles of all adapters and all targets of a call are spread
// over the pool in one ParallelFor.
//
// Cost: per token and module r * (in + out) multiply-adds, a few percent of the base product at
// rank 16, plus reading each used adapter's A and B once per tile. In a decode step of 32 tokens
// spread over 8 adapters, the base weights are read once for all tokens but each adapter's only
// for its own 4, so the LoRA time is mostly memory traffic: F16 storage halves it.
//
// Determinism: every output element is accumulated in one fixed order (input features, then
// ranks, each as one fused multiply-add chain per element), whatever the tile, the batch or the
// thread it lands on, and the vector and scalar versions (cpu.h) do the same operations. A
// token's added delta is therefore bit-for-bit the same alone or mixed with any other tokens.
//
// Thread-compatible: one LoraBatch per step, built and used by the engine thread. The adapters
// it holds stay alive (shared ownership) until the next Reset or its destruction, even if the
// registry drops them meanwhile.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "engine/kernels/thread_pool.h"
#include "engine/lora/adapter.h"
#include "engine/model/config.h"

namespace aicloud::engine {

// Slot id of a token that runs the base model only.
inline constexpr int32_t kNoLora = -1;

class LoraBatch {
 public:
  static constexpr int kTileTokens = 4;

  // Groups the step's tokens: token i uses the adapter in slot token_slots[i], or none for
  // kNoLora. `slots` is the slot table (an entry may be null when nothing uses it).
  // INVALID_ARGUMENT (and an empty batch) for a slot id outside the table, or one whose entry is
  // null. Reuses its storage: no allocation once warmed up.
  Status Reset(std::span<const int32_t> token_slots, std::span<const std::shared_ptr<const LoraAdapter>> slots);
  void Clear();

  // Tokens of the step (adapted or not).
  int64_t num_tokens() const { return num_tokens_; }
  // True when no token uses an adapter: the runner can skip ApplyLora altogether.
  bool empty() const { return tiles_.empty(); }
  // Distinct adapters used.
  int64_t num_adapters() const { return static_cast<int64_t>(held_.size()); }

  // A gathered run of tokens that share one adapter. Exposed for ApplyLora and tests.
  struct Tile {
    const LoraAdapter* adapter = nullptr;
    int32_t count = 0;
    int32_t rows[kTileTokens] = {};
  };
  std::span<const Tile> tiles() const { return tiles_; }

 private:
  int64_t num_tokens_ = 0;
  std::vector<Tile> tiles_;
  std::vector<std::shared_ptr<const LoraAdapter>> held_;  // one per distinct adapter
  std::vector<int32_t> first_of_slot_, slot_order_;       // scratch of Reset
};

// One module of a fused output row: its columns start at y_offset.
struct LoraTarget {
  LoraModule module = LoraModule::kQ;
  int64_t y_offset = 0;
};

// The runner's fused rows: q|k|v (width q_dim + 2 kv_dim) and gate|up (2 * intermediate).
std::array<LoraTarget, 3> QkvTargets(const ModelConfig& config);
std::array<LoraTarget, 2> GateUpTargets(const ModelConfig& config);

// For every token t of the batch with an adapter that adapts `module` of `layer`:
//   y[t * y_stride + y_offset + o] += sum_r B[o][r] * (scale * sum_k A[r][k] * x[t * x_stride + k])
// for o < out, k < in of the module. Other tokens' rows, and other columns, are not touched.
// REQUIRES: every adapter of the batch was built for a base model in which the module has the
// in/out features x and y are laid out for, and has more than `layer` layers; x and y do not
// overlap; y_offset + out <= y_stride.
void ApplyLora(kernels::ThreadPool& pool, const LoraBatch& batch, int64_t layer, LoraModule module,
               const float* x, int64_t x_stride, float* y, int64_t y_stride, int64_t y_offset);

// The same for several modules that read the same x and write disjoint column ranges of y (the
// fused q|k|v and gate|up rows), in one ParallelFor.
void ApplyLora(kernels::ThreadPool& pool, const LoraBatch& batch, int64_t layer, std::span<const LoraTarget> targets,
               const float* x, int64_t x_stride, float* y, int64_t y_stride);

}  // namespace aicloud::engine
