#include "engine/model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "engine/model/model_test_util.h"

namespace aicloud::engine {
namespace {

using nlohmann::json;

// SmolLM2-135M's config.json, abridged to the fields the engine reads.
json SmolLm2() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
    "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 100000,
    "rope_scaling": null, "tie_word_embeddings": true, "hidden_act": "silu",
    "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "bfloat16",
    "attention_bias": false, "mlp_bias": false
  })");
}

// Sets each key of `patch` on `doc`; the string "<remove>" deletes the key instead.
json Patched(json doc, const json& patch) {
  for (const auto& [k, v] : patch.items()) {
    if (v.is_string() && v.get<std::string>() == "<remove>") {
      doc.erase(k);
    } else {
      doc[k] = v;
    }
  }
  return doc;
}

TEST(ModelConfigTest, ParsesSmolLm2) {
  StatusOr<ModelConfig> c = ParseModelConfig(SmolLm2());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->hidden_size, 576);
  EXPECT_EQ(c->num_hidden_layers, 30);
  EXPECT_EQ(c->num_attention_heads, 9);
  EXPECT_EQ(c->num_key_value_heads, 3);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->q_dim(), 576);
  EXPECT_EQ(c->kv_dim(), 192);
  EXPECT_EQ(c->intermediate_size, 1536);
  EXPECT_EQ(c->vocab_size, 49152);
  EXPECT_EQ(c->max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope_theta, 100000);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_EQ(c->bos_token_ids, std::vector<int64_t>{0});
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{0});
  EXPECT_EQ(c->torch_dtype, DType::kBF16);
  // The published parameter count of SmolLM2-135M.
  EXPECT_EQ(c->ParameterCount(), 134'515'008);
}

struct GoodCase {
  std::string name;
  json patch;
  std::function<void(const ModelConfig&)> check;
};

