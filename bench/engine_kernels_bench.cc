// CPU kernel benchmarks for the serving engine (src/engine/kernels), at SmolLM2-135M shapes.
//
//   engine_kernels_bench --benchmark_counters_tabular=true [--benchmark_filter=MatMul/F16]
//
// - ParallelFor/*: per-call overhead of the thread pool with an empty body.
// - MatMul/<format>/<shape>/M/threads: y = x * W^T. Each iteration uses the next of several
//   copies of W (together >= 64 MiB, beyond the 32 MiB L3), so weights stream from DRAM as
//   they do in a real forward pass. Counters: GFLOP/s (2*M*N*K) and weight GB/s.
// - OpenBLAS/<shape>/M/threads: cblas_sgemv (M = 1) / cblas_sgemm on the same F32 shapes.
// - DecodeMatMuls135M/<format>/M/threads: every linear layer of one decode step of the 135M
//   model for M sequences (30 layers x q,k,v,o,gate,up,down + the 49152-row LM head), with
//   each layer's own weights: tokens/s = M / step time for the matmul part of decode.
// - Attention/<cache>/decode and /prefill: PagedAttention alone with the 135M attention shape
//   (9 heads over 3 KV heads of 64, blocks of 16): GFLOP/s (4 * ctx * 64 per head and token)
//   and GB/s of K/V read (each KV head's context once per token).
// - Forward135M/<format>/<mode>/...: the whole forward pass of the 135M model built from these
//   kernels (norms, fused qkv, RoPE, KV store, paged attention over an F16 cache, o, fused
//   gate/up, SwiGLU, down, residuals, LM head + argmax): decode of S sequences at context C
//   (tokens/s = S / step time), and prefill of a P-token prompt (tokens/s = P / time).
// After the tables it prints ours/OpenBLAS GFLOP/s ratios per shape, M and thread count.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/kernels/kernels.h"

#ifdef AICLOUD_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int num_threads);
#endif

namespace {

using namespace aicloud::engine::kernels;  // NOLINT: benchmark file

ThreadPool& Pool(int threads) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[threads];
  if (!p) p = std::make_unique<ThreadPool>(threads);
  return *p;
}

std::vector<float> Random(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

struct Shape {
  const char* name;
  int64_t n, k;
};
constexpr Shape kShapes[] = {
    {"qo_576x576", 576, 576},       {"kv_192x576", 192, 576},
    {"up_1536x576", 1536, 576},     {"down_576x1536", 576, 1536},
    {"vocab_49152x576", 49152, 576},
};

// Enough copies of a weight matrix to overflow the last-level cache.
const std::vector<Matrix>& ColdWeights(const Shape& s, WeightFormat f) {
  static std::map<std::pair<std::string, WeightFormat>, std::vector<Matrix>> cache;
  auto& copies = cache[{s.name, f}];
  if (copies.empty()) {
    const auto w = Random(static_cast<size_t>(s.n * s.k), 1, 0.02f);
    const WeightView src{WeightFormat::kF32, s.n, s.k, w.data()};
    const size_t bytes = RowBytes(f, s.k) * static_cast<size_t>(s.n);
    const size_t count = std::clamp<size_t>((64u << 20) / bytes + 1, 1, 64);
    for (size_t i = 0; i < count; ++i) copies.push_back(std::move(*ConvertMatrix(src, f)));
  }
  return copies;
}

void SetCounters(benchmark::State& state, double flops, double weight_bytes) {
  const double it = static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = benchmark::Counter(flops * it / 1e9, benchmark::Counter::kIsRate);
  state.counters["GB/s"] = benchmark::Counter(weight_bytes * it / 1e9, benchmark::Counter::kIsRate);
}

void BM_ParallelFor(benchmark::State& state) {
  ThreadPool& pool = Pool(static_cast<int>(state.range(0)));
  const int64_t n = state.range(1);
  for (auto _ : state) {
    pool.ParallelFor(n, [](int64_t b, int64_t e) { benchmark::DoNotOptimize(b + e); });
  }
}

void BM_MatMul(benchmark::State& state, Shape s, WeightFormat f, Q8Activations act) {
  const int64_t m = state.range(0);
  ThreadPool& pool = Pool(static_cast<int>(state.range(1)));
  const auto& copies = ColdWeights(s, f);
  const auto x = Random(static_cast<size_t>(m * s.k), 2, 1.0f);
  std::vector<float> y(static_cast<size_t>(m * s.n));
  size_t i = 0;
  for (auto _ : state) {
    MatMul(pool, x.data(), m, copies[i++ % copies.size()].view(), y.data(), MatMulOptions{act});
    benchmark::ClobberMemory();
  }
  SetCounters(state, 2.0 * m * s.n * s.k, static_cast<double>(copies[0].bytes()));
}

#ifdef AICLOUD_HAVE_OPENBLAS
void BM_OpenBlas(benchmark::State& state, Shape s) {
  const int64_t m = state.range(0);
  openblas_set_num_threads(static_cast<int>(state.range(1)));
  const auto& copies = ColdWeights(s, WeightFormat::kF32);
  const auto x = Random(static_cast<size_t>(m * s.k), 2, 1.0f);
  std::vector<float> y(static_cast<size_t>(m * s.n));
  size_t i = 0;
  for (auto _ : state) {
    const auto* w = static_cast<const float*>(copies[i++ % copies.size()].view().data);
    const int n = static_cast<int>(s.n), k = static_cast<int>(s.k);
    if (m == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, w, k, x.data(), 1, 0.0f, y.data(), 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), n, k, 1.0f,
                  x.data(), k, w, k, 0.0f, y.data(), n);
    }
    benchmark::ClobberMemory();
  }
  SetCounters(state, 2.0 * m * s.n * s.k, static_cast<double>(copies[0].bytes()));
}
#endif

