#include "engine/model/random_checkpoint.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "engine/model/checkpoint.h"
#include "engine/model/model_test_util.h"

namespace aicloud::engine {
namespace {

using nlohmann::json;
using testing::ReadAll;
using testing::TempDir;
using testing::TinyLlama;
using testing::WriteAll;

// A minimal byte-level BPE tokenizer.json: 7 vocab entries and `specials` as added tokens after
// them.
std::string TinyTokenizer(const std::vector<std::string>& specials) {
  json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"\u0120", 4}, {"\u0120a", 5}, {"bc", 6}};
  json added = json::array();
  for (size_t i = 0; i < specials.size(); ++i) {
    added.push_back({{"id", 7 + i}, {"content", specials[i]}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  json doc = {{"version", "1.0"},
              {"added_tokens", added},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", "b c", "\u0120 a"}}}}};
  return doc.dump();
}

double Mean(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return s / static_cast<double>(v.size());
}

double Std(const std::vector<float>& v) {
  const double m = Mean(v);
  double s = 0;
  for (float x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

TEST(RandomCheckpointTest, SameSeedSameBytes) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    TempDir a, b, c;
    InitCheckpointOptions o{.config = TinyLlama(), .dtype = dtype, .seed = 7};
    ASSERT_TRUE(InitRandomCheckpoint(a.path(), o).ok());
    ASSERT_TRUE(InitRandomCheckpoint(b.path(), o).ok());
    o.seed = 8;
    ASSERT_TRUE(InitRandomCheckpoint(c.path(), o).ok());
    const std::string wa = ReadAll(a / "model.safetensors");
    EXPECT_EQ(wa, ReadAll(b / "model.safetensors"));
    EXPECT_EQ(ReadAll(a / "config.json"), ReadAll(b / "config.json"));
    EXPECT_NE(wa, ReadAll(c / "model.safetensors"));
    EXPECT_EQ(wa.size(), ReadAll(c / "model.safetensors").size());
  }
}

TEST(RandomCheckpointTest, WeightsFollowTheInitialisation) {
  TempDir dir;
  ModelConfig cfg = TinyLlama();
  cfg.model_type = "qwen2";
  cfg.architecture = "Qwen2ForCausalLM";
  StatusOr<ModelConfig> written =
      InitRandomCheckpoint(dir.path(), {.config = cfg, .dtype = DType::kF32, .seed = 3, .init_std = 0.02});
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_TRUE(written->qkv_bias);
  EXPECT_EQ(written->torch_dtype, DType::kF32);
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ASSERT_TRUE((*ckpt)->Validate().ok()) << (*ckpt)->Validate();
  EXPECT_EQ((*ckpt)->config().ToJson(), written->ToJson());
  for (const auto& [name, t] : (*ckpt)->tensors()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(CheckFinite(*t).ok());
    const std::vector<float> v = TensorToFloat(*t);
    if (name.ends_with("norm.weight")) {
      EXPECT_EQ(v, std::vector<float>(v.size(), 1.0f));
    } else if (name.ends_with(".bias")) {
      EXPECT_EQ(v, std::vector<float>(v.size(), 0.0f));
    } else {
      EXPECT_NEAR(Mean(v), 0.0, 0.002);
      EXPECT_NEAR(Std(v), 0.02, 0.002);
    }
  }
  // Each tensor draws its own stream.
  EXPECT_NE(TensorToFloat(*(*ckpt)->Find("model.layers.0.self_attn.q_proj.weight")),
            TensorToFloat(*(*ckpt)->Find("model.layers.1.self_attn.q_proj.weight")));
  const json gen = json::parse(ReadAll(dir / "generation_config.json"));
  EXPECT_TRUE(gen["eos_token_id"].is_null());
  EXPECT_FALSE(std::filesystem::exists(dir / "tokenizer.json"));
}

TEST(RandomCheckpointTest, TokenizerSetsVocabAndSpecialTokens) {
  TempDir tok, dir;
  WriteAll(tok / "tokenizer.json", TinyTokenizer({"<|endoftext|>"}));
  ModelConfig cfg = TinyLlama();
  cfg.vocab_size = 0;  // from the tokenizer
  StatusOr<ModelConfig> c = InitRandomCheckpoint(
      dir.path(), {.config = cfg, .dtype = DType::kF16, .tokenizer_json = tok / "tokenizer.json"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vocab_size, 8);
  EXPECT_EQ(c->bos_token_ids, std::vector<int64_t>{7});
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{7});
  EXPECT_EQ(ReadAll(dir / "tokenizer.json"), ReadAll(tok / "tokenizer.json"));
  const json tc = json::parse(ReadAll(dir / "tokenizer_config.json"));
  EXPECT_EQ(tc["eos_token"], "<|endoftext|>");
  EXPECT_EQ(tc["bos_token"], "<|endoftext|>");
  EXPECT_NE(tc["chat_template"].get<std::string>().find("<|im_start|>' + message['role']"), std::string::npos);
  EXPECT_NE(tc["chat_template"].get<std::string>().find("add_generation_prompt"), std::string::npos);
  const json gen = json::parse(ReadAll(dir / "generation_config.json"));
  EXPECT_EQ(gen["eos_token_id"], 7);
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE((*ckpt)->Validate().ok());
  EXPECT_EQ((*ckpt)->Find("model.embed_tokens.weight")->shape, (std::vector<int64_t>{8, 64}));
}

TEST(RandomCheckpointTest, PrefersChatMlEndToken) {
  TempDir tok, dir;
  WriteAll(tok / "tokenizer.json", TinyTokenizer({"<|endoftext|>", "<|im_start|>", "<|im_end|>"}));
  ModelConfig cfg = TinyLlama();
  cfg.vocab_size = 0;
  StatusOr<ModelConfig> c = InitRandomCheckpoint(dir.path(), {.config = cfg, .tokenizer_json = tok / "tokenizer.json"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vocab_size, 10);
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{9});
  EXPECT_EQ(json::parse(ReadAll(dir / "tokenizer_config.json"))["eos_token"], "<|im_end|>");
}

TEST(RandomCheckpointTest, CopiesTheTokenizerConfigBesideTheTokenizer) {
  TempDir tok, dir;
  WriteAll(tok / "tokenizer.json", TinyTokenizer({"<s>", "</s>"}));
  const std::string config =
      R"({"bos_token": "<s>", "eos_token": {"content": "</s>", "special": true}, "chat_template": "{{ custom }}"})";
  WriteAll(tok / "tokenizer_config.json", config);
  ModelConfig cfg = TinyLlama();
  cfg.vocab_size = 0;
  StatusOr<ModelConfig> c = InitRandomCheckpoint(dir.path(), {.config = cfg, .tokenizer_json = tok / "tokenizer.json"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->bos_token_ids, std::vector<int64_t>{7});
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{8});
  EXPECT_EQ(json::parse(ReadAll(dir / "tokenizer_config.json")), json::parse(config));
}

TEST(RandomCheckpointTest, VocabPaddingAndTokenizerErrors) {
  TempDir tok, dir;
  WriteAll(tok / "tokenizer.json", TinyTokenizer({"<|endoftext|>"}));
  ModelConfig cfg = TinyLlama();
  cfg.vocab_size = 64;  // padded beyond the tokenizer's 8
  StatusOr<ModelConfig> padded = InitRandomCheckpoint(dir.path(), {.config = cfg, .tokenizer_json = tok / "tokenizer.json"});
  ASSERT_TRUE(padded.ok()) << padded.status();
  EXPECT_EQ(padded->vocab_size, 64);

  cfg.vocab_size = 4;
  StatusOr<ModelConfig> small =
      InitRandomCheckpoint(dir.path(), {.config = cfg, .tokenizer_json = tok / "tokenizer.json", .overwrite = true});
  EXPECT_EQ(small.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("vocab_size 4 is smaller than the tokenizer's 8"), std::string::npos);

  StatusOr<TokenizerVocab> missing = ReadTokenizerVocab(tok / "nope.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  WriteAll(tok / "bad.json", R"({"model": {"type": "BPE"}})");
  StatusOr<TokenizerVocab> bad = ReadTokenizerVocab(tok / "bad.json");
  EXPECT_NE(bad.status().message().find("bad.json: model.vocab is missing"), std::string::npos) << bad.status();
  WriteAll(tok / "neg.json", R"({"model": {"vocab": {"a": -1}}})");
  EXPECT_NE(ReadTokenizerVocab(tok / "neg.json").status().message().find("id of 'a' must be a non-negative integer"),
            std::string::npos);
  // Unigram vocabularies are lists of [piece, score].
  WriteAll(tok / "unigram.json", R"({"model": {"type": "Unigram", "vocab": [["<unk>", 0], ["a", -1.5], ["b", -2]]}})");
  StatusOr<TokenizerVocab> uni = ReadTokenizerVocab(tok / "unigram.json");
  ASSERT_TRUE(uni.ok()) << uni.status();
  EXPECT_EQ(uni->vocab_size, 3);
  EXPECT_EQ(uni->ids.at("b"), 2);
}

TEST(RandomCheckpointTest, Gpt2Tokenizer) {
  const std::filesystem::path gpt2 = std::filesystem::path(AICLOUD_SOURCE_DIR) / "data/tokenizers/gpt2/tokenizer.json";
  if (!std::filesystem::exists(gpt2)) GTEST_SKIP() << gpt2 << " is not in the repository yet";
  StatusOr<TokenizerVocab> v = ReadTokenizerVocab(gpt2);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->vocab_size, 50257);
  TempDir dir;
  ModelConfig cfg = TinyLlama();
  cfg.vocab_size = 0;
  cfg.num_hidden_layers = 1;
  StatusOr<ModelConfig> c = InitRandomCheckpoint(dir.path(), {.config = cfg, .tokenizer_json = gpt2});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vocab_size, 50257);
  EXPECT_EQ(c->bos_token_ids, std::vector<int64_t>{50256});
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{50256});
  EXPECT_EQ(json::parse(ReadAll(dir / "tokenizer_config.json"))["eos_token"], "<|endoftext|>");
}

TEST(RandomCheckpointTest, RefusesToOverwriteUnlessAsked) {
  TempDir dir;
  ASSERT_TRUE(InitRandomCheckpoint(dir.path(), {.config = TinyLlama(), .shards = 2}).ok());
  StatusOr<ModelConfig> again = InitRandomCheckpoint(dir.path(), {.config = TinyLlama()});
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(again.status().message().find("already holds a checkpoint"), std::string::npos) << again.status();
  // Overwriting a sharded checkpoint with a single file leaves no stale shards behind.
  ASSERT_TRUE(InitRandomCheckpoint(dir.path(), {.config = TinyLlama(), .overwrite = true}).ok());
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "model-00001-of-00002.safetensors"));
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_FALSE((*ckpt)->sharded());
  // No temporary files remain.
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
  }
}

