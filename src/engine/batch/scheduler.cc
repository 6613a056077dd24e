#include "engine/batch/scheduler.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace aicloud::engine {

struct Scheduler::Sequence {
  Sequence(RequestId id_in, uint64_t order_in, std::vector<int32_t> prompt, SamplingParams params,
           uint64_t seed, std::span<const int32_t> eos, CacheScope scope_in, int32_t max_len_in)
      : id(id_in),
        order(order_in),
        tokens(std::move(prompt)),
        prompt_len(static_cast<int32_t>(tokens.size())),
        max_len(max_len_in),
        scope(scope_in),
        sampling(std::move(params), seed, tokens, eos) {}

  const RequestId id;
  const uint64_t order;         // arrival order at the inbox
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  const int32_t prompt_len;
  const int32_t max_len;        // tokens.size() never exceeds it
  int32_t num_computed = 0;     // KV written, or being written by the step in flight
  const CacheScope scope;
  SequenceSampling sampling;
  RequestStats stats;
  bool running = false;
  uint64_t batch = 0;           // static batching: the batch it belongs to (0 = none yet)
  int32_t entry = -1;           // index in the step being built, -1 if not in it
  // kShortestFirst, while waiting: its cached prefix when first ranked (the prefix cache moves
  // slowly next to a queue's wait; hashing every waiting prompt every step would not). -1: not yet.
  int64_t cached_hint = -1;
};

// ---- Construction ------------------------------------------------------------------------------

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerOptions& o,
                                                       const Clock* clock) {
  auto bad = [](const std::string& m) { return InvalidArgumentError("scheduler: " + m); };
  if (o.max_num_seqs <= 0) return bad("max_num_seqs must be > 0");
  if (o.max_num_batched_tokens < o.max_num_seqs) {
    return bad("max_num_batched_tokens (" + std::to_string(o.max_num_batched_tokens) +
               ") must be >= max_num_seqs (" + std::to_string(o.max_num_seqs) +
               "), so every running sequence can decode in every step");
  }
  if (o.max_model_len < 2) return bad("max_model_len must be >= 2");
  if (o.max_loras < 0) return bad("max_loras must be >= 0 (0 = no limit)");
  if (o.vocab_size < 0) return bad("vocab_size must be >= 0");
  if (o.static_batch_size < 0 || o.static_batch_size > o.max_num_seqs) {
    return bad("static_batch_size must be in [0, max_num_seqs]");
  }
  if (o.prefill_order == PrefillOrder::kShortestFirst) {
    if (o.static_batch_size > 0) {
      return bad("the shortest-first prefill order needs continuous batching (static_batch_size 0)");
    }
    if (o.max_overtake_micros <= 0) return bad("max_overtake_micros must be > 0");
  }
  for (int32_t t : o.eos_token_ids) {
    if (t < 0 || (o.vocab_size > 0 && t >= o.vocab_size)) {
      return bad("eos token id " + std::to_string(t) + " is outside the vocabulary");
    }
  }
  StatusOr<BlockManager> kv = BlockManager::Create(o.kv);
  if (!kv.ok()) return bad(kv.status().message());
  return std::unique_ptr<Scheduler>(new Scheduler(o, std::move(*kv), clock));
}

Scheduler::Scheduler(const SchedulerOptions& options, BlockManager kv, const Clock* clock)
    : options_(options),
      own_clock_(clock == nullptr ? std::make_unique<RealClock>() : nullptr),
      clock_(clock == nullptr ? own_clock_.get() : clock),
      seed_rng_(options.seed),
      kv_(std::move(kv)) {}

Scheduler::~Scheduler() = default;

int64_t Scheduler::Now() const { return clock_->NowMicros(); }

// ---- Any thread ----------------------------------------------------------------------------

