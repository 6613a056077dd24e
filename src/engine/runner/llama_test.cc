#include "engine/runner/llama.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/kernels/ops.h"
#include "engine/model/model_test_util.h"
#include "engine/model/random_checkpoint.h"
#include "engine/model/test_models.h"

namespace aicloud::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kSource = AICLOUD_SOURCE_DIR;

// The two reference models. Their fixtures in tests/engine/data/ were produced by
// tests/engine/llama_reference.py (PyTorch, float32) from the checkpoints these options write:
//   AICLOUD_KEEP_MODELS=/tmp/ref build/src/engine/runner/engine_runner_test
//       --gtest_filter='*MatchesReference*'                          (one command line)
//   /usr/bin/python3 tests/engine/llama_reference.py /tmp/ref/plain --prompt <Prompt()>
//       --greedy 12 > tests/engine/data/reference_plain.json        (and the same for llama3)
struct RefModel {
  std::string name;
  InitCheckpointOptions options;
};

RefModel Plain() { return {"plain", PlainTestModel(kSource)}; }

RefModel Llama3() {
  RefModel m{"llama3", {}};
  ModelConfig& c = m.options.config;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.hidden_size = 96;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 160;
  c.max_position_embeddings = 2048;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000;
  c.rope_scaling.type = RopeScaling::Type::kLlama3;
  c.rope_scaling.factor = 8;
  c.rope_scaling.low_freq_factor = 1;
  c.rope_scaling.high_freq_factor = 4;
  c.rope_scaling.original_max_position_embeddings = 64;  // small, so all three bands occur
  c.tie_word_embeddings = true;
  m.options.dtype = DType::kBF16;
  m.options.seed = 11;
  m.options.init_std = 0.1;
  m.options.tokenizer_json = kSource + "/data/tokenizers/gpt2/tokenizer.json";
  return m;
}

std::vector<int32_t> Prompt() { return {15496, 11, 995, 0, 314, 716, 257, 1332, 13, 40, 588, 50256, 3}; }

using testing::TempDir;  // engine/model/model_test_util.h

