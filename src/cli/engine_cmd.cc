// `aicloud engine`: serves one model over the OpenAI API (see docs/engine.md).
// `aicloud engine generate`: runs one greedy or sampled generation from token ids and prints the
// generated ids on one line — the simplest way to compare with another engine.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.h"
#include "engine/server/api.h"
#include "engine/server/engine.h"

namespace aicloud::cli {
namespace {

using engine::DType;
using engine::kernels::WeightFormat;

struct EngineFlags {
  std::string model;
  std::string served_name;
  std::string instance;
  std::string host = "127.0.0.1";
  int port = 8000;
  int threads = 2;
  double kv_cache_gib = 1.0;
  int max_num_seqs = 64;
  int max_num_batched_tokens = 512;
  int64_t max_model_len = 0;
  int max_waiting = 256;
  int static_batch = 0;
  std::string prefill_order = "fcfs";
  double max_overtake_s = 60;
  std::string dtype = "auto";
  std::string kv_dtype = "f16";
  std::vector<std::string> loras;
  bool no_prefix_caching = false;
  bool allow_runtime_lora_paths = false;
  int max_loras = 4;
  int64_t max_lora_rank = 64;
};

Status ToOptions(const EngineFlags& f, engine::EngineOptions* o) {
  o->model_dir = f.model;
  o->served_model_name = f.served_name;
  o->instance = f.instance;
  o->threads = f.threads;
  o->kv_cache_gib = f.kv_cache_gib;
  o->max_num_seqs = f.max_num_seqs;
  o->max_num_batched_tokens = f.max_num_batched_tokens;
  o->max_model_len = f.max_model_len;
  o->max_waiting = f.max_waiting;
  if (f.static_batch < 0 || f.static_batch > f.max_num_seqs) {
    return InvalidArgumentError("--static-batch: " + std::to_string(f.static_batch) +
                                " is not in [0, --max-num-seqs " + std::to_string(f.max_num_seqs) + "]");
  }
  o->static_batch_size = f.static_batch;
  if (f.prefill_order == "fcfs") {
    o->prefill_order = engine::PrefillOrder::kFcfs;
  } else if (f.prefill_order == "shortest-first") {
    o->prefill_order = engine::PrefillOrder::kShortestFirst;
    if (f.static_batch > 0) return InvalidArgumentError("--prefill-order shortest-first: not with --static-batch");
  } else {
    return InvalidArgumentError("--prefill-order: \"" + f.prefill_order + "\" is not fcfs or shortest-first");
  }
  if (!(f.max_overtake_s >= 0.001 && f.max_overtake_s <= 86400)) {
    return InvalidArgumentError("--max-overtake: " + std::to_string(f.max_overtake_s) +
                                " is not between 0.001 and 86400 seconds");
  }
  o->max_overtake_micros = static_cast<int64_t>(f.max_overtake_s * 1e6);
  o->enable_prefix_caching = !f.no_prefix_caching;
  if (f.dtype == "auto") o->weights.reset();
  else if (f.dtype == "f32") o->weights = WeightFormat::kF32;
  else if (f.dtype == "f16") o->weights = WeightFormat::kF16;
  else if (f.dtype == "bf16") o->weights = WeightFormat::kBF16;
  else if (f.dtype == "int8" || f.dtype == "q8") o->weights = WeightFormat::kQ8;
  else return InvalidArgumentError("--dtype: \"" + f.dtype + "\" is not auto, f32, f16, bf16 or int8");
  if (f.kv_dtype == "f16") o->kv_dtype = DType::kF16;
  else if (f.kv_dtype == "f32") o->kv_dtype = DType::kF32;
  else return InvalidArgumentError("--kv-dtype: \"" + f.kv_dtype + "\" is not f16 or f32");
  for (const std::string& l : f.loras) {
    const size_t eq = l.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == l.size()) {
      return InvalidArgumentError("--lora: \"" + l + "\" is not NAME=DIR");
    }
    o->loras.emplace_back(l.substr(0, eq), l.substr(eq + 1));
  }
  o->allow_runtime_lora_paths = f.allow_runtime_lora_paths;
  o->max_loras = f.max_loras;
  o->max_lora_rank = f.max_lora_rank;
  return OkStatus();
}

void AddCommon(CLI::App* c, EngineFlags* f) {
  c->add_option("--model", f->model, "Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json)")
      ->required();
  c->add_option("--threads", f->threads, "CPU threads for the forward pass")->capture_default_str();
  c->add_option("--kv-cache-gib", f->kv_cache_gib, "KV-cache budget in GiB")->capture_default_str();
  c->add_option("--dtype", f->dtype, "weights: auto (as stored), f32, f16, bf16, int8")->capture_default_str();
  c->add_option("--kv-dtype", f->kv_dtype, "KV cache: f16 or f32")->capture_default_str();
  c->add_option("--max-num-seqs", f->max_num_seqs, "running sequences at most")->capture_default_str();
  c->add_option("--max-num-batched-tokens", f->max_num_batched_tokens, "tokens per step at most")
      ->capture_default_str();
  c->add_option("--max-model-len", f->max_model_len, "context limit (default: the model's)");
}

int Fail(const Status& st) {
  std::cerr << "error: " << st.message() << "\n";
  return 1;
}

StatusOr<std::vector<int32_t>> ParseIds(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return InvalidArgumentError("--prompt-ids: \"" + item + "\" is not a token id");
    }
  }
  if (ids.empty()) return InvalidArgumentError("--prompt-ids: give at least one token id, e.g. 1,2,3");
  return ids;
}

}  // namespace

