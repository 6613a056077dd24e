// The adapters end to end against PyTorch, before the runner calls ApplyLora: a Llama forward
// pass written here from the kernels, shaped like LlamaModel::Run (fused q|k|v and gate|up
// products, ApplyLora right after each product), runs three sequences (the base model, adapter
// "a", adapter "b") interleaved token by token in one step, and each sequence's logits must match
// its fixture from tests/engine/lora_reference.py (and the base one reference_plain.json from
// llama_reference.py). Adapters go through the whole path: InitRandomLora writes PEFT files,
// LoraRegistry loads and pins them, Resolve builds the step's LoraBatch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/kernels/kernels.h"
#include "engine/lora/apply.h"
#include "engine/lora/lora_test_models.h"
#include "engine/lora/registry.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_test_util.h"

namespace aicloud::engine {
namespace {

namespace fs = std::filesystem;
using kernels::Matrix;
using kernels::ThreadPool;
using kernels::VectorView;
using kernels::WeightView;
using nlohmann::json;

using testing::TempDir;  // engine/model/model_test_util.h

WeightView ViewOf(const TensorView& t) {
  return {kernels::WeightFormatOf(t.dtype), t.shape[0], t.shape.size() > 1 ? t.shape[1] : 1, t.data};
}

// F32 weights only (the fixture model's); attention dense over the step's own tokens.
class MiniLlama {
 public:
  explicit MiniLlama(const Checkpoint& ck) : c_(ck.config()) {
    auto f = [&](const std::string& n) { return TensorToFloat(*ck.Find(n)); };
    auto concat = [&](std::initializer_list<std::string> names) {
      std::vector<WeightView> parts;
      for (const std::string& n : names) parts.push_back(ViewOf(*ck.Find(n)));
      return std::move(*kernels::ConcatRows(parts, kernels::WeightFormat::kF32));
    };
    embed_ = f("model.embed_tokens.weight");
    head_ = *kernels::ConvertMatrix(ViewOf(*ck.Find("lm_head.weight")), kernels::WeightFormat::kF32);
    final_norm_ = f("model.norm.weight");
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      Layer L;
      L.attn_norm = f(p + "input_layernorm.weight");
      L.mlp_norm = f(p + "post_attention_layernorm.weight");
      L.qkv = concat({p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"});
      L.o = *kernels::ConvertMatrix(ViewOf(*ck.Find(p + "self_attn.o_proj.weight")), kernels::WeightFormat::kF32);
      L.gate_up = concat({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"});
      L.down = *kernels::ConvertMatrix(ViewOf(*ck.Find(p + "mlp.down_proj.weight")), kernels::WeightFormat::kF32);
      layers_.push_back(std::move(L));
    }
    inv_freq_ = RopeInverseFrequencies(c_);
  }

  // Logits [rows.size()][vocab] of a step: token i of sequence seq[i] at positions[i] attends to
  // the tokens of its sequence at positions <= its own.
  std::vector<float> Forward(ThreadPool& pool, const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                             const std::vector<int>& seq, const LoraBatch& lora, const std::vector<int32_t>& rows) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t H = c_.hidden_size, Q = c_.q_dim(), KV = c_.kv_dim(), I = c_.intermediate_size, W = Q + 2 * KV;
    const int64_t hd = c_.head_dim, heads = c_.num_attention_heads, group = heads / c_.num_key_value_heads;
    const float eps = static_cast<float>(c_.rms_norm_eps);
    std::vector<float> x(static_cast<size_t>(n * H)), h(x.size()), qkv(static_cast<size_t>(n * W)),
        attn(static_cast<size_t>(n * Q)), gu(static_cast<size_t>(n * 2 * I)), act(static_cast<size_t>(n * I));
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(embed_.begin() + tokens[static_cast<size_t>(t)] * H, H, x.begin() + t * H);
    }
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& L = layers_[l];
      const int64_t layer = static_cast<int64_t>(l);
      kernels::RmsNorm(x.data(), n, H, VectorView{DType::kF32, H, L.attn_norm.data()}, eps, h.data());
      kernels::MatMul(pool, h.data(), n, L.qkv.view(), qkv.data());
      ApplyLora(pool, lora, layer, QkvTargets(c_), h.data(), H, qkv.data(), W);
      Rope(qkv.data(), n, heads, W, positions);
      Rope(qkv.data() + Q, n, c_.num_key_value_heads, W, positions);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t hh = 0; hh < heads; ++hh) {
          const float* q = qkv.data() + i * W + hh * hd;
          const int64_t kvh = hh / group;
          std::vector<double> score(static_cast<size_t>(n), -INFINITY);
          double mx = -INFINITY;
          for (int64_t j = 0; j < n; ++j) {
            if (seq[static_cast<size_t>(j)] != seq[static_cast<size_t>(i)] ||
                positions[static_cast<size_t>(j)] > positions[static_cast<size_t>(i)]) {
              continue;
            }
            const float* k = qkv.data() + j * W + Q + kvh * hd;
            double s = 0;
            for (int64_t d = 0; d < hd; ++d) s += static_cast<double>(q[d]) * k[d];
            score[static_cast<size_t>(j)] = s / std::sqrt(static_cast<double>(hd));
            mx = std::max(mx, score[static_cast<size_t>(j)]);
          }
          std::vector<double> out(static_cast<size_t>(hd), 0.0);
          double sum = 0;
          for (int64_t j = 0; j < n; ++j) {
            if (score[static_cast<size_t>(j)] == -INFINITY) continue;
            const double p = std::exp(score[static_cast<size_t>(j)] - mx);
            sum += p;
            const float* v = qkv.data() + j * W + Q + KV + kvh * hd;
            for (int64_t d = 0; d < hd; ++d) out[static_cast<size_t>(d)] += p * v[d];
          }
          for (int64_t d = 0; d < hd; ++d) attn[static_cast<size_t>(i * Q + hh * hd + d)] = static_cast<float>(out[static_cast<size_t>(d)] / sum);
        }
      }
      kernels::MatMul(pool, attn.data(), n, L.o.view(), h.data());
      ApplyLora(pool, lora, layer, LoraModule::kO, attn.data(), Q, h.data(), H, 0);
      kernels::Add(x.data(), h.data(), x.data(), n * H);
      kernels::RmsNorm(x.data(), n, H, VectorView{DType::kF32, H, L.mlp_norm.data()}, eps, h.data());
      kernels::MatMul(pool, h.data(), n, L.gate_up.view(), gu.data());
      ApplyLora(pool, lora, layer, GateUpTargets(c_), h.data(), H, gu.data(), 2 * I);
      kernels::SiluMulRows(gu.data(), n, I, act.data());
      kernels::MatMul(pool, act.data(), n, L.down.view(), h.data());
      ApplyLora(pool, lora, layer, LoraModule::kDown, act.data(), I, h.data(), H, 0);
      kernels::Add(x.data(), h.data(), x.data(), n * H);
    }
    std::vector<float> fin(rows.size() * static_cast<size_t>(H));
    for (size_t r = 0; r < rows.size(); ++r) {
      kernels::RmsNorm(x.data() + rows[r] * H, 1, H, VectorView{DType::kF32, H, final_norm_.data()}, eps,
                       fin.data() + r * static_cast<size_t>(H));
    }
    std::vector<float> logits(rows.size() * static_cast<size_t>(c_.vocab_size));
    kernels::MatMul(pool, fin.data(), static_cast<int64_t>(rows.size()), head_.view(), logits.data());
    return logits;
  }

