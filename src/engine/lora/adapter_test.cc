#include "engine/lora/adapter.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/lora/random_adapter.h"
#include "engine/model/model_test_util.h"
#include "engine/model/safetensors.h"
#include "engine/model/safetensors_writer.h"

namespace aicloud::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing::TempDir;  // engine/model/model_test_util.h

// hidden 16, 4 heads of 4 with 2 KV heads (q 16, k/v 8), FFN 24, 2 layers.
ModelConfig Base() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.hidden_size = 16;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.intermediate_size = 24;
  c.vocab_size = 32;
  c.max_position_embeddings = 64;
  return c;
}

// --- adapter_config.json ----------------------------------------------------------------------

json GoodConfig() {
  return json{{"peft_type", "LORA"},      {"r", 8},           {"lora_alpha", 16},
              {"target_modules", {"q_proj", "v_proj"}}, {"bias", "none"}, {"fan_in_fan_out", false},
              {"modules_to_save", nullptr}, {"use_rslora", false}, {"base_model_name_or_path", "HuggingFaceTB/SmolLM2-135M"}};
}

TEST(ParseLoraConfig, AcceptsPeftConfigs) {
  StatusOr<LoraConfig> c = ParseLoraConfig(GoodConfig());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rank, 8);
  EXPECT_EQ(c->alpha, 16);
  EXPECT_FLOAT_EQ(c->Scale(), 2.0f);
  EXPECT_EQ(c->base_model_name_or_path, "HuggingFaceTB/SmolLM2-135M");
  EXPECT_TRUE(c->Targets("model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(c->Targets("model.layers.11.self_attn.v_proj"));
  EXPECT_FALSE(c->Targets("model.layers.0.self_attn.k_proj"));

  json rs = GoodConfig();
  rs["use_rslora"] = true;
  rs["r"] = 16;
  rs["lora_alpha"] = 8.0;
  rs["modules_to_save"] = json::array();  // empty is fine
  rs["task_type"] = "CAUSAL_LM";          // unknown harmless fields are ignored
  rs["lora_dropout"] = 0.05;
  c = ParseLoraConfig(rs);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FLOAT_EQ(c->Scale(), 2.0f);  // 8 / sqrt(16)

  json suffix = GoodConfig();
  suffix["target_modules"] = {"layers.1.self_attn.q_proj", "mlp.down_proj"};
  c = ParseLoraConfig(suffix);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->Targets("model.layers.1.self_attn.q_proj"));
  EXPECT_FALSE(c->Targets("model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(c->Targets("model.layers.11.self_attn.q_proj"));  // suffix after a dot only
  EXPECT_TRUE(c->Targets("model.layers.0.mlp.down_proj"));

  json regex = GoodConfig();
  regex["target_modules"] = R"(.*\.(q_proj|up_proj))";
  c = ParseLoraConfig(regex);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->Targets("model.layers.3.mlp.up_proj"));
  EXPECT_FALSE(c->Targets("model.layers.3.mlp.gate_proj"));

  json all = GoodConfig();
  all["target_modules"] = "all-linear";
  c = ParseLoraConfig(all);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->Targets("model.layers.0.mlp.gate_proj"));
}