Status Scheduler::Add(Request r) {
  const std::string who = "request " + std::to_string(r.id) + ": ";
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  if (prompt == 0) return InvalidArgumentError(who + "empty prompt");
  if (options_.vocab_size > 0) {
    for (size_t i = 0; i < r.prompt.size(); ++i) {
      if (r.prompt[i] < 0 || r.prompt[i] >= options_.vocab_size) {
        return InvalidArgumentError(who + "prompt token " + std::to_string(i) + " is " +
                                    std::to_string(r.prompt[i]) + ", outside the vocabulary of " +
                                    std::to_string(options_.vocab_size));
      }
    }
  }
  if (Status s = Validate(r.sampling, options_.vocab_size); !s.ok()) {
    return InvalidArgumentError(who + s.message());
  }
  if (r.adapter_id < 0) return InvalidArgumentError(who + "adapter id must be >= 0");
  if (prompt >= options_.max_model_len) {
    return InvalidArgumentError(who + "the prompt has " + std::to_string(prompt) +
                                " tokens; the model's context is " +
                                std::to_string(options_.max_model_len) +
                                " tokens, and at least one must be left for output");
  }
  // At its longest the request holds KV for every token but the last generated one.
  const int64_t max_len = std::min<int64_t>(prompt + r.sampling.max_tokens, options_.max_model_len);
  const int64_t bs = options_.kv.block_size;
  const int64_t blocks = (max_len - 1 + bs - 1) / bs;
  if (blocks > options_.kv.num_blocks) {
    return InvalidArgumentError(
        who + "needs up to " + std::to_string(blocks) + " KV blocks (" + std::to_string(prompt) +
        " prompt tokens + up to " + std::to_string(max_len - prompt) +
        " output tokens); the whole KV cache has " + std::to_string(options_.kv.num_blocks) +
        " blocks of " + std::to_string(bs) + " tokens. Lower max_tokens or shorten the prompt");
  }
  const int64_t arrival = r.arrival_micros >= 0 ? r.arrival_micros : Now();
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (live_ids_.count(r.id) > 0) {
      return AlreadyExistsError(who + "an unfinished request has this id");
    }
    const uint64_t seed = r.sampling.seed ? *r.sampling.seed : seed_rng_.Next();
    auto seq = std::make_unique<Sequence>(r.id, next_order_++, std::move(r.prompt),
                                          std::move(r.sampling), seed, options_.eos_token_ids,
                                          CacheScope{r.adapter_id, r.cache_salt},
                                          static_cast<int32_t>(max_len));
    seq->stats.arrival_micros = arrival;
    seq->stats.num_prompt_tokens = static_cast<int32_t>(prompt);
    live_ids_.insert(r.id);
    InboxItem item;
    item.add = std::move(seq);
    inbox_.push_back(std::move(item));
    num_unfinished_.fetch_add(1, std::memory_order_relaxed);
  }
  inbox_cv_.notify_one();
  return OkStatus();
}

void Scheduler::Abort(RequestId id, FinishReason reason) {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    InboxItem item;
    item.abort_id = id;
    item.reason = reason;
    inbox_.push_back(std::move(item));
  }
  inbox_cv_.notify_one();
}

bool Scheduler::WaitForWork(int64_t timeout_micros) {
  std::unique_lock<std::mutex> lock(inbox_mu_);
  return inbox_cv_.wait_for(lock, std::chrono::microseconds(timeout_micros), [this] {
    return !inbox_.empty() || num_scheduled_.load(std::memory_order_relaxed) > 0;
  });
}

// ---- Engine thread: Schedule ---------------------------------------------------------------

void Scheduler::DrainInbox(StepPlan& plan) {
  std::vector<InboxItem> items;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    items.swap(inbox_);
  }
  for (InboxItem& item : items) {
    if (item.add) {
      Sequence* s = item.add.get();
      seqs_.emplace(s->id, std::move(item.add));
      waiting_.push_back(s);
      num_scheduled_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    auto it = seqs_.find(item.abort_id);
    if (it == seqs_.end()) continue;  // finished already, or never added
    RequestOutput out;
    Finish(it->second.get(), item.reason, &out);
    plan.outputs.push_back(std::move(out));
  }
}