TEST(RandomCheckpointTest, RejectsBadOptions) {
  TempDir dir;
  EXPECT_NE(InitRandomCheckpoint(dir.path(), {.config = TinyLlama(), .shards = 0}).status().message().find(
                "shards must be at least 1"),
            std::string::npos);
  EXPECT_NE(InitRandomCheckpoint(dir.path(), {.config = TinyLlama(), .shards = 22}).status().message().find(
                "shards 22 is more than the model's 21 tensors"),
            std::string::npos);
  ModelConfig bad = TinyLlama();
  bad.num_key_value_heads = 3;
  StatusOr<ModelConfig> s = InitRandomCheckpoint(dir.path(), {.config = bad});
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("num_key_value_heads: 3 does not divide"), std::string::npos) << s.status();
  EXPECT_FALSE(std::filesystem::exists(dir / "config.json"));
}

TEST(RandomCheckpointTest, ShardingUsesEveryShard) {
  for (int shards : {2, 5, 21}) {
    SCOPED_TRACE(shards);
    TempDir dir;
    ASSERT_TRUE(InitRandomCheckpoint(dir.path(), {.config = TinyLlama(), .shards = shards}).ok());
    auto ckpt = Checkpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_EQ((*ckpt)->files().size(), static_cast<size_t>(shards));
    for (const auto& f : (*ckpt)->files()) EXPECT_FALSE(f->tensors().empty()) << f->path();
    EXPECT_TRUE((*ckpt)->Validate().ok());
  }
}

