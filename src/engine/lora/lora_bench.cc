// lora_bench: what multi-LoRA costs a decode step on SmolLM2-135M shapes (hidden 576, 30 layers,
// 9 heads / 3 KV heads of 64, FFN 1536, GPT-2's vocabulary), on this machine's cores.
//
//   lora_bench [--benchmark_filter=...] [--threads=2] [--model-dir=/var/tmp/aicloud-lora-bench-135m]
//
// The question it answers: a 32-token decode step whose tokens use 8 different rank-16 adapters
// (every module of every layer adapted), how much slower is it than the same step on the base
// model alone? The step's LoRA work is exactly the ApplyLora calls the runner makes (q|k|v,
// o, gate|up, down per layer), timed here on their own:
//   BM_LoraStep/<adapters>/<F32|F16 storage>   all ApplyLora calls of one step (+ grouping)
//   BM_BaseMatMuls/<format>                    the step's 120 base products (m = 32)
//   BM_BaseDecodeStep/<format>                 LlamaModel::Forward of the whole 32-token step
// Throughput kept with adapters = base step / (base step + LoRA step).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "engine/kernels/kernels.h"
#include "engine/lora/apply.h"
#include "engine/model/checkpoint.h"
#include "engine/model/random_checkpoint.h"
#include "engine/model/test_models.h"
#include "engine/runner/llama.h"

namespace {

using namespace aicloud;
using namespace aicloud::engine;
using kernels::Matrix;
using kernels::ThreadPool;
using kernels::WeightFormat;

constexpr int64_t kTokens = 32;
constexpr int64_t kRank = 16;

int g_threads = 2;
std::string g_model_dir = "/var/tmp/aicloud-lora-bench-135m";


ThreadPool& Pool() {
  static ThreadPool pool(g_threads);
  return pool;
}

std::vector<float> RandomFloats(Rng& rng, int64_t n, float bound) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>((2.0 * rng.UniformDouble() - 1.0) * bound);
  return v;
}

// `count` adapters of rank 16 on all seven modules of every layer, cached per storage type.
const std::vector<std::shared_ptr<const LoraAdapter>>& Adapters(DType storage) {
  static std::vector<std::shared_ptr<const LoraAdapter>> cache[2];
  std::vector<std::shared_ptr<const LoraAdapter>>& a = cache[storage == DType::kF16 ? 1 : 0];
  if (!a.empty()) return a;
  const ModelConfig c = SmolLm2_135M();
  Rng rng(storage == DType::kF16 ? 2 : 1);
  for (int i = 0; i < 8; ++i) {
    LoraConfig lc;
    lc.rank = kRank;
    lc.alpha = 32;
    auto adapter = std::make_shared<LoraAdapter>(lc, c.num_hidden_layers);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      for (LoraModule m : kAllLoraModules) {
        const LoraModuleShape s = ModuleShape(c, m);
        const std::vector<float> A = RandomFloats(rng, kRank * s.in, 0.04f);
        const std::vector<float> B = RandomFloats(rng, s.out * kRank, 0.02f);
        adapter->Set(l, m, LoraWeights::FromFloat(s.in, s.out, kRank, lc.Scale(), A.data(), B.data(), storage));
      }
    }
    a.push_back(std::move(adapter));
  }
  return a;
}