StatusOr<StepPlan> Scheduler::Schedule() {
  if (in_flight_) {
    return FailedPreconditionError("scheduler: step " + std::to_string(step_) +
                                   " has not been through Update");
  }
  StepPlan plan;
  plan.step = ++step_;
  // 1. New requests and aborts.
  DrainInbox(plan);
  std::vector<Entry> entries;
  int64_t budget = options_.max_num_batched_tokens;
  // 2. Decodes: one token for every running sequence whose known tokens are all computed but
  //    the newest. Victims of preemption leave from the back, so index i stays valid.
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence* s = running_[i];
    if (static_cast<int32_t>(s->tokens.size()) - s->num_computed == 1) {
      ReserveOrPreempt(s, 1, entries, budget, plan);
    }
  }
  if (options_.prefill_order == PrefillOrder::kShortestFirst) {
    PrefillShortestFirst(entries, budget, plan);
  } else {
    // 3. Running sequences still prefilling (or recomputing): the next chunk, oldest first.
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
      Sequence* s = running_[i];
      const int64_t rest = static_cast<int64_t>(s->tokens.size()) - s->num_computed;
      if (rest > 0 && s->entry < 0) {
        ReserveOrPreempt(s, static_cast<int32_t>(std::min(rest, budget)), entries, budget, plan);
      }
    }
    // 4. Admission, unless memory was short enough to preempt.
    if (plan.preempted.empty()) Admit(entries, budget);
  }
  // 5. The plan.
  BuildPlan(entries, plan);
  for (const Entry& e : entries) e.seq->entry = -1;
  last_step_tokens_ = plan.num_tokens();
  in_flight_ = !plan.empty();
  return plan;
}

bool Scheduler::ReserveOrPreempt(Sequence* s, int32_t n, std::vector<Entry>& entries,
                                 int64_t& budget, StepPlan& plan) {
  for (;;) {
    if (kv_.CanAppendSlots(s->id, n)) {
      (void)kv_.AppendSlots(s->id, n);
      s->entry = static_cast<int32_t>(entries.size());
      entries.push_back({s, s->num_computed, n, false});
      s->num_computed += n;
      budget -= n;
      return true;
    }
    Sequence* victim = running_.back();
    Preempt(victim, entries, budget, plan);
    if (victim == s) return false;
  }
}

void Scheduler::Preempt(Sequence* v, std::vector<Entry>& entries, int64_t& budget,
                        StepPlan& plan) {
  kv_.Free(v->id);
  if (v->entry >= 0) {  // already given tokens in this step: take them back
    Entry& e = entries[static_cast<size_t>(v->entry)];
    e.removed = true;
    budget += e.num_tokens;
    v->entry = -1;
  }
  v->num_computed = 0;
  v->cached_hint = -1;  // its blocks just went back to the cache
  running_.pop_back();
  AddRunningAdapter(v->scope.adapter_id, -1);
  v->running = false;
  waiting_.push_front(v);
  ++num_preemptions_;
  ++v->stats.num_preemptions;
  plan.preempted.push_back(v->id);
}

bool Scheduler::LoraAllows(int32_t adapter) const {
  return adapter == 0 || options_.max_loras == 0 || running_adapters_.count(adapter) > 0 ||
         static_cast<int32_t>(running_adapters_.size()) < options_.max_loras;
}

void Scheduler::AddRunningAdapter(int32_t adapter, int delta) {
  if (adapter == 0) return;
  if ((running_adapters_[adapter] += delta) <= 0) running_adapters_.erase(adapter);
}

void Scheduler::Admit(std::vector<Entry>& entries, int64_t& budget) {
  const bool is_static = options_.static_batch_size > 0;
  if (is_static && batch_live_ == 0) {
    // The previous batch is done: the next one is the front of the queue.
    ++batch_id_;
    for (size_t i = 0; i < waiting_.size() &&
                       batch_live_ < options_.static_batch_size; ++i) {
      waiting_[i]->batch = batch_id_;
      ++batch_live_;
    }
  }
  const int64_t now = Now();
  while (!waiting_.empty() && budget > 0) {
    Sequence* s = waiting_.front();
    if (is_static && s->batch != batch_id_) break;
    // Strict FCFS: a head that cannot start blocks those behind it, so nobody starves.
    if (!Start(s, entries, budget, now)) break;
    waiting_.pop_front();
  }
}

