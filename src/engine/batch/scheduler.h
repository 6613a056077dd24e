// Scheduler: continuous batching at iteration level (Orca, OSDI'22; vLLM V1's scheduler), over
// the paged KV cache (kv/block_manager.h). Every Schedule() call builds one engine step; the
// runner executes it and Update() applies the sampled tokens.
//
//   SchedulerOptions o;
//   o.kv.num_blocks = NumBlocksForBudget(kv_bytes, KvBytesPerBlock(...));
//   o.max_model_len = config.max_position_embeddings;
//   o.eos_token_ids = {tokenizer.eos_id()};
//   auto sched = Scheduler::Create(o).value();
//   // server threads:
//   Status s = sched->Add(std::move(request));   // INVALID_ARGUMENT names what cannot fit
//   sched->Abort(id);                             // client went away
//   // engine thread:
//   for (;;) {
//     sched->WaitForWork(100'000);
//     StepPlan plan = sched->Schedule().value();
//     Publish(plan.outputs);                      // aborted requests
//     if (plan.empty()) continue;
//     std::vector<SampledToken> sampled = runner.Run(plan);
//     Publish(sched->Update(plan, std::move(sampled)).value());
//   }
//
// One step, top to bottom (Schedule):
//   1. Drain the inbox: new requests join the back of the waiting queue, aborts finish theirs.
//   2. Decodes: every running sequence whose prompt is computed gets its one token.
//   3. Partial prefills: running sequences still computing their prompt (or recomputing after
//      a preemption) get the next chunk, oldest first, within max_num_batched_tokens.
//   4. Admission: while budget, max_num_seqs and KV blocks allow, the head of the waiting
//      queue is admitted with its first chunk; its cached prefix (prefix caching) is skipped.
//      Admission is strictly first-come-first-served: the head is never overtaken, so no
//      request starves. No admission in a step that had to preempt.
//   5. Emit the plan: tokens, positions, slot mapping, block tables, which logits to sample.
// That is the default order (PrefillOrder::kFcfs, as vLLM and SGLang by default). With
// kShortestFirst, steps 3 and 4 become one: the sequences still prefilling and the waiting ones
// get the step's prefill budget fewest prompt tokens left first (a waiting one counts its prompt
// past the cached prefix it had when first ranked), so a short prompt is not queued behind a
// long one (shortest remaining processing time, which minimizes mean waiting). Nobody starves:
// a sequence that arrived
// `max_overtake_micros` ago or earlier, or was preempted, goes ahead of the others, oldest
// first, and a waiting one of those that cannot start (max_num_seqs, max_loras, KV) blocks
// admission behind it as the FCFS head does. A waiting sequence is dealt budget only while a
// seat, its adapter and blocks look free, and what it could not use goes to the running
// prefills, so one that cannot start never stalls those that run. KV for the running
// sequences' chunks is reserved before any waiting one starts, so the rule of step 4 holds.
// RESULTS.md section 7 measures what the order is worth on TTFT.
// A prompt longer than the budget is thus split across steps (chunked prefill), and the
// decodes of running sequences are scheduled before any prefill, so a long prompt never
// stalls them.
//
// Preemption (vLLM's recompute): when a running sequence needs a KV block and none is free,
// the most recently admitted running sequence (with FCFS, the most recent arrival) is
// preempted: its blocks are freed and it goes back to the front of the waiting queue, its
// generated tokens appended to what it must recompute (the prefix cache usually still holds
// most of its blocks). It may be the one that needed the block. Since the longest-running
// sequence is never the victim while another runs, and Add refuses any request that could not
// run alone in the whole cache, every request completes: no deadlock, no livelock.
//
// Outputs do not depend on batching: a sequence's tokens are a function of its own tokens,
// seed and parameters (sampler.h), whatever else shares its steps and however often it is
// preempted (the tests check this with a fake model that reads its context back through the
// KV slots).
//
// Static batching (static_batch_size = B > 0) is the baseline for the continuous-vs-static
// benchmark: take up to B waiting requests, run them until all have finished (no admission in
// between), then take the next B. Everything else (chunking, KV, preemption) is shared, and
// only real tokens are fed: no padding, so this is static batching at its best.
// bench/engine_sched_bench.cc also models a padded static server (what Hugging Face generate
// computes) and compares all three on the Azure trace.
//
// Thread-safety: Add, Abort, WaitForWork and NumUnfinished may be called from any thread (they
// go through a locked inbox that Schedule drains). Everything else belongs to one engine
// thread. Schedule and Update alternate strictly; a non-empty plan must be given to Update
// before the next Schedule.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/clock.h"
#include "core/rng.h"
#include "core/status.h"
#include "engine/batch/request.h"
#include "engine/batch/step_plan.h"
#include "engine/kv/block_manager.h"