  int64_t vocab_size() const { return c_.vocab_size; }

 private:
  // Rotate-half RoPE of `heads` heads per row, angles in double as llama_reference.py takes them.
  void Rope(float* x, int64_t n, int64_t heads, int64_t stride, const std::vector<int32_t>& positions) const {
    const int64_t half = c_.head_dim / 2;
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t hh = 0; hh < heads; ++hh) {
        float* v = x + t * stride + hh * c_.head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const double a = positions[static_cast<size_t>(t)] * static_cast<double>(inv_freq_[static_cast<size_t>(i)]);
          const float cs = static_cast<float>(std::cos(a)), sn = static_cast<float>(std::sin(a));
          const float x0 = v[i], x1 = v[i + half];
          v[i] = x0 * cs - x1 * sn;
          v[i + half] = x1 * cs + x0 * sn;
        }
      }
    }
  }

  struct Layer {
    std::vector<float> attn_norm, mlp_norm;
    Matrix qkv, o, gate_up, down;
  };
  ModelConfig c_;
  std::vector<float> embed_, final_norm_;
  Matrix head_;
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;
};

json ReadFixture(const std::string& file) {
  std::ifstream in(kLoraTestSource + "/tests/engine/data/" + file);
  EXPECT_TRUE(in.good()) << "missing fixture tests/engine/data/" << file;
  json j;
  if (in) in >> j;
  return j;
}

