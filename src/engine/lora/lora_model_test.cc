// LlamaModel with adapters: the runner's forward pass, with ApplyLora called after each of its
// matrix products, against the PyTorch fixtures of tests/engine/lora_reference.py, and mixed
// steps against single-sequence ones.
//
// Built once the runner has ForwardBatch::adapters and LlamaModel::SetLoras: add this file to
// engine_lora_test's SOURCES and aicloud::engine_runner to its LIBS (src/engine/lora/CMakeLists.txt).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/kernels/ops.h"
#include "engine/lora/lora_test_models.h"
#include "engine/lora/registry.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_test_util.h"
#include "engine/runner/llama.h"

namespace aicloud::engine {
namespace {

namespace fs = std::filesystem;
using kernels::ThreadPool;
using nlohmann::json;

using testing::TempDir;  // engine/model/model_test_util.h

// Sequences with consecutive blocks, each with an adapter id; builds a step's ForwardBatch.
class Seqs {
 public:
  explicit Seqs(int64_t block_size) : bs_(block_size) {}
  int Add(int32_t adapter_id) {
    tables_.emplace_back();
    lens_.push_back(0);
    adapter_of_.push_back(adapter_id);
    return static_cast<int>(tables_.size()) - 1;
  }
  // Appends this step's tokens of sequence s.
  void Feed(int s, const std::vector<int32_t>& toks) {
    for (int32_t t : toks) {
      const int32_t pos = lens_[static_cast<size_t>(s)]++;
      auto& table = tables_[static_cast<size_t>(s)];
      if (pos / bs_ >= static_cast<int64_t>(table.size())) table.push_back(next_block_++);
      tokens.push_back(t);
      positions.push_back(pos);
      slots.push_back(table[static_cast<size_t>(pos / bs_)] * bs_ + pos % bs_);
      owner.push_back(s);
      adapters.push_back(adapter_of_[static_cast<size_t>(s)]);
    }
    last_row[s] = static_cast<int32_t>(tokens.size()) - 1;
  }
  ForwardBatch Batch(const std::vector<int32_t>& logit_rows) {
    attention.clear();
    for (size_t i = 0; i < tokens.size(); ++i) {
      attention.push_back({tables_[static_cast<size_t>(owner[i])], positions[i] + 1});
    }
    rows_ = logit_rows;
    return {tokens, positions, slots, attention, rows_, adapters};
  }
  void Clear() {
    tokens.clear();
    positions.clear();
    slots.clear();
    owner.clear();
    adapters.clear();
    last_row.clear();
  }
  std::vector<int32_t> tokens, positions, owner, adapters;
  std::vector<int64_t> slots;
  std::vector<kernels::AttentionToken> attention;
  std::map<int, int32_t> last_row;

 private:
  int64_t bs_;
  int32_t next_block_ = 0;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<int32_t> lens_, adapter_of_, rows_;
};

json ReadFixture(const std::string& file) {
  std::ifstream in(kLoraTestSource + "/tests/engine/data/" + file);
  EXPECT_TRUE(in.good()) << "missing fixture tests/engine/data/" << file;
  json j;
  if (in) in >> j;
  return j;
}

class LlamaModelLora : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path root = LoraTestRoot(tmp_.path());
    InitCheckpointOptions o = LoraTestBaseModel();
    o.overwrite = true;
    StatusOr<ModelConfig> c = InitRandomCheckpoint(root / "plain", o);
    ASSERT_TRUE(c.ok()) << c.status();
    StatusOr<std::unique_ptr<Checkpoint>> ck = Checkpoint::Open(root / "plain");
    ASSERT_TRUE(ck.ok()) << ck.status();
    StatusOr<std::unique_ptr<LlamaModel>> m = LlamaModel::Load(**ck, {});
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    StatusOr<std::unique_ptr<LoraRegistry>> reg =
        LoraRegistry::Create(*c, {.base_model = "plain", .max_loras = 2, .max_lora_rank = 16});
    ASSERT_TRUE(reg.ok());
    registry_ = std::move(*reg);
    for (const LoraTestAdapter& a : LoraTestAdapters()) {
      InitLoraOptions lo = a.options;
      lo.overwrite = true;
      ASSERT_TRUE(InitRandomLora(root / a.name, *c, lo).ok());
      ASSERT_TRUE(registry_->Load(a.name, root / a.name).ok());
      StatusOr<LoraPin> pin = registry_->Acquire(a.name);
      ASSERT_TRUE(pin.ok());
      pins_.push_back(std::move(*pin));
    }
    ASSERT_TRUE(model_->SetLoras(registry_.get()).ok());
  }