namespace aicloud::engine {

// Which prefill is served first (see the file comment).
enum class PrefillOrder { kFcfs, kShortestFirst };

struct SchedulerOptions {
  // Tokens per step, prefill and decode together (vLLM: max_num_batched_tokens; 2048 on its
  // API server). Every running sequence waits for the whole step between two of its tokens,
  // and on a CPU a step costs about its token count (a 135M-parameter model on 2 cores
  // prefills ~450 tokens/s), so the budget sets the inter-token latency whenever a prefill is
  // pending. bench/engine_sched_bench.cc on the Azure conv trace (simulated, that model's
  // costs): budgets 512 / 256 / 128 / 64 give ITL p99 1.24 / 0.66 / 0.35 / 0.19 s and TTFT p99
  // 33 / 37 / 48 / 55 s at 70% load, with offline throughput within 2% (the fixed per-step
  // cost is small next to the per-token cost on a CPU). 256 is the middle of that trade.
  // Must be >= max_num_seqs, so that every running sequence can always decode.
  int32_t max_num_batched_tokens = 256;
  // Running sequences at most (vLLM: max_num_seqs, 256 on GPUs). Aggregate CPU decode
  // throughput grows to about 32 sequences and flattens after (llama.cpp on this machine:
  // 108 tokens/s at 1, 230 at 32); 64 leaves headroom for sequences still prefilling.
  int32_t max_num_seqs = 64;
  // Context limit of the model: prompt + output tokens (from config.json).
  int32_t max_model_len = 4096;
  // Distinct LoRA adapters among running sequences (vLLM: max_loras). The base model
  // (adapter 0) does not count. 0 = no limit.
  int32_t max_loras = 0;
  // The model's end-of-sequence tokens (several for Llama 3).
  std::vector<int32_t> eos_token_ids;
  // > 0: prompt and stop token ids must be below it.
  int32_t vocab_size = 0;
  // Seeds the generator that gives requests without SamplingParams::seed their seed.
  uint64_t seed = 0;
  // > 0: static batching baseline with batches of this many requests (<= max_num_seqs).
  int32_t static_batch_size = 0;
  // Order of the prefill budget among sequences still computing their prompt.
  PrefillOrder prefill_order = PrefillOrder::kFcfs;
  // kShortestFirst: after this long since its arrival a sequence goes ahead of younger ones.
  // 60 s keeps most of the order's gain on the Azure code trace (RESULTS.md section 7).
  int64_t max_overtake_micros = 60'000'000;
  // The KV pool: num_blocks (required), block_size, watermark, prefix caching.
  BlockManagerOptions kv;
};

// Counters and gauges for /metrics (vLLM names in comments).
struct SchedulerStats {
  int64_t num_running = 0;           // vllm:num_requests_running
  int64_t num_waiting = 0;           // vllm:num_requests_waiting
  int64_t num_preemptions = 0;       // vllm:num_preemptions
  int64_t num_steps = 0;
  int64_t prompt_tokens = 0;         // vllm:prompt_tokens (computed, cache hits excluded)
  int64_t generation_tokens = 0;     // vllm:generation_tokens
  int64_t last_step_tokens = 0;      // vllm:iteration_tokens_total (observe per step)
  std::vector<int32_t> running_adapters;  // vllm:lora_requests_info
  KvStats kv;                        // vllm:kv_cache_usage_perc, vllm:prefix_cache_*
};

class Scheduler {
 public:
  // INVALID_ARGUMENT for unusable options (non-positive budgets, max_num_batched_tokens <
  // max_num_seqs, a bad KV configuration, ...). `clock` (not owned, may be null for the real
  // clock) stamps events; it must outlive the scheduler.
  static StatusOr<std::unique_ptr<Scheduler>> Create(const SchedulerOptions& options,
                                                     const Clock* clock = nullptr);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // ---- Any thread -------------------------------------------------------------------------

  // Queues a request. Refuses, with nothing queued:
  //   ALREADY_EXISTS   another unfinished request has this id;
  //   INVALID_ARGUMENT empty prompt, token ids outside the vocabulary, bad sampling
  //                    parameters, negative adapter id, a prompt that leaves no room for
  //                    output in max_model_len, or a request whose KV at its longest
  //                    (prompt + max_tokens - 1 tokens, capped by the context) exceeds the
  //                    whole KV cache, which no amount of waiting or preemption would fix.
  Status Add(Request request);
  // Finishes a request at the next Schedule with `reason` (kAborted, or kStopString when the
  // caller found a stop string). Unknown or finished ids are ignored.
  void Abort(RequestId id, FinishReason reason = FinishReason::kAborted);

