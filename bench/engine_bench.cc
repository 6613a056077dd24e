// engine_bench: the forward pass's speed on SmolLM2-135M shapes (hidden 576, 30 layers, 9 heads,
// 3 KV heads, FFN 1536, GPT-2's 50,257-token vocabulary), random weights, on this machine's
// cores. Results and the exact command are in bench/RESULTS.md (section 6).
//
//   engine_bench [--threads 2] [--formats f16,q8] [--prompt 512] [--decode 128] [--streams 32]
//                [--stream-tokens 64] [--reps 3] [--model-dir /var/tmp/aicloud-bench-135m]
//
// For each weight format: prompt processing (one --prompt-token prompt in steps of 512 tokens,
// as llama-bench's pp512 does), single-stream decode (--decode tokens after a 16-token prompt,
// one token per step, as tg128), and batched decode (--streams sequences each decoding
// --stream-tokens tokens, all in one step per token). Prompt processing and single-stream
// decode are measured as `llama-bench -r 3` measures them (the baseline below was taken that
// way): one untimed warm-up run, then --reps timed runs over the same KV blocks, reported as
// mean ± standard deviation. Tokens/s and peak RSS are printed.
// The baseline, llama.cpp on the same 2 cores with the same shapes (research note B.4):
// F16 pp512 509 t/s, tg128 64 t/s; Q8_0 pp512 444 t/s, tg128 116 t/s, 230 t/s aggregate at 32
// sequences.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/kernels/ops.h"
#include "engine/model/checkpoint.h"
#include "engine/model/random_checkpoint.h"
#include "engine/model/test_models.h"
#include "engine/runner/llama.h"

namespace {

using namespace aicloud;
using namespace aicloud::engine;
using Clock = std::chrono::steady_clock;

struct Flags {
  int threads = 2;
  std::string formats = "f16,q8";
  int prompt = 512;
  int decode = 128;
  int streams = 32;
  int stream_tokens = 64;
  int reps = 3;
  std::string model_dir = "/var/tmp/aicloud-bench-135m";
};

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "engine_bench: %s\n", why.c_str());
  std::exit(1);
}

double PeakRssMiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// Sequences with consecutive blocks; enough for a benchmark.
struct Batcher {
  int64_t bs = 16;
  int32_t next_block = 0;
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> lens;
  std::vector<int32_t> tokens, positions, rows;
  std::vector<int64_t> slots;
  std::vector<kernels::AttentionToken> att;
  std::vector<int> owner;
  int Add() {
    tables.emplace_back();
    lens.push_back(0);
    return static_cast<int>(tables.size()) - 1;
  }
  // Starts sequence s again at position 0 on its own blocks (llama-bench clears its KV cache
  // between repetitions).
  void Rewind(int s) { lens[s] = 0; }
  void Clear() {
    tokens.clear();
    positions.clear();
    slots.clear();
    owner.clear();
    rows.clear();
  }
  void Feed(int s, int32_t tok, bool logits) {
    const int32_t pos = lens[s]++;
    if (pos / bs >= static_cast<int64_t>(tables[s].size())) tables[s].push_back(next_block++);
    tokens.push_back(tok);
    positions.push_back(pos);
    slots.push_back(tables[s][pos / bs] * bs + pos % bs);
    owner.push_back(s);
    if (logits) rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
  }
  ForwardBatch Batch() {
    att.clear();
    for (size_t i = 0; i < tokens.size(); ++i) att.push_back({tables[owner[i]], positions[i] + 1});
    return {tokens, positions, slots, att, rows};
  }
};

// Mean and sample standard deviation of f.reps timed runs after one untimed warm-up.
struct Spread {
  double mean = 0, sd = 0;
};

template <typename Run>
Spread Repeat(int reps, Run run) {
  run();  // warm-up: first touch of scratch buffers and KV pages, as llama-bench's warm-up run
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) v.push_back(run());
  Spread s;
  for (double x : v) s.mean += x / reps;
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = reps > 1 ? std::sqrt(s.sd / (reps - 1)) : 0.0;
  return s;
}

void Check(const Status& s) {
  if (!s.ok()) Die(std::string(s.message()));
}