bool Scheduler::Start(Sequence* s, std::vector<Entry>& entries, int64_t& budget, int64_t now) {
  if (static_cast<int32_t>(running_.size()) >= options_.max_num_seqs) return false;
  if (!LoraAllows(s->scope.adapter_id)) return false;
  const int64_t rest = static_cast<int64_t>(s->tokens.size()) - kv_.CachedPrefixLength(s->tokens, s->scope);
  const int32_t n = static_cast<int32_t>(std::min(rest, budget));
  StatusOr<int64_t> cached =
      kv_.Allocate(s->id, s->tokens, s->scope, n, /*apply_watermark=*/!running_.empty());
  if (!cached.ok()) return false;  // RESOURCE_EXHAUSTED: wait for blocks
  s->running = true;
  running_.push_back(s);
  AddRunningAdapter(s->scope.adapter_id, +1);
  s->num_computed = static_cast<int32_t>(*cached);
  s->entry = static_cast<int32_t>(entries.size());
  entries.push_back({s, s->num_computed, n, false});
  s->num_computed += n;
  budget -= n;
  if (s->stats.first_scheduled_micros < 0) {
    s->stats.first_scheduled_micros = now;
    s->stats.num_cached_tokens = static_cast<int32_t>(*cached);
    prompt_tokens_ += s->prompt_len;
  }
  return true;
}

void Scheduler::PrefillShortestFirst(std::vector<Entry>& entries, int64_t& budget, StepPlan& plan) {
  struct Candidate {
    Sequence* s;
    bool first;         // waited max_overtake_micros, or was preempted: ahead of the others
    int64_t rest;       // prompt tokens left (a waiting one: past its cached prefix)
    int64_t share = 0;  // of the step's budget
  };
  const int64_t now = Now();
  auto starved = [&](const Sequence* s) { return now - s->stats.arrival_micros >= options_.max_overtake_micros; };
  std::vector<Candidate> order;
  // A preempted sequence goes first until it has recomputed, as the FCFS queue puts it back at
  // its front.
  for (Sequence* s : running_) {
    const int64_t rest = static_cast<int64_t>(s->tokens.size()) - s->num_computed;
    if (rest > 0 && s->entry < 0) order.push_back({s, starved(s) || s->stats.num_preemptions > 0, rest});
  }
  for (Sequence* s : waiting_) {
    if (s->cached_hint < 0) s->cached_hint = kv_.CachedPrefixLength(s->tokens, s->scope);
    const int64_t rest = static_cast<int64_t>(s->tokens.size()) - s->cached_hint;
    order.push_back({s, starved(s) || s->stats.num_preemptions > 0, rest});
  }
  // Those first oldest first, a running one before a waiting one (as FCFS serves running prefills
  // before it admits); then the fewest tokens left, the older first on a tie.
  std::sort(order.begin(), order.end(), [](const Candidate& a, const Candidate& b) {
    if (a.first != b.first) return a.first;
    if (a.first && a.s->running != b.s->running) return a.s->running;
    if (!a.first && a.rest != b.rest) return a.rest < b.rest;
    return a.s->order < b.s->order;
  });
  // The budget is dealt out in that order, to waiting sequences only while a seat (max_num_seqs),
  // their adapter and blocks for their chunk look free: a share given to one that cannot start
  // would be lost to the running ones behind it, and a long wait for a seat would stall them.
  int64_t left = budget;
  int32_t seats = options_.max_num_seqs - static_cast<int32_t>(running_.size());
  for (Candidate& c : order) {
    if (left <= 0) break;
    if (!c.s->running) {
      if (seats <= 0 || !LoraAllows(c.s->scope.adapter_id) || !kv_.CanAllocate(std::min(c.rest, left))) continue;
      --seats;
    }
    c.share = std::min(c.rest, left);
    left -= c.share;
  }
  // KV for the running sequences' chunks is reserved before any waiting one starts, so a
  // preemption those need takes a running sequence, never one started in this step; and there is
  // no admission in a step that had to preempt.
  for (const Candidate& c : order) {
    if (c.share > 0 && c.s->running) ReserveOrPreempt(c.s, static_cast<int32_t>(c.share), entries, budget, plan);
  }
  if (plan.preempted.empty()) {
    for (const Candidate& c : order) {
      if (c.s->running) continue;
      int64_t share = std::min(c.share, budget);
      if (share > 0) {
        const int64_t given = share;
        if (Start(c.s, entries, share, now)) {
          budget -= given - share;
          waiting_.erase(std::find(waiting_.begin(), waiting_.end(), c.s));
          continue;
        }
      }
      if (c.first) break;  // as the FCFS head: nobody behind it starts before it
    }
  }
  // What a waiting sequence could not use goes to the running ones still prefilling, in order,
  // where their blocks allow it without preempting.
  for (const Candidate& c : order) {
    if (budget <= 0) break;
    Sequence* s = c.s;
    if (!s->running) continue;
    const int64_t more = std::min(static_cast<int64_t>(s->tokens.size()) - s->num_computed, budget);
    if (more <= 0 || !kv_.CanAppendSlots(s->id, more)) continue;
    (void)kv_.AppendSlots(s->id, more);
    if (s->entry >= 0) {
      entries[static_cast<size_t>(s->entry)].num_tokens += static_cast<int32_t>(more);
    } else {
      s->entry = static_cast<int32_t>(entries.size());
      entries.push_back({s, s->num_computed, static_cast<int32_t>(more), false});
    }
    s->num_computed += static_cast<int32_t>(more);
    budget -= more;
  }
}

