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
// After the tables it prints ours/OpenBLAS GFLOP/s ratios per shape, M and thread count.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/kernels/matmul.h"
#include "engine/kernels/matrix.h"
#include "engine/kernels/thread_pool.h"

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
      std::sscanf(tail.c_str(), "/%d/%d", &m, &t);
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