TEST(ParseLoraConfig, RefusesWhatItCannotHonour) {
  struct Case {
    std::string name;
    std::function<void(json&)> edit;
    StatusCode code;
    std::string want;
  };
  const Case cases[] = {
      {"not an object", [](json& j) { j = json::array(); }, StatusCode::kInvalidArgument, "not a JSON object"},
      {"no r", [](json& j) { j.erase("r"); }, StatusCode::kInvalidArgument, "r: missing"},
      {"zero r", [](json& j) { j["r"] = 0; }, StatusCode::kInvalidArgument, "r: must be a positive integer"},
      {"string r", [](json& j) { j["r"] = "8"; }, StatusCode::kInvalidArgument, "r: must be a positive integer"},
      {"huge r", [](json& j) { j["r"] = 1024; }, StatusCode::kInvalidArgument, "r: 1024 is larger than the supported 512"},
      {"no alpha", [](json& j) { j.erase("lora_alpha"); }, StatusCode::kInvalidArgument, "lora_alpha: missing"},
      {"string alpha", [](json& j) { j["lora_alpha"] = "16"; }, StatusCode::kInvalidArgument, "lora_alpha: must be"},
      {"rslora not bool", [](json& j) { j["use_rslora"] = "yes"; }, StatusCode::kInvalidArgument, "use_rslora"},
      {"fan_in_fan_out", [](json& j) { j["fan_in_fan_out"] = true; }, StatusCode::kUnimplemented, "fan_in_fan_out: true"},
      {"bias all", [](json& j) { j["bias"] = "all"; }, StatusCode::kUnimplemented, "bias: \"all\""},
      {"bias lora_only", [](json& j) { j["bias"] = "lora_only"; }, StatusCode::kUnimplemented, "bias"},
      {"modules_to_save", [](json& j) { j["modules_to_save"] = {"lm_head"}; }, StatusCode::kUnimplemented,
       "modules_to_save: fully trained extra modules"},
      {"dora", [](json& j) { j["use_dora"] = true; }, StatusCode::kUnimplemented, "use_dora: DoRA"},
      {"rank_pattern", [](json& j) { j["rank_pattern"] = {{"q_proj", 4}}; }, StatusCode::kUnimplemented, "rank_pattern"},
      {"alpha_pattern", [](json& j) { j["alpha_pattern"] = {{"q_proj", 4}}; }, StatusCode::kUnimplemented, "alpha_pattern"},
      {"lora_bias", [](json& j) { j["lora_bias"] = true; }, StatusCode::kUnimplemented, "lora_bias"},
      {"layer_replication", [](json& j) { j["layer_replication"] = {{0, 2}}; }, StatusCode::kUnimplemented,
       "layer_replication"},
      {"other peft type", [](json& j) { j["peft_type"] = "IA3"; }, StatusCode::kUnimplemented, "peft_type: only LORA"},
      {"no targets", [](json& j) { j.erase("target_modules"); }, StatusCode::kInvalidArgument, "target_modules: missing"},
      {"empty targets", [](json& j) { j["target_modules"] = json::array(); }, StatusCode::kInvalidArgument,
       "target_modules: empty list"},
      {"number targets", [](json& j) { j["target_modules"] = 5; }, StatusCode::kInvalidArgument, "target_modules: must be"},
      {"embedding target", [](json& j) { j["target_modules"] = {"q_proj", "embed_tokens"}; }, StatusCode::kUnimplemented,
       "target_modules[1]: \"embed_tokens\" is not a module the engine adapts"},
      {"lm_head target", [](json& j) { j["target_modules"] = {"lm_head"}; }, StatusCode::kUnimplemented,
       "target_modules[0]"},
      {"non-string target", [](json& j) { j["target_modules"] = {"q_proj", 3}; }, StatusCode::kInvalidArgument,
       "target_modules[1]: must be a string"},
      {"bad regex", [](json& j) { j["target_modules"] = "(q_proj"; }, StatusCode::kInvalidArgument,
       "not a valid regular expression"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    json j = GoodConfig();
    c.edit(j);
    StatusOr<LoraConfig> got = ParseLoraConfig(j, "dir/adapter_config.json");
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), c.code) << got.status();
    EXPECT_NE(got.status().message().find("dir/adapter_config.json: "), std::string::npos) << got.status();
    EXPECT_NE(got.status().message().find(c.want), std::string::npos) << got.status();
  }
}

// --- loading ----------------------------------------------------------------------------------

