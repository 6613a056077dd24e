// Engine: one model served by one loop thread. The loop takes new requests from an inbox, asks
// the continuous-batching scheduler for a step, runs the step through the model (one forward
// pass over every scheduled token), samples each sequence that needs a token, and hands the
// results back to the scheduler and to the requests' streams.
//
//   StatusOr<std::unique_ptr<Engine>> e = Engine::Load({.model_dir = "models/smollm2"});
//   StatusOr<std::shared_ptr<Stream>> s = (*e)->Submit(std::move(request));  // 429 when full
//   Delta d;
//   while ((*s)->Next(&d)) send(d.text);      // until d.finish_reason is set
//
// Requests arrive from any thread (HTTP workers); everything else — model, KV cache, scheduler,
// sampler — belongs to the loop thread, so no lock is held while the model runs. A client that
// goes away cancels its Stream; the loop aborts the request at the next step and frees its KV.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/metrics.h"
#include "core/status.h"
#include "engine/batch/scheduler.h"
#include "engine/kernels/thread_pool.h"
#include "engine/lora/registry.h"
#include "engine/model/checkpoint.h"
#include "engine/runner/llama.h"
#include "engine/sample/sampler.h"
#include "engine/server/openai.h"
#include "engine/server/structured_output.h"
#include "engine/server/text_stream.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace aicloud::engine {

struct EngineOptions {
  std::string model_dir;
  std::string served_model_name;  // default: the directory's name
  // Who runs this engine, answered in /health as {"instance": ...} (a Deployment's replica job
  // name: its controller checks that the engine on a replica's port is that replica's).
  std::string instance;
  int threads = 2;
  double kv_cache_gib = 1.0;
  DType kv_dtype = DType::kF16;
  std::optional<kernels::WeightFormat> weights;  // nullopt: as stored
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 512;
  int32_t block_size = 16;
  int64_t max_model_len = 0;  // 0: the model's max_position_embeddings (capped by the cache)
  int32_t max_waiting = 256;  // admitted but not yet running; beyond it Submit answers 429
  // > 0: static batching with batches of this many requests, run until all of them finish
  // before the next batch starts (the baseline for comparisons; see batch/scheduler.h).
  int32_t static_batch_size = 0;
  // Which prompts are prefilled first, and for how long one can be overtaken (batch/scheduler.h).
  PrefillOrder prefill_order = PrefillOrder::kFcfs;
  int64_t max_overtake_micros = 60'000'000;
  bool enable_prefix_caching = true;
  // LoRA adapters served at start (name, PEFT directory). POST /v1/load_lora_adapter (re)loads
  // one of these by name; a directory the caller names is refused unless
  // allow_runtime_lora_paths (a standalone engine's operator choice; never set for Deployments,
  // whose adapters the platform resolves).
  std::vector<std::pair<std::string, std::string>> loras;
  bool allow_runtime_lora_paths = false;
  int32_t max_loras = 4;        // resident adapters, and distinct adapters in one step
  int64_t max_lora_rank = 64;
};

// One piece of a request's output.
struct Delta {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<SampleResult> samples;          // per token, when logprobs were asked for
  std::optional<std::string> finish_reason;   // "stop", "length", "abort" on the last delta
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;
  Status error;                               // a request that failed inside the engine
};

// Wakes a consumer that reads several Streams (the n choices of one API request) when any of
// them gets output.
class StreamSignal {
 public:
  // Waits until Notify was called after `*seen` or `timeout` passes; updates *seen.
  void Wait(uint64_t* seen, std::chrono::milliseconds timeout);
  void Notify();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t count_ = 0;
};

// A request's output channel, shared by the engine (producer) and one consumer.
class Stream {
 public:
  Stream() = default;
  explicit Stream(std::shared_ptr<StreamSignal> signal) : signal_(std::move(signal)) {}
  // Waits up to `timeout` for output. true with *d filled (possibly merging several steps);
  // false when nothing came in time (d untouched) or the stream is over and drained.
  bool Next(Delta* d, std::chrono::milliseconds timeout = std::chrono::milliseconds(100));
  bool done() const;
  // The consumer is gone (client disconnected): the engine aborts the request.
  void Cancel();
  bool cancelled() const { return cancelled_.load(); }

 private:
  friend class Engine;
  void Push(Delta d);
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Delta> queue_;
  bool finished_ = false;  // the last delta is queued
  std::atomic<bool> cancelled_{false};
  std::shared_ptr<StreamSignal> signal_;  // may be null
};