  // The clock's time in micros, what Request::arrival_micros is measured on (any thread).
  int64_t Now() const;
  // Blocks until there is something to schedule (a request waiting or running, or an inbox
  // entry) or the timeout passes; returns whether there is.
  bool WaitForWork(int64_t timeout_micros);
  // Requests added and not yet finished.
  int64_t NumUnfinished() const { return num_unfinished_.load(std::memory_order_relaxed); }

  // ---- Engine thread --------------------------------------------------------------------

  // Builds the next step (see the file comment). FAILED_PRECONDITION if the previous
  // non-empty plan has not been through Update. An empty plan (nothing to run) needs no
  // Update; its `outputs` may still hold aborts.
  StatusOr<StepPlan> Schedule();

  // Applies the step: the KV of every fed token counts as computed, and each sequence whose
  // logits were needed gets its sampled token (`sampled` holds exactly those, in plan order).
  // Returns one event per sampled token (with finish set when a stop condition hit: EOS, stop
  // token, max_tokens, context cap) and frees finished requests' KV. INVALID_ARGUMENT,
  // changing nothing, when `sampled` does not match the plan or holds a token outside the
  // vocabulary; FAILED_PRECONDITION when `plan` is not the step in flight.
  StatusOr<std::vector<RequestOutput>> Update(const StepPlan& plan,
                                              std::vector<SampledToken> sampled);

  SchedulerStats Stats() const;
  const BlockManager& kv() const { return kv_; }
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Sequence;
  struct InboxItem {
    std::unique_ptr<Sequence> add;  // a new request, or
    RequestId abort_id = 0;         // one to finish
    FinishReason reason = FinishReason::kAborted;
  };
  struct Entry {  // one sequence's share of the step being built
    Sequence* seq;
    int32_t start;
    int32_t num_tokens;
    bool removed;
  };

  Scheduler(const SchedulerOptions& options, BlockManager kv, const Clock* clock);

  void DrainInbox(StepPlan& plan);
  // Reserves KV for n more tokens of running sequence s, preempting from the back of running_
  // until it fits or s itself was preempted. Returns whether s got its tokens.
  bool ReserveOrPreempt(Sequence* s, int32_t n, std::vector<Entry>& entries, int64_t& budget,
                        StepPlan& plan);
  void Preempt(Sequence* s, std::vector<Entry>& entries, int64_t& budget, StepPlan& plan);
  void Admit(std::vector<Entry>& entries, int64_t& budget);
  // kShortestFirst's steps 3 and 4.
  void PrefillShortestFirst(std::vector<Entry>& entries, int64_t& budget, StepPlan& plan);
  // Starts waiting sequence s (not removed from waiting_) with its first chunk. False, changing
  // nothing, when max_num_seqs, max_loras or the KV blocks do not allow it.
  bool Start(Sequence* s, std::vector<Entry>& entries, int64_t& budget, int64_t now);
  bool LoraAllows(int32_t adapter) const;
  void AddRunningAdapter(int32_t adapter, int delta);
  // Ends a request: frees its KV, drops it from every queue, fills out's finish and stats.
  void Finish(Sequence* s, FinishReason reason, RequestOutput* out);
  std::optional<FinishReason> StopReason(const Sequence& s, int32_t token) const;
  void BuildPlan(const std::vector<Entry>& entries, StepPlan& plan) const;

  const SchedulerOptions options_;
  std::unique_ptr<Clock> own_clock_;
  const Clock* clock_;

  // The inbox, shared with server threads.
  mutable std::mutex inbox_mu_;
  std::condition_variable inbox_cv_;
  std::vector<InboxItem> inbox_;             // GUARDED_BY(inbox_mu_)
  std::unordered_set<RequestId> live_ids_;   // GUARDED_BY(inbox_mu_); unfinished requests
  Rng seed_rng_;                             // GUARDED_BY(inbox_mu_)
  uint64_t next_order_ = 0;                  // GUARDED_BY(inbox_mu_)
  std::atomic<int64_t> num_unfinished_{0};
  std::atomic<int64_t> num_scheduled_{0};    // waiting + running, for WaitForWork

  // Engine thread state.
  BlockManager kv_;
  std::unordered_map<RequestId, std::unique_ptr<Sequence>> seqs_;
  std::deque<Sequence*> waiting_;    // arrival order; preempted ones back at the front
  std::vector<Sequence*> running_;   // admission order: the back is the preemption victim
  std::map<int32_t, int32_t> running_adapters_;  // adapter (not 0) -> running sequences
  bool in_flight_ = false;
  uint64_t step_ = 0;
  uint64_t batch_id_ = 0;   // static batching: the batch being run
  int32_t batch_live_ = 0;  // its unfinished members

  int64_t num_preemptions_ = 0;
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
  int64_t last_step_tokens_ = 0;
};

}  // namespace aicloud::engine