// One step's ApplyLora calls: tokens round-robin over `adapters` adapters (0: none).
void BM_LoraStep(benchmark::State& state) {
  const int adapters = static_cast<int>(state.range(0));
  const DType storage = state.range(1) == 16 ? DType::kF16 : DType::kF32;
  const auto& slots = Adapters(storage);
  const ModelConfig c = SmolLm2_135M();
  const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate_size, W = Q + 2 * KV;
  Rng rng(3);
  const std::vector<float> h = RandomFloats(rng, kTokens * H, 1.0f), attn = RandomFloats(rng, kTokens * Q, 1.0f),
                           act = RandomFloats(rng, kTokens * I, 1.0f);
  std::vector<float> qkv(static_cast<size_t>(kTokens * W)), o(static_cast<size_t>(kTokens * H)),
      gu(static_cast<size_t>(kTokens * 2 * I)), down(static_cast<size_t>(kTokens * H));
  std::vector<int32_t> token_slots(kTokens);
  for (int64_t t = 0; t < kTokens; ++t) token_slots[static_cast<size_t>(t)] = adapters == 0 ? kNoLora : static_cast<int32_t>(t % adapters);
  ThreadPool& pool = Pool();
  LoraBatch batch;
  for (auto _ : state) {
    if (!batch.Reset(token_slots, slots).ok()) state.SkipWithError("bad batch");
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      ApplyLora(pool, batch, l, QkvTargets(c), h.data(), H, qkv.data(), W);
      ApplyLora(pool, batch, l, LoraModule::kO, attn.data(), Q, o.data(), H, 0);
      ApplyLora(pool, batch, l, GateUpTargets(c), h.data(), H, gu.data(), 2 * I);
      ApplyLora(pool, batch, l, LoraModule::kDown, act.data(), I, down.data(), H, 0);
    }
    benchmark::DoNotOptimize(down.data());
    benchmark::ClobberMemory();
  }
  size_t bytes = 0;
  for (int i = 0; i < adapters; ++i) bytes += slots[static_cast<size_t>(i)]->bytes();
  state.counters["adapter_MiB"] = static_cast<double>(bytes) / 1048576.0;
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(kTokens), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LoraStep)
    ->ArgNames({"adapters", "bits"})
    ->Args({8, 32})
    ->Args({8, 16})
    ->Args({1, 32})
    ->Args({0, 32})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The 120 base products of one 32-token step, each layer with its own weights.