void AddEngine(CLI::App& app, int* exit_code) {
  auto* f = new EngineFlags();
  CLI::App* cmd = app.add_subcommand("engine", "Serve a model over the OpenAI API (or: engine generate)");
  AddCommon(cmd, f);
  CLI::Option* host = cmd->add_option("--host", f->host,
                                      "listen address (default: $AICLOUD_NODE_ADDRESS, the address a node agent "
                                      "gives its replicas, else 127.0.0.1)");
  cmd->add_option("--port", f->port, "listen port (0: any free port)")->capture_default_str();
  cmd->add_option("--served-model-name", f->served_name, "model name clients use (default: the directory's name)");
  cmd->add_option("--instance", f->instance, "a name answered in /health as {\"instance\": NAME} (set by Deployments)");
  cmd->add_option("--max-waiting", f->max_waiting, "queued requests before 429")->capture_default_str();
  cmd->add_option("--static-batch", f->static_batch,
                  "N > 0: static batching baseline (batches of N run to completion); 0: continuous")
      ->capture_default_str();
  cmd->add_option("--prefill-order", f->prefill_order,
                  "fcfs: prompts prefilled in arrival order; shortest-first: fewest prompt tokens left first, "
                  "none overtaken for longer than --max-overtake")
      ->capture_default_str();
  cmd->add_option("--max-overtake", f->max_overtake_s,
                  "shortest-first: seconds after its arrival a request goes ahead of younger ones")
      ->capture_default_str();
  cmd->add_option("--lora", f->loras, "NAME=DIR of a PEFT adapter (repeatable)");
  cmd->add_flag("--no-prefix-caching", f->no_prefix_caching, "disable automatic prefix caching");
  cmd->add_flag("--allow-runtime-lora-paths", f->allow_runtime_lora_paths,
                "let POST /v1/load_lora_adapter load a directory the caller names (off: only the --lora adapters, "
                "by name)");
  cmd->add_option("--max-loras", f->max_loras, "adapters resident (and mixed in one step) at most")->capture_default_str();
  cmd->add_option("--max-lora-rank", f->max_lora_rank, "larger adapters are refused")->capture_default_str();

  auto* g = new EngineFlags();
  auto* prompt_ids = new std::string();
  auto* max_tokens = new int(16);
  auto* greedy = new bool(false);
  auto* seed = new int64_t(-1);
  auto* temperature = new float(1.0f);
  CLI::App* gen = cmd->add_subcommand("generate", "Generate from token ids and print the generated ids");
  AddCommon(gen, g);
  gen->add_option("--prompt-ids", *prompt_ids, "comma-separated prompt token ids")->required();
  gen->add_option("--max-tokens", *max_tokens, "tokens to generate")->capture_default_str();
  gen->add_flag("--greedy", *greedy, "argmax decoding (same as --temperature 0)");
  gen->add_option("--temperature", *temperature, "sampling temperature")->capture_default_str();
  gen->add_option("--seed", *seed, "sampling seed");
  cmd->require_subcommand(0, 1);
  // `engine --model ...` alone serves; `engine generate --model ...` generates.
  cmd->get_option("--model")->required(false);

  gen->callback([=] {
    engine::EngineOptions o;
    Status st = ToOptions(*g, &o);
    if (!st.ok()) {
      *exit_code = Fail(st);
      return;
    }
    StatusOr<std::vector<int32_t>> ids = ParseIds(*prompt_ids);
    if (!ids.ok()) {
      *exit_code = Fail(ids.status());
      return;
    }
    if (o.kv_cache_gib == 1.0) o.kv_cache_gib = 0.25;
    StatusOr<std::unique_ptr<engine::Engine>> e = engine::Engine::Load(o);
    if (!e.ok()) {
      *exit_code = Fail(e.status());
      return;
    }
    engine::GenerateRequest r;
    r.model = (*e)->model_name();
    r.prompt = *ids;
    r.sampling.max_tokens = *max_tokens;
    r.sampling.temperature = *greedy ? 0.0f : *temperature;
    r.sampling.ignore_eos = true;
    if (*seed >= 0) r.sampling.seed = static_cast<uint64_t>(*seed);
    if (Status v = engine::Validate(r.sampling, static_cast<int32_t>((*e)->config().vocab_size)); !v.ok()) {
      *exit_code = Fail(v);
      return;
    }
    StatusOr<std::shared_ptr<engine::Stream>> s = (*e)->Submit(std::move(r));
    if (!s.ok()) {
      *exit_code = Fail(s.status());
      return;
    }
    std::vector<int32_t> out;
    engine::Delta d;
    for (;;) {
      if (!(*s)->Next(&d, std::chrono::milliseconds(1000))) continue;
      if (!d.error.ok()) {
        *exit_code = Fail(d.error);
        return;
      }
      out.insert(out.end(), d.tokens.begin(), d.tokens.end());
      if (d.finish_reason) break;
    }
    for (size_t i = 0; i < out.size(); ++i) std::cout << (i ? "," : "") << out[i];
    std::cout << "\n";
  });

  cmd->callback([=] {
    if (gen->parsed()) return;
    if (f->model.empty()) {
      *exit_code = Fail(InvalidArgumentError("--model is required"));
      return;
    }
    engine::EngineOptions o;
    Status st = ToOptions(*f, &o);
    if (!st.ok()) {
      *exit_code = Fail(st);
      return;
    }
    if (host->count() == 0) {
      const char* node_address = std::getenv("AICLOUD_NODE_ADDRESS");
      if (node_address != nullptr && *node_address != '\0') f->host = node_address;
    }
    // A replica's secret (set by the platform for Deployments; an operator may set it for a
    // standalone engine): demanded of every request. Read from the environment, never argv, which
    // every user of the host can list.
    const char* key = std::getenv("AICLOUD_REPLICA_SECRET");
    const std::string api_key = key != nullptr ? key : "";
    if (key != nullptr && api_key.empty()) {  // fail closed: never answer anyone for lack of a key
      *exit_code = Fail(InvalidArgumentError("AICLOUD_REPLICA_SECRET is set but empty: refusing to serve without a key"));
      return;
    }
    ::unsetenv("AICLOUD_REPLICA_SECRET");  // nothing this process starts inherits it
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    const auto t0 = std::chrono::steady_clock::now();
    StatusOr<std::unique_ptr<engine::Engine>> e = engine::Engine::Load(o);
    if (!e.ok()) {
      *exit_code = Fail(e.status());
      return;
    }
    // A non-streaming request holds a handler thread until it finishes, so the HTTP server
    // must take as many as the engine admits (running + waiting): otherwise requests queue in
    // the HTTP layer where the engine's waiting gauge — what autoscalers read — cannot see them.
    const int workers = f->max_num_seqs + f->max_waiting + 8;
    http::ServerOptions so{.host = f->host, .port = static_cast<uint16_t>(f->port), .worker_threads = workers};
    StatusOr<bool> tls = engine::TlsFromEnvironment(&so);  // a replica of a cluster with TLS
    if (!tls.ok()) {
      *exit_code = Fail(tls.status());
      return;
    }
    StatusOr<std::unique_ptr<engine::EngineServer>> server = engine::EngineServer::Start(e->get(), so, api_key);
    if (!server.ok()) {
      *exit_code = Fail(server.status());
      return;
    }
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << fmt::format("aicloud engine: model {} ({} layers, hidden {}, vocab {}), loaded in {:.2f} s; "
                             "KV cache {} blocks of {} tokens; max model len {}\n",
                             (*e)->model_name(), (*e)->config().num_hidden_layers, (*e)->config().hidden_size,
                             (*e)->config().vocab_size, load_s, (*e)->kv_cache_blocks(), o.block_size,
                             (*e)->max_model_len())
              << fmt::format("aicloud engine listening on {}://{}:{}\n", *tls ? "https" : "http", f->host,
                             (*server)->port())
              << std::flush;
    int sig = 0;
    sigwait(&set, &sig);
    std::cout << "aicloud engine: stopping\n";
    (*server)->Stop();
  });
}

}  // namespace aicloud::cli
