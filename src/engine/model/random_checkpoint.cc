#include "engine/model/random_checkpoint.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include <fmt/format.h>

#include "core/rng.h"
#include "engine/model/checkpoint.h"
#include "engine/model/safetensors_writer.h"

namespace aicloud::engine {
namespace {

using nlohmann::json;

// ChatML, the template Qwen and SmolLM2-Instruct ship: each message is
// <|im_start|>{role}\n{content}<|im_end|>\n, and the generation prompt opens an assistant turn.
constexpr std::string_view kChatMlTemplate =
    R"({% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";

// Special tokens in order of preference, among those found in common vocabularies.
constexpr std::string_view kEosCandidates[] = {"<|im_end|>", "<|endoftext|>", "<|end_of_text|>", "</s>",
                                               "<|eot_id|>"};
constexpr std::string_view kBosCandidates[] = {"<|begin_of_text|>", "<s>", "<|endoftext|>", "<|im_start|>"};

StatusOr<json> ReadJson(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(fmt::format("{}: cannot open", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    return InvalidArgumentError(fmt::format("{}: not valid JSON: {}", path.string(), e.what()));
  }
}

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

enum class Init { kNormal, kOnes, kZeros };

Init InitFor(std::string_view name) {
  auto ends_with = [&](std::string_view s) {
    return name.size() >= s.size() && name.substr(name.size() - s.size()) == s;
  };
  if (ends_with(".bias")) return Init::kZeros;
  if (ends_with("norm.weight")) return Init::kOnes;  // input_/post_attention_layernorm, model.norm
  return Init::kNormal;
}

void Store(DType dtype, float v, std::byte* out) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out, &v, 4);
      return;
    case DType::kF16: {
      const uint16_t h = FloatToHalf(v);
      std::memcpy(out, &h, 2);
      return;
    }
    case DType::kBF16: {
      const uint16_t b = FloatToBF16(v);
      std::memcpy(out, &b, 2);
      return;
    }
  }
}

// Produces one tensor's values in order, chunk after chunk: normal samples by Marsaglia's polar
// method (a pair per accepted point; no trigonometry, about twice as fast as Box-Muller).
class NormalStream {
 public:
  NormalStream(uint64_t seed, std::string_view name, double stddev)
      : rng_(seed ^ Fnv1a(name)), stddev_(stddev) {}
  float Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u, v, s;
    do {
      u = 2.0 * rng_.UniformDouble() - 1.0;
      v = 2.0 * rng_.UniformDouble() - 1.0;
      s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    const double scale = std::sqrt(-2.0 * std::log(s) / s) * stddev_;
    spare_ = static_cast<float>(v * scale);
    has_spare_ = true;
    return static_cast<float>(u * scale);
  }

 private:
  Rng rng_;
  double stddev_;
  float spare_ = 0;
  bool has_spare_ = false;
};

// Splits tensors (in model order) into `n` contiguous groups of roughly equal bytes, none empty.
std::vector<int> AssignShards(const std::vector<uint64_t>& bytes, int n) {
  uint64_t total = 0;
  for (uint64_t b : bytes) total += b;
  std::vector<int> shard(bytes.size());
  uint64_t done = 0;
  int s = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const size_t left = bytes.size() - i;
    const int shards_left = n - s;  // including the current one
    // Move on when the current shard is past its share, or when every later shard needs one of
    // the remaining tensors.
    const bool current_has_some = i > 0 && shard[i - 1] == s;
    if (current_has_some && s + 1 < n &&
        (static_cast<size_t>(shards_left - 1) == left ||
         (done + bytes[i] / 2) * static_cast<uint64_t>(n) > total * static_cast<uint64_t>(s + 1))) {
      ++s;
    }
    shard[i] = s;
    done += bytes[i];
  }
  return shard;
}

// The special token's text from tokenizer_config.json: a string or {"content": ...}.
std::string TokenText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

bool IsModelFile(const std::string& name) {
  return name == Checkpoint::kSingleFile || name == Checkpoint::kIndexFile ||
         (name.rfind("model-", 0) == 0 && name.find("-of-") != std::string::npos &&
          name.size() > 12 && name.substr(name.size() - 12) == ".safetensors");
}

json Ids(const std::vector<int64_t>& v) {
  if (v.empty()) return nullptr;
  if (v.size() == 1) return v[0];
  return v;
}

}  // namespace

int64_t DefaultIntermediateSize(int64_t hidden) {
  const int64_t raw = 2 * (4 * hidden) / 3;
  return (raw + 255) / 256 * 256;
}

