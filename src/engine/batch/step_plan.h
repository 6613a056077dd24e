// StepPlan: one iteration of the engine as the scheduler decided it, in the form the model
// runner consumes: the tokens to feed (flat, sequence after sequence), their positions and KV
// slots, and per sequence its block table, whether its logits are needed, and its adapter.
//
//   StatusOr<StepPlan> plan = scheduler.Schedule();
//   // runner: embed plan->token_ids; per layer StoreKv(kv, plan->slot_mapping.data(), ...);
//   //         attention for token t of seq s: {s.block_table, positions[t] + 1};
//   //         logits only for seqs with needs_logits (their last fed token).
//   std::vector<SampledToken> sampled;
//   for (const ScheduledSeq& s : plan->seqs)
//     if (s.needs_logits) sampled.push_back({s.id, *sampler.Sample(*s.sampling, logits_of(s))});
//   StatusOr<std::vector<RequestOutput>> events = scheduler.Update(*plan, std::move(sampled));
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/batch/request.h"
#include "engine/sample/sampler.h"

namespace aicloud::engine {

struct ScheduledSeq {
  RequestId id = 0;
  int32_t adapter_id = 0;
  // Tokens fed this step: positions [start_position, start_position + num_tokens), found in
  // the plan's flat arrays at [token_offset, token_offset + num_tokens).
  int32_t start_position = 0;
  int32_t num_tokens = 0;
  int32_t token_offset = 0;
  // Logical block -> physical block, covering at least every fed position. Token at position p
  // attends to positions [0, p]. Valid until Update.
  std::span<const int32_t> block_table;
  // Sample a token from the logits of the last fed token: true for decodes and for the prefill
  // chunk that completes the sequence's known tokens; false for earlier prefill chunks.
  bool needs_logits = false;
  // False for a plain decode (the single, newest generated token); true for prompt chunks and
  // for recomputation after a preemption.
  bool is_prefill = true;
  // Pass to Sampler::Sample when needs_logits. Valid until Update.
  const SequenceSampling* sampling = nullptr;
};

struct StepPlan {
  uint64_t step = 0;                 // Update must be given this plan
  std::vector<ScheduledSeq> seqs;    // decodes first, then prefill chunks
  std::vector<int32_t> token_ids;    // every fed token, sequence after sequence
  std::vector<int32_t> positions;    // same order
  std::vector<int64_t> slot_mapping;  // same order: block * block_size + offset (StoreKv slots)
  // Requests sent back to waiting by this step's preemptions: a runner holding per-request
  // state for them (none needed for KV, which the scheduler recomputes) may drop it.
  std::vector<RequestId> preempted;
  // Requests that finished while scheduling (aborts and stop strings from the inbox).
  std::vector<RequestOutput> outputs;
  int32_t num_decode_tokens = 0;
  int32_t num_prefill_tokens = 0;

  bool empty() const { return seqs.empty(); }
  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
};

// The runner's answer for one sequence whose logits were needed, in plan order.
struct SampledToken {
  RequestId id = 0;
  SampleResult sample;
};

}  // namespace aicloud::engine
