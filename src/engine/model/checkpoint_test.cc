#include "engine/model/checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/model/model_test_util.h"
#include "engine/model/random_checkpoint.h"
#include "engine/model/safetensors_writer.h"

namespace aicloud::engine {
namespace {

using nlohmann::json;
using testing::TempDir;
using testing::TinyLlama;
using testing::WriteAll;

// Writes config.json and a model.safetensors holding `tensors` (zeros).
void WriteZeros(const std::filesystem::path& dir, const ModelConfig& config, const std::vector<ExpectedTensor>& tensors,
                DType dtype = DType::kF32) {
  WriteAll(dir / "config.json", config.ToJson().dump());
  std::vector<TensorToWrite> w;
  for (const ExpectedTensor& e : tensors) {
    TensorToWrite t{.name = e.name, .dtype = dtype, .shape = e.shape};
    t.fill = [](size_t, std::span<std::byte> chunk) { std::memset(chunk.data(), 0, chunk.size()); };
    w.push_back(std::move(t));
  }
  ASSERT_TRUE(WriteSafetensors(dir / "model.safetensors", w).ok());
}

TEST(ExpectedTensorsTest, LlamaLayout) {
  ModelConfig c = TinyLlama();
  c.num_hidden_layers = 1;
  const std::vector<ExpectedTensor> t = ExpectedTensors(c);
  std::vector<std::string> names;
  for (const ExpectedTensor& e : t) names.push_back(e.name + " " + ShapeString(e.shape));
  EXPECT_EQ(names, (std::vector<std::string>{
                       "model.embed_tokens.weight [100, 64]",
                       "model.layers.0.input_layernorm.weight [64]",
                       "model.layers.0.self_attn.q_proj.weight [64, 64]",
                       "model.layers.0.self_attn.k_proj.weight [32, 64]",
                       "model.layers.0.self_attn.v_proj.weight [32, 64]",
                       "model.layers.0.self_attn.o_proj.weight [64, 64]",
                       "model.layers.0.post_attention_layernorm.weight [64]",
                       "model.layers.0.mlp.gate_proj.weight [128, 64]",
                       "model.layers.0.mlp.up_proj.weight [128, 64]",
                       "model.layers.0.mlp.down_proj.weight [64, 128]",
                       "model.norm.weight [64]",
                       "lm_head.weight [100, 64]",
                   }));
  c.tie_word_embeddings = true;
  EXPECT_EQ(ExpectedTensors(c).size(), 11u);
  c.model_type = "qwen2";
  c.qkv_bias = true;
  std::vector<ExpectedTensor> q = ExpectedTensors(c);
  ASSERT_EQ(q.size(), 14u);
  EXPECT_EQ(q[5].name, "model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(q[6].shape, (std::vector<int64_t>{32}));
  c.o_bias = true;
  EXPECT_EQ(ExpectedTensors(c).size(), 15u);
}

TEST(CheckpointTest, OpensAndValidatesSingleFile) {
  TempDir dir;
  InitCheckpointOptions o{.config = TinyLlama(), .dtype = DType::kF32, .seed = 1};
  ASSERT_TRUE(InitRandomCheckpoint(dir.path(), o).ok());
  StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const Checkpoint& c = **ckpt;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  EXPECT_FALSE(c.sharded());
  EXPECT_EQ(c.files().size(), 1u);
  EXPECT_EQ(c.config().hidden_size, 64);
  EXPECT_EQ(c.tensors().size(), ExpectedTensors(c.config()).size());
  EXPECT_EQ(c.parameter_count(), c.config().ParameterCount());
  EXPECT_EQ(c.tensor_bytes(), static_cast<uint64_t>(c.config().ParameterCount()) * 4);
  EXPECT_TRUE(c.UnusedTensors().empty());

  ASSERT_NE(c.Find("model.norm.weight"), nullptr);
  EXPECT_EQ(c.Find("model.nope"), nullptr);
  StatusOr<const TensorView*> q = c.Require("model.layers.1.self_attn.q_proj.weight", {64, 64});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ((*q)->shape, (std::vector<int64_t>{64, 64}));

  StatusOr<const TensorView*> wrong = c.Require("model.layers.1.self_attn.k_proj.weight", {64, 64});
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.status().message(), dir.path().string() +
                                          ": tensor 'model.layers.1.self_attn.k_proj.weight' has shape [32, 64], "
                                          "config.json implies [64, 64]");
  StatusOr<const TensorView*> missing = c.Require("model.layers.9.mlp.up_proj.weight", {128, 64});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            dir.path().string() + ": missing tensor 'model.layers.9.mlp.up_proj.weight' (expected shape [128, 64])");
}

TEST(CheckpointTest, ShardedMatchesSingleFile) {
  TempDir single, sharded;
  InitCheckpointOptions o{.config = TinyLlama(), .dtype = DType::kBF16, .seed = 5};
  ASSERT_TRUE(InitRandomCheckpoint(single.path(), o).ok());
  o.shards = 3;
  ASSERT_TRUE(InitRandomCheckpoint(sharded.path(), o).ok());
  EXPECT_TRUE(std::filesystem::exists(sharded / "model-00001-of-00003.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(sharded / "model-00003-of-00003.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(sharded / "model.safetensors"));
  const json index = json::parse(testing::ReadAll(sharded / "model.safetensors.index.json"));
  EXPECT_EQ(index["weight_map"].size(), ExpectedTensors(TinyLlama()).size());

  auto a = Checkpoint::Open(single.path());
  auto b = Checkpoint::Open(sharded.path());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE((*b)->sharded());
  EXPECT_EQ((*b)->files().size(), 3u);
  EXPECT_TRUE((*b)->Validate().ok()) << (*b)->Validate();
  EXPECT_EQ(index["metadata"]["total_size"], (*b)->tensor_bytes());
  ASSERT_EQ((*a)->tensors().size(), (*b)->tensors().size());
  for (const auto& [name, t] : (*a)->tensors()) {
    const TensorView* u = (*b)->Find(name);
    ASSERT_NE(u, nullptr) << name;
    EXPECT_EQ(u->shape, t->shape);
    EXPECT_EQ(u->nbytes, t->nbytes);
    EXPECT_EQ(std::memcmp(u->data, t->data, t->nbytes), 0) << name;
  }
}

struct IndexCase {
  std::string name;
  std::function<void(json& index)> edit;
  std::string message;
};

TEST(CheckpointTest, RejectsBadIndexes) {
  const std::vector<IndexCase> cases = {
      {"path traversal", [](json& i) { i["weight_map"]["model.norm.weight"] = "../model-00001-of-00002.safetensors"; },
       "weight_map['model.norm.weight']: \"../model-00001-of-00002.safetensors\" is not a file name in the checkpoint directory"},
      {"absolute path", [](json& i) { i["weight_map"]["model.norm.weight"] = "/dev/zero"; }, "is not a file name"},
      {"non-string shard", [](json& i) { i["weight_map"]["model.norm.weight"] = 3; }, "is not a file name"},
      {"missing shard", [](json& i) { i["weight_map"]["model.norm.weight"] = "model-00009-of-00009.safetensors"; },
       "shard model-00009-of-00009.safetensors is missing"},
      {"tensor not in its shard",
       [](json& i) { i["weight_map"]["model.extra.weight"] = "model-00001-of-00002.safetensors"; },
       "weight_map puts tensor 'model.extra.weight' in model-00001-of-00002.safetensors, which has no such tensor"},
      {"no weight_map", [](json& i) { i.erase("weight_map"); }, "weight_map (an object of tensor name -> shard file) is missing"},
  };
  for (const IndexCase& tc : cases) {
    SCOPED_TRACE(tc.name);
    TempDir dir;
    InitCheckpointOptions o{.config = TinyLlama(), .dtype = DType::kF16, .shards = 2};
    ASSERT_TRUE(InitRandomCheckpoint(dir.path(), o).ok());
    json index = json::parse(testing::ReadAll(dir / "model.safetensors.index.json"));
    tc.edit(index);
    WriteAll(dir / "model.safetensors.index.json", index.dump());
    auto ckpt = Checkpoint::Open(dir.path());
    ASSERT_FALSE(ckpt.ok());
    EXPECT_EQ(ckpt.status().code(), StatusCode::kDataLoss) << ckpt.status();
    EXPECT_NE(ckpt.status().message().find("model.safetensors.index.json: "), std::string::npos) << ckpt.status();
    EXPECT_NE(ckpt.status().message().find(tc.message), std::string::npos) << ckpt.status();
  }
  TempDir dir;
  ASSERT_TRUE(InitRandomCheckpoint(dir.path(), {.config = TinyLlama(), .shards = 2}).ok());
  WriteAll(dir / "model.safetensors.index.json", "{\"weight_map\": ");
  auto ckpt = Checkpoint::Open(dir.path());
  EXPECT_NE(ckpt.status().message().find("model.safetensors.index.json: not valid JSON"), std::string::npos)
      << ckpt.status();
}

TEST(CheckpointTest, DirectoryErrors) {
  TempDir dir;
  auto none = Checkpoint::Open(dir / "absent");
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("no such directory"), std::string::npos);

  auto no_config = Checkpoint::Open(dir.path());
  EXPECT_EQ(no_config.status().code(), StatusCode::kNotFound);
  EXPECT_NE(no_config.status().message().find(": no config.json"), std::string::npos);

  WriteAll(dir / "config.json", TinyLlama().ToJson().dump());
  auto no_weights = Checkpoint::Open(dir.path());
  EXPECT_EQ(no_weights.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(no_weights.status().message(),
            dir.path().string() + ": no model.safetensors or model.safetensors.index.json");

  WriteAll(dir / "pytorch_model.bin", "pickle");
  auto pickle = Checkpoint::Open(dir.path());
  EXPECT_NE(pickle.status().message().find("pytorch_model.bin (pickle) weights are not loaded"), std::string::npos);

  // A bad config is reported before any weights are looked at.
  WriteAll(dir / "config.json", "{\"model_type\": \"llama\"}");
  auto bad_config = Checkpoint::Open(dir.path());
  EXPECT_EQ(bad_config.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_config.status().message().find("config.json: hidden_size: missing"), std::string::npos)
      << bad_config.status();

  // A corrupt weights file is reported with its own error.
  WriteAll(dir / "config.json", TinyLlama().ToJson().dump());
  WriteAll(dir / "model.safetensors", "garbage!garbage!");
  auto corrupt = Checkpoint::Open(dir.path());
  EXPECT_EQ(corrupt.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(corrupt.status().message().find("model.safetensors: header length"), std::string::npos) << corrupt.status();
}

// Every tensor of the model, missing or misshaped in turn, is named by Validate.
TEST(CheckpointTest, ValidateNamesEachMissingOrMisshapedTensor) {
  for (const char* family : {"llama", "qwen2"}) {
    ModelConfig c = TinyLlama();
    c.num_hidden_layers = 1;
    if (std::string(family) == "qwen2") {
      c.model_type = "qwen2";
      c.architecture = "Qwen2ForCausalLM";
      c.qkv_bias = true;
    }
    const std::vector<ExpectedTensor> all = ExpectedTensors(c);
    for (size_t i = 0; i < all.size(); ++i) {
      SCOPED_TRACE(std::string(family) + " " + all[i].name);
      {
        TempDir dir;
        std::vector<ExpectedTensor> t = all;
        t.erase(t.begin() + static_cast<long>(i));
        WriteZeros(dir.path(), c, t);
        auto ckpt = Checkpoint::Open(dir.path());
        ASSERT_TRUE(ckpt.ok()) << ckpt.status();
        Status s = (*ckpt)->Validate();
        EXPECT_EQ(s.code(), StatusCode::kNotFound);
        EXPECT_EQ(s.message(), dir.path().string() + ": missing tensor '" + all[i].name + "' (expected shape " +
                                   ShapeString(all[i].shape) + ")");
      }
      {
        TempDir dir;
        std::vector<ExpectedTensor> t = all;
        t[i].shape.back() += 1;
        WriteZeros(dir.path(), c, t);
        auto ckpt = Checkpoint::Open(dir.path());
        ASSERT_TRUE(ckpt.ok()) << ckpt.status();
        Status s = (*ckpt)->Validate();
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
        EXPECT_EQ(s.message(), dir.path().string() + ": tensor '" + all[i].name + "' has shape " +
                                   ShapeString(t[i].shape) + ", config.json implies " + ShapeString(all[i].shape));
      }
    }
  }
}

TEST(CheckpointTest, ValidateSummarisesManyProblems) {
  TempDir dir;
  ModelConfig c = TinyLlama();
  std::vector<ExpectedTensor> t = ExpectedTensors(c);
  t.resize(t.size() - 12);  // drops layer 1's tail, model.norm and lm_head
  WriteZeros(dir.path(), c, t);
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  Status s = (*ckpt)->Validate();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message().rfind(dir.path().string() + ": 12 tensor problems:\n  missing tensor '", 0), 0u) << s;
  EXPECT_NE(s.message().find("\n  ... and 2 more"), std::string::npos) << s;
}

TEST(CheckpointTest, TiedAndUntiedEmbeddings) {
  ModelConfig tied = TinyLlama();
  tied.tie_word_embeddings = true;
  ModelConfig untied = TinyLlama();
  {
    // Tied: no lm_head needed.
    TempDir dir;
    WriteZeros(dir.path(), tied, ExpectedTensors(tied));
    auto ckpt = Checkpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok());
    EXPECT_TRUE((*ckpt)->Validate().ok());
    EXPECT_EQ((*ckpt)->Find("lm_head.weight"), nullptr);
  }
  {
    // Tied but an lm_head is present anyway: valid, and reported as unused.
    TempDir dir;
    WriteZeros(dir.path(), tied, ExpectedTensors(untied));
    auto ckpt = Checkpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok());
    EXPECT_TRUE((*ckpt)->Validate().ok());
    EXPECT_EQ((*ckpt)->UnusedTensors(), std::vector<std::string>{"lm_head.weight"});
  }
  {
    // Untied without lm_head: named.
    TempDir dir;
    WriteZeros(dir.path(), untied, ExpectedTensors(tied));
    auto ckpt = Checkpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok());
    Status s = (*ckpt)->Validate();
    EXPECT_NE(s.message().find("missing tensor 'lm_head.weight' (expected shape [100, 64])"), std::string::npos) << s;
  }
}

