// Attention over a paged KV cache: softmax(q k^T * scale) v for a batch of query tokens, each
// reading the keys and values of its own sequence through a block table.
//
// KV cache layout (one layer). The cache is a pool of `num_blocks` blocks of `block_size`
// token slots; a sequence owns a list of blocks (its block table), token position p living in
// block table[p / block_size], slot p % block_size. Within a block, per KV head:
//   K: [kv_heads][head_dim][block_size]   (transposed: one dim of 16 consecutive keys is
//                                           contiguous, so q.k for 16 keys is 16-wide FMAs
//                                           with no horizontal sums)
//   V: [kv_heads][block_size][head_dim]   (a token's values contiguous, for p.v)
// in F32 or F16. K and V are separate pools of identical size. StoreKv writes new tokens in
// this layout, so the owner of the cache only manages block ids and slots.
//
// Per query token and head, PagedAttention walks the visible keys block by block with an online
// softmax (running max, running sum, rescaled accumulator), so no score matrix is materialised
// however long the context. Grouped-query attention: query head h reads KV head
// h / (heads / kv_heads). Work is split over (runs of up to 8 consecutive tokens of the same
// sequence) x (KV head), so the query heads sharing a KV head, and the tokens of a prefill
// chunk, read each K/V block once. A context longer than 16 blocks is cut into parts of 16
// blocks at fixed boundaries that run in parallel and are merged, in order, by their softmax
// statistics (one sequence decoding would otherwise leave threads idle). The cut depends only
// on the token's own context, and every row is summed the same way whatever else is in its
// work item, so a token's result is bit-identical alone or in any batch.
//
//   KvCacheView kv{DType::kF16, num_blocks, 16, /*kv_heads=*/3, /*head_dim=*/64, k_pool, v_pool};
//   StoreKv(kv, slots, k_new, k_stride, v_new, v_stride, tokens);   // this step's K/V first
//   std::vector<AttentionToken> toks = ...;  // per query token: block table, context length
//   PagedAttention(pool, q, q_stride, toks, /*heads=*/9, kv, 1 / std::sqrt(64.0f), out, 576);
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "engine/kernels/dtype.h"
#include "engine/kernels/thread_pool.h"

namespace aicloud::engine::kernels {

// One layer's K and V pools. Does not own memory; trivially copyable.
struct KvCacheView {
  DType type = DType::kF32;  // kF32 or kF16
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  void* k = nullptr;  // num_blocks * BlockElements() elements
  void* v = nullptr;  // same

  // Elements of one block of one pool (K or V).
  int64_t BlockElements() const { return block_size * kv_heads * head_dim; }
  int64_t BlockBytes() const { return BlockElements() * static_cast<int64_t>(DTypeSize(type)); }
};

// InvalidArgument unless the view is usable (F32/F16, positive sizes, pools present).
Status Validate(const KvCacheView& kv);

// Writes `tokens` new K/V rows into the cache: token i goes to slot slots[i] (= block id *
// block_size + offset in block); k + i * k_stride and v + i * v_stride hold kv_heads * head_dim
// floats each (k/v straight out of a fused qkv projection work with k_stride = row width).
// REQUIRES: 0 <= slots[i] < num_blocks * block_size.
void StoreKv(const KvCacheView& kv, const int64_t* slots, const float* k, int64_t k_stride,
             const float* v, int64_t v_stride, int64_t tokens);

// One query token: the block table of its sequence (logical block i -> physical block id) and
// how many tokens it attends to: positions [0, context_len), its own included (causal).
struct AttentionToken {
  std::span<const int32_t> block_table;
  int32_t context_len = 0;
};

// InvalidArgument unless every token has 1 <= context_len <= block_table.size() * block_size
// and its visible blocks are in [0, num_blocks); checks heads % kv_heads == 0 as well.
// PagedAttention assumes all of this; callers that build tables from untrusted state check
// here first.
Status ValidateAttention(std::span<const AttentionToken> tokens, int64_t heads,
                         const KvCacheView& kv);

// out[t][h] = sum_j softmax_j(q[t][h] . K[j][h / (heads / kv_heads)] * scale) V[j][...] over
// j < tokens[t].context_len. q row t is at q + t * q_stride, out row t at out + t * out_stride,
// each heads * head_dim floats. Runs on the pool.
// REQUIRES: ValidateAttention(tokens, heads, kv).ok(); the cached K/V of every visible
// position written (StoreKv) before the call; out does not overlap q or the cache.
void PagedAttention(ThreadPool& pool, const float* q, int64_t q_stride,
                    std::span<const AttentionToken> tokens, int64_t heads, const KvCacheView& kv,
                    float scale, float* out, int64_t out_stride);

// The same result computed the plain way (full score vector, double-precision softmax and
// sums), single-threaded: the tests' reference.
void PagedAttentionReference(const float* q, int64_t q_stride,
                             std::span<const AttentionToken> tokens, int64_t heads,
                             const KvCacheView& kv, float scale, float* out, int64_t out_stride);

}  // namespace aicloud::engine::kernels
