// The latency model of one serving replica, stepped iteration by iteration as the engine's
// continuous-batching scheduler runs (src/engine/batch): every step decodes one token for each
// running sequence whose prompt is done and prefills up to `prefill_chunk_tokens` of the others'
// prompts (chunked prefill), FCFS admission while the batch and the KV cache have room.
//
// Step time = (base + per_seq x decoding sequences + per_token x prefilled tokens) / speedup.
// The constants are fitted to the project's CPU engine on SmolLM2-135M shapes, 2 cores
// (bench/RESULTS.md section 6): a 512-token prompt in one step at ~520 tokens/s, single-stream
// decode ~70 tokens/s (14.3 ms/step), 32 streams ~350 tokens/s (91 ms/step), so
// base = 11.8 ms, per_seq = 2.49 ms, per_token = 1.92 ms. `speedup` scales the whole curve to
// stand for a GPU replica (docs/autoscaling.md says which factor and why).
//
// Prefill order (`prefill_order`, as the engine's SchedulerOptions::prefill_order): the step's
// prefill budget goes to the running sequences oldest first (kFcfs), or to those with the fewest
// prompt tokens left first (kShortestFirst), except that a sequence that has waited
// `max_overtake_s` since it arrived goes ahead of every other, oldest first, so none starves.
// Admission stays FCFS and takes no budget (up to max_batch and the KV capacity): only the order
// among admitted sequences is modelled, which on the Azure traces is every request a replica
// holds (a few per replica, against 64). The engine also orders its waiting queue.
//
// A replica keeps a prefix cache of prompt blocks (an LRU of block ids, as vLLM's free-block
// LRU): at admission the leading blocks it holds are not prefilled again.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "fleet/prefix_index.h"
#include "fleet/snapshot.h"
#include "fleet/window.h"
#include "sim/serving_trace.h"

namespace aicloud::sim {

enum class PrefillOrder { kFcfs, kShortestFirst };

struct ReplicaModel {
  double speedup = 4;
  double step_base_s = 0.0118;
  double step_per_seq_s = 0.00249;
  double prefill_per_token_s = 1.0 / 520;
  int max_batch = 64;
  int64_t kv_capacity_tokens = 262'144;
  int prefill_chunk_tokens = 2048;
  double cold_start_s = 30;          // weights load + warm-up on a node that is already up
  int64_t prefix_cache_blocks = 0;   // 0 = kv_capacity_tokens / block size
  PrefillOrder prefill_order = PrefillOrder::kFcfs;
  double max_overtake_s = 60;        // kShortestFirst: the most a sequence can be overtaken

  double StepSeconds(int decoding, int prefill_tokens) const;
  // The capacity estimate an operator would profile: prefill-only tokens/s, and decode
  // tokens/s at a full batch.
  fleet::ReplicaCapacity Capacity() const;
};

// Per-request outcome, filled in by the replica that served it.
struct RequestOutcome {
  double first_token_s = -1;  // absolute time of the first token; < 0 = never
  double finish_s = -1;
  int cached_tokens = 0;      // prompt tokens served from the prefix cache
  int replica = -1;
};

// One replica's engine state. Not thread-safe.
class SimReplica {
 public:
  SimReplica(const ReplicaModel& model, const ServingTrace& trace, std::vector<RequestOutcome>* outcomes,
             fleet::PrefixIndex* cache, std::string id, int index);

  const std::string& id() const { return id_; }
  void Enqueue(int request, double now_s);
  // End of the step in progress; +inf when idle.
  double next_event_s() const { return next_event_s_; }
  // Finishes the step ending at next_event_s() and starts the next one if there is work.
  void CompleteStep();
  // Starts a step at now_s if idle and there is work.
  void Kick(double now_s);

  int running() const { return static_cast<int>(running_.size()); }
  int waiting() const { return static_cast<int>(waiting_.size()); }
  bool empty() const { return running_.empty() && waiting_.empty(); }
  double kv_usage() const { return static_cast<double>(kv_used_) / model_.kv_capacity_tokens; }
  // Engine metrics over the last `window_s` seconds.
  fleet::ReplicaMetrics Metrics(double now_s, double window_s) const;

 private:
  struct Active {
    int request;
    int prefill_left;
    int decode_left;
    int64_t kv_tokens;
    int chunk = 0;  // prefill tokens in the current step
  };
  void StartStep(double now_s);
  bool Admit(double now_s);

  const ReplicaModel& model_;
  const ServingTrace& trace_;
  std::vector<RequestOutcome>* outcomes_;
  fleet::PrefixIndex* cache_;
  std::string id_;
  int index_;
  std::deque<int> waiting_;
  std::vector<Active> running_;
  std::vector<int> order_;  // kShortestFirst: indices of running_ in the order prefill is given
  int64_t kv_used_ = 0;
  double step_start_s_ = 0;
  double next_event_s_;
  bool stepping_ = false;
  fleet::SampleWindow ttft_ms_{120};      // (time of first token, TTFT ms)
  fleet::SampleWindow tpot_ms_{120};      // (finish time, TPOT ms)
  fleet::SampleWindow tokens_{120};       // (step end, tokens generated)
};

}  // namespace aicloud::sim