// The linear layers of SmolLM2-135M, each layer with its own weights.
struct Model135M {
  static constexpr int kLayers = 30;
  static constexpr int64_t kHidden = 576, kKv = 192, kFfn = 1536, kVocab = 49152;
  std::vector<Matrix> layers;  // q, k, v, o, gate, up, down per layer
  Matrix lm_head;

  explicit Model135M(WeightFormat f) {
    const int64_t shapes[7][2] = {{kHidden, kHidden}, {kKv, kHidden}, {kKv, kHidden},
                                  {kHidden, kHidden}, {kFfn, kHidden}, {kFfn, kHidden},
                                  {kHidden, kFfn}};
    uint32_t seed = 10;
    for (int l = 0; l < kLayers; ++l) {
      for (const auto& sh : shapes) {
        const auto w = Random(static_cast<size_t>(sh[0] * sh[1]), seed++, 0.02f);
        layers.push_back(std::move(*ConvertMatrix({WeightFormat::kF32, sh[0], sh[1], w.data()}, f)));
      }
    }
    const auto w = Random(static_cast<size_t>(kVocab * kHidden), seed, 0.02f);
    lm_head = std::move(*ConvertMatrix({WeightFormat::kF32, kVocab, kHidden, w.data()}, f));
  }
  size_t bytes() const {
    size_t b = lm_head.bytes();
    for (const Matrix& m : layers) b += m.bytes();
    return b;
  }
};

const Model135M& Model(WeightFormat f) {
  static std::map<WeightFormat, std::unique_ptr<Model135M>> models;
  auto& m = models[f];
  if (!m) m = std::make_unique<Model135M>(f);
  return *m;
}

void BM_DecodeMatMuls135M(benchmark::State& state, WeightFormat f) {
  const int64_t m = state.range(0);
  ThreadPool& pool = Pool(static_cast<int>(state.range(1)));
  const Model135M& model = Model(f);
  const auto x = Random(static_cast<size_t>(m * Model135M::kFfn), 3, 1.0f);
  std::vector<float> y(static_cast<size_t>(m * Model135M::kVocab));
  double flops = 0;
  for (const Matrix& w : model.layers) flops += 2.0 * m * w.rows() * w.cols();
  flops += 2.0 * m * model.lm_head.rows() * model.lm_head.cols();
  for (auto _ : state) {
    for (const Matrix& w : model.layers) MatMul(pool, x.data(), m, w.view(), y.data());
    MatMul(pool, x.data(), m, model.lm_head.view(), y.data());
    benchmark::ClobberMemory();
  }
  SetCounters(state, flops, static_cast<double>(model.bytes()));
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(m) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}


// One layer's KV cache with the 135M attention shape and sequences laid out block after block.
struct AttentionBench {
  static constexpr int64_t kHeads = 9, kKvHeads = 3, kDim = 64, kBlock = 16;
  std::vector<uint16_t> k16, v16;
  std::vector<float> k32, v32;
  KvCacheView kv;
  std::vector<std::vector<int32_t>> tables;