void Scheduler::BuildPlan(const std::vector<Entry>& entries, StepPlan& plan) const {
  for (const Entry& e : entries) {
    if (e.removed) continue;
    const Sequence& s = *e.seq;
    const int32_t known = static_cast<int32_t>(s.tokens.size());
    ScheduledSeq ps;
    ps.id = s.id;
    ps.adapter_id = s.scope.adapter_id;
    ps.start_position = e.start;
    ps.num_tokens = e.num_tokens;
    ps.token_offset = plan.num_tokens();
    ps.block_table = kv_.BlockTable(s.id);
    ps.needs_logits = e.start + e.num_tokens == known;
    ps.is_prefill = !(e.num_tokens == 1 && e.start == known - 1 && known > s.prompt_len);
    ps.sampling = &s.sampling;
    plan.token_ids.insert(plan.token_ids.end(), s.tokens.begin() + e.start,
                          s.tokens.begin() + e.start + e.num_tokens);
    for (int32_t p = e.start; p < e.start + e.num_tokens; ++p) plan.positions.push_back(p);
    kv_.AppendSlotMapping(s.id, e.start, e.num_tokens, &plan.slot_mapping);
    (ps.is_prefill ? plan.num_prefill_tokens : plan.num_decode_tokens) += e.num_tokens;
    plan.seqs.push_back(ps);
  }
}

// ---- Engine thread: Update -----------------------------------------------------------------

