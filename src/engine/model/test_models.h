// Test and benchmark models. PlainTestModel is the small random-weight Llama the engine's
// reference fixtures were computed from (tests/engine/data/reference_plain.json and the
// lora_plain_*.json adapters on it). The runner, LoRA and server tests write it with
// InitRandomCheckpoint and compare against those fixtures, so every option there is part of the
// fixtures: change one and regenerate them (see src/engine/runner/llama_test.cc).
// SmolLm2_135M is the shape the benchmarks measure (bench/RESULTS.md).
#pragma once

#include <string>

#include "engine/model/random_checkpoint.h"

namespace aicloud::engine {

// Two layers, hidden 64, 4 heads / 2 KV heads of 16, FFN 128, untied, F32, GPT-2's vocabulary,
// seed 7, init_std 0.1 (larger than training-time init so the logits are not all alike).
inline InitCheckpointOptions PlainTestModel(const std::string& source_dir) {
  InitCheckpointOptions o;
  ModelConfig& c = o.config;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 128;
  c.max_position_embeddings = 512;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000;
  c.tie_word_embeddings = false;
  o.dtype = DType::kF32;
  o.seed = 7;
  o.init_std = 0.1;
  o.tokenizer_json = source_dir + "/data/tokenizers/gpt2/tokenizer.json";
  return o;
}

// SmolLM2-135M's shapes: hidden 576, 30 layers, 9 heads / 3 KV heads of 64, FFN 1536, tied
// embeddings, RoPE theta 100,000; the vocabulary comes from the tokenizer given at init.
inline ModelConfig SmolLm2_135M() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.hidden_size = 576;
  c.num_hidden_layers = 30;
  c.num_attention_heads = 9;
  c.num_key_value_heads = 3;
  c.head_dim = 64;
  c.intermediate_size = 1536;
  c.max_position_embeddings = 8192;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 100000;
  c.tie_word_embeddings = true;
  return c;
}

}  // namespace aicloud::engine