  AttentionBench(aicloud::engine::DType type, int64_t seqs, int64_t ctx) {
    const int64_t per_seq = (ctx + kBlock - 1) / kBlock;
    const size_t elems = static_cast<size_t>(seqs * per_seq * kBlock * kKvHeads * kDim);
    kv = {type, seqs * per_seq, kBlock, kKvHeads, kDim, nullptr, nullptr};
    if (type == aicloud::engine::DType::kF16) {
      k16.assign(elems, 0x3c00);
      v16.assign(elems, 0x3c00);
      kv.k = k16.data();
      kv.v = v16.data();
    } else {
      k32.assign(elems, 0.5f);
      v32.assign(elems, 0.5f);
      kv.k = k32.data();
      kv.v = v32.data();
    }
    for (int64_t s = 0; s < seqs; ++s) {
      tables.emplace_back();
      for (int64_t b = 0; b < per_seq; ++b) tables.back().push_back(static_cast<int32_t>(s * per_seq + b));
    }
  }
};

// Args: {sequences, context, threads}: one decode token per sequence.
void BM_AttentionDecode(benchmark::State& state, aicloud::engine::DType type) {
  const int64_t seqs = state.range(0), ctx = state.range(1);
  ThreadPool& pool = Pool(static_cast<int>(state.range(2)));
  AttentionBench a(type, seqs, ctx);
  std::vector<AttentionToken> toks;
  for (int64_t s = 0; s < seqs; ++s) toks.push_back({a.tables[s], static_cast<int32_t>(ctx)});
  const int64_t width = AttentionBench::kHeads * AttentionBench::kDim;
  const auto q = Random(static_cast<size_t>(seqs * width), 5, 1.0f);
  std::vector<float> out(q.size());
  for (auto _ : state) {
    PagedAttention(pool, q.data(), width, toks, AttentionBench::kHeads, a.kv, 0.125f, out.data(), width);
    benchmark::ClobberMemory();
  }
  const double flops = 4.0 * seqs * ctx * width;
  const double bytes = 2.0 * seqs * ctx * AttentionBench::kKvHeads * AttentionBench::kDim *
                       static_cast<double>(aicloud::engine::DTypeSize(type));
  SetCounters(state, flops, bytes);
}

// Args: {prompt, threads}: causal attention of a whole prompt.
void BM_AttentionPrefill(benchmark::State& state, aicloud::engine::DType type) {
  const int64_t p = state.range(0);
  ThreadPool& pool = Pool(static_cast<int>(state.range(1)));
  AttentionBench a(type, 1, p);
  std::vector<AttentionToken> toks;
  for (int64_t i = 0; i < p; ++i) toks.push_back({a.tables[0], static_cast<int32_t>(i + 1)});
  const int64_t width = AttentionBench::kHeads * AttentionBench::kDim;
  const auto q = Random(static_cast<size_t>(p * width), 5, 1.0f);
  std::vector<float> out(q.size());
  for (auto _ : state) {
    PagedAttention(pool, q.data(), width, toks, AttentionBench::kHeads, a.kv, 0.125f, out.data(), width);
    benchmark::ClobberMemory();
  }
  const double flops = 4.0 * width * (static_cast<double>(p) * (p + 1) / 2);
  SetCounters(state, flops, 0.0);
}

// The SmolLM2-135M forward pass from the kernels, with q/k/v and gate/up fused at load.
struct Forward135M {
  static constexpr int kLayers = 30;
  static constexpr int64_t kHidden = 576, kHeads = 9, kKvHeads = 3, kHeadDim = 64, kFfn = 1536,
                           kVocab = 49152, kQkv = 960, kBlock = 16;
  struct Layer {
    Matrix qkv, o, gate_up, down;
    std::vector<float> attn_norm, mlp_norm;
    std::vector<uint16_t> k_pool, v_pool;  // F16 KV cache
    KvCacheView kv;
  };
  std::vector<Layer> layers;
  Matrix embed;  // tied with the LM head
  std::vector<float> final_norm;
  RopeTable rope{RopeInvFreq(kHeadDim, 100000.0), 8192};