StatusOr<TokenizerVocab> ReadTokenizerVocab(const std::filesystem::path& tokenizer_json) {
  StatusOr<json> doc = ReadJson(tokenizer_json);
  if (!doc.ok()) return doc.status();
  const std::string src = tokenizer_json.string();
  TokenizerVocab v;
  int64_t max_id = -1;
  auto add = [&](const std::string& token, const json& id, std::string_view where) -> Status {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      return InvalidArgumentError(fmt::format("{}: {}: id of '{}' must be a non-negative integer", src, where, token));
    }
    v.ids[token] = id.get<int64_t>();
    max_id = std::max(max_id, id.get<int64_t>());
    return OkStatus();
  };
  if (!doc->is_object() || !doc->contains("model") || !(*doc)["model"].is_object() ||
      !(*doc)["model"].contains("vocab")) {
    return InvalidArgumentError(fmt::format("{}: model.vocab is missing (not a tokenizer.json?)", src));
  }
  const json& vocab = (*doc)["model"]["vocab"];
  if (vocab.is_object()) {  // BPE, WordPiece: token -> id
    for (const auto& [token, id] : vocab.items()) AICLOUD_RETURN_IF_ERROR(add(token, id, "model.vocab"));
  } else if (vocab.is_array()) {  // Unigram: [[piece, score], ...], id = position
    for (size_t i = 0; i < vocab.size(); ++i) {
      if (vocab[i].is_array() && !vocab[i].empty() && vocab[i][0].is_string()) {
        AICLOUD_RETURN_IF_ERROR(add(vocab[i][0].get<std::string>(), json(i), "model.vocab"));
      }
    }
  } else {
    return InvalidArgumentError(fmt::format("{}: model.vocab must be an object or a list", src));
  }
  if (doc->contains("added_tokens") && (*doc)["added_tokens"].is_array()) {
    for (const json& t : (*doc)["added_tokens"]) {
      if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || !t.contains("id")) {
        return InvalidArgumentError(fmt::format("{}: added_tokens entries need content and id", src));
      }
      AICLOUD_RETURN_IF_ERROR(add(t["content"].get<std::string>(), t["id"], "added_tokens"));
    }
  }
  if (max_id < 0) return InvalidArgumentError(fmt::format("{}: the vocabulary is empty", src));
  v.vocab_size = max_id + 1;
  return v;
}