// Writes the model (into AICLOUD_KEEP_MODELS/<name> when set, to regenerate fixtures) and loads it.
std::unique_ptr<LlamaModel> LoadRef(const RefModel& m, const fs::path& tmp, ModelLoadOptions lo = {}) {
  fs::path dir = tmp / m.name;
  if (const char* keep = std::getenv("AICLOUD_KEEP_MODELS")) dir = fs::path(keep) / m.name;
  InitCheckpointOptions o = m.options;
  o.overwrite = true;
  StatusOr<ModelConfig> c = InitRandomCheckpoint(dir, o);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return nullptr;
  StatusOr<std::unique_ptr<Checkpoint>> ck = Checkpoint::Open(dir);
  EXPECT_TRUE(ck.ok()) << ck.status();
  if (!ck.ok()) return nullptr;
  StatusOr<std::unique_ptr<LlamaModel>> model = LlamaModel::Load(**ck, lo);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

// A minimal stand-in for the block manager: sequences get consecutive blocks.
class Seqs {
 public:
  Seqs(int64_t block_size, int64_t blocks) : bs_(block_size), blocks_(blocks) {}
  int Add() {
    tables_.emplace_back();
    lens_.push_back(0);
    return static_cast<int>(tables_.size()) - 1;
  }
  // Appends this step's tokens of sequence s to the batch being built.
  void Feed(int s, const std::vector<int32_t>& toks) {
    for (int32_t t : toks) {
      const int32_t pos = lens_[s]++;
      if (pos / bs_ >= static_cast<int64_t>(tables_[s].size())) tables_[s].push_back(next_block_++);
      tokens.push_back(t);
      positions.push_back(pos);
      slots.push_back(tables_[s][pos / bs_] * bs_ + pos % bs_);
      owner.push_back(s);
    }
    rows_of_seq_last[s] = static_cast<int32_t>(tokens.size()) - 1;
  }
  ForwardBatch Batch(const std::vector<int32_t>& logit_rows) {
    attention.clear();
    for (size_t i = 0; i < tokens.size(); ++i) {
      attention.push_back({tables_[owner[i]], positions[i] + 1});
    }
    logit_rows_ = logit_rows;
    return {tokens, positions, slots, attention, logit_rows_};
  }
  void Clear() {
    tokens.clear();
    positions.clear();
    slots.clear();
    owner.clear();
    rows_of_seq_last.clear();
  }
  std::vector<int32_t> tokens, positions, owner;
  std::vector<int64_t> slots;
  std::vector<kernels::AttentionToken> attention;
  std::map<int, int32_t> rows_of_seq_last;

 private:
  int64_t bs_, blocks_;
  int32_t next_block_ = 0;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<int32_t> lens_;
  std::vector<int32_t> logit_rows_;
};

json ReadFixture(const std::string& name) {
  std::ifstream in(kSource + "/tests/engine/data/reference_" + name + ".json");
  EXPECT_TRUE(in.good()) << "missing fixture tests/engine/data/reference_" << name << ".json";
  json j;
  if (in) in >> j;
  return j;
}

// All prompt positions in one step; logits of every row.
std::vector<float> PrefillLogits(LlamaModel& m, kernels::ThreadPool& pool, const std::vector<int32_t>& prompt,
                                 DType kv = DType::kF32) {
  StatusOr<KvCache> cache = KvCache::Create(m.config(), 64, 16, kv);
  EXPECT_TRUE(cache.ok());
  Seqs s(16, 64);
  s.Feed(s.Add(), prompt);
  std::vector<int32_t> rows(prompt.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int32_t>(i);
  std::vector<float> logits(prompt.size() * static_cast<size_t>(m.vocab_size()));
  Status st = m.Forward(pool, s.Batch(rows), *cache, logits.data());
  EXPECT_TRUE(st.ok()) << st;
  return logits;
}

// Greedy continuation with the KV cache: the prompt in one step, then one token per step.
std::vector<int32_t> Greedy(LlamaModel& m, kernels::ThreadPool& pool, const std::vector<int32_t>& prompt, int n) {
  StatusOr<KvCache> cache = KvCache::Create(m.config(), 64, 16, DType::kF32);
  Seqs s(16, 64);
  const int id = s.Add();
  std::vector<int32_t> out, feed = prompt;
  std::vector<float> logits(static_cast<size_t>(m.vocab_size()));
  for (int i = 0; i < n; ++i) {
    s.Clear();
    s.Feed(id, feed);
    Status st = m.Forward(pool, s.Batch({s.rows_of_seq_last[id]}), *cache, logits.data());
    EXPECT_TRUE(st.ok()) << st;
    const int32_t next = static_cast<int32_t>(kernels::Argmax(logits.data(), m.vocab_size()));
    out.push_back(next);
    feed = {next};
  }
  return out;
}

TEST(LlamaModel, MatchesReference) {
  TempDir tmp;
  kernels::ThreadPool pool(2);
  for (const RefModel& ref : {Plain(), Llama3()}) {
    SCOPED_TRACE(ref.name);
    std::unique_ptr<LlamaModel> m = LoadRef(ref, tmp.path());
    ASSERT_NE(m, nullptr);
    const json fx = ReadFixture(ref.name);
    ASSERT_TRUE(fx.contains("positions"));
    const std::vector<int32_t> prompt = fx["prompt"].get<std::vector<int32_t>>();
    ASSERT_EQ(prompt, Prompt());
    const std::vector<float> logits = PrefillLogits(*m, pool, prompt);
    const auto probes = fx["probe_ids"].get<std::vector<int64_t>>();
    const int64_t V = m->vocab_size();
    double worst = 0;
    for (size_t p = 0; p < prompt.size(); ++p) {
      const float* row = logits.data() + p * static_cast<size_t>(V);
      const json& want = fx["positions"][p];
      // Tolerance relative to the row's largest logit (the reference's top-1).
      const double scale = std::abs(want["top"][0][1].get<double>());
      for (size_t k = 0; k < probes.size(); ++k) {
        const double w = want["probe_logits"][k].get<double>();
        const double err = std::abs(row[probes[k]] - w) / std::max(scale, 1e-6);
        worst = std::max(worst, err);
        ASSERT_LE(err, 1e-4) << "position " << p << " token " << probes[k] << ": " << row[probes[k]]
                             << " vs reference " << w;
      }
      for (const json& t : want["top"]) {
        const double err = std::abs(row[t[0].get<int64_t>()] - t[1].get<double>()) / std::max(scale, 1e-6);
        worst = std::max(worst, err);
        ASSERT_LE(err, 1e-4) << "position " << p << " top token " << t[0];
      }
      double sum = 0, sumsq = 0;
      for (int64_t v = 0; v < V; ++v) {
        sum += row[v];
        sumsq += static_cast<double>(row[v]) * row[v];
      }
      EXPECT_NEAR(sum, want["sum"].get<double>(), 1e-4 * scale * std::sqrt(static_cast<double>(V)));
      EXPECT_NEAR(sumsq, want["sumsq"].get<double>(), 1e-4 * want["sumsq"].get<double>());
    }
    std::printf("[ %s ] worst relative logit error vs the PyTorch reference: %.2e\n", ref.name.c_str(), worst);
    const auto want_greedy = fx["greedy"].get<std::vector<int32_t>>();
    EXPECT_EQ(Greedy(*m, pool, prompt, static_cast<int>(want_greedy.size())), want_greedy);
  }
}

// A sequence's logits do not depend on what else is in the step, nor on how its prompt is
// chunked across steps.
TEST(LlamaModel, BatchedEqualsUnbatched) {
  TempDir tmp;
  kernels::ThreadPool pool(2);
  std::unique_ptr<LlamaModel> m = LoadRef(Plain(), tmp.path());
  ASSERT_NE(m, nullptr);
  const int64_t V = m->vocab_size();
  const std::vector<int32_t> a = Prompt();
  const std::vector<int32_t> b = {464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 383};
  const std::vector<float> alone_a = PrefillLogits(*m, pool, a);
  const std::vector<float> alone_b = PrefillLogits(*m, pool, b);

  // Both prompts in one step, b first; then a chunked 5 + 8 while b decodes.
  StatusOr<KvCache> cache = KvCache::Create(m->config(), 64, 16, DType::kF32);
  Seqs s(16, 64);
  const int sa = s.Add(), sb = s.Add();
  s.Feed(sb, b);
  s.Feed(sa, std::vector<int32_t>(a.begin(), a.begin() + 5));
  std::vector<int32_t> rows = {s.rows_of_seq_last[sb], s.rows_of_seq_last[sa]};
  std::vector<float> logits(2 * static_cast<size_t>(V));
  ASSERT_TRUE(m->Forward(pool, s.Batch(rows), *cache, logits.data()).ok());
  auto near = [&](const float* got, const float* want, const char* what) {
    float worst = 0, scale = 0;
    for (int64_t v = 0; v < V; ++v) {
      worst = std::max(worst, std::abs(got[v] - want[v]));
      scale = std::max(scale, std::abs(want[v]));
    }
    EXPECT_LE(worst, 2e-5f * scale) << what;
  };
  near(logits.data(), alone_b.data() + (b.size() - 1) * V, "b batched with a's first chunk");
  near(logits.data() + V, alone_a.data() + 4 * V, "a's first chunk batched with b");
  s.Clear();
  s.Feed(sb, {198});
  s.Feed(sa, std::vector<int32_t>(a.begin() + 5, a.end()));
  rows = {s.rows_of_seq_last[sa]};
  ASSERT_TRUE(m->Forward(pool, s.Batch(rows), *cache, logits.data()).ok());
  near(logits.data(), alone_a.data() + (a.size() - 1) * V, "a's second chunk next to b's decode");
}

TEST(LlamaModel, QuantizedAndHalfWeightsStayClose) {
  TempDir tmp;
  kernels::ThreadPool pool(2);
  std::unique_ptr<LlamaModel> f32 = LoadRef(Plain(), tmp.path());
  ASSERT_NE(f32, nullptr);
  const std::vector<float> ref = PrefillLogits(*f32, pool, Prompt());
  struct Case {
    kernels::WeightFormat format;
    DType kv;
    double max_rel;  // of the largest |logit| of the row
  };
  for (const Case& c : {Case{kernels::WeightFormat::kF16, DType::kF32, 2e-3},
                        Case{kernels::WeightFormat::kBF16, DType::kF32, 2e-2},
                        Case{kernels::WeightFormat::kQ8, DType::kF32, 6e-2},  // int8 activations too
                        Case{kernels::WeightFormat::kF32, DType::kF16, 2e-3}}) {
    SCOPED_TRACE(std::string(kernels::WeightFormatName(c.format)) + " weights, KV " + std::string(DTypeName(c.kv)));
    std::unique_ptr<LlamaModel> m = LoadRef(Plain(), tmp.path(), {.weights = c.format});
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->matrix_format(), c.format);
    const std::vector<float> got = PrefillLogits(*m, pool, Prompt(), c.kv);
    const int64_t V = m->vocab_size();
    for (size_t p = 0; p < Prompt().size(); ++p) {
      float worst = 0, scale = 0;
      for (int64_t v = 0; v < V; ++v) {
        worst = std::max(worst, std::abs(got[p * V + v] - ref[p * V + v]));
        scale = std::max(scale, std::abs(ref[p * V + v]));
      }
      EXPECT_LE(worst, c.max_rel * scale) << "position " << p;
    }
  }
  std::unique_ptr<LlamaModel> q8 = LoadRef(Plain(), tmp.path(), {.weights = kernels::WeightFormat::kQ8});
  ASSERT_NE(q8, nullptr);
  EXPECT_LT(q8->weight_bytes(), f32->weight_bytes() / 3);
}

TEST(LlamaModel, BadBatchesAreRefused) {
  TempDir tmp;
  kernels::ThreadPool pool(1);
  std::unique_ptr<LlamaModel> m = LoadRef(Plain(), tmp.path());
  ASSERT_NE(m, nullptr);
  StatusOr<KvCache> cache = KvCache::Create(m->config(), 4, 16, DType::kF32);
  ASSERT_TRUE(cache.ok());
  std::vector<float> logits(static_cast<size_t>(m->vocab_size()));
  const std::vector<int32_t> table = {0};
  struct Case {
    std::string name;
    std::vector<int32_t> tokens, positions;
    std::vector<int64_t> slots;
    int32_t context;
    std::vector<int32_t> rows;
    std::string want;
  };
  const Case cases[] = {
      {"token past vocab", {50257}, {0}, {0}, 1, {0}, "outside the vocabulary"},
      {"negative token", {-1}, {0}, {0}, 1, {0}, "outside the vocabulary"},
      {"slot past cache", {5}, {0}, {64}, 1, {0}, "outside the cache"},
      {"span lengths", {5, 6}, {0}, {0}, 1, {0}, "2 tokens but 1 positions"},
      {"logit row", {5}, {0}, {0}, 1, {3}, "logit row 3"},
      {"context past table", {5}, {0}, {0}, 17, {0}, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<kernels::AttentionToken> att(c.tokens.size(), {table, c.context});
    ForwardBatch b{c.tokens, c.positions, c.slots, att, c.rows};
    Status st = m->Forward(pool, b, *cache, logits.data());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(c.want), std::string::npos) << st;
  }
  EXPECT_FALSE(KvCache::Create(m->config(), 0, 16, DType::kF32).ok());
  EXPECT_FALSE(KvCache::Create(m->config(), 4, 16, DType::kBF16).ok());
}

}  // namespace
}  // namespace aicloud::engine