TEST(LoraAdapter, LoadsWhatInitRandomLoraWrites) {
  TempDir tmp;
  const ModelConfig base = Base();
  struct Case {
    std::string name;
    InitLoraOptions options;
    DType storage;
  };
  const Case cases[] = {
      {"f32 attention", {.rank = 4, .alpha = 8, .targets = {LoraModule::kQ, LoraModule::kK, LoraModule::kV, LoraModule::kO}, .seed = 1}, DType::kF32},
      {"bf16 mlp rslora, layer 1 only",
       {.rank = 3, .alpha = 6, .targets = {LoraModule::kGate, LoraModule::kUp, LoraModule::kDown}, .use_rslora = true,
        .seed = 2, .b_std = 0.5, .dtype = DType::kBF16, .layers = {1}},
       DType::kF32},
      {"f16 file, f16 storage", {.rank = 8, .alpha = 4, .targets = {LoraModule::kDown, LoraModule::kQ}, .seed = 3, .dtype = DType::kF16},
       DType::kF16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path dir = tmp.path() / c.name;
    ASSERT_TRUE(InitRandomLora(dir, base, c.options).ok());
    StatusOr<std::unique_ptr<LoraAdapter>> a = LoraAdapter::Load(dir, base, {.max_rank = 8, .dtype = c.storage});
    ASSERT_TRUE(a.ok()) << a.status();
    const LoraConfig& cfg = (*a)->config();
    EXPECT_EQ(cfg.rank, c.options.rank);
    const double want_scale = c.options.use_rslora ? c.options.alpha / std::sqrt(static_cast<double>(c.options.rank))
                                                   : c.options.alpha / static_cast<double>(c.options.rank);
    EXPECT_FLOAT_EQ(cfg.Scale(), static_cast<float>(want_scale));
    StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(dir / "adapter_model.safetensors");
    ASSERT_TRUE(f.ok());
    int64_t adapted = 0;
    for (int64_t l = 0; l < base.num_hidden_layers; ++l) {
      const bool layer_on = c.options.layers.empty() || l == 1;
      for (LoraModule m : kAllLoraModules) {
        const LoraWeights* w = (*a)->weights(l, m);
        const bool on = layer_on && std::find(c.options.targets.begin(), c.options.targets.end(), m) != c.options.targets.end();
        ASSERT_EQ(w != nullptr, on) << LoraModuleKey(l, m);
        if (!on) continue;
        ++adapted;
        const LoraModuleShape s = ModuleShape(base, m);
        EXPECT_EQ(w->in(), s.in);
        EXPECT_EQ(w->out(), s.out);
        EXPECT_EQ(w->padded_rank(), 8);
        EXPECT_EQ(w->dtype(), c.storage);
        const std::string p = "base_model.model." + LoraModuleKey(l, m);
        const std::vector<float> A = TensorToFloat(*(*f)->Find(p + ".lora_A.weight"));
        const std::vector<float> B = TensorToFloat(*(*f)->Find(p + ".lora_B.weight"));
        auto stored = [&](float v) { return c.storage == DType::kF16 ? HalfToFloat(FloatToHalf(v)) : v; };
        for (int64_t r = 0; r < w->rank(); ++r) {
          for (int64_t k = 0; k < s.in; ++k) ASSERT_EQ(w->A(r, k), stored(A[static_cast<size_t>(r * s.in + k)]));
          for (int64_t o = 0; o < s.out; ++o) ASSERT_EQ(w->B(o, r), stored(B[static_cast<size_t>(o * w->rank() + r)]));
        }
        float bmax = 0;
        for (float v : B) bmax = std::max(bmax, std::abs(v));
        EXPECT_GT(bmax, 0.0f) << "B must not be zero, or the adapter would do nothing";
      }
    }
    EXPECT_EQ((*a)->num_adapted(), adapted);
    EXPECT_GT((*a)->bytes(), 0u);
  }
}

// A directory PEFT-shaped by hand, for the unhappy paths.
struct FakeTensor {
  std::string name;
  std::vector<int64_t> shape;
  float poison = 0;  // stored at element 3 when non-zero
};

std::string T(int layer, std::string_view module, char ab) {
  const std::optional<LoraModule> m = ParseLoraModule(module);
  return "base_model.model." + LoraModuleKey(layer, *m) + ".lora_" + ab + ".weight";
}

// r 4; q [16 -> 16], k [16 -> 8], down [24 -> 16] in both layers.
std::vector<FakeTensor> GoodTensors() {
  std::vector<FakeTensor> t;
  for (int l = 0; l < 2; ++l) {
    t.push_back({T(l, "q_proj", 'A'), {4, 16}});
    t.push_back({T(l, "q_proj", 'B'), {16, 4}});
    t.push_back({T(l, "k_proj", 'A'), {4, 16}});
    t.push_back({T(l, "k_proj", 'B'), {8, 4}});
    t.push_back({T(l, "down_proj", 'A'), {4, 24}});
    t.push_back({T(l, "down_proj", 'B'), {16, 4}});
  }
  return t;
}

json GoodDirConfig() {
  return json{{"peft_type", "LORA"}, {"r", 4}, {"lora_alpha", 8}, {"target_modules", {"q_proj", "k_proj", "down_proj"}},
              {"bias", "none"}};
}

void WriteDir(const fs::path& dir, const json& config, const std::vector<FakeTensor>& tensors) {
  fs::create_directories(dir);
  std::vector<std::vector<float>> values;
  std::vector<TensorToWrite> out;
  for (const FakeTensor& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * static_cast<float>(i % 7) - 0.02f;
    if (t.poison != 0 && v.size() > 3) v[3] = t.poison;
    values.push_back(std::move(v));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    out.push_back({.name = tensors[i].name, .dtype = DType::kF32, .shape = tensors[i].shape,
                   .data = std::as_bytes(std::span<const float>(values[i]))});
  }
  ASSERT_TRUE(WriteSafetensors(dir / "adapter_model.safetensors", out).ok());
  ASSERT_TRUE(WriteFileAtomically(dir / "adapter_config.json", config.dump()).ok());
}

TEST(LoraAdapter, HandWrittenDirectoryLoads) {
  TempDir tmp;
  WriteDir(tmp.path(), GoodDirConfig(), GoodTensors());
  StatusOr<std::unique_ptr<LoraAdapter>> a = LoraAdapter::Load(tmp.path(), Base(), {});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->num_adapted(), 6);
  EXPECT_EQ((*a)->weights(1, LoraModule::kK)->out(), 8);
  EXPECT_EQ((*a)->weights(0, LoraModule::kV), nullptr);
}