void RunFormat(const Flags& f, const Checkpoint& ckpt, kernels::WeightFormat fmt) {
  const auto t0 = Clock::now();
  StatusOr<std::unique_ptr<LlamaModel>> m = LlamaModel::Load(ckpt, {.weights = fmt});
  if (!m.ok()) Die(std::string(m.status().message()));
  const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  LlamaModel& model = **m;
  kernels::ThreadPool pool(f.threads);
  const int64_t V = model.vocab_size();
  const int64_t blocks_needed = (f.prompt / 16 + 2) + (f.decode / 16 + 3) + f.streams * ((16 + f.stream_tokens) / 16 + 2);
  StatusOr<KvCache> cache = KvCache::Create(model.config(), blocks_needed, 16, DType::kF16);
  if (!cache.ok()) Die(std::string(cache.status().message()));
  std::vector<float> logits(static_cast<size_t>(V) * std::max(1, f.streams));
  Batcher b;

  // Prompt processing: a warm-up, then f.reps timed runs.
  const int ps = b.Add();
  auto prompt_run = [&] {
    b.Rewind(ps);
    const auto p0 = Clock::now();
    for (int done = 0; done < f.prompt;) {
      const int n = std::min(512, f.prompt - done);
      b.Clear();
      for (int i = 0; i < n; ++i) b.Feed(ps, (done + i) * 7 % 50000, done + i == f.prompt - 1);
      Check(model.Forward(pool, b.Batch(), *cache, logits.data()));
      done += n;
    }
    return f.prompt / std::chrono::duration<double>(Clock::now() - p0).count();
  };
  const Spread pp = Repeat(f.reps, prompt_run);

  // Single-stream decode: a 16-token prompt (untimed), then f.decode steps of one token.
  const int ds = b.Add();
  auto decode_run = [&] {
    b.Rewind(ds);
    b.Clear();
    for (int i = 0; i < 16; ++i) b.Feed(ds, 100 + i, i == 15);
    Check(model.Forward(pool, b.Batch(), *cache, logits.data()));
    int32_t next = static_cast<int32_t>(kernels::Argmax(logits.data(), V));
    const auto d0 = Clock::now();
    for (int i = 0; i < f.decode; ++i) {
      b.Clear();
      b.Feed(ds, next, true);
      Check(model.Forward(pool, b.Batch(), *cache, logits.data()));
      next = static_cast<int32_t>(kernels::Argmax(logits.data(), V));
    }
    return f.decode / std::chrono::duration<double>(Clock::now() - d0).count();
  };
  const Spread tg = f.decode > 0 ? Repeat(f.reps, decode_run) : Spread{};

  // Batched decode: all streams' prompts first (untimed), then one token each per step.
  std::vector<int> ids;
  b.Clear();
  for (int s = 0; s < f.streams; ++s) {
    ids.push_back(b.Add());
    for (int i = 0; i < 16; ++i) b.Feed(ids.back(), 200 + s * 16 + i, i == 15);
  }
  Check(model.Forward(pool, b.Batch(), *cache, logits.data()));
  std::vector<int32_t> nexts(static_cast<size_t>(f.streams));
  for (int s = 0; s < f.streams; ++s) nexts[s] = static_cast<int32_t>(kernels::Argmax(logits.data() + s * V, V));
  const auto b0 = Clock::now();
  for (int t = 0; t < f.stream_tokens; ++t) {
    b.Clear();
    for (int s = 0; s < f.streams; ++s) b.Feed(ids[s], nexts[s], true);
    Check(model.Forward(pool, b.Batch(), *cache, logits.data()));
    for (int s = 0; s < f.streams; ++s) nexts[s] = static_cast<int32_t>(kernels::Argmax(logits.data() + s * V, V));
  }
  const double agg = static_cast<double>(f.streams) * f.stream_tokens /
                     std::chrono::duration<double>(Clock::now() - b0).count();
  std::printf("%-5s load %.2f s  weights %.0f MiB  pp%d %7.1f ± %4.1f t/s  tg%d %6.1f ± %4.1f t/s  %d streams %7.1f t/s  peak RSS %.0f MiB\n",
              kernels::WeightFormatName(fmt), load_s, model.weight_bytes() / 1048576.0, f.prompt, pp.mean, pp.sd,
              f.decode, tg.mean, tg.sd, f.streams, agg, PeakRssMiB());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--threads") f.threads = std::stoi(val());
    else if (a == "--formats") f.formats = val();
    else if (a == "--prompt") f.prompt = std::stoi(val());
    else if (a == "--decode") f.decode = std::stoi(val());
    else if (a == "--streams") f.streams = std::stoi(val());
    else if (a == "--stream-tokens") f.stream_tokens = std::stoi(val());
    else if (a == "--reps") f.reps = std::stoi(val());
    else if (a == "--model-dir") f.model_dir = val();
    else Die("unknown flag " + a);
  }
  if (f.reps < 1) Die("--reps must be at least 1");
  const std::filesystem::path dir = f.model_dir;
  if (!std::filesystem::exists(dir / "config.json")) {
    InitCheckpointOptions o;
    o.config = SmolLm2_135M();
    o.dtype = DType::kF16;
    o.seed = 1;
    o.tokenizer_json = std::string(AICLOUD_SOURCE_DIR) + "/data/tokenizers/gpt2/tokenizer.json";
    std::printf("writing a random SmolLM2-135M-shaped checkpoint to %s\n", dir.c_str());
    StatusOr<ModelConfig> w = InitRandomCheckpoint(dir, o);
    if (!w.ok()) Die(std::string(w.status().message()));
  }
  const auto t0 = Clock::now();
  StatusOr<std::unique_ptr<Checkpoint>> ck = Checkpoint::Open(dir);
  if (!ck.ok()) Die(std::string(ck.status().message()));
  std::printf("checkpoint %s: %.1fM parameters, opened in %.1f ms; %d threads\n", dir.c_str(),
              (*ck)->parameter_count() / 1e6,
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count(), f.threads);
  for (size_t pos = 0; pos <= f.formats.size();) {
    size_t end = f.formats.find(',', pos);
    if (end == std::string::npos) end = f.formats.size();
    const std::string name = f.formats.substr(pos, end - pos);
    pos = end + 1;
    if (name.empty()) continue;
    kernels::WeightFormat fmt;
    if (name == "f32") fmt = kernels::WeightFormat::kF32;
    else if (name == "f16") fmt = kernels::WeightFormat::kF16;
    else if (name == "bf16") fmt = kernels::WeightFormat::kBF16;
    else if (name == "q8" || name == "int8") fmt = kernels::WeightFormat::kQ8;
    else Die("unknown format " + name + " (f32, f16, bf16, q8)");
    RunFormat(f, **ck, fmt);
  }
  return 0;
}