StatusOr<std::vector<RequestOutput>> Scheduler::Update(const StepPlan& plan,
                                                       std::vector<SampledToken> sampled) {
  std::vector<RequestOutput> outputs;
  if (plan.empty() && sampled.empty()) return outputs;
  if (!in_flight_ || plan.step != step_) {
    return FailedPreconditionError("scheduler: plan " + std::to_string(plan.step) +
                                   " is not the step in flight");
  }
  // Check everything before changing anything.
  size_t j = 0;
  for (const ScheduledSeq& ps : plan.seqs) {
    if (!ps.needs_logits) continue;
    if (j >= sampled.size()) {
      return InvalidArgumentError("scheduler: no sampled token for request " +
                                  std::to_string(ps.id));
    }
    if (sampled[j].id != ps.id) {
      return InvalidArgumentError("scheduler: sampled token " + std::to_string(j) +
                                  " is for request " + std::to_string(sampled[j].id) +
                                  ", the plan expects " + std::to_string(ps.id));
    }
    const int32_t t = sampled[j].sample.token;
    if (t < 0 || (options_.vocab_size > 0 && t >= options_.vocab_size)) {
      return InvalidArgumentError("scheduler: sampled token " + std::to_string(t) +
                                  " for request " + std::to_string(ps.id) +
                                  " is outside the vocabulary");
    }
    ++j;
  }
  if (j != sampled.size()) {
    return InvalidArgumentError("scheduler: " + std::to_string(sampled.size()) +
                                " sampled tokens for " + std::to_string(j) + " sequences");
  }

  const int64_t now = Now();
  j = 0;
  for (const ScheduledSeq& ps : plan.seqs) {
    Sequence* s = seqs_.at(ps.id).get();
    kv_.MarkComputed(s->id, std::span<const int32_t>(s->tokens).first(static_cast<size_t>(s->num_computed)));
    if (!ps.needs_logits) continue;
    SampleResult r = std::move(sampled[j++].sample);
    const int32_t token = r.token;
    s->tokens.push_back(token);
    s->sampling.Append(token);
    ++s->stats.num_output_tokens;
    ++generation_tokens_;
    if (s->stats.first_token_micros < 0) s->stats.first_token_micros = now;
    RequestOutput out;
    out.id = s->id;
    out.sample = std::move(r);
    out.time_micros = now;
    if (std::optional<FinishReason> reason = StopReason(*s, token)) {
      Finish(s, *reason, &out);
    } else {
      out.stats = s->stats;
    }
    outputs.push_back(std::move(out));
  }
  in_flight_ = false;
  return outputs;
}

std::optional<FinishReason> Scheduler::StopReason(const Sequence& s, int32_t token) const {
  const SamplingParams& p = s.sampling.params();
  const int32_t n = s.stats.num_output_tokens;
  if (n >= p.min_tokens) {
    if (!p.ignore_eos && std::find(options_.eos_token_ids.begin(), options_.eos_token_ids.end(),
                                   token) != options_.eos_token_ids.end()) {
      return FinishReason::kEos;
    }
    if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) !=
        p.stop_token_ids.end()) {
      return FinishReason::kStopToken;
    }
  }
  if (n >= p.max_tokens) return FinishReason::kMaxTokens;
  if (static_cast<int32_t>(s.tokens.size()) >= s.max_len) return FinishReason::kLengthCap;
  return std::nullopt;
}

void Scheduler::Finish(Sequence* s, FinishReason reason, RequestOutput* out) {
  if (s->running) {
    kv_.Free(s->id);
    running_.erase(std::find(running_.begin(), running_.end(), s));
    AddRunningAdapter(s->scope.adapter_id, -1);
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
  }
  if (options_.static_batch_size > 0 && s->batch == batch_id_ && batch_id_ != 0) --batch_live_;
  s->stats.finished_micros = Now();
  out->id = s->id;
  out->finish = reason;
  out->time_micros = s->stats.finished_micros;
  out->stats = s->stats;
  const RequestId id = s->id;
  seqs_.erase(id);  // s is gone
  num_scheduled_.fetch_sub(1, std::memory_order_relaxed);
  num_unfinished_.fetch_sub(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(inbox_mu_);
  live_ids_.erase(id);
}

SchedulerStats Scheduler::Stats() const {
  SchedulerStats st;
  st.num_running = static_cast<int64_t>(running_.size());
  st.num_waiting = static_cast<int64_t>(waiting_.size());
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    for (const InboxItem& item : inbox_) st.num_waiting += item.add != nullptr;
  }
  st.num_preemptions = num_preemptions_;
  st.num_steps = static_cast<int64_t>(step_);
  st.prompt_tokens = prompt_tokens_;
  st.generation_tokens = generation_tokens_;
  st.last_step_tokens = last_step_tokens_;
  for (const auto& [adapter, count] : running_adapters_) st.running_adapters.push_back(adapter);
  st.kv = kv_.Stats();
  return st;
}

}  // namespace aicloud::engine