TEST(ModelConfigTest, AcceptsVariants) {
  const std::vector<GoodCase> cases = {
      {"kv heads default to heads", {{"num_key_value_heads", "<remove>"}},
       [](const ModelConfig& c) { EXPECT_EQ(c.num_key_value_heads, 9); }},
      {"null kv heads default to heads", {{"num_key_value_heads", nullptr}},
       [](const ModelConfig& c) { EXPECT_EQ(c.num_key_value_heads, 9); }},
      {"explicit head_dim need not divide hidden",
       {{"num_attention_heads", 10}, {"num_key_value_heads", 5}, {"head_dim", 64}},
       [](const ModelConfig& c) {
         EXPECT_EQ(c.head_dim, 64);
         EXPECT_EQ(c.q_dim(), 640);
       }},
      {"eos list", {{"eos_token_id", {1, 2}}},
       [](const ModelConfig& c) { EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 2})); }},
      {"null token ids", {{"bos_token_id", nullptr}, {"eos_token_id", "<remove>"}},
       [](const ModelConfig& c) {
         EXPECT_TRUE(c.bos_token_ids.empty());
         EXPECT_TRUE(c.eos_token_ids.empty());
       }},
      {"untied", {{"tie_word_embeddings", false}},
       [](const ModelConfig& c) { EXPECT_EQ(c.ParameterCount(), 134'515'008 + 49152 * 576); }},
      {"tie default is false", {{"tie_word_embeddings", "<remove>"}},
       [](const ModelConfig& c) { EXPECT_FALSE(c.tie_word_embeddings); }},
      {"llama attention bias", {{"attention_bias", true}},
       [](const ModelConfig& c) {
         EXPECT_TRUE(c.qkv_bias);
         EXPECT_TRUE(c.o_bias);
       }},
      {"qwen2 has q/k/v biases",
       {{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"}, {"use_sliding_window", false},
        {"sliding_window", 32768}},
       [](const ModelConfig& c) {
         EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
         EXPECT_TRUE(c.qkv_bias);
         EXPECT_FALSE(c.o_bias);
         EXPECT_EQ(c.sliding_window, 0);
       }},
      {"mistral window", {{"architectures", {"MistralForCausalLM"}}, {"model_type", "mistral"}, {"sliding_window", 4096}},
       [](const ModelConfig& c) { EXPECT_EQ(c.sliding_window, 4096); }},
      {"mistral null window", {{"architectures", {"MistralForCausalLM"}}, {"model_type", "mistral"}, {"sliding_window", nullptr}},
       [](const ModelConfig& c) { EXPECT_EQ(c.sliding_window, 0); }},
      {"architectures alone", {{"model_type", "<remove>"}},
       [](const ModelConfig& c) { EXPECT_EQ(c.model_type, "llama"); }},
      {"model_type alone", {{"architectures", "<remove>"}},
       [](const ModelConfig& c) { EXPECT_EQ(c.architecture, "LlamaForCausalLM"); }},
      {"defaults", {{"rms_norm_eps", "<remove>"}, {"rope_theta", "<remove>"}, {"max_position_embeddings", "<remove>"},
                    {"hidden_act", "<remove>"}, {"torch_dtype", "<remove>"}},
       [](const ModelConfig& c) {
         EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
         EXPECT_DOUBLE_EQ(c.rope_theta, 10000);
         EXPECT_EQ(c.max_position_embeddings, 2048);
         EXPECT_FALSE(c.torch_dtype.has_value());
       }},
      {"newer dtype key", {{"torch_dtype", "<remove>"}, {"dtype", "float16"}},
       [](const ModelConfig& c) { EXPECT_EQ(c.torch_dtype, DType::kF16); }},
      {"float32", {{"torch_dtype", "float32"}}, [](const ModelConfig& c) { EXPECT_EQ(c.torch_dtype, DType::kF32); }},
      {"default rope type", {{"rope_scaling", {{"rope_type", "default"}}}},
       [](const ModelConfig& c) { EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone); }},
      {"linear rope via legacy 'type'", {{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}},
       [](const ModelConfig& c) {
         EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
         EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 2.0);
       }},
      {"llama3 rope",
       {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}}}},
       [](const ModelConfig& c) {
         EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
         EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
         EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
         EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
         EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
       }},
      {"rope_parameters (newer transformers)",
       {{"rope_theta", "<remove>"}, {"rope_scaling", "<remove>"},
        {"rope_parameters", {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 32.0},
                             {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                             {"original_max_position_embeddings", 8192}}}},
       [](const ModelConfig& c) {
         EXPECT_DOUBLE_EQ(c.rope_theta, 500000);
         EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
         EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
       }},
      {"integer eps", {{"rms_norm_eps", 1}}, [](const ModelConfig& c) { EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1.0); }},
  };
  for (const GoodCase& tc : cases) {
    SCOPED_TRACE(tc.name);
    StatusOr<ModelConfig> c = ParseModelConfig(Patched(SmolLm2(), tc.patch));
    ASSERT_TRUE(c.ok()) << c.status();
    tc.check(*c);
  }
}

struct BadCase {
  std::string name;
  json patch;
  StatusCode code;
  std::string message;  // substring of the error
};

