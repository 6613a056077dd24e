#include "sim/serving_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace aicloud::sim {

double ReplicaModel::StepSeconds(int decoding, int prefill_tokens) const {
  if (decoding == 0 && prefill_tokens == 0) return 0;
  return (step_base_s + step_per_seq_s * decoding + prefill_per_token_s * prefill_tokens) / speedup;
}

fleet::ReplicaCapacity ReplicaModel::Capacity() const {
  fleet::ReplicaCapacity c;
  c.max_concurrency = max_batch;
  c.prefill_tokens_per_s = prefill_chunk_tokens / StepSeconds(0, prefill_chunk_tokens);
  c.decode_tokens_per_s = max_batch / StepSeconds(max_batch, 0);
  return c;
}

SimReplica::SimReplica(const ReplicaModel& model, const ServingTrace& trace,
                       std::vector<RequestOutcome>* outcomes, fleet::PrefixIndex* cache, std::string id,
                       int index)
    : model_(model),
      trace_(trace),
      outcomes_(outcomes),
      cache_(cache),
      id_(std::move(id)),
      index_(index),
      next_event_s_(std::numeric_limits<double>::infinity()) {}

void SimReplica::Enqueue(int request, double now_s) {
  waiting_.push_back(request);
  Kick(now_s);
}

void SimReplica::Kick(double now_s) {
  if (!stepping_) StartStep(now_s);
}

bool SimReplica::Admit(double /*now_s*/) {
  bool any = false;
  while (!waiting_.empty() && static_cast<int>(running_.size()) < model_.max_batch) {
    const int r = waiting_.front();
    const ServingRequest& req = trace_.requests[static_cast<size_t>(r)];
    const int64_t need = static_cast<int64_t>(req.prompt_tokens) + std::max(req.output_tokens, 1);
    // A request larger than the whole cache still runs alone rather than never.
    if (kv_used_ + need > model_.kv_capacity_tokens && !running_.empty()) break;
    waiting_.pop_front();
    int cached = 0;
    if (cache_ != nullptr && trace_.block_tokens > 0 && !req.block_hashes.empty()) {
      const int hit = cache_->MatchedBlocks(id_, req.block_hashes);
      cached = std::min(hit * trace_.block_tokens, std::max(req.prompt_tokens - 1, 0));
    }
    RequestOutcome& o = (*outcomes_)[static_cast<size_t>(r)];
    o.cached_tokens = cached;
    o.replica = index_;
    running_.push_back({r, std::max(req.prompt_tokens - cached, 1), std::max(req.output_tokens, 1), need, 0});
    kv_used_ += need;
    any = true;
  }
  return any;
}

void SimReplica::StartStep(double now_s) {
  Admit(now_s);
  int decoding = 0;
  int budget = model_.prefill_chunk_tokens;
  int prefill = 0;
  auto give = [&](Active& a) {
    a.chunk = std::min(a.prefill_left, budget);
    budget -= a.chunk;
    prefill += a.chunk;
  };
  order_.clear();
  for (size_t i = 0; i < running_.size(); ++i) {
    Active& a = running_[i];
    a.chunk = 0;
    if (a.prefill_left == 0) {
      ++decoding;
    } else if (model_.prefill_order == PrefillOrder::kShortestFirst) {
      order_.push_back(static_cast<int>(i));
    } else if (budget > 0) {
      give(a);
    }
  }
  if (!order_.empty()) {
    // Starved sequences first (oldest first), then the fewest tokens left; running_ is in
    // admission order, which breaks ties.
    auto key = [&](int i) {
      const Active& a = running_[static_cast<size_t>(i)];
      const double arrival = trace_.requests[static_cast<size_t>(a.request)].arrival_s;
      const bool starved = now_s - arrival >= model_.max_overtake_s;
      return std::make_pair(starved ? 0 : 1, starved ? 0 : a.prefill_left);
    };
    std::stable_sort(order_.begin(), order_.end(), [&](int x, int y) { return key(x) < key(y); });
    for (int i : order_) {
      if (budget <= 0) break;
      give(running_[static_cast<size_t>(i)]);
    }
  }
  if (decoding == 0 && prefill == 0) {
    stepping_ = false;
    next_event_s_ = std::numeric_limits<double>::infinity();
    return;
  }
  stepping_ = true;
  step_start_s_ = now_s;
  next_event_s_ = now_s + model_.StepSeconds(decoding, prefill);
}

void SimReplica::CompleteStep() {
  const double now = next_event_s_;
  int generated = 0;
  std::vector<Active> still;
  still.reserve(running_.size());
  for (Active& a : running_) {
    const ServingRequest& req = trace_.requests[static_cast<size_t>(a.request)];
    RequestOutcome& o = (*outcomes_)[static_cast<size_t>(a.request)];
    bool produced = false;
    if (a.prefill_left == 0) {
      produced = true;
    } else if (a.chunk > 0) {
      a.prefill_left -= a.chunk;
      if (a.prefill_left == 0) {
        // The step that finishes the prompt yields the first token.
        produced = true;
        o.first_token_s = now;
        ttft_ms_.Add(now, (now - req.arrival_s) * 1000);
        if (cache_ != nullptr && !req.block_hashes.empty()) cache_->Record(id_, req.block_hashes);
      }
    }
    if (produced) {
      ++generated;
      if (--a.decode_left == 0) {
        o.finish_s = now;
        const int out = std::max(req.output_tokens, 1);
        if (out > 1) tpot_ms_.Add(now, (now - o.first_token_s) * 1000 / (out - 1));
        kv_used_ -= a.kv_tokens;
        continue;
      }
    }
    still.push_back(a);
  }
  running_.swap(still);
  tokens_.Add(now, generated);
  stepping_ = false;
  StartStep(now);
}

fleet::ReplicaMetrics SimReplica::Metrics(double now_s, double window_s) const {
  fleet::ReplicaMetrics m;
  m.id = id_;
  m.running = running();
  m.waiting = waiting();
  m.kv_usage = kv_usage();
  // The window's maximum stands for its p99 (a window holds tens of values, not hundreds).
  m.ttft_p99_ms = ttft_ms_.Max(now_s, window_s, 0);
  m.tpot_p99_ms = tpot_ms_.Max(now_s, window_s, 0);
  m.tokens_per_s = tokens_.Sum(now_s, window_s) / window_s;
  return m;
}

}  // namespace aicloud::sim