TEST(LoraAdapter, RefusesBadDirectories) {
  struct Case {
    std::string name;
    std::function<void(json&, std::vector<FakeTensor>&)> edit;
    std::function<void(const fs::path&)> after;  // file-level damage, optional
    int64_t max_rank;
    StatusCode code;
    std::vector<std::string> want;  // substrings of the message
  };
  auto none = [](json&, std::vector<FakeTensor>&) {};
  auto add = [](FakeTensor t) { return [t](json&, std::vector<FakeTensor>& v) { v.push_back(t); }; };
  auto drop = [](const std::string& name) {
    return [name](json&, std::vector<FakeTensor>& v) {
      std::erase_if(v, [&](const FakeTensor& t) { return t.name == name; });
    };
  };
  auto reshape = [](const std::string& name, std::vector<int64_t> shape) {
    return [name, shape](json&, std::vector<FakeTensor>& v) {
      for (FakeTensor& t : v) {
        if (t.name == name) t.shape = shape;
      }
    };
  };
  const std::string kA1 = T(1, "k_proj", 'A'), kB1 = T(1, "k_proj", 'B');
  const Case cases[] = {
      {"no config", none, [](const fs::path& d) { fs::remove(d / "adapter_config.json"); }, 16, StatusCode::kNotFound,
       {"adapter_config.json: cannot open"}},
      {"no weights", none, [](const fs::path& d) { fs::remove(d / "adapter_model.safetensors"); }, 16,
       StatusCode::kNotFound, {"adapter_model.safetensors"}},
      {"pickled weights", none,
       [](const fs::path& d) {
         fs::rename(d / "adapter_model.safetensors", d / "adapter_model.bin");
       },
       16, StatusCode::kUnimplemented, {"adapter_model.bin", "safetensors"}},
      {"config not json", none, [](const fs::path& d) { (void)WriteFileAtomically(d / "adapter_config.json", "{r: 4"); }, 16,
       StatusCode::kInvalidArgument, {"adapter_config.json: not valid JSON"}},
      {"rank over the engine's max", none, nullptr, 2, StatusCode::kInvalidArgument,
       {"adapter_config.json: r: 4 is larger than the engine's max LoRA rank 2"}},
      {"config option", [](json& j, std::vector<FakeTensor>&) { j["fan_in_fan_out"] = true; }, nullptr, 16,
       StatusCode::kUnimplemented, {"adapter_config.json: fan_in_fan_out"}},
      {"layer past the model", add({T(2, "q_proj", 'A'), {4, 16}}), nullptr, 16, StatusCode::kInvalidArgument,
       {"adapter_model.safetensors: " + T(2, "q_proj", 'A'), "layer 2 is outside the base model's 2 layers"}},
      {"A with wrong in", reshape(kA1, {4, 12}), nullptr, 16, StatusCode::kInvalidArgument,
       {kA1, "shape [4, 12], expected [4, 16]"}},
      {"k B as wide as q (GQA)", reshape(kB1, {16, 4}), nullptr, 16, StatusCode::kInvalidArgument,
       {kB1, "shape [16, 4], expected [8, 4]"}},
      {"rank differs from r", reshape(kA1, {2, 16}), nullptr, 16, StatusCode::kInvalidArgument, {kA1, "expected [4, 16]"}},
      {"missing B", drop(kB1), nullptr, 16, StatusCode::kInvalidArgument, {kA1, "has no matching " + kB1}},
      {"missing A", drop(kA1), nullptr, 16, StatusCode::kInvalidArgument, {kB1, "has no matching " + kA1}},
      {"nan", [&](json&, std::vector<FakeTensor>& v) { v[3].poison = std::numeric_limits<float>::quiet_NaN(); }, nullptr,
       16, StatusCode::kInvalidArgument, {T(0, "k_proj", 'B'), "element 3 is not finite"}},
      {"inf", [&](json&, std::vector<FakeTensor>& v) { v[0].poison = std::numeric_limits<float>::infinity(); }, nullptr,
       16, StatusCode::kInvalidArgument, {T(0, "q_proj", 'A'), "not finite"}},
      {"module not targeted", add({T(0, "v_proj", 'A'), {4, 16}}), nullptr, 16, StatusCode::kInvalidArgument,
       {T(0, "v_proj", 'A'), "not among the adapter's target_modules"}},
      {"target without tensors",
       [](json& j, std::vector<FakeTensor>&) { j["target_modules"] = {"q_proj", "k_proj", "down_proj", "o_proj"}; },
       nullptr, 16, StatusCode::kInvalidArgument, {"target_modules[3]: \"o_proj\" has no tensors"}},
      {"no tensors", [](json&, std::vector<FakeTensor>& v) { v.clear(); }, nullptr, 16, StatusCode::kInvalidArgument,
       {"no LoRA tensors"}},
      {"embedding adapter", add({"base_model.model.model.embed_tokens.lora_embedding_A", {4, 32}}), nullptr, 16,
       StatusCode::kUnimplemented, {"lora_embedding_A", "embeddings"}},
      {"lm_head adapter", add({"base_model.model.lm_head.lora_A.weight", {4, 16}}), nullptr, 16,
       StatusCode::kUnimplemented, {"lm_head.lora_A.weight", "not a decoder-layer module"}},
      {"saved full module", add({"base_model.model.lm_head.weight", {32, 16}}), nullptr, 16, StatusCode::kUnimplemented,
       {"lm_head.weight", "modules_to_save"}},
      {"dora", add({"base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", {16}}), nullptr, 16,
       StatusCode::kUnimplemented, {"DoRA"}},
      {"trained bias", add({"base_model.model.model.layers.0.self_attn.q_proj.bias", {16}}), nullptr, 16,
       StatusCode::kUnimplemented, {"biases"}},
      {"module under the wrong parent", add({"base_model.model.model.layers.0.mlp.q_proj.lora_A.weight", {4, 16}}),
       nullptr, 16, StatusCode::kUnimplemented, {"mlp.q_proj"}},
      {"foreign name", add({"model.layers.0.self_attn.q_proj.weight", {16, 16}}), nullptr, 16,
       StatusCode::kInvalidArgument, {"not a PEFT LoRA tensor name"}},
      {"no layer index", add({"base_model.model.model.layers.x.self_attn.q_proj.lora_A.weight", {4, 16}}), nullptr, 16,
       StatusCode::kInvalidArgument, {"no layer index"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir tmp;
    json config = GoodDirConfig();
    std::vector<FakeTensor> tensors = GoodTensors();
    c.edit(config, tensors);
    WriteDir(tmp.path(), config, tensors);
    if (c.after) c.after(tmp.path());
    StatusOr<std::unique_ptr<LoraAdapter>> a = LoraAdapter::Load(tmp.path(), Base(), {.max_rank = c.max_rank});
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), c.code) << a.status();
    for (const std::string& w : c.want) EXPECT_NE(a.status().message().find(w), std::string::npos) << a.status();
  }
}