void BM_BaseMatMuls(benchmark::State& state) {
  const WeightFormat fmt = static_cast<WeightFormat>(state.range(0));
  const ModelConfig c = SmolLm2_135M();
  const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate_size, W = Q + 2 * KV;
  struct Layer {
    Matrix qkv, o, gate_up, down;
  };
  std::vector<Layer> layers;
  Rng rng(4);
  auto make = [&](int64_t rows, int64_t cols) {
    const std::vector<float> v = RandomFloats(rng, rows * cols, 0.05f);
    return std::move(*kernels::ConvertMatrix({WeightFormat::kF32, rows, cols, v.data()}, fmt));
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    layers.push_back({make(W, H), make(H, Q), make(2 * I, H), make(H, I)});
  }
  const std::vector<float> h = RandomFloats(rng, kTokens * H, 1.0f), attn = RandomFloats(rng, kTokens * Q, 1.0f),
                           act = RandomFloats(rng, kTokens * I, 1.0f);
  std::vector<float> qkv(static_cast<size_t>(kTokens * W)), o(static_cast<size_t>(kTokens * H)),
      gu(static_cast<size_t>(kTokens * 2 * I)), down(static_cast<size_t>(kTokens * H));
  ThreadPool& pool = Pool();
  for (auto _ : state) {
    for (const Layer& L : layers) {
      kernels::MatMul(pool, h.data(), kTokens, L.qkv.view(), qkv.data());
      kernels::MatMul(pool, attn.data(), kTokens, L.o.view(), o.data());
      kernels::MatMul(pool, h.data(), kTokens, L.gate_up.view(), gu.data());
      kernels::MatMul(pool, act.data(), kTokens, L.down.view(), down.data());
    }
    benchmark::DoNotOptimize(down.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(kernels::WeightFormatName(fmt));
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(kTokens), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_BaseMatMuls)
    ->ArgName("format")
    ->Arg(static_cast<int>(WeightFormat::kF32))
    ->Arg(static_cast<int>(WeightFormat::kF16))
    ->Arg(static_cast<int>(WeightFormat::kQ8))
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The whole base step through LlamaModel: 32 sequences of 16 prompt tokens each decode one token
// (the same positions every iteration, so the KV cache stays small).
void BM_BaseDecodeStep(benchmark::State& state) {
  const WeightFormat fmt = static_cast<WeightFormat>(state.range(0));
  const std::filesystem::path dir = g_model_dir;
  if (!std::filesystem::exists(dir / "config.json")) {
    InitCheckpointOptions o;
    o.config = SmolLm2_135M();
    o.dtype = DType::kF16;
    o.seed = 1;
    o.tokenizer_json = std::string(AICLOUD_SOURCE_DIR) + "/data/tokenizers/gpt2/tokenizer.json";
    StatusOr<ModelConfig> c = InitRandomCheckpoint(dir, o);
    if (!c.ok()) return state.SkipWithError(c.status().ToString().c_str());
  }
  StatusOr<std::unique_ptr<Checkpoint>> ck = Checkpoint::Open(dir);
  if (!ck.ok()) return state.SkipWithError(ck.status().ToString().c_str());
  StatusOr<std::unique_ptr<LlamaModel>> m = LlamaModel::Load(**ck, {.weights = fmt});
  if (!m.ok()) return state.SkipWithError(m.status().ToString().c_str());
  LlamaModel& model = **m;
  constexpr int64_t kBlock = 16, kPrompt = 16;
  StatusOr<KvCache> cache = KvCache::Create(model.config(), kTokens * 2, kBlock, DType::kF16);
  if (!cache.ok()) return state.SkipWithError(cache.status().ToString().c_str());
  // Sequence s owns blocks 2s and 2s + 1.
  std::vector<std::vector<int32_t>> tables(kTokens);
  std::vector<int32_t> tokens, positions, rows;
  std::vector<int64_t> slots;
  std::vector<kernels::AttentionToken> att;
  for (int64_t s = 0; s < kTokens; ++s) tables[static_cast<size_t>(s)] = {static_cast<int32_t>(2 * s), static_cast<int32_t>(2 * s + 1)};
  for (int64_t s = 0; s < kTokens; ++s) {
    for (int64_t p = 0; p < kPrompt; ++p) {
      tokens.push_back(static_cast<int32_t>(100 + s * 16 + p));
      positions.push_back(static_cast<int32_t>(p));
      slots.push_back(2 * s * kBlock + p);
      att.push_back({tables[static_cast<size_t>(s)], static_cast<int32_t>(p + 1)});
    }
    rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
  }
  std::vector<float> logits(static_cast<size_t>(kTokens * model.vocab_size()));
  ThreadPool& pool = Pool();
  if (Status s = model.Forward(pool, {tokens, positions, slots, att, rows}, *cache, logits.data()); !s.ok()) {
    return state.SkipWithError(s.ToString().c_str());
  }
  tokens.clear();
  positions.clear();
  slots.clear();
  att.clear();
  rows.clear();
  for (int64_t s = 0; s < kTokens; ++s) {
    tokens.push_back(static_cast<int32_t>(7 + s));
    positions.push_back(kPrompt);
    slots.push_back(2 * s * kBlock + kPrompt);
    att.push_back({tables[static_cast<size_t>(s)], static_cast<int32_t>(kPrompt + 1)});
    rows.push_back(static_cast<int32_t>(s));
  }
  const ForwardBatch step{tokens, positions, slots, att, rows};
  for (auto _ : state) {
    if (!model.Forward(pool, step, *cache, logits.data()).ok()) state.SkipWithError("forward failed");
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetLabel(kernels::WeightFormatName(fmt));
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(kTokens), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_BaseDecodeStep)
    ->ArgName("format")
    ->Arg(static_cast<int>(WeightFormat::kF16))
    ->Arg(static_cast<int>(WeightFormat::kQ8))
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  // Our flags first; the rest go to Google Benchmark.
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--threads=", 0) == 0) {
      g_threads = std::atoi(a.c_str() + 10);
    } else if (a.rfind("--model-dir=", 0) == 0) {
      g_model_dir = a.substr(12);
    } else {
      rest.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