  // Logits of every position of `prompt` run alone under `adapter_id`.
  std::vector<float> Prefill(ThreadPool& pool, const std::vector<int32_t>& prompt, int32_t adapter_id) {
    StatusOr<KvCache> cache = KvCache::Create(model_->config(), 64, 16, DType::kF32);
    EXPECT_TRUE(cache.ok());
    Seqs s(16);
    s.Feed(s.Add(adapter_id), prompt);
    std::vector<int32_t> rows(prompt.size());
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int32_t>(i);
    std::vector<float> logits(prompt.size() * static_cast<size_t>(model_->vocab_size()));
    const Status st = model_->Forward(pool, s.Batch(rows), *cache, logits.data());
    EXPECT_TRUE(st.ok()) << st;
    return logits;
  }

  // Greedy continuation with the KV cache: the prompt in one step, then a token per step.
  std::vector<int32_t> Greedy(ThreadPool& pool, const std::vector<int32_t>& prompt, int32_t adapter_id, int n) {
    StatusOr<KvCache> cache = KvCache::Create(model_->config(), 64, 16, DType::kF32);
    Seqs s(16);
    const int id = s.Add(adapter_id);
    std::vector<int32_t> out, feed = prompt;
    std::vector<float> logits(static_cast<size_t>(model_->vocab_size()));
    for (int i = 0; i < n; ++i) {
      s.Clear();
      s.Feed(id, feed);
      const Status st = model_->Forward(pool, s.Batch({s.last_row[id]}), *cache, logits.data());
      EXPECT_TRUE(st.ok()) << st;
      const int32_t next = static_cast<int32_t>(kernels::Argmax(logits.data(), model_->vocab_size()));
      out.push_back(next);
      feed = {next};
    }
    return out;
  }

  TempDir tmp_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<LoraRegistry> registry_;
  std::vector<LoraPin> pins_;  // lora_a, lora_b
};

// The three prompts (base, a, b) as one step, each against its fixture; greedy with the cache.
TEST_F(LlamaModelLora, MatchesPyTorchReference) {
  ThreadPool pool(2);
  struct Seq {
    std::string fixture;
    int32_t adapter_id;
  };
  const Seq seqs[] = {{"reference_plain.json", kBaseAdapterId},
                      {"lora_plain_a.json", pins_[0].adapter_id()},
                      {"lora_plain_b.json", pins_[1].adapter_id()}};
  const std::vector<int32_t> prompt = LoraTestPrompt();
  StatusOr<KvCache> cache = KvCache::Create(model_->config(), 64, 16, DType::kF32);
  ASSERT_TRUE(cache.ok());
  Seqs s(16);
  std::vector<int32_t> rows;
  for (const Seq& q : seqs) {
    const int id = s.Add(q.adapter_id);
    s.Feed(id, prompt);
  }
  for (int32_t r = 0; r < static_cast<int32_t>(s.tokens.size()); ++r) rows.push_back(r);
  const int64_t V = model_->vocab_size();
  std::vector<float> logits(rows.size() * static_cast<size_t>(V));
  ASSERT_TRUE(model_->Forward(pool, s.Batch(rows), *cache, logits.data()).ok());
  for (size_t q = 0; q < 3; ++q) {
    SCOPED_TRACE(seqs[q].fixture);
    const json fx = ReadFixture(seqs[q].fixture);
    ASSERT_TRUE(fx.contains("positions"));
    const auto probes = fx["probe_ids"].get<std::vector<int64_t>>();
    double worst = 0;
    for (size_t p = 0; p < prompt.size(); ++p) {
      const float* row = logits.data() + (q * prompt.size() + p) * static_cast<size_t>(V);
      const json& want = fx["positions"][p];
      const double scale = std::max(std::abs(want["top"][0][1].get<double>()), 1e-6);
      for (size_t k = 0; k < probes.size(); ++k) {
        const double err = std::abs(row[probes[k]] - want["probe_logits"][k].get<double>()) / scale;
        worst = std::max(worst, err);
        ASSERT_LE(err, 1e-4) << "position " << p << " token " << probes[k];
      }
      for (const json& t : want["top"]) {
        const double err = std::abs(row[t[0].get<int64_t>()] - t[1].get<double>()) / scale;
        worst = std::max(worst, err);
        ASSERT_LE(err, 1e-4) << "position " << p << " top token " << t[0];
      }
    }
    std::printf("[ %s ] worst relative logit error vs the PyTorch reference: %.2e\n", seqs[q].fixture.c_str(), worst);
    const auto want_greedy = fx["greedy"].get<std::vector<int32_t>>();
    EXPECT_EQ(Greedy(pool, prompt, seqs[q].adapter_id, static_cast<int>(want_greedy.size())), want_greedy);
  }
}

