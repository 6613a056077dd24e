// FakeRunner: a deterministic stand-in for the model runner, for the scheduler's tests and
// benchmark. It consumes a StepPlan exactly as a real runner must:
//   1. "StoreKv": every fed token writes a cell (token id, position, adapter) at its slot of a
//      fake KV pool;
//   2. "attention": for each sequence whose logits are needed, it reads its whole context,
//      positions [0, last fed position], back from the pool through the sequence's block
//      table, and checks each cell holds that position and adapter;
//   3. "logits": a pure function of the context read and the adapter (FakeLogits), sampled
//      with the sequence's SequenceSampling.
// So a wrong slot mapping, a shared block overwritten, a prefix-cache hit on other content or
// another adapter's KV, or a block freed too early changes the tokens or fails the step,
// exactly where a real model would silently compute garbage. Outputs of correct scheduling
// equal ReferenceGenerate's, which runs one request alone with no KV cache at all.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/batch/request.h"
#include "engine/batch/step_plan.h"
#include "engine/sample/sampler.h"

namespace aicloud::engine {

// The fake model: logits over `out.size()` tokens after `context` for `adapter`.
inline void FakeLogits(std::span<const int32_t> context, int32_t adapter, std::span<float> out) {
  auto mix = [](uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  uint64_t h = mix(static_cast<uint64_t>(adapter) + 0x1234567ULL);
  for (int32_t t : context) h = mix(h ^ static_cast<uint64_t>(static_cast<uint32_t>(t)));
  for (size_t v = 0; v < out.size(); ++v) {
    // [-4, 4): peaked enough that top_p and min_p matter, flat enough that seeds matter.
    out[v] = static_cast<float>(mix(h + 0x9e3779b97f4a7c15ULL * (v + 1)) >> 40) / 16777216.0f * 8.0f - 4.0f;
  }
}

class FakeRunner {
 public:
  FakeRunner(int32_t num_blocks, int32_t block_size, int32_t vocab_size)
      : block_size_(block_size),
        vocab_(vocab_size),
        pool_(static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size)) {}

  // One step. INTERNAL if the plan is inconsistent or a context read finds the wrong cell.
  StatusOr<std::vector<SampledToken>> Run(const StepPlan& plan) {
    const size_t n = plan.token_ids.size();
    if (plan.positions.size() != n || plan.slot_mapping.size() != n) {
      return InternalError("plan arrays differ in length");
    }
    for (const ScheduledSeq& s : plan.seqs) {
      for (int32_t i = 0; i < s.num_tokens; ++i) {
        const size_t k = static_cast<size_t>(s.token_offset + i);
        const int64_t slot = plan.slot_mapping[k];
        const int32_t pos = plan.positions[k];
        if (pos != s.start_position + i) return InternalError("positions out of order");
        const int64_t expect = static_cast<int64_t>(s.block_table[static_cast<size_t>(pos / block_size_)]) * block_size_ + pos % block_size_;
        if (slot != expect) return InternalError("slot mapping disagrees with the block table");
        pool_[static_cast<size_t>(slot)] = Cell{plan.token_ids[k], pos, s.adapter_id};
      }
    }
    std::vector<SampledToken> out;
    for (const ScheduledSeq& s : plan.seqs) {
      if (!s.needs_logits) continue;
      const int32_t len = s.start_position + s.num_tokens;
      context_.clear();
      for (int32_t p = 0; p < len; ++p) {
        const size_t b = static_cast<size_t>(p / block_size_);
        if (b >= s.block_table.size()) return InternalError("block table too short");
        const Cell& c = pool_[static_cast<size_t>(s.block_table[b]) * static_cast<size_t>(block_size_) + static_cast<size_t>(p % block_size_)];
        if (c.pos != p || c.adapter != s.adapter_id) {
          return InternalError("request " + std::to_string(s.id) + " reads position " +
                               std::to_string(p) + " and finds position " + std::to_string(c.pos) +
                               " of adapter " + std::to_string(c.adapter));
        }
        context_.push_back(c.token);
      }
      logits_.resize(static_cast<size_t>(vocab_));
      FakeLogits(context_, s.adapter_id, logits_);
      StatusOr<SampleResult> r = sampler_.Sample(*s.sampling, logits_);
      if (!r.ok()) return r.status();
      out.push_back({s.id, std::move(*r)});
    }
    return out;
  }

 private:
  struct Cell {
    int32_t token = -1;
    int32_t pos = -1;
    int32_t adapter = -1;
  };
  int32_t block_size_;
  int32_t vocab_;
  std::vector<Cell> pool_;
  std::vector<int32_t> context_;
  std::vector<float> logits_;
  Sampler sampler_;
};

// What `request` generates when run alone, one token at a time from its full context, with the
// scheduler's stop rules. `seed` is the seed the scheduler used (the request's own if set).
struct ReferenceResult {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kMaxTokens;
};

inline ReferenceResult ReferenceGenerate(const Request& request, uint64_t seed,
                                         const std::vector<int32_t>& eos, int32_t max_model_len,
                                         int32_t vocab_size) {
  ReferenceResult res;
  std::vector<int32_t> context = request.prompt;
  SequenceSampling seq(request.sampling, seed, request.prompt, eos);
  Sampler sampler;
  std::vector<float> logits(static_cast<size_t>(vocab_size));
  const SamplingParams& p = request.sampling;
  for (;;) {
    FakeLogits(context, request.adapter_id, logits);
    const int32_t t = sampler.Sample(seq, logits)->token;
    seq.Append(t);
    context.push_back(t);
    res.tokens.push_back(t);
    const int32_t n = static_cast<int32_t>(res.tokens.size());
    if (n >= p.min_tokens) {
      if (!p.ignore_eos && std::find(eos.begin(), eos.end(), t) != eos.end()) {
        res.finish = FinishReason::kEos;
        return res;
      }
      if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t) != p.stop_token_ids.end()) {
        res.finish = FinishReason::kStopToken;
        return res;
      }
    }
    if (n >= p.max_tokens) {
      res.finish = FinishReason::kMaxTokens;
      return res;
    }
    if (static_cast<int32_t>(context.size()) >= max_model_len) {
      res.finish = FinishReason::kLengthCap;
      return res;
    }
  }
}

}  // namespace aicloud::engine