TEST(ModelConfigTest, RejectsBadConfigs) {
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  const StatusCode kUnimpl = StatusCode::kUnimplemented;
  const std::vector<BadCase> cases = {
      {"heads do not divide hidden", {{"num_attention_heads", 7}, {"num_key_value_heads", 7}}, kInvalid,
       "config.json: num_attention_heads: 7 does not divide hidden_size 576"},
      {"kv heads do not divide heads", {{"num_key_value_heads", 4}}, kInvalid,
       "config.json: num_key_value_heads: 4 does not divide num_attention_heads 9"},
      {"zero hidden", {{"hidden_size", 0}}, kInvalid, "config.json: hidden_size: must be positive, got 0"},
      {"negative layers", {{"num_hidden_layers", -5}}, kInvalid, "num_hidden_layers: must be positive, got -5"},
      {"string size", {{"hidden_size", "576"}}, kInvalid,
       "hidden_size: must be a positive integer, got the string \"576\""},
      {"fractional size", {{"intermediate_size", 1536.5}}, kInvalid,
       "intermediate_size: must be a positive integer, got 1536.5"},
      {"bool size", {{"num_hidden_layers", true}}, kInvalid, "num_hidden_layers: must be a positive integer, got true"},
      {"null required size", {{"vocab_size", nullptr}}, kInvalid, "config.json: vocab_size: missing"},
      {"missing vocab", {{"vocab_size", "<remove>"}}, kInvalid, "config.json: vocab_size: missing"},
      {"huge hidden", {{"hidden_size", 1 << 22}}, kInvalid, "hidden_size: 4194304 is larger than the supported"},
      {"huge unsigned", {{"vocab_size", uint64_t{1} << 63}}, kInvalid, "vocab_size: 9223372036854775808 is larger"},
      {"odd head_dim", {{"head_dim", 63}}, kInvalid, "config.json: head_dim: must be even"},
      {"zero head_dim", {{"head_dim", 0}}, kInvalid, "head_dim: must be positive"},
      {"no family", {{"architectures", "<remove>"}, {"model_type", "<remove>"}}, kInvalid, "model_type: missing"},
      {"other model_type", {{"model_type", "gpt2"}, {"architectures", "<remove>"}}, kUnimpl,
       "config.json: model_type: \"gpt2\" is not supported"},
      {"other architecture", {{"architectures", {"GemmaForCausalLM"}}, {"model_type", "<remove>"}}, kUnimpl,
       "architectures: \"GemmaForCausalLM\" is not supported"},
      {"architecture/model_type mismatch", {{"architectures", {"Qwen2ForCausalLM"}}}, kInvalid,
       "architectures: \"Qwen2ForCausalLM\" does not match model_type \"llama\""},
      {"architectures not a list", {{"architectures", "LlamaForCausalLM"}}, kInvalid,
       "architectures: must be a non-empty list"},
      {"gelu", {{"hidden_act", "gelu"}}, kUnimpl, "hidden_act: \"gelu\" is not supported"},
      {"mlp bias", {{"mlp_bias", true}}, kUnimpl, "mlp_bias"},
      {"quantized", {{"quantization_config", {{"quant_method", "fp8"}}}}, kUnimpl, "quantization_config"},
      {"partial rotary", {{"partial_rotary_factor", 0.5}}, kUnimpl, "partial_rotary_factor"},
      {"qwen2 sliding window", {{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"}, {"use_sliding_window", true}},
       kUnimpl, "use_sliding_window"},
      {"yarn", {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}}, kUnimpl,
       "config.json: rope_scaling.rope_type: \"yarn\" is not supported (supported: default, linear, llama3)"},
      {"dynamic via legacy type", {{"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}}}, kUnimpl,
       "rope_scaling.type: \"dynamic\" is not supported"},
      {"rope type missing", {{"rope_scaling", {{"factor", 2.0}}}}, kInvalid, "rope_scaling.rope_type: missing"},
      {"rope type not a string", {{"rope_scaling", {{"rope_type", 3}}}}, kInvalid,
       "rope_scaling.rope_type: must be a string"},
      {"rope scaling not an object", {{"rope_scaling", "linear"}}, kInvalid, "rope_scaling: must be null or an object"},
      {"linear without factor", {{"rope_scaling", {{"rope_type", "linear"}}}}, kInvalid, "rope_scaling.factor: missing"},
      {"llama3 without low_freq_factor",
       {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}}}},
       kInvalid, "config.json: rope_scaling.low_freq_factor: missing"},
      {"llama3 without original length",
       {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}}}},
       kInvalid, "rope_scaling.original_max_position_embeddings: missing"},
      {"llama3 high <= low",
       {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}}}},
       kInvalid, "rope_scaling.high_freq_factor: must be larger than low_freq_factor"},
      {"negative factor", {{"rope_scaling", {{"rope_type", "linear"}, {"factor", -2.0}}}}, kInvalid,
       "rope_scaling.factor: must be positive"},
      {"eos outside vocab", {{"eos_token_id", 60000}}, kInvalid,
       "config.json: eos_token_id: token id 60000 is outside the vocabulary (vocab_size 49152)"},
      {"eos in list outside vocab", {{"eos_token_id", {1, 49152}}}, kInvalid, "eos_token_id: token id 49152"},
      {"bos negative", {{"bos_token_id", -1}}, kInvalid, "bos_token_id: must be a token id"},
      {"eos string", {{"eos_token_id", "</s>"}}, kInvalid, "eos_token_id: must be a token id"},
      {"tie not bool", {{"tie_word_embeddings", "yes"}}, kInvalid,
       "tie_word_embeddings: must be true or false, got the string \"yes\""},
      {"unknown dtype", {{"torch_dtype", "float8_e4m3fn"}}, kInvalid,
       "torch_dtype: \"float8_e4m3fn\" is not float32, float16 or bfloat16"},
      {"dtype not a string", {{"torch_dtype", 16}}, kInvalid, "torch_dtype: must be a string"},
      {"negative eps", {{"rms_norm_eps", -1e-5}}, kInvalid, "rms_norm_eps: must be positive"},
      {"string theta", {{"rope_theta", "1e4"}}, kInvalid, "rope_theta: must be a number"},
      {"zero theta", {{"rope_theta", 0}}, kInvalid, "rope_theta: must be positive"},
      {"attention_bias not bool", {{"attention_bias", 1}}, kInvalid, "attention_bias: must be true or false"},
      {"mistral zero window", {{"architectures", {"MistralForCausalLM"}}, {"model_type", "mistral"}, {"sliding_window", 0}},
       kInvalid, "sliding_window: must be positive"},
  };
  for (const BadCase& tc : cases) {
    SCOPED_TRACE(tc.name);
    StatusOr<ModelConfig> c = ParseModelConfig(Patched(SmolLm2(), tc.patch));
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), tc.code) << c.status();
    EXPECT_NE(c.status().message().find(tc.message), std::string::npos) << c.status();
  }
}