// A sequence's logits do not depend on the adapters of the other sequences in its step (up to
// the base products' own batch-size rounding, as in the runner's BatchedEqualsUnbatched).
TEST_F(LlamaModelLora, MixedStepEqualsSingleSequences) {
  ThreadPool pool(2);
  const int64_t V = model_->vocab_size();
  const std::vector<int32_t> a = LoraTestPrompt();
  const std::vector<int32_t> b = {464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 383};
  const int32_t ida = pins_[0].adapter_id(), idb = pins_[1].adapter_id();
  const std::vector<float> alone_a = Prefill(pool, a, ida);
  const std::vector<float> alone_b = Prefill(pool, b, idb);
  const std::vector<float> alone_b_base = Prefill(pool, b, kBaseAdapterId);

  StatusOr<KvCache> cache = KvCache::Create(model_->config(), 64, 16, DType::kF32);
  Seqs s(16);
  const int sa = s.Add(ida), sb = s.Add(idb), sc = s.Add(kBaseAdapterId);
  s.Feed(sb, b);
  s.Feed(sa, a);
  s.Feed(sc, b);
  std::vector<float> logits(3 * static_cast<size_t>(V));
  ASSERT_TRUE(model_->Forward(pool, s.Batch({s.last_row[sa], s.last_row[sb], s.last_row[sc]}), *cache, logits.data()).ok());
  auto near = [&](const float* got, const float* want, const char* what) {
    float worst = 0, scale = 0;
    for (int64_t v = 0; v < V; ++v) {
      worst = std::max(worst, std::abs(got[v] - want[v]));
      scale = std::max(scale, std::abs(want[v]));
    }
    EXPECT_LE(worst, 2e-5f * scale) << what;
  };
  near(logits.data(), alone_a.data() + (a.size() - 1) * V, "a next to b and the base model");
  near(logits.data() + V, alone_b.data() + (b.size() - 1) * V, "b next to a and the base model");
  near(logits.data() + 2 * V, alone_b_base.data() + (b.size() - 1) * V, "the base model next to two adapters");
}

// Adapter ids of 0 everywhere, or no span at all, are the base model, bit for bit.
TEST_F(LlamaModelLora, BaseIdsAreTheBaseModel) {
  ThreadPool pool(2);
  const std::vector<int32_t> prompt = LoraTestPrompt();
  const std::vector<float> with_ids = Prefill(pool, prompt, kBaseAdapterId);
  ASSERT_TRUE(model_->SetLoras(nullptr).ok());
  const std::vector<float> without = Prefill(pool, prompt, kBaseAdapterId);
  EXPECT_EQ(with_ids, without);
}

TEST_F(LlamaModelLora, BadAdapterIdsAreRefused) {
  ThreadPool pool(1);
  StatusOr<KvCache> cache = KvCache::Create(model_->config(), 4, 16, DType::kF32);
  ASSERT_TRUE(cache.ok());
  std::vector<float> logits(static_cast<size_t>(model_->vocab_size()));
  const std::vector<int32_t> table = {0};
  const std::vector<int32_t> tokens = {5, 6}, positions = {0, 1}, rows = {1};
  const std::vector<int64_t> slots = {0, 1};
  const std::vector<kernels::AttentionToken> att = {{table, 1}, {table, 2}};
  const int32_t ida = pins_[0].adapter_id();
  struct Case {
    std::string name;
    std::vector<int32_t> adapters;
    StatusCode code;
    std::string want;
  };
  const Case cases[] = {
      {"span length", {ida}, StatusCode::kInvalidArgument, "1 adapter ids"},
      {"unknown id", {0, 12345}, StatusCode::kFailedPrecondition, "adapter id 12345"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Status st = model_->Forward(pool, {tokens, positions, slots, att, rows, c.adapters}, *cache, logits.data());
    EXPECT_EQ(st.code(), c.code) << st;
    EXPECT_NE(st.message().find(c.want), std::string::npos) << st;
  }
  // A released adapter can no longer be named.
  const int32_t idb = pins_[1].adapter_id();
  pins_[1].Reset();
  const std::vector<int32_t> with_b = {idb, 0};
  EXPECT_EQ(model_->Forward(pool, {tokens, positions, slots, att, rows, with_b}, *cache, logits.data()).code(),
            StatusCode::kFailedPrecondition);
  // Without a registry only base ids are accepted.
  ASSERT_TRUE(model_->SetLoras(nullptr).ok());
  const std::vector<int32_t> with_a = {0, ida};
  const Status none = model_->Forward(pool, {tokens, positions, slots, att, rows, with_a}, *cache, logits.data());
  EXPECT_EQ(none.code(), StatusCode::kFailedPrecondition) << none;
  EXPECT_NE(none.message().find("has no adapters"), std::string::npos) << none;
  // A registry for another model shape is refused.
  ModelConfig other = model_->config();
  other.num_hidden_layers = 3;
  StatusOr<std::unique_ptr<LoraRegistry>> wrong = LoraRegistry::Create(other, {.base_model = "x"});
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(model_->SetLoras(wrong->get()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace aicloud::engine