class Engine {
 public:
  static StatusOr<std::unique_ptr<Engine>> Load(EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. `request.model` names the base model or a LoRA adapter (NOT_FOUND otherwise).
  // RESOURCE_EXHAUSTED (HTTP 429) when max_waiting requests already wait or every adapter slot
  // is pinned; INVALID_ARGUMENT for a request the scheduler can never run (longer than the cache).
  StatusOr<std::shared_ptr<Stream>> Submit(GenerateRequest request);
  // The API's `n`: n requests for one prompt, one Stream each (choice i is streams[i]), all
  // notifying `signal` when given. Choice 0 keeps request.sampling.seed; choice i > 0 draws
  // with a seed derived from (seed, i), or its own when none was given. Choices 1..n-1 enter the
  // scheduler once choice 0's prompt is computed, so they take its KV from the prefix cache
  // instead of computing the prompt n times. All or nothing: 429 when n do not fit the queue.
  StatusOr<std::vector<std::shared_ptr<Stream>>> SubmitChoices(GenerateRequest request, int32_t n,
                                                               std::shared_ptr<StreamSignal> signal = nullptr);

  // Mean-pooled final hidden states of each input, L2-normalised. Runs on the loop thread
  // between steps; blocks the caller until done.
  StatusOr<std::vector<std::vector<float>>> Embed(const std::vector<std::vector<int32_t>>& inputs);

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ChatTemplate* chat_template() const { return chat_ ? &*chat_ : nullptr; }
  const std::string& model_name() const { return options_.served_model_name; }
  const ModelConfig& config() const { return model_->config(); }
  int64_t max_model_len() const { return max_model_len_; }
  int64_t kv_cache_blocks() const { return num_blocks_; }
  const EngineOptions& options() const { return options_; }
  // The compiled grammars of structured outputs, bound to this model's vocabulary.
  GrammarCache* grammars() { return grammars_.get(); }
  // The adapters (hot load and unload go straight to it; thread-safe).
  LoraRegistry& loras() { return *loras_; }
  Metrics& metrics() { return metrics_; }
  bool healthy() const { return !failed_.load(); }

 private:
  Engine() = default;
  void Loop();
  void Step();
  void Deliver(const RequestOutput& out);
  void UpdateLoraInfo(const SchedulerStats& st);

  EngineOptions options_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<kernels::ThreadPool> pool_;
  std::unique_ptr<LoraRegistry> loras_;
  std::unique_ptr<GrammarCache> grammars_;
  std::vector<int32_t> eos_ids_;
  // Constrained requests whose grammar failed mid-way (e.g. its automaton outgrew its limits):
  // they end at this step with the error instead of taking the engine down.
  std::map<RequestId, Status> constraint_failures_;  // loop thread only
  Sampler sampler_;
  int64_t max_model_len_ = 0;
  int64_t num_blocks_ = 0;

  struct Live {
    std::shared_ptr<Stream> stream;
    std::unique_ptr<TextStream> text;
    bool want_logprobs = false;
    int32_t prompt_tokens = 0;
    LoraPin pin;  // holds the request's adapter resident until it finishes
    std::string adapter;  // its name; "" for the base model
    bool started = false;  // produced its first token
  };
  std::map<RequestId, Live> live_;  // loop thread only
  // Choices 1..n-1 of a request, by the id of its choice 0, until that one's prompt is computed.
  std::map<RequestId, std::vector<Request>> held_;  // guarded by mu_
  StatusOr<std::pair<Request, Live>> Prepare(GenerateRequest& g, std::shared_ptr<StreamSignal> signal);
  void ReleaseHeld(RequestId leader);

  std::mutex mu_;  // guards the inbox and the counters below
  std::condition_variable cv_;
  std::vector<std::pair<Request, Live>> inbox_;
  std::vector<std::function<void()>> tasks_;
  int32_t waiting_ = 0;  // submitted, not yet past their first token
  RequestId next_id_ = 1;
  bool stop_ = false;
  std::atomic<bool> failed_{false};
  std::thread thread_;

  std::vector<float> logits_;
  std::vector<kernels::AttentionToken> attention_;
  std::vector<int32_t> logit_rows_;
  std::vector<int32_t> adapters_;

  Metrics metrics_;
  Counter* prompt_tokens_total_ = nullptr;
  Counter* generation_tokens_total_ = nullptr;
  Counter* request_success_total_ = nullptr;
  Counter* preemptions_total_ = nullptr;
  Counter* structured_requests_total_ = nullptr;  // labels model_name, kind
  Counter* structured_failures_total_ = nullptr;
  Histogram* ttft_ = nullptr;
  Histogram* itl_ = nullptr;
  Histogram* e2e_ = nullptr;
  Histogram* queue_time_ = nullptr;
  std::atomic<int64_t> running_gauge_{0}, waiting_gauge_{0};
  std::atomic<double> kv_usage_{0};
  // vllm:lora_requests_info labels: adapters of running and of waiting requests, comma-joined.
  mutable std::mutex lora_info_mu_;
  std::string running_loras_, waiting_loras_;
  std::map<RequestId, int64_t> last_token_micros_;
};

}  // namespace aicloud::engine