TEST(CheckpointTest, UnloadableDTypeIsNamed) {
  TempDir dir;
  ModelConfig c = TinyLlama();
  c.num_hidden_layers = 1;
  std::vector<ExpectedTensor> t = ExpectedTensors(c);
  WriteZeros(dir.path(), c, t);
  // Rewrite model.norm.weight as I64 by hand: same header shape, 8-byte elements.
  std::string raw = testing::ReadAll(dir / "model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  json header = json::parse(raw.substr(8, n));
  json& norm = header["model.norm.weight"];
  norm["dtype"] = "I32";  // same width as F32, so the offsets stay valid
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t len = text.size();
  std::memcpy(out.data(), &len, 8);
  WriteAll(dir / "model.safetensors", out + text + raw.substr(8 + n));
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  Status s = (*ckpt)->Validate();
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("tensor 'model.norm.weight' has dtype I32, which the engine does not load"),
            std::string::npos)
      << s;
}

struct FiniteCase {
  DType dtype;
  float bad;
  std::string what;
};

TEST(CheckFiniteTest, NamesTheFirstBadElement) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<FiniteCase> cases = {
      {DType::kF32, nan, "NaN"},   {DType::kF32, inf, "+inf"},  {DType::kF32, -inf, "-inf"},
      {DType::kF16, nan, "NaN"},   {DType::kF16, inf, "+inf"},  {DType::kF16, -inf, "-inf"},
      {DType::kF16, 70000.0f, "+inf"},  // overflows binary16
      {DType::kBF16, nan, "NaN"},  {DType::kBF16, -inf, "-inf"},
  };
  for (const FiniteCase& tc : cases) {
    SCOPED_TRACE(std::string(DTypeName(tc.dtype)) + " " + tc.what);
    std::vector<float> v(12, 0.5f);
    v[7] = tc.bad;
    v[9] = nan;  // a later bad value is not the one reported
    std::string bytes(v.size() * DTypeSize(tc.dtype), '\0');
    for (size_t i = 0; i < v.size(); ++i) {
      if (tc.dtype == DType::kF32) {
        std::memcpy(&bytes[4 * i], &v[i], 4);
      } else {
        const uint16_t h = tc.dtype == DType::kF16 ? FloatToHalf(v[i]) : FloatToBF16(v[i]);
        std::memcpy(&bytes[2 * i], &h, 2);
      }
    }
    TensorView view{.name = "model.layers.3.mlp.up_proj.weight", .dtype = tc.dtype, .shape = {3, 4},
                    .data = bytes.data(), .nbytes = bytes.size()};
    Status s = CheckFinite(view);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "tensor 'model.layers.3.mlp.up_proj.weight': element 7 (at [1, 3]) is " + tc.what);
  }
  // Finite values, the largest ones included, pass; so does an empty tensor.
  std::vector<float> ok = {0, -0.0f, 1e-40f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()};
  TensorView f32{.name = "w", .dtype = DType::kF32, .shape = {5}, .data = ok.data(), .nbytes = 20};
  EXPECT_TRUE(CheckFinite(f32).ok());
  uint16_t max_half = 0x7bff;
  TensorView f16{.name = "h", .dtype = DType::kF16, .shape = {}, .data = &max_half, .nbytes = 2};
  EXPECT_TRUE(CheckFinite(f16).ok());
  TensorView empty{.name = "e", .dtype = DType::kF16, .shape = {0, 4}, .data = nullptr, .nbytes = 0};
  EXPECT_TRUE(CheckFinite(empty).ok());
}

}  // namespace
}  // namespace aicloud::engine