class LoraForward : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = LoraTestRoot(tmp_.path());
    InitCheckpointOptions o = LoraTestBaseModel();
    o.overwrite = true;
    StatusOr<ModelConfig> c = InitRandomCheckpoint(root_ / "plain", o);
    ASSERT_TRUE(c.ok()) << c.status();
    for (const LoraTestAdapter& a : LoraTestAdapters()) {
      InitLoraOptions lo = a.options;
      lo.overwrite = true;
      ASSERT_TRUE(InitRandomLora(root_ / a.name, *c, lo).ok());
    }
    StatusOr<std::unique_ptr<Checkpoint>> ck = Checkpoint::Open(root_ / "plain");
    ASSERT_TRUE(ck.ok()) << ck.status();
    model_ = std::make_unique<MiniLlama>(**ck);
    StatusOr<std::unique_ptr<LoraRegistry>> reg =
        LoraRegistry::Create(*c, {.base_model = "plain", .max_loras = 2, .max_lora_rank = 16});
    ASSERT_TRUE(reg.ok());
    registry_ = std::move(*reg);
    for (const LoraTestAdapter& a : LoraTestAdapters()) {
      ASSERT_TRUE(registry_->Load(a.name, root_ / a.name).ok());
      StatusOr<LoraPin> pin = registry_->Acquire(a.name);
      ASSERT_TRUE(pin.ok());
      pins_.push_back(std::move(*pin));
    }
  }

  // Greedy continuation of `prompt` by one sequence, recomputing it whole each step.
  std::vector<int32_t> Greedy(ThreadPool& pool, std::vector<int32_t> seq, int32_t adapter_id, int steps) {
    std::vector<int32_t> out;
    LoraBatch lb;
    for (int s = 0; s < steps; ++s) {
      std::vector<int32_t> pos(seq.size()), ids(seq.size(), adapter_id);
      for (size_t i = 0; i < seq.size(); ++i) pos[i] = static_cast<int32_t>(i);
      EXPECT_TRUE(registry_->Resolve(ids, lb).ok());
      const std::vector<float> logits =
          model_->Forward(pool, seq, pos, std::vector<int>(seq.size(), 0), lb, {static_cast<int32_t>(seq.size()) - 1});
      const int32_t next = static_cast<int32_t>(kernels::Argmax(logits.data(), model_->vocab_size()));
      out.push_back(next);
      seq.push_back(next);
    }
    return out;
  }

  TempDir tmp_;
  fs::path root_;
  std::unique_ptr<MiniLlama> model_;
  std::unique_ptr<LoraRegistry> registry_;
  std::vector<LoraPin> pins_;  // "lora_a", "lora_b"
};

TEST_F(LoraForward, MatchesPyTorchReferenceInOneMixedStep) {
  ThreadPool pool(2);
  struct Seq {
    std::string fixture;
    int32_t adapter_id;
  };
  const Seq seqs[] = {{"reference_plain.json", kBaseAdapterId},
                      {"lora_plain_a.json", pins_[0].adapter_id()},
                      {"lora_plain_b.json", pins_[1].adapter_id()}};
  const std::vector<int32_t> prompt = LoraTestPrompt();
  // Round-robin: base, a, b, base, a, b, ... so every tile and every row mixes sequences.
  std::vector<int32_t> tokens, positions, ids, rows;
  std::vector<int> owner;
  for (size_t p = 0; p < prompt.size(); ++p) {
    for (int s = 0; s < 3; ++s) {
      tokens.push_back(prompt[p]);
      positions.push_back(static_cast<int32_t>(p));
      ids.push_back(seqs[s].adapter_id);
      owner.push_back(s);
      rows.push_back(static_cast<int32_t>(rows.size()));
    }
  }
  LoraBatch lb;
  ASSERT_TRUE(registry_->Resolve(ids, lb).ok());
  EXPECT_EQ(lb.num_adapters(), 2);
  const std::vector<float> logits = model_->Forward(pool, tokens, positions, owner, lb, rows);
  const int64_t V = model_->vocab_size();

  std::vector<std::vector<int32_t>> top1(3);
  for (int s = 0; s < 3; ++s) {
    SCOPED_TRACE(seqs[s].fixture);
    const json fx = ReadFixture(seqs[s].fixture);
    ASSERT_TRUE(fx.contains("positions"));
    ASSERT_EQ(fx["prompt"].get<std::vector<int32_t>>(), prompt);
    if (s > 0) {
      EXPECT_EQ(fx["adapter"]["r"].get<int64_t>(), LoraTestAdapters()[static_cast<size_t>(s - 1)].options.rank);
    }
    const auto probes = fx["probe_ids"].get<std::vector<int64_t>>();
    double worst = 0;
    for (size_t p = 0; p < prompt.size(); ++p) {
      const float* row = logits.data() + (p * 3 + static_cast<size_t>(s)) * static_cast<size_t>(V);
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
      double sum = 0, sumsq = 0;
      for (int64_t v = 0; v < V; ++v) {
        sum += row[v];
        sumsq += static_cast<double>(row[v]) * row[v];
      }
      EXPECT_NEAR(sum, want["sum"].get<double>(), 1e-4 * scale * std::sqrt(static_cast<double>(V)));
      EXPECT_NEAR(sumsq, want["sumsq"].get<double>(), 1e-4 * want["sumsq"].get<double>());
      top1[static_cast<size_t>(s)].push_back(want["top"][0][0].get<int32_t>());
    }
    std::printf("[ %s ] worst relative logit error vs the PyTorch reference: %.2e\n", seqs[s].fixture.c_str(), worst);
    const auto want_greedy = fx["greedy"].get<std::vector<int32_t>>();
    EXPECT_EQ(Greedy(pool, prompt, seqs[s].adapter_id, static_cast<int>(want_greedy.size())), want_greedy);
  }
  // The adapters matter: each changes the reference's own top-1 token somewhere.
  EXPECT_NE(top1[1], top1[0]);
  EXPECT_NE(top1[2], top1[0]);
}

}  // namespace
}  // namespace aicloud::engine