  Forward135M(WeightFormat f, int64_t kv_blocks) {
    uint32_t seed = 100;
    auto make = [&](int64_t rows, int64_t cols) {
      const auto w = Random(static_cast<size_t>(rows * cols), seed++, 0.02f);
      return std::move(*ConvertMatrix({WeightFormat::kF32, rows, cols, w.data()}, f));
    };
    for (int l = 0; l < kLayers; ++l) {
      Layer layer;
      layer.qkv = make(kQkv, kHidden);
      layer.o = make(kHidden, kHidden);
      layer.gate_up = make(2 * kFfn, kHidden);
      layer.down = make(kHidden, kFfn);
      layer.attn_norm.assign(kHidden, 1.0f);
      layer.mlp_norm.assign(kHidden, 1.0f);
      const size_t elems = static_cast<size_t>(kv_blocks * kBlock * kKvHeads * kHeadDim);
      layer.k_pool.assign(elems, 0x3c00);  // 1.0
      layer.v_pool.assign(elems, 0x3c00);
      layer.kv = {aicloud::engine::DType::kF16, kv_blocks, kBlock, kKvHeads, kHeadDim,
                  layer.k_pool.data(), layer.v_pool.data()};
      layers.push_back(std::move(layer));
    }
    embed = make(kVocab, kHidden);
    final_norm.assign(kHidden, 1.0f);
  }

  size_t weight_bytes() const {
    size_t b = embed.bytes();
    for (const Layer& l : layers) b += l.qkv.bytes() + l.o.bytes() + l.gate_up.bytes() + l.down.bytes();
    return b;
  }

  // One step over m tokens; tokens[i] says which cache blocks token i reads, slots[i] where its
  // K/V go. Logits are computed for the rows in [m - logit_rows, m).
  void Step(ThreadPool& pool, const int32_t* ids, const int32_t* positions, const int64_t* slots,
            std::span<const AttentionToken> tokens, int64_t m, int64_t logit_rows,
            int32_t* next) {
    using aicloud::engine::DType;
    x_.resize(m * kHidden);
    h_.resize(m * kHidden);
    qkv_.resize(m * kQkv);
    att_.resize(m * kHidden);
    gu_.resize(m * 2 * kFfn);
    act_.resize(m * kFfn);
    logits_.resize(logit_rows * kVocab);
    (void)EmbeddingLookup(embed.view(), std::span<const int32_t>(ids, m), x_.data());
    auto norm = [&](const std::vector<float>& w, const float* in, float* out, int64_t rows) {
      const VectorView wv{DType::kF32, kHidden, w.data()};
      if (rows < 16) return RmsNorm(in, rows, kHidden, wv, 1e-5f, out);
      pool.ParallelFor(rows, [&](int64_t b, int64_t e) {
        RmsNorm(in + b * kHidden, e - b, kHidden, wv, 1e-5f, out + b * kHidden);
      }, 8);
    };
    for (Layer& l : layers) {
      norm(l.attn_norm, x_.data(), h_.data(), m);
      MatMul(pool, h_.data(), m, l.qkv.view(), qkv_.data());
      Rope(qkv_.data(), m, kHeads, kHeadDim, kQkv, positions, rope);
      Rope(qkv_.data() + kHidden, m, kKvHeads, kHeadDim, kQkv, positions, rope);
      StoreKv(l.kv, slots, qkv_.data() + kHidden, kQkv, qkv_.data() + kHidden + kKvHeads * kHeadDim,
              kQkv, m);
      PagedAttention(pool, qkv_.data(), kQkv, tokens, kHeads, l.kv, 0.125f, att_.data(), kHidden);
      MatMul(pool, att_.data(), m, l.o.view(), h_.data());
      Add(x_.data(), h_.data(), x_.data(), m * kHidden);
      norm(l.mlp_norm, x_.data(), h_.data(), m);
      MatMul(pool, h_.data(), m, l.gate_up.view(), gu_.data());
      SiluMulRows(gu_.data(), m, kFfn, act_.data());
      MatMul(pool, act_.data(), m, l.down.view(), h_.data());
      Add(x_.data(), h_.data(), x_.data(), m * kHidden);
    }
    const float* last = x_.data() + (m - logit_rows) * kHidden;
    norm(final_norm, last, h_.data(), logit_rows);
    MatMul(pool, h_.data(), logit_rows, embed.view(), logits_.data());
    for (int64_t r = 0; r < logit_rows; ++r) next[r] = static_cast<int32_t>(Argmax(&logits_[r * kVocab], kVocab));
  }

 private:
  std::vector<float> x_, h_, qkv_, att_, gu_, act_, logits_;
};