TEST(RandomCheckpointTest, DefaultIntermediateSize) {
  EXPECT_EQ(DefaultIntermediateSize(576), 1536);    // SmolLM2-135M
  EXPECT_EQ(DefaultIntermediateSize(2048), 5632);   // TinyLlama-1.1B
  EXPECT_EQ(DefaultIntermediateSize(4096), 11008);  // Llama-2-7B
  EXPECT_EQ(DefaultIntermediateSize(64), 256);
}

// SmolLM2-135M shapes: written once, then opened and validated; prints the times (not asserted:
// the machine is shared).
TEST(RandomCheckpointTest, SmolLm2ShapesOpenFast) {
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  ModelConfig c = TinyLlama();
  c.hidden_size = 576;
  c.num_hidden_layers = 30;
  c.num_attention_heads = 9;
  c.num_key_value_heads = 3;
  c.head_dim = 64;
  c.intermediate_size = 1536;
  c.vocab_size = 49152;
  c.max_position_embeddings = 8192;
  c.rope_theta = 100000;
  c.tie_word_embeddings = true;
  InitCheckpointOptions o{.config = c, .dtype = DType::kF16, .seed = 42};
  const std::filesystem::path gpt2 = std::filesystem::path(AICLOUD_SOURCE_DIR) / "data/tokenizers/gpt2/tokenizer.json";
  if (std::filesystem::exists(gpt2)) {
    o.config.vocab_size = 0;
    o.tokenizer_json = gpt2;
  }
  TempDir dir;
  const auto t0 = Clock::now();
  StatusOr<ModelConfig> written = InitRandomCheckpoint(dir.path(), o);
  const auto t1 = Clock::now();
  ASSERT_TRUE(written.ok()) << written.status();

  double best_open = 1e9, best_validate = 1e9;
  for (int i = 0; i < 5; ++i) {
    const auto a = Clock::now();
    auto ckpt = Checkpoint::Open(dir.path());
    const auto b = Clock::now();
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    Status v = (*ckpt)->Validate();
    const auto e = Clock::now();
    ASSERT_TRUE(v.ok()) << v;
    best_open = std::min(best_open, ms(b - a));
    best_validate = std::min(best_validate, ms(e - b));
    if (i == 0) {
      EXPECT_EQ((*ckpt)->parameter_count(), written->ParameterCount());
      EXPECT_EQ((*ckpt)->tensors().size(), 272u);  // 1 + 30 * 9 + 1, lm_head tied
    }
  }
  std::cout << fmt::format(
      "[ SmolLM2-135M shapes, F16, vocab {} ] {:.1f}M parameters, {:.1f} MiB: written in {:.0f} ms, "
      "opened in {:.2f} ms, validated in {:.2f} ms (best of 5)\n",
      written->vocab_size, static_cast<double>(written->ParameterCount()) / 1e6,
      static_cast<double>(std::filesystem::file_size(dir / "model.safetensors")) / (1 << 20), ms(t1 - t0), best_open,
      best_validate);
}

}  // namespace
}  // namespace aicloud::engine
