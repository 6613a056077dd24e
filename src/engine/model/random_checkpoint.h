// InitRandomCheckpoint: writes a random-weight Llama-family checkpoint in the Hugging Face layout,
// so the engine, its benchmarks and its tests can run real model shapes without downloading
// weights. The directory loads with Checkpoint::Open (and with Hugging Face transformers).
//
//   InitCheckpointOptions o;
//   o.config = SmallLlamaConfig(...);          // shapes; vocab from the tokenizer below
//   o.tokenizer_json = "data/tokenizers/gpt2/tokenizer.json";
//   o.dtype = DType::kF16;
//   o.shards = 2;
//   StatusOr<ModelConfig> c = InitRandomCheckpoint("/tmp/tiny", o);
//
// Files: config.json, model.safetensors (or model-0000K-of-0000N.safetensors + the index json
// when shards > 1), generation_config.json and, with a tokenizer, tokenizer.json (copied) and
// tokenizer_config.json (copied from beside the tokenizer.json when there is one, else written
// with a ChatML chat_template and bos/eos tokens that exist in the vocabulary).
//
// Weights: matrices ~ normal(0, init_std), norm weights 1, biases 0: the initialisation
// transformers uses, which keeps activations finite through any depth. Each tensor draws from
// its own Rng seeded by (seed, tensor name), so the bytes depend only on the seed, the shapes and
// the dtype: not on sharding or write order. Normal samples go through libm's log, so bytes repeat
// exactly on one platform; another libm may differ in the last bit of a few values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "core/status.h"
#include "engine/kernels/dtype.h"
#include "engine/model/config.h"

namespace aicloud::engine {

struct InitCheckpointOptions {
  // Shapes and hyper-parameters. With a tokenizer, vocab_size 0 means the tokenizer's size and a
  // larger value pads the vocabulary; bos/eos ids are taken from the tokenizer.
  ModelConfig config;
  DType dtype = DType::kF16;
  uint64_t seed = 0;
  int shards = 1;
  double init_std = 0.02;
  std::filesystem::path tokenizer_json;  // empty: no tokenizer files
  bool overwrite = false;                // replace an existing checkpoint in the directory
};

// Writes the checkpoint into `dir` (created if needed) and returns the config written.
// INVALID_ARGUMENT for a bad config or option, ALREADY_EXISTS when `dir` holds a checkpoint
// (config.json or model weights) and !overwrite, the I/O or tokenizer error otherwise. config.json is written last, so an
// interrupted run leaves a directory Checkpoint::Open refuses rather than half a model.
StatusOr<ModelConfig> InitRandomCheckpoint(const std::filesystem::path& dir, const InitCheckpointOptions& options);

// What a tokenizer.json contributes to a model: its vocabulary size (largest id + 1, over the
// model vocab and the added tokens) and token -> id for every token.
struct TokenizerVocab {
  int64_t vocab_size = 0;
  std::map<std::string, int64_t, std::less<>> ids;
};
StatusOr<TokenizerVocab> ReadTokenizerVocab(const std::filesystem::path& tokenizer_json);

// The SwiGLU width Llama uses for `hidden`: 8/3 * hidden rounded up to a multiple of 256
// (576 -> 1536, 4096 -> 11008).
int64_t DefaultIntermediateSize(int64_t hidden);

}  // namespace aicloud::engine