TEST(ModelConfigTest, RejectsNonObject) {
  StatusOr<ModelConfig> c = ParseModelConfig(json::array(), "m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "m/config.json: must be a JSON object, got a array");
}

TEST(ModelConfigTest, LoadNamesTheFile) {
  testing::TempDir dir;
  StatusOr<ModelConfig> missing = LoadModelConfig(dir / "config.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find((dir / "config.json").string()), std::string::npos);

  testing::WriteAll(dir / "config.json", "{\"hidden_size\": 5,");
  StatusOr<ModelConfig> broken = LoadModelConfig(dir / "config.json");
  EXPECT_EQ(broken.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(broken.status().message().find("config.json: not valid JSON"), std::string::npos) << broken.status();

  testing::WriteAll(dir / "config.json", Patched(SmolLm2(), {{"num_key_value_heads", 2}}).dump());
  StatusOr<ModelConfig> bad = LoadModelConfig(dir / "config.json");
  EXPECT_EQ(bad.status().message(),
            (dir / "config.json").string() +
                ": num_key_value_heads: 2 does not divide num_attention_heads 9 (each KV head must serve a "
                "whole number of query heads)");

  testing::WriteAll(dir / "config.json", SmolLm2().dump());
  EXPECT_TRUE(LoadModelConfig(dir / "config.json").ok());
}

TEST(ModelConfigTest, ToJsonRoundTrips) {
  std::vector<json> docs = {
      SmolLm2(),
      Patched(SmolLm2(), {{"eos_token_id", {0, 1, 2}}, {"bos_token_id", nullptr}, {"tie_word_embeddings", false}}),
      Patched(SmolLm2(), {{"attention_bias", true},
                          {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}}}}),
      Patched(SmolLm2(), {{"rope_scaling", {{"type", "linear"}, {"factor", 4.0}}}, {"torch_dtype", "float32"}}),
      Patched(SmolLm2(), {{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"}}),
      Patched(SmolLm2(), {{"architectures", {"MistralForCausalLM"}}, {"model_type", "mistral"}, {"sliding_window", 4096}}),
  };
  for (const json& doc : docs) {
    StatusOr<ModelConfig> a = ParseModelConfig(doc);
    ASSERT_TRUE(a.ok()) << a.status();
    StatusOr<ModelConfig> b = ParseModelConfig(a->ToJson());
    ASSERT_TRUE(b.ok()) << b.status() << "\n" << a->ToJson().dump(2);
    EXPECT_EQ(a->ToJson(), b->ToJson());
    EXPECT_EQ(b->qkv_bias, a->qkv_bias);
    EXPECT_EQ(b->o_bias, a->o_bias);
    EXPECT_EQ(b->sliding_window, a->sliding_window);
    EXPECT_EQ(b->rope_scaling.type, a->rope_scaling.type);
    EXPECT_EQ(b->eos_token_ids, a->eos_token_ids);
  }
}

// The llama3 rule, written independently of the implementation from the published description
// (Llama 3.1's `apply_scaling`): frequencies whose wavelength is shorter than
// original_len / high_freq_factor are kept, longer than original_len / low_freq_factor are divided
// by factor, and in between interpolated linearly in original_len / wavelength.
std::vector<double> ReferenceLlama3(double theta, int dim, double factor, double low, double high, double original_len) {
  std::vector<double> out;
  for (int j = 0; j < dim; j += 2) {
    const double freq = std::exp(-std::log(theta) * j / dim);  // 1 / theta^(j/dim)
    const double wavelen = 2 * M_PI / freq;
    const double ratio = original_len / wavelen;  // how many wavelengths fit the original context
    double v;
    if (ratio > high) {
      v = freq;
    } else if (ratio < low) {
      v = freq / factor;
    } else {
      const double t = (ratio - low) / (high - low);
      v = freq / factor + t * (freq - freq / factor);
    }
    out.push_back(v);
  }
  return out;
}

TEST(RopeTest, Llama3ScalingMatchesTheReferenceRule) {
  // Llama 3.1 8B.
  ModelConfig c = testing::TinyLlama();
  c.head_dim = 128;
  c.rope_theta = 500000;
  c.rope_scaling = {RopeScaling::Type::kLlama3, 8.0, 1.0, 4.0, 8192};
  const std::vector<float> got = RopeInverseFrequencies(c);
  const std::vector<double> want = ReferenceLlama3(500000, 128, 8.0, 1.0, 4.0, 8192);
  ASSERT_EQ(got.size(), 64u);
  int kept = 0, scaled = 0, smoothed = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-6 * want[i]) << "i=" << i;
    const double base = std::pow(500000.0, -2.0 * static_cast<double>(i) / 128);
    if (std::abs(got[i] - base) <= 1e-6 * base) {
      ++kept;
    } else if (std::abs(got[i] - base / 8) <= 1e-6 * base) {
      ++scaled;
    } else {
      ++smoothed;
    }
    if (i > 0) {
      EXPECT_LT(got[i], got[i - 1]);  // still strictly decreasing
    }
  }
  // All three regimes occur for these parameters.
  EXPECT_GT(kept, 0);
  EXPECT_GT(scaled, 0);
  EXPECT_GT(smoothed, 0);
  EXPECT_EQ(kept + scaled + smoothed, 64);
  EXPECT_FLOAT_EQ(got[0], 1.0f);
  EXPECT_FLOAT_EQ(got[63], static_cast<float>(std::pow(500000.0, -126.0 / 128) / 8));
}

TEST(RopeTest, DefaultAndLinear) {
  ModelConfig c = testing::TinyLlama();  // head_dim 16, theta 10000
  std::vector<float> base = RopeInverseFrequencies(c);
  ASSERT_EQ(base.size(), 8u);
  for (size_t i = 0; i < base.size(); ++i) {
    EXPECT_FLOAT_EQ(base[i], static_cast<float>(1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i) / 16)));
  }
  c.rope_scaling = {RopeScaling::Type::kLinear, 4.0};
  std::vector<float> linear = RopeInverseFrequencies(c);
  for (size_t i = 0; i < base.size(); ++i) EXPECT_FLOAT_EQ(linear[i], base[i] / 4);
}

TEST(ModelConfigTest, ValidateCatchesCodeBuiltConfigs) {
  ModelConfig c = testing::TinyLlama();
  EXPECT_TRUE(ValidateModelConfig(c).ok());
  c.num_key_value_heads = 3;
  EXPECT_NE(ValidateModelConfig(c, "x").message().find("x: num_key_value_heads: 3 does not divide"),
            std::string::npos);
  c = testing::TinyLlama();
  c.eos_token_ids = {100};
  EXPECT_NE(ValidateModelConfig(c).message().find("eos_token_id: token id 100 is outside"), std::string::npos);
  c = testing::TinyLlama();
  c.model_type = "bert";
  EXPECT_EQ(ValidateModelConfig(c).code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace aicloud::engine
