// `aicloud model init`: writes a random-weight Llama-family checkpoint in the Hugging Face layout
// (for benchmarks and tests of the serving engine at real model shapes, no download needed).
// `aicloud model inspect DIR`: opens a checkpoint the way the engine does and reports its config,
// tensors and whether it validates.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/model/checkpoint.h"
#include "engine/model/random_checkpoint.h"

namespace aicloud::cli {
namespace {

using engine::DType;

struct ModelInitOptions {
  std::string arch = "llama";
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;      // 0: = heads
  int64_t head_dim = 0;      // 0: hidden / heads
  int64_t intermediate = 0;  // 0: Llama's 8/3 * hidden rounded up to 256
  std::string vocab_from;
  int64_t vocab = 0;
  std::string out;
  std::string dtype = "f16";
  uint64_t seed = 0;
  int shards = 1;
  bool tie = false;
  double rope_theta = 10000;
  int64_t max_positions = 2048;
  double rms_norm_eps = 1e-5;
  bool force = false;
};

StatusOr<DType> ParseDTypeFlag(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "f32" || s == "float32") return DType::kF32;
  if (s == "f16" || s == "float16") return DType::kF16;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  return InvalidArgumentError(fmt::format("--dtype: \"{}\" is not f32, f16 or bf16", s));
}

std::string Mib(uint64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

// 134515008 -> "134,515,008".
std::string Grouped(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string Ids(const std::vector<int64_t>& ids) {
  if (ids.empty()) return "none";
  std::string s;
  for (int64_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

int RunModelInit(const ModelInitOptions& o) {
  if (o.arch != "llama" && o.arch != "qwen2" && o.arch != "mistral") {
    return Fail(InvalidArgumentError(fmt::format("--arch: \"{}\" is not llama, qwen2 or mistral", o.arch)), 2);
  }
  StatusOr<DType> dtype = ParseDTypeFlag(o.dtype);
  if (!dtype.ok()) return Fail(dtype.status(), 2);
  if (o.vocab_from.empty() && o.vocab == 0) {
    return Fail(InvalidArgumentError("give --vocab-from TOKENIZER.json (vocabulary and special tokens from a "
                                     "Hugging Face tokenizer) or --vocab N"),
                2);
  }
  if (o.head_dim == 0 && o.hidden % o.heads != 0) {
    return Fail(InvalidArgumentError(fmt::format("--heads {} does not divide --hidden {}; give --head-dim", o.heads,
                                                 o.hidden)),
                2);
  }
  engine::InitCheckpointOptions init;
  engine::ModelConfig& c = init.config;
  c.model_type = o.arch;
  c.hidden_size = o.hidden;
  c.num_hidden_layers = o.layers;
  c.num_attention_heads = o.heads;
  c.num_key_value_heads = o.kv_heads > 0 ? o.kv_heads : o.heads;
  c.head_dim = o.head_dim > 0 ? o.head_dim : o.hidden / o.heads;
  c.intermediate_size = o.intermediate > 0 ? o.intermediate : engine::DefaultIntermediateSize(o.hidden);
  c.vocab_size = o.vocab;  // with --vocab-from: 0 = the tokenizer's size, more pads it
  c.max_position_embeddings = o.max_positions;
  c.rope_theta = o.rope_theta;
  c.rms_norm_eps = o.rms_norm_eps;
  c.tie_word_embeddings = o.tie;
  init.dtype = *dtype;
  init.seed = o.seed;
  init.shards = o.shards;
  init.tokenizer_json = o.vocab_from;
  init.overwrite = o.force;

  const auto start = std::chrono::steady_clock::now();
  StatusOr<engine::ModelConfig> written = engine::InitRandomCheckpoint(o.out, init);
  if (!written.ok()) {
    const StatusCode code = written.status().code();
    const bool bad_input = code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound ||
                           code == StatusCode::kAlreadyExists || code == StatusCode::kUnimplemented;
    if (code == StatusCode::kAlreadyExists) {
      return Fail(Status(code, written.status().message() + "; --force replaces it"), 2);
    }
    return Fail(written.status(), bad_input ? 2 : 1);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t bytes = static_cast<uint64_t>(written->ParameterCount()) * engine::DTypeSize(*dtype);
  std::cout << fmt::format(
      "wrote {}: {} {}, hidden {}, {} layers, {} heads ({} kv, head_dim {}), intermediate {}, vocab {}{}\n"
      "  {:.1f}M parameters, {} {} in {} file{}, seed {}, {:.1f} s\n",
      o.out, written->architecture, written->tie_word_embeddings ? "(tied embeddings)" : "(untied embeddings)",
      written->hidden_size, written->num_hidden_layers, written->num_attention_heads, written->num_key_value_heads,
      written->head_dim, written->intermediate_size, written->vocab_size,
      o.vocab_from.empty() ? "" : fmt::format(" (from {})", o.vocab_from),
      static_cast<double>(written->ParameterCount()) / 1e6, Mib(bytes), engine::DTypeName(*dtype), o.shards,
      o.shards == 1 ? "" : "s", o.seed, seconds);
  return 0;
}

int RunModelInspect(const std::string& dir, bool check_finite) {
  const auto start = std::chrono::steady_clock::now();
  StatusOr<std::unique_ptr<engine::Checkpoint>> opened = engine::Checkpoint::Open(dir);
  const double open_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!opened.ok()) return Fail(opened.status(), 2);
  const engine::Checkpoint& ckpt = **opened;
  const engine::ModelConfig& c = ckpt.config();

  std::string rope = fmt::format("{}", engine::RopeScalingTypeName(c.rope_scaling.type));
  if (c.rope_scaling.type == engine::RopeScaling::Type::kLinear) {
    rope += fmt::format(" x{}", c.rope_scaling.factor);
  } else if (c.rope_scaling.type == engine::RopeScaling::Type::kLlama3) {
    rope += fmt::format(" x{} (low {}, high {}, original {})", c.rope_scaling.factor, c.rope_scaling.low_freq_factor,
                        c.rope_scaling.high_freq_factor, c.rope_scaling.original_max_position_embeddings);
  }
  std::string biases = c.qkv_bias ? (c.o_bias ? "q, k, v, o" : "q, k, v") : "none";
  std::map<std::string, int> dtypes;
  for (const auto& [name, t] : ckpt.tensors()) ++dtypes[std::string(engine::DTypeName(t->dtype))];
  std::string dtype_counts;
  for (const auto& [d, n] : dtypes) dtype_counts += fmt::format("{}{} x{}", dtype_counts.empty() ? "" : ", ", d, n);

  std::cout << fmt::format("{}: {} ({})\n", dir, c.architecture, c.model_type);
  std::cout << fmt::format("  hidden {}, layers {}, heads {}, kv heads {}, head_dim {}, intermediate {}\n",
                           c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads,
                           c.head_dim, c.intermediate_size);
  std::cout << fmt::format("  vocab {}, max positions {}, rope theta {} (scaling: {}), rms_norm_eps {}\n",
                           c.vocab_size, c.max_position_embeddings, c.rope_theta, rope, c.rms_norm_eps);
  std::cout << fmt::format("  embeddings {}, attention biases: {}{}, bos {}, eos {}, torch_dtype {}\n",
                           c.tie_word_embeddings ? "tied" : "untied", biases,
                           c.sliding_window > 0 ? fmt::format(", sliding window {}", c.sliding_window) : "",
                           Ids(c.bos_token_ids), Ids(c.eos_token_ids),
                           c.torch_dtype ? std::string(engine::DTypeName(*c.torch_dtype)) : std::string("unset"));
  std::cout << fmt::format("  weights: {} file{}{}, {} tensors, {} parameters ({:.1f}M), {}, dtypes {}\n",
                           ckpt.files().size(), ckpt.files().size() == 1 ? "" : "s",
                           ckpt.sharded() ? " (sharded)" : "", ckpt.tensors().size(), Grouped(ckpt.parameter_count()),
                           static_cast<double>(ckpt.parameter_count()) / 1e6, Mib(ckpt.tensor_bytes()),
                           dtype_counts.empty() ? "none" : dtype_counts);
  std::cout << fmt::format("  opened in {:.1f} ms (memory-mapped, nothing read yet)\n", open_ms);

  int exit_code = 0;
  Status valid = ckpt.Validate();
  if (valid.ok()) {
    std::cout << fmt::format("  validation: OK, all {} tensors config.json implies are present with their shapes\n",
                             engine::ExpectedTensors(c).size());
  } else {
    std::string m = valid.message();
    for (size_t at = m.find('\n'); at != std::string::npos; at = m.find('\n', at + 1)) m.insert(at + 1, "  ");
    std::cout << "  validation: FAILED\n    " << m << "\n";
    exit_code = 1;
  }
  const std::vector<std::string> unused = ckpt.UnusedTensors();
  if (!unused.empty()) {
    std::cout << fmt::format("  unused tensors: {} (e.g. {}), ignored by the engine\n", unused.size(), unused.front());
  }
  if (check_finite) {
    const auto t0 = std::chrono::steady_clock::now();
    int bad = 0;
    for (const auto& [name, t] : ckpt.tensors()) {
      Status f = engine::CheckFinite(*t);
      if (!f.ok()) {
        if (bad++ < 10) std::cout << "    " << f.message() << "\n";
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (bad == 0) {
      std::cout << fmt::format("  finite: OK, no NaN or infinity in {} tensors ({:.1f} s)\n", ckpt.tensors().size(), s);
    } else {
      std::cout << fmt::format("  finite: FAILED, {} tensors hold NaN or infinity\n", bad);
      exit_code = 1;
    }
  }
  return exit_code;
}

// CLI11's PositiveNumber prints its whole double range; this names the problem instead.
const CLI::Validator kPositive(
    [](std::string& text) -> std::string {
      try {
        size_t used = 0;
        const long long v = std::stoll(text, &used);
        if (used == text.size() && v > 0) return "";
      } catch (const std::exception&) {
      }
      return "must be a positive integer, got " + text;
    },
    "POSITIVE");

}  // namespace

void AddModel(CLI::App& app, int* exit_code) {
  CLI::App* model = app.add_subcommand("model", "Model checkpoints: create random-weight ones, inspect any");
  model->require_subcommand(1);

  auto o = std::make_shared<ModelInitOptions>();
  CLI::App* init = model->add_subcommand(
      "init", "Write a random-weight Llama-family checkpoint (Hugging Face layout) for tests and benchmarks");
  init->add_option("--arch", o->arch, "llama, qwen2 (q/k/v biases) or mistral")->capture_default_str();
  init->add_option("--hidden", o->hidden, "hidden_size")->required()->check(kPositive);
  init->add_option("--layers", o->layers, "num_hidden_layers")->required()->check(kPositive);
  init->add_option("--heads", o->heads, "num_attention_heads")->required()->check(kPositive);
  init->add_option("--kv-heads", o->kv_heads, "num_key_value_heads (default: --heads, no GQA)")
      ->check(kPositive);
  init->add_option("--head-dim", o->head_dim, "head_dim (default: hidden / heads)")->check(kPositive);
  init->add_option("--intermediate", o->intermediate,
                   "intermediate_size (default: 8/3 x hidden rounded up to a multiple of 256)")
      ->check(kPositive);
  init->add_option("--vocab-from", o->vocab_from,
                   "tokenizer.json: sets the vocabulary size and bos/eos, and is copied with a tokenizer_config.json")
      ->check(CLI::ExistingFile);
  init->add_option("--vocab", o->vocab, "vocab_size (without --vocab-from; with it, pads the vocabulary)")
      ->check(kPositive);
  init->add_option("--out", o->out, "output directory (created if needed)")->required();
  init->add_option("--dtype", o->dtype, "f32, f16 or bf16")->capture_default_str();
  init->add_option("--seed", o->seed, "weights depend only on the seed, shapes and dtype")->capture_default_str();
  init->add_option("--shards", o->shards, "split the weights into N files with model.safetensors.index.json")
      ->capture_default_str()
      ->check(kPositive);
  init->add_flag("--tie-embeddings", o->tie, "share model.embed_tokens with the output layer (no lm_head.weight)");
  init->add_option("--rope-theta", o->rope_theta, "rope_theta")->capture_default_str();
  init->add_option("--max-positions", o->max_positions, "max_position_embeddings")->capture_default_str();
  init->add_option("--rms-norm-eps", o->rms_norm_eps, "rms_norm_eps")->capture_default_str();
  init->add_flag("--force", o->force, "replace a checkpoint already in --out");
  init->callback([o, exit_code] { *exit_code = RunModelInit(*o); });

  auto dir = std::make_shared<std::string>();
  auto finite = std::make_shared<bool>(false);
  CLI::App* inspect = model->add_subcommand(
      "inspect", "Open a checkpoint directory as the engine does: config, tensors, parameters, validation");
  inspect->add_option("DIR", *dir, "directory with config.json and model.safetensors (or the sharded index)")
      ->required();
  inspect->add_flag("--check-finite", *finite, "also scan every weight for NaN and infinity (reads all bytes)");
  inspect->callback([dir, finite, exit_code] { *exit_code = RunModelInspect(*dir, *finite); });
}

}  // namespace aicloud::cli