// One model per format, with room in its KV cache for every case below.
Forward135M& ForwardModel(WeightFormat f) {
  static std::map<WeightFormat, std::unique_ptr<Forward135M>> models;
  auto& m = models[f];
  if (!m) m = std::make_unique<Forward135M>(f, /*kv_blocks=*/1024);
  return *m;
}

// Args: {sequences S, context C, threads}: each of S sequences decodes one token attending to C
// cached positions.
void BM_Forward135MDecode(benchmark::State& state, WeightFormat f) {
  const int64_t seqs = state.range(0), ctx = state.range(1);
  ThreadPool& pool = Pool(static_cast<int>(state.range(2)));
  const int64_t blocks_per_seq = (ctx + 15) / 16;
  Forward135M& model = ForwardModel(f);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(seqs));
  std::vector<AttentionToken> tokens;
  std::vector<int32_t> ids(seqs), positions(seqs), next(seqs);
  std::vector<int64_t> slots(seqs);
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables[s].push_back(static_cast<int32_t>(s * blocks_per_seq + b));
    ids[s] = static_cast<int32_t>(s * 7 + 1);
    positions[s] = static_cast<int32_t>(ctx - 1);
    slots[s] = tables[s][(ctx - 1) / 16] * 16 + (ctx - 1) % 16;
  }
  for (int64_t s = 0; s < seqs; ++s) tokens.push_back({tables[s], static_cast<int32_t>(ctx)});
  for (auto _ : state) {
    model.Step(pool, ids.data(), positions.data(), slots.data(), tokens, seqs, seqs, next.data());
    benchmark::DoNotOptimize(next.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(seqs * state.iterations()),
                                                  benchmark::Counter::kIsRate);
  state.counters["weight GB/s"] = benchmark::Counter(
      static_cast<double>(model.weight_bytes()) * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

// Args: {prompt tokens P, threads}: one sequence's prompt in one step (logits for the last
// token only), causal attention inside it.
void BM_Forward135MPrefill(benchmark::State& state, WeightFormat f) {
  const int64_t p = state.range(0);
  ThreadPool& pool = Pool(static_cast<int>(state.range(1)));
  const int64_t blocks = (p + 15) / 16;
  Forward135M& model = ForwardModel(f);
  std::vector<int32_t> table(blocks), ids(p), positions(p), next(1);
  std::vector<int64_t> slots(p);
  std::vector<AttentionToken> tokens;
  for (int64_t b = 0; b < blocks; ++b) table[b] = static_cast<int32_t>(b);
  for (int64_t i = 0; i < p; ++i) {
    ids[i] = static_cast<int32_t>((i * 31) % 49152);
    positions[i] = static_cast<int32_t>(i);
    slots[i] = i;
    tokens.push_back({table, static_cast<int32_t>(i + 1)});
  }
  for (auto _ : state) {
    model.Step(pool, ids.data(), positions.data(), slots.data(), tokens, p, 1, next.data());
    benchmark::DoNotOptimize(next.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(p * state.iterations()),
                                                  benchmark::Counter::kIsRate);
}

// Keeps GFLOP/s per run name so main can print ours/OpenBLAS ratios.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      auto it = r.counters.find("GFLOP/s");
      if (it != r.counters.end() && !r.error_occurred) gflops_[r.benchmark_name()] = it->second.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void PrintRatios() const {
    std::printf("\nours / OpenBLAS (GFLOP/s ratio; >1 means ours is faster)\n");
    std::printf("%-22s %6s %8s %8s %8s %8s %8s\n", "shape", "M", "threads", "BLAS", "F32", "F16", "Q8");
    for (const auto& [name, blas] : gflops_) {
      if (name.rfind("OpenBLAS/", 0) != 0) continue;
      const std::string rest = name.substr(9);  // <shape>/M/threads
      const size_t slash = rest.find('/');
      const std::string shape = rest.substr(0, slash);
      const std::string tail = rest.substr(slash);
      auto ratio = [&](const char* fmt) {
        auto it = gflops_.find(std::string("MatMul/") + fmt + "/" + shape + tail);
        return it == gflops_.end() ? NAN : it->second / blas;
      };
      int m = 0, t = 0;
      std::sscanf(tail.c_str(), "/M:%d/threads:%d", &m, &t);
      std::printf("%-22s %6d %8d %8.1f %8.2f %8.2f %8.2f\n", shape.c_str(), m, t, blas, ratio("F32"),
                  ratio("F16"), ratio("Q8"));
    }
  }

 private:
  std::map<std::string, double> gflops_;
};

void RegisterAll() {
  benchmark::RegisterBenchmark("ParallelFor", BM_ParallelFor)
      ->ArgNames({"threads", "n"})
      ->Args({1, 2})
      ->Args({2, 2})
      ->Args({2, 64});
  const std::vector<int64_t> ms = {1, 8, 32, 128, 512};
  for (const Shape& s : kShapes) {
    for (auto [f, act, label] : {std::tuple{WeightFormat::kF32, Q8Activations::kInt8, "F32"},
                                 {WeightFormat::kF16, Q8Activations::kInt8, "F16"},
                                 {WeightFormat::kQ8, Q8Activations::kInt8, "Q8"},
                                 {WeightFormat::kQ8, Q8Activations::kFloat, "Q8floatx"}}) {
      auto* b = benchmark::RegisterBenchmark(
          (std::string("MatMul/") + label + "/" + s.name).c_str(),
          [s, f = f, act = act](benchmark::State& st) { BM_MatMul(st, s, f, act); });
      b->ArgNames({"M", "threads"})->UseRealTime();
      for (int64_t m : ms) {
        if (act == Q8Activations::kFloat && m > 1) continue;  // the option only affects M = 1
        if (s.n > 10000 && m > 32) continue;                   // the LM head runs on few rows
        for (int t : {1, 2}) b->Args({m, t});
      }
    }
#ifdef AICLOUD_HAVE_OPENBLAS
    auto* b = benchmark::RegisterBenchmark((std::string("OpenBLAS/") + s.name).c_str(),
                                           [s](benchmark::State& st) { BM_OpenBlas(st, s); });
    b->ArgNames({"M", "threads"})->UseRealTime();
    for (int64_t m : ms) {
      if (s.n > 10000 && m > 32) continue;
      for (int t : {1, 2}) b->Args({m, t});
    }
#endif
  }
  for (auto [f, label] : {std::pair{WeightFormat::kF32, "F32"}, {WeightFormat::kF16, "F16"},
                          {WeightFormat::kQ8, "Q8"}}) {
    benchmark::RegisterBenchmark((std::string("DecodeMatMuls135M/") + label).c_str(),
                                 [f = f](benchmark::State& st) { BM_DecodeMatMuls135M(st, f); })
        ->ArgNames({"M", "threads"})
        ->Args({1, 1})
        ->Args({1, 2})
        ->Args({32, 2})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (auto [t, label] : {std::pair{aicloud::engine::DType::kF32, "F32"},
                          {aicloud::engine::DType::kF16, "F16"}}) {
    benchmark::RegisterBenchmark((std::string("Attention/") + label + "/decode").c_str(),
                                 [t = t](benchmark::State& st) { BM_AttentionDecode(st, t); })
        ->ArgNames({"seqs", "ctx", "threads"})
        ->Args({1, 1024, 1})
        ->Args({1, 1024, 2})
        ->Args({32, 256, 2})
        ->Args({32, 1024, 2})
        ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("Attention/") + label + "/prefill").c_str(),
                                 [t = t](benchmark::State& st) { BM_AttentionPrefill(st, t); })
        ->ArgNames({"prompt", "threads"})
        ->Args({512, 1})
        ->Args({512, 2})
        ->UseRealTime();
  }
  for (auto [f, label] : {std::pair{WeightFormat::kF16, "F16"}, {WeightFormat::kQ8, "Q8"}}) {
    benchmark::RegisterBenchmark((std::string("Forward135M/") + label + "/decode").c_str(),
                                 [f = f](benchmark::State& st) { BM_Forward135MDecode(st, f); })
        ->ArgNames({"seqs", "ctx", "threads"})
        ->Args({1, 64, 1})
        ->Args({1, 64, 2})
        ->Args({1, 256, 2})
        ->Args({1, 1024, 2})
        ->Args({32, 64, 2})
        ->Args({32, 256, 2})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("Forward135M/") + label + "/prefill").c_str(),
                                 [f = f](benchmark::State& st) { BM_Forward135MPrefill(st, f); })
        ->ArgNames({"prompt", "threads"})
        ->Args({512, 1})
        ->Args({512, 2})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RegisterAll();
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  benchmark::Shutdown();
  return 0;
}
