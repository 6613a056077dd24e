// The engine's CPU compute kernels: everything a Llama-style forward pass computes, for one
// token (decode) or many (prefill, batched decode), on x86-64 with AVX2/FMA/F16C when present.
//
// Pieces (one header each; this one includes them all):
//   thread_pool.h  ThreadPool::ParallelFor(n, fn(begin, end)): the only threads kernels use.
//   matrix.h       WeightView / Matrix (F32, F16, BF16, Q8 int8 blocks), QuantizeQ8,
//                  ConcatRows (fuse q/k/v or gate/up), DequantizeRow, bulk dtype conversion.
//   matmul.h       MatMul(pool, x[m][k], W[n][k], y[m][n]) = x W^T, GEMV for m == 1 and a
//                  blocked GEMM for m > 1; MatMulReference.
//   ops.h          RmsNorm, RopeInvFreq / RopeTable / Rope (HF rotate_half), SiluMul / SiluMulRows,
//                  Softmax, Add, EmbeddingLookup, Argmax.
//   attention.h    KvCacheView (paged K/V layout), StoreKv, PagedAttention (online softmax,
//                  GQA, causal via per-token context length), ValidateAttention, reference.
//   cpu.h          Isa / ScopedIsa: runtime choice between the AVX2 and scalar versions.
//   dtype.h        DType and scalar half / bfloat16 conversions (checkpoint element types).
//
// Conventions shared by all kernels:
// - Activations are float32, row-major, rows contiguous unless a stride is given. Weights stay
//   in their stored format ([out][in], as Hugging Face stores linear layers) and are widened
//   inside the kernels.
// - Kernels do not allocate on their hot paths (per-thread scratch grows once and is reused)
//   and do not fail: preconditions are documented as REQUIRES and checked by Validate*
//   functions that return Status for callers holding untrusted shapes or tables.
// - MatMul and PagedAttention parallelise over the pool they are given; row/elementwise ops run
//   on the calling thread (split rows over the pool when there are many).
// - Thread safety: kernels are reentrant; concurrent calls on one pool are serialised by it.
//
// One decoder layer of SmolLM2-135M for a batch of `m` tokens (hidden 576, 9 heads / 3 KV
// heads of 64, FFN 1536), with q/k/v and gate/up fused at load by ConcatRows:
//
//   RmsNorm(x, m, 576, attn_norm, 1e-5f, h);
//   MatMul(pool, h, m, wqkv.view(), qkv);                     // [m][576 + 192 + 192]
//   Rope(qkv, m, 9, 64, 960, positions, rope);                // q heads (RopeTable rope)
//   Rope(qkv + 576, m, 3, 64, 960, positions, rope);          // k heads
//   StoreKv(kv, slots, qkv + 576, 960, qkv + 768, 960, m);
//   PagedAttention(pool, qkv, 960, tokens, 9, kv, 0.125f, attn, 576);
//   MatMul(pool, attn, m, wo.view(), h);
//   Add(x, h, x, m * 576);
//   RmsNorm(x, m, 576, mlp_norm, 1e-5f, h);
//   MatMul(pool, h, m, w_gate_up.view(), gu);                  // [m][2 * 1536]
//   SiluMulRows(gu, m, 1536, act);
//   MatMul(pool, act, m, wdown.view(), h);
//   Add(x, h, x, m * 576);
#pragma once

#include "engine/kernels/attention.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/dtype.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/matrix.h"
#include "engine/kernels/ops.h"
#include "engine/kernels/thread_pool.h"