TEST(LoraAdapter, RefusesBadLoadOptions) {
  TempDir tmp;
  WriteDir(tmp.path(), GoodDirConfig(), GoodTensors());
  EXPECT_EQ(LoraAdapter::Load(tmp.path(), Base(), {.max_rank = 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LoraAdapter::Load(tmp.path(), Base(), {.max_rank = 1024}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LoraAdapter::Load(tmp.path(), Base(), {.dtype = DType::kBF16}).status().code(), StatusCode::kInvalidArgument);
}

TEST(LoraAdapter, F16StorageRefusesValuesOutOfRange) {
  TempDir tmp;
  std::vector<FakeTensor> tensors = GoodTensors();
  tensors[1].poison = 1e5f;  // layer 0 q_proj B
  WriteDir(tmp.path(), GoodDirConfig(), tensors);
  EXPECT_TRUE(LoraAdapter::Load(tmp.path(), Base(), {.dtype = DType::kF32}).ok());
  const StatusOr<std::unique_ptr<LoraAdapter>> f16 = LoraAdapter::Load(tmp.path(), Base(), {.dtype = DType::kF16});
  EXPECT_EQ(f16.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f16.status().message().find("does not fit F16 storage"), std::string::npos) << f16.status();
}

TEST(CheckLoraBase, ComparesModuleShapes) {
  EXPECT_TRUE(CheckLoraBase(Base(), Base()).ok());
  ModelConfig other = Base();
  other.vocab_size = 1000;  // not a module shape
  other.rope_theta = 1e6;
  EXPECT_TRUE(CheckLoraBase(Base(), other).ok());
  struct Case {
    std::string name;
    std::function<void(ModelConfig&)> edit;
    std::string want;
  };
  const Case cases[] = {
      {"layers", [](ModelConfig& c) { c.num_hidden_layers = 3; }, "3 layers, the model has 2"},
      {"kv heads", [](ModelConfig& c) { c.num_key_value_heads = 4; }, "k_proj is [16 -> 16], the model's is [16 -> 8]"},
      {"ffn", [](ModelConfig& c) { c.intermediate_size = 32; }, "gate_proj"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ModelConfig changed = Base();
    c.edit(changed);
    const Status s = CheckLoraBase(Base(), changed);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(c.want), std::string::npos) << s;
  }
}

// --- the writer -------------------------------------------------------------------------------

TEST(InitRandomLora, RefusesBadOptions) {
  TempDir tmp;
  struct Case {
    std::string name;
    InitLoraOptions o;
    StatusCode code;
  };
  const Case cases[] = {
      {"rank 0", {.rank = 0}, StatusCode::kInvalidArgument},
      {"rank too large", {.rank = 513}, StatusCode::kInvalidArgument},
      {"no targets", {.targets = {}}, StatusCode::kInvalidArgument},
      {"duplicate target", {.targets = {LoraModule::kQ, LoraModule::kQ}}, StatusCode::kInvalidArgument},
      {"layer out of range", {.layers = {0, 2}}, StatusCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(InitRandomLora(tmp.path() / "x", Base(), c.o).code(), c.code);
  }
  ASSERT_TRUE(InitRandomLora(tmp.path() / "a", Base(), {}).ok());
  EXPECT_EQ(InitRandomLora(tmp.path() / "a", Base(), {}).code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(InitRandomLora(tmp.path() / "a", Base(), {.overwrite = true}).ok());
}

TEST(InitRandomLora, SameSeedSameBytes) {
  TempDir tmp;
  ASSERT_TRUE(InitRandomLora(tmp.path() / "a", Base(), {.seed = 5}).ok());
  ASSERT_TRUE(InitRandomLora(tmp.path() / "b", Base(), {.seed = 5}).ok());
  ASSERT_TRUE(InitRandomLora(tmp.path() / "c", Base(), {.seed = 6}).ok());
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(tmp.path() / "a/adapter_model.safetensors"), bytes(tmp.path() / "b/adapter_model.safetensors"));
  EXPECT_NE(bytes(tmp.path() / "a/adapter_model.safetensors"), bytes(tmp.path() / "c/adapter_model.safetensors"));
}

}  // namespace
}  // namespace aicloud::engine