StatusOr<ModelConfig> InitRandomCheckpoint(const std::filesystem::path& dir, const InitCheckpointOptions& o) {
  ModelConfig c = o.config;
  if (o.shards < 1) return InvalidArgumentError(fmt::format("shards must be at least 1, got {}", o.shards));
  if (!(o.init_std >= 0) || !std::isfinite(o.init_std)) {
    return InvalidArgumentError(fmt::format("init_std must be a non-negative number, got {}", o.init_std));
  }
  c.torch_dtype = o.dtype;
  if (c.architecture.empty()) {
    c.architecture = c.model_type == "qwen2" ? "Qwen2ForCausalLM"
                     : c.model_type == "mistral" ? "MistralForCausalLM"
                                                 : "LlamaForCausalLM";
  }
  if (c.model_type == "qwen2") c.qkv_bias = true;

  // Vocabulary and special tokens from the tokenizer.
  std::optional<TokenizerVocab> vocab;
  json tokenizer_config;
  if (!o.tokenizer_json.empty()) {
    StatusOr<TokenizerVocab> v = ReadTokenizerVocab(o.tokenizer_json);
    if (!v.ok()) return v.status();
    vocab = std::move(*v);
    if (c.vocab_size == 0) {
      c.vocab_size = vocab->vocab_size;
    } else if (c.vocab_size < vocab->vocab_size) {
      return InvalidArgumentError(fmt::format("vocab_size {} is smaller than the tokenizer's {} ({})", c.vocab_size,
                                              vocab->vocab_size, o.tokenizer_json.string()));
    }
    std::string bos, eos;
    const std::filesystem::path beside = o.tokenizer_json.parent_path() / "tokenizer_config.json";
    std::error_code ec;
    if (std::filesystem::exists(beside, ec)) {
      StatusOr<json> tc = ReadJson(beside);
      if (!tc.ok()) return tc.status();
      tokenizer_config = std::move(*tc);
      if (tokenizer_config.contains("bos_token")) bos = TokenText(tokenizer_config["bos_token"]);
      if (tokenizer_config.contains("eos_token")) eos = TokenText(tokenizer_config["eos_token"]);
    } else {
      for (std::string_view t : kBosCandidates) {
        if (bos.empty() && vocab->ids.count(t)) bos = t;
      }
      for (std::string_view t : kEosCandidates) {
        if (eos.empty() && vocab->ids.count(t)) eos = t;
      }
      tokenizer_config = {
          {"add_bos_token", false},
          {"add_eos_token", false},
          {"bos_token", bos.empty() ? json(nullptr) : json(bos)},
          {"eos_token", eos.empty() ? json(nullptr) : json(eos)},
          {"pad_token", nullptr},
          {"unk_token", vocab->ids.count("<unk>") ? json("<unk>") : json(nullptr)},
          {"chat_template", kChatMlTemplate},
          {"clean_up_tokenization_spaces", false},
          {"model_max_length", c.max_position_embeddings},
          {"tokenizer_class", "PreTrainedTokenizerFast"},
      };
    }
    c.bos_token_ids.clear();
    c.eos_token_ids.clear();
    if (auto it = vocab->ids.find(bos); !bos.empty() && it != vocab->ids.end()) c.bos_token_ids = {it->second};
    if (auto it = vocab->ids.find(eos); !eos.empty() && it != vocab->ids.end()) c.eos_token_ids = {it->second};
  }
  AICLOUD_RETURN_IF_ERROR(ValidateModelConfig(c, "model config"));

  const std::vector<ExpectedTensor> tensors = ExpectedTensors(c);
  if (static_cast<size_t>(o.shards) > tensors.size()) {
    return InvalidArgumentError(fmt::format("shards {} is more than the model's {} tensors", o.shards, tensors.size()));
  }

  // The directory: created, or emptied of an old checkpoint when allowed.
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return UnavailableError(fmt::format("{}: cannot create: {}", dir.string(), ec.message()));
  std::vector<std::filesystem::path> old;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "config.json" || IsModelFile(name)) old.push_back(entry.path());
  }
  if (!old.empty() && !o.overwrite) {
    return AlreadyExistsError(fmt::format("{}: already holds a checkpoint ({})",
                                          dir.string(), old.front().filename().string()));
  }
  for (const auto& p : old) std::filesystem::remove(p, ec);

  // Weights.
  const size_t elem = DTypeSize(o.dtype);
  std::vector<uint64_t> bytes;
  std::vector<TensorToWrite> writes;
  for (const ExpectedTensor& e : tensors) {
    TensorToWrite w;
    w.name = e.name;
    w.dtype = o.dtype;
    w.shape = e.shape;
    uint64_t n = elem;
    for (int64_t d : e.shape) n *= static_cast<uint64_t>(d);
    bytes.push_back(n);
    const Init init = InitFor(e.name);
    if (init == Init::kNormal) {
      auto stream = std::make_shared<NormalStream>(o.seed, e.name, o.init_std);
      const DType dtype = o.dtype;
      w.fill = [stream, dtype, elem](size_t /*offset: chunks come in order*/, std::span<std::byte> chunk) {
        for (size_t i = 0; i < chunk.size(); i += elem) Store(dtype, stream->Next(), chunk.data() + i);
      };
    } else {
      const float value = init == Init::kOnes ? 1.0f : 0.0f;
      const DType dtype = o.dtype;
      w.fill = [value, dtype, elem](size_t, std::span<std::byte> chunk) {
        for (size_t i = 0; i < chunk.size(); i += elem) Store(dtype, value, chunk.data() + i);
      };
    }
    writes.push_back(std::move(w));
  }
  uint64_t total = 0;
  for (uint64_t b : bytes) total += b;
  if (o.shards == 1) {
    AICLOUD_RETURN_IF_ERROR(WriteSafetensors(dir / Checkpoint::kSingleFile, writes));
  } else {
    const std::vector<int> shard = AssignShards(bytes, o.shards);
    json weight_map = json::object();
    for (int s = 0; s < o.shards; ++s) {
      const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, o.shards);
      std::vector<TensorToWrite> part;
      for (size_t i = 0; i < writes.size(); ++i) {
        if (shard[i] != s) continue;
        part.push_back(writes[i]);
        weight_map[writes[i].name] = file;
      }
      AICLOUD_RETURN_IF_ERROR(WriteSafetensors(dir / file, part));
    }
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    AICLOUD_RETURN_IF_ERROR(WriteFileAtomically(dir / Checkpoint::kIndexFile, index.dump(2) + "\n"));
  }

  // Tokenizer and generation defaults, then config.json last.
  if (vocab) {
    std::filesystem::copy_file(o.tokenizer_json, dir / "tokenizer.json",
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) {
      return UnavailableError(fmt::format("{}: cannot copy to {}: {}", o.tokenizer_json.string(), dir.string(),
                                          ec.message()));
    }
    AICLOUD_RETURN_IF_ERROR(
        WriteFileAtomically(dir / "tokenizer_config.json", tokenizer_config.dump(2) + "\n"));
  }
  json generation = {{"_from_model_config", true},
                     {"bos_token_id", Ids(c.bos_token_ids)},
                     {"eos_token_id", Ids(c.eos_token_ids)}};
  AICLOUD_RETURN_IF_ERROR(WriteFileAtomically(dir / "generation_config.json", generation.dump(2) + "\n"));
  AICLOUD_RETURN_IF_ERROR(WriteFileAtomically(dir / "config.json", c.ToJson().dump(2) + "\n"));
  return c;
}

}  // namespace aicloud::engine
