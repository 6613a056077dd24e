// Scheduler: driven end to end with FakeRunner (fake_runner.h), whose tokens depend on the KV it
// reads back through the block tables. Every run is checked against ReferenceGenerate (each
// request alone, no cache), with per-step checks of the budgets, max_loras and the KV
// invariants. Also: chunked prefill against decodes, preemption, rejection of impossible
// requests, aborts, static batching, events and timings, misuse of Update, threads.
#include "engine/batch/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/rng.h"
#include "engine/batch/fake_runner.h"

namespace aicloud::engine {
namespace {

constexpr int32_t kVocab = 64;
constexpr int32_t kEos = 1;
constexpr int32_t kMaxModelLen = 160;

SchedulerOptions Options(int32_t budget, int32_t max_seqs, int32_t num_blocks,
                         int32_t block_size = 16) {
  SchedulerOptions o;
  o.max_num_batched_tokens = budget;
  o.max_num_seqs = max_seqs;
  o.max_model_len = kMaxModelLen;
  o.eos_token_ids = {kEos};
  o.vocab_size = kVocab;
  o.seed = 99;
  o.kv.num_blocks = num_blocks;
  o.kv.block_size = block_size;
  o.kv.watermark = 0.0;
  o.kv.hash_key = SipKey{3, 4};
  return o;
}

std::vector<int32_t> RandomTokens(Rng& rng, int n) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(2 + static_cast<int32_t>(rng.Uniform(kVocab - 2)));
  return v;
}

// A request of `tokens` random prompt tokens and up to `max_tokens` of output, seeded by its id.
Request Prompt(Rng& rng, RequestId id, int tokens, int max_tokens) {
  Request r;
  r.id = id;
  r.prompt = RandomTokens(rng, tokens);
  r.sampling.max_tokens = max_tokens;
  r.sampling.seed = id;
  return r;
}

// A mixed workload: shared prefixes, every sampling feature, three adapters, salts, every stop
// condition. All requests carry seeds, so outputs cannot depend on arrival order.
std::vector<Request> Workload(uint64_t seed, int n) {
  Rng rng(seed);
  std::vector<std::vector<int32_t>> families = {RandomTokens(rng, 40), RandomTokens(rng, 70),
                                                RandomTokens(rng, 5)};
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.id = static_cast<RequestId>(i + 1);
    if (rng.Uniform(4) != 0) r.prompt = families[rng.Uniform(families.size())];
    std::vector<int32_t> tail = RandomTokens(rng, 1 + static_cast<int>(rng.Uniform(60)));
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    SamplingParams& p = r.sampling;
    p.seed = rng.Next();
    p.max_tokens = 1 + static_cast<int32_t>(rng.Uniform(40));
    switch (i % 6) {
      case 0: p.temperature = 0; break;
      case 1: p.temperature = 0.8f; p.top_p = 0.9f; break;
      case 2: p.top_k = 8; p.min_p = 0.05f; p.repetition_penalty = 1.2f; break;
      case 3: p.temperature = 0.7f; p.presence_penalty = 0.5f; p.frequency_penalty = 0.3f;
              p.stop_token_ids = {5, 6}; break;
      case 4: p.temperature = 0; p.ignore_eos = true; p.min_tokens = std::min(3, p.max_tokens); break;
      case 5: p.temperature = 1.3f; p.min_tokens = std::min(2, p.max_tokens); break;
    }
    r.adapter_id = i % 4 == 0 ? 1 : (i % 7 == 0 ? 2 : 0);
    if (i % 11 == 0) r.cache_salt = 7;
    out.push_back(std::move(r));
  }
  return out;
}

struct RunResult {
  std::map<RequestId, std::vector<int32_t>> tokens;
  std::map<RequestId, FinishReason> finish;
  std::map<RequestId, RequestStats> stats;
  std::vector<StepPlan> plans;  // every non-empty plan, when kept
  SchedulerStats final_stats;
  int64_t steps = 0;
};

struct DriveOptions {
  std::map<int64_t, std::vector<Request>> arrivals;  // step -> requests added before it
  bool keep_plans = false;
  const Clock* clock = nullptr;
  FakeClock* advance = nullptr;  // advanced by 1000 us per step when set
};

// Runs everything to completion, checking each step.
RunResult Drive(const SchedulerOptions& o, DriveOptions d) {
  RunResult run;
  auto sched = Scheduler::Create(o, d.clock);
  EXPECT_TRUE(sched.ok()) << sched.status();
  if (!sched.ok()) return run;
  Scheduler& s = **sched;
  FakeRunner runner(o.kv.num_blocks, o.kv.block_size, kVocab);
  int64_t last_arrival = d.arrivals.empty() ? 0 : d.arrivals.rbegin()->first;
  std::set<RequestId> open;  // scheduled at least once, unfinished
  std::set<RequestId> running;  // admitted in an earlier step, not preempted or finished since
  int64_t admitted_since_empty = 0;
  for (int64_t step = 0;; ++step) {
    if (step > 200000) {
      ADD_FAILURE() << "no progress";
      break;
    }
    if (auto it = d.arrivals.find(step); it != d.arrivals.end()) {
      for (Request& r : it->second) {
        Status st = s.Add(r);
        EXPECT_TRUE(st.ok()) << st;
      }
    }
    if (step > last_arrival && s.NumUnfinished() == 0) break;
    if (d.advance) d.advance->Advance(1000);
    StatusOr<StepPlan> plan = s.Schedule();
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) break;
    // Budgets and limits.
    EXPECT_LE(plan->num_tokens(), o.max_num_batched_tokens);
    EXPECT_LE(static_cast<int32_t>(plan->seqs.size()), o.max_num_seqs);
    std::set<RequestId> ids;
    std::set<int32_t> adapters;
    for (const ScheduledSeq& ps : plan->seqs) {
      EXPECT_TRUE(ids.insert(ps.id).second) << "request twice in one step";
      EXPECT_GT(ps.num_tokens, 0);
      if (ps.adapter_id != 0) adapters.insert(ps.adapter_id);
      if (!open.count(ps.id)) {
        open.insert(ps.id);
        ++admitted_since_empty;
      }
    }
    if (o.max_loras > 0) {
      EXPECT_LE(static_cast<int32_t>(adapters.size()), o.max_loras);
    }
    // No admission in a step that had to preempt.
    if (!plan->preempted.empty()) {
      for (const ScheduledSeq& ps : plan->seqs) {
        EXPECT_TRUE(running.count(ps.id)) << "step " << step << ": request " << ps.id << " admitted in a step that preempted";
      }
    }
    for (const ScheduledSeq& ps : plan->seqs) running.insert(ps.id);
    for (RequestId id : plan->preempted) running.erase(id);
    if (o.static_batch_size > 0) {
      EXPECT_LE(admitted_since_empty, o.static_batch_size);
    }
    EXPECT_EQ(plan->num_decode_tokens + plan->num_prefill_tokens, plan->num_tokens());
    for (const RequestOutput& out : plan->outputs) {
      run.finish[out.id] = *out.finish;
      open.erase(out.id);
      running.erase(out.id);
    }
    if (!plan->empty()) {
      ++run.steps;
      StatusOr<std::vector<SampledToken>> sampled = runner.Run(*plan);
      EXPECT_TRUE(sampled.ok()) << sampled.status();
      if (!sampled.ok()) break;
      StatusOr<std::vector<RequestOutput>> events = s.Update(*plan, std::move(*sampled));
      EXPECT_TRUE(events.ok()) << events.status();
      if (!events.ok()) break;
      for (const RequestOutput& e : *events) {
        if (e.sample) run.tokens[e.id].push_back(e.sample->token);
        if (e.finish) {
          run.finish[e.id] = *e.finish;
          run.stats[e.id] = e.stats;
          open.erase(e.id);
          running.erase(e.id);
        }
      }
      if (d.keep_plans) run.plans.push_back(std::move(*plan));
    }
    if (open.empty()) admitted_since_empty = 0;
    const Status inv = s.kv().CheckInvariants();
    EXPECT_TRUE(inv.ok()) << inv;
    if (!inv.ok()) break;
  }
  run.final_stats = s.Stats();
  EXPECT_EQ(run.final_stats.kv.num_used_blocks, 0) << "blocks leaked";
  EXPECT_EQ(run.final_stats.num_running + run.final_stats.num_waiting, 0);
  return run;
}

void ExpectMatchesReference(const RunResult& run, const std::vector<Request>& reqs, const std::string& name) {
  for (const Request& r : reqs) {
    const ReferenceResult want = ReferenceGenerate(r, *r.sampling.seed, {kEos}, kMaxModelLen, kVocab);
    auto it = run.tokens.find(r.id);
    ASSERT_TRUE(it != run.tokens.end()) << name << ": request " << r.id << " produced nothing";
    EXPECT_EQ(it->second, want.tokens) << name << ": request " << r.id;
    auto f = run.finish.find(r.id);
    ASSERT_TRUE(f != run.finish.end()) << name << ": request " << r.id << " never finished";
    EXPECT_EQ(f->second, want.finish) << name << ": request " << r.id;
  }
}

// Runs `plan` on the fake runner and applies it; the events by value (a range-for over
// *s.Update(...) would dangle before C++23).
std::vector<RequestOutput> Apply(Scheduler& s, FakeRunner& runner, const StepPlan& plan) {
  StatusOr<std::vector<SampledToken>> sampled = runner.Run(plan);
  EXPECT_TRUE(sampled.ok()) << sampled.status();
  if (!sampled.ok()) return {};
  StatusOr<std::vector<RequestOutput>> events = s.Update(plan, std::move(*sampled));
  EXPECT_TRUE(events.ok()) << events.status();
  if (!events.ok()) return {};
  return std::move(*events);
}

std::map<int64_t, std::vector<Request>> Staggered(const std::vector<Request>& reqs, int64_t gap,
                                                  bool reverse = false) {
  std::map<int64_t, std::vector<Request>> a;
  for (size_t i = 0; i < reqs.size(); ++i) {
    a[static_cast<int64_t>(i) * gap].push_back(reqs[reverse ? reqs.size() - 1 - i : i]);
  }
  return a;
}

// ---- Options and admission -----------------------------------------------------------------

TEST(SchedulerTest, CreateValidatesOptions) {
  struct Case {
    const char* name;
    void (*edit)(SchedulerOptions&);
    const char* error;
  };
  const Case cases[] = {
      {"ok", [](SchedulerOptions&) {}, nullptr},
      {"budget below seqs", [](SchedulerOptions& o) { o.max_num_batched_tokens = 8; o.max_num_seqs = 9; },
       "max_num_batched_tokens (8) must be >= max_num_seqs (9)"},
      {"no seqs", [](SchedulerOptions& o) { o.max_num_seqs = 0; }, "max_num_seqs"},
      {"tiny context", [](SchedulerOptions& o) { o.max_model_len = 1; }, "max_model_len"},
      {"negative max_loras", [](SchedulerOptions& o) { o.max_loras = -1; }, "max_loras"},
      {"static above seqs", [](SchedulerOptions& o) { o.static_batch_size = 65; }, "static_batch_size"},
      {"eos outside vocab", [](SchedulerOptions& o) { o.eos_token_ids = {64}; }, "eos token id 64"},
      {"no blocks", [](SchedulerOptions& o) { o.kv.num_blocks = 0; }, "num_blocks"},
      {"shortest first", [](SchedulerOptions& o) { o.prefill_order = PrefillOrder::kShortestFirst; }, nullptr},
      {"shortest first, static",
       [](SchedulerOptions& o) {
         o.prefill_order = PrefillOrder::kShortestFirst;
         o.static_batch_size = 4;
       },
       "needs continuous batching"},
      {"shortest first, no overtake bound",
       [](SchedulerOptions& o) {
         o.prefill_order = PrefillOrder::kShortestFirst;
         o.max_overtake_micros = 0;
       },
       "max_overtake_micros"},
  };
  for (const Case& c : cases) {
    SchedulerOptions o = Options(512, 64, 100);
    c.edit(o);
    auto s = Scheduler::Create(o);
    if (c.error == nullptr) {
      EXPECT_TRUE(s.ok()) << c.name << ": " << s.status();
    } else {
      ASSERT_FALSE(s.ok()) << c.name;
      EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(s.status().message().find(c.error), std::string::npos) << c.name << ": " << s.status();
    }
  }
}

TEST(SchedulerTest, AddRejectsWhatCanNeverRun) {
  struct Case {
    const char* name;
    void (*edit)(Request&);
    StatusCode code;
    const char* error;
  };
  const Case cases[] = {
      {"ok", [](Request&) {}, StatusCode::kOk, nullptr},
      {"empty prompt", [](Request& r) { r.prompt.clear(); }, StatusCode::kInvalidArgument, "empty prompt"},
      {"token outside vocab", [](Request& r) { r.prompt[1] = 64; }, StatusCode::kInvalidArgument,
       "prompt token 1 is 64, outside the vocabulary of 64"},
      {"negative token", [](Request& r) { r.prompt[0] = -1; }, StatusCode::kInvalidArgument, "prompt token 0"},
      {"bad sampling", [](Request& r) { r.sampling.top_p = 0; }, StatusCode::kInvalidArgument,
       "request 1: sampling: top_p must be in (0, 1]"},
      {"stop id outside vocab", [](Request& r) { r.sampling.stop_token_ids = {70}; },
       StatusCode::kInvalidArgument, "stop_token_ids"},
      {"negative adapter", [](Request& r) { r.adapter_id = -2; }, StatusCode::kInvalidArgument, "adapter id"},
      {"prompt fills the context", [](Request& r) { r.prompt.assign(kMaxModelLen, 3); },
       StatusCode::kInvalidArgument, "the prompt has 160 tokens; the model's context is 160 tokens"},
      {"prompt one below the context",
       [](Request& r) { r.prompt.assign(kMaxModelLen - 1, 3); r.adapter_id = 99; },
       StatusCode::kOk, nullptr},
      // 8 blocks of 16 = 128 slots: 100 + 29 - 1 = 128 fits, 100 + 30 - 1 does not.
      {"fits the cache exactly", [](Request& r) { r.prompt.assign(100, 3); r.sampling.max_tokens = 29; },
       StatusCode::kOk, nullptr},
      {"longer than the cache", [](Request& r) { r.prompt.assign(100, 3); r.sampling.max_tokens = 30; },
       StatusCode::kInvalidArgument,
       "needs up to 9 KV blocks (100 prompt tokens + up to 30 output tokens); the whole KV cache has 8 blocks"},
      // The context cap bounds the footprint: 120 + 1000 is capped at 160 tokens = 10 blocks.
      {"capped by the context", [](Request& r) { r.prompt.assign(120, 3); r.sampling.max_tokens = 1000; },
       StatusCode::kInvalidArgument, "needs up to 10 KV blocks"},
  };
  for (const Case& c : cases) {
    Request r;
    r.id = 1;
    r.prompt = {2, 3, 4};
    c.edit(r);
    // 8 blocks of 16 tokens; 10 for the case that needs a 159-token prompt to fit.
    auto s = Scheduler::Create(Options(64, 8, r.adapter_id == 99 ? 10 : 8));
    ASSERT_TRUE(s.ok());
    const Status st = (*s)->Add(r);
    EXPECT_EQ(st.code(), c.code) << c.name << ": " << st;
    if (c.error) {
      EXPECT_NE(st.message().find(c.error), std::string::npos) << c.name << ": " << st;
    }
    EXPECT_EQ((*s)->NumUnfinished(), c.code == StatusCode::kOk ? 1 : 0) << c.name;
  }
  // Duplicate ids while unfinished; the id is free again once finished.
  auto s = Scheduler::Create(Options(64, 8, 8));
  Request r;
  r.id = 5;
  r.prompt = {2, 3};
  r.sampling.max_tokens = 1;
  ASSERT_TRUE((*s)->Add(r).ok());
  EXPECT_EQ((*s)->Add(r).code(), StatusCode::kAlreadyExists);
  FakeRunner runner(8, 16, kVocab);
  StepPlan plan = *(*s)->Schedule();
  ASSERT_TRUE((*s)->Update(plan, *runner.Run(plan)).ok());
  EXPECT_EQ((*s)->NumUnfinished(), 0);
  EXPECT_TRUE((*s)->Add(r).ok());
}

// ---- Outputs do not depend on scheduling --------------------------------------------------------

TEST(SchedulerTest, OutputsIndependentOfArrivalBatchingBudgetAndPreemption) {
  const std::vector<Request> reqs = Workload(7, 36);
  struct Case {
    const char* name;
    SchedulerOptions options;
    std::map<int64_t, std::vector<Request>> arrivals;
    bool expect_preemption;
  };
  auto opts = [](int32_t budget, int32_t seqs, int32_t blocks, int32_t bs, void (*edit)(SchedulerOptions&)) {
    SchedulerOptions o = Options(budget, seqs, blocks, bs);
    if (edit) edit(o);
    return o;
  };
  std::map<int64_t, std::vector<Request>> at_once;
  at_once[0] = reqs;
  auto shortest = [](SchedulerOptions& o) { o.prefill_order = PrefillOrder::kShortestFirst; };
  auto shortest_5ms = [](SchedulerOptions& o) {
    o.prefill_order = PrefillOrder::kShortestFirst;
    o.max_overtake_micros = 5000;
  };
  const std::vector<Case> cases = {
      {"default, staggered", opts(512, 64, 4096, 16, nullptr), Staggered(reqs, 3), false},
      {"all at once", opts(512, 64, 4096, 16, nullptr), at_once, false},
      {"reversed arrival", opts(512, 64, 4096, 16, nullptr), Staggered(reqs, 2, true), false},
      {"budget 8, 8 seqs", opts(8, 8, 4096, 16, nullptr), Staggered(reqs, 1), false},
      {"one token per step", opts(1, 1, 4096, 16, nullptr), at_once, false},
      {"budget 37, chunked", opts(37, 5, 4096, 16, nullptr), Staggered(reqs, 5, true), false},
      {"tiny pool", opts(64, 16, 12, 16, nullptr), at_once, true},
      {"tiny pool, staggered", opts(48, 12, 14, 16, nullptr), Staggered(reqs, 2), true},
      {"tiny pool, block 4", opts(64, 16, 44, 4, nullptr), at_once, true},
      {"no prefix caching", opts(64, 16, 20, 16, [](SchedulerOptions& o) { o.kv.enable_prefix_caching = false; }),
       at_once, true},
      {"watermark 0.2", opts(64, 16, 30, 16, [](SchedulerOptions& o) { o.kv.watermark = 0.2; }), at_once, false},
      {"max_loras 1", opts(128, 16, 4096, 16, [](SchedulerOptions& o) { o.max_loras = 1; }), at_once, false},
      {"static 4", opts(512, 64, 4096, 16, [](SchedulerOptions& o) { o.static_batch_size = 4; }),
       Staggered(reqs, 1), false},
      {"static 6, tiny pool", opts(64, 16, 16, 16, [](SchedulerOptions& o) { o.static_batch_size = 6; }),
       at_once, true},
      {"shortest first", opts(37, 5, 4096, 16, shortest), Staggered(reqs, 2), false},
      {"shortest first, all at once", opts(64, 16, 4096, 16, shortest), at_once, false},
      {"shortest first, tiny pool", opts(64, 16, 12, 16, shortest), at_once, true},
      {"shortest first, tiny pool, staggered", opts(48, 12, 14, 16, shortest), Staggered(reqs, 2), true},
      // Overtaking bounded at 5 steps of the fake clock: starved and fresh sequences mix.
      {"shortest first, overtake 5 ms", opts(64, 16, 12, 16, shortest_5ms), at_once, true},
      // Few seats: a waiting sequence that cannot start must not take the budget from the running
      // ones (it did once, and with a starved one waiting the engine made no progress at all).
      {"shortest first, one seat", opts(16, 1, 4096, 16, shortest_5ms), Staggered(reqs, 1), false},
      {"shortest first, two seats", opts(24, 2, 4096, 16, shortest_5ms), at_once, false},
      {"shortest first, two seats, tiny pool", opts(32, 2, 12, 16, shortest_5ms), at_once, true},
      {"shortest first, one seat, no overtake bound", opts(16, 1, 4096, 16, shortest), at_once, false},
      {"shortest first, max_loras 1", opts(128, 16, 4096, 16,
                                           [](SchedulerOptions& o) {
                                             o.prefill_order = PrefillOrder::kShortestFirst;
                                             o.max_loras = 1;
                                           }),
       Staggered(reqs, 1), false},
  };
  for (const Case& c : cases) {
    DriveOptions d;
    d.arrivals = c.arrivals;
    FakeClock clock;
    d.clock = &clock;
    d.advance = &clock;
    const RunResult run = Drive(c.options, d);
    ExpectMatchesReference(run, reqs, c.name);
    if (c.expect_preemption) {
      EXPECT_GT(run.final_stats.num_preemptions, 0) << c.name << ": the case should preempt";
    }
    if (c.options.kv.enable_prefix_caching && !c.expect_preemption) {
      EXPECT_GT(run.final_stats.kv.prefix_hits, 0) << c.name << ": shared prefixes should hit";
    }
  }
}

// ---- Prefill order ---------------------------------------------------------------------------

// A long prompt is being prefilled when a short one arrives: FCFS makes the short one wait for the
// whole long prompt; shortest-first prefills it in the next step and gives the long one the rest.
TEST(SchedulerTest, ShortestFirstLetsAShortPromptOvertakeALongPrefill) {
  for (PrefillOrder order : {PrefillOrder::kFcfs, PrefillOrder::kShortestFirst}) {
    const bool sf = order == PrefillOrder::kShortestFirst;
    SchedulerOptions o = Options(64, 8, 4096);
    o.max_model_len = 2048;
    o.prefill_order = order;
    FakeClock clock;
    auto s = *Scheduler::Create(o, &clock);
    FakeRunner runner(o.kv.num_blocks, 16, kVocab);
    Rng rng(3);
    ASSERT_TRUE(s->Add(Prompt(rng, 1, 640, 2)).ok());
    StepPlan first = *s->Schedule();
    ASSERT_EQ(first.seqs.size(), 1u);
    EXPECT_EQ(first.seqs[0].num_tokens, 64);
    Apply(*s, runner, first);
    ASSERT_TRUE(s->Add(Prompt(rng, 2, 20, 2)).ok());
    int first_token_step = -1;
    int32_t long_done = 64;
    for (int step = 1; step <= 12 && first_token_step < 0; ++step) {
      clock.Advance(1000);
      StepPlan plan = *s->Schedule();
      for (const ScheduledSeq& ps : plan.seqs) {
        if (ps.id == 1 && ps.is_prefill) long_done += ps.num_tokens;
        if (ps.id == 2 && ps.needs_logits) first_token_step = step;
        if (sf && step == 1) {
          // The short prompt whole, the long one what is left of the budget.
          EXPECT_EQ(ps.num_tokens, ps.id == 2 ? 20 : 44) << "request " << ps.id;
        }
      }
      Apply(*s, runner, plan);
    }
    if (sf) {
      EXPECT_EQ(first_token_step, 1);
    } else {
      EXPECT_EQ(first_token_step, 10) << "FCFS: after the long prompt's 9 remaining chunks";
      EXPECT_EQ(long_done, 640);
    }
  }
}

// Short prompts arrive while a long one is being prefilled and the KV pool is nearly full: the
// long prompt's next chunk gets its blocks before a short one starts, so the step that has to
// preempt for it admits nobody (Drive checks that rule every step), and outputs are unchanged.
TEST(SchedulerTest, ShortestFirstAdmitsNobodyInAStepThatPreempts) {
  SchedulerOptions o = Options(128, 16, 11);
  o.prefill_order = PrefillOrder::kShortestFirst;
  Rng rng(5);
  std::vector<Request> reqs;
  for (int n : {150, 10, 18}) reqs.push_back(Prompt(rng, static_cast<RequestId>(reqs.size() + 1), n, 8));
  DriveOptions d;
  d.arrivals[0] = {reqs[0]};
  d.arrivals[1] = {reqs[1], reqs[2]};
  FakeClock clock;
  d.clock = &clock;
  d.advance = &clock;
  const RunResult run = Drive(o, d);
  ExpectMatchesReference(run, reqs, "shortest first, pool of 11 blocks");
}

// An older prompt that has waited past max_overtake but cannot start — the only seat, or the KV
// blocks, are held by a shorter prompt that started first — goes first for admission, yet must
// not take the budget the running one needs to finish and free them.
TEST(SchedulerTest, ShortestFirstNeverStallsOnAStarvedPromptThatCannotStart) {
  struct Case {
    const char* name;
    int32_t budget, seats, blocks;
    int long_prompt, short_prompt;
  };
  for (const Case& c : {Case{"one seat", 16, 1, 4096, 100, 60}, Case{"KV for one of them", 32, 4, 12, 150, 100}}) {
    SchedulerOptions o = Options(c.budget, c.seats, c.blocks);
    o.prefill_order = PrefillOrder::kShortestFirst;
    o.max_overtake_micros = 2000;  // 2 steps of the fake clock: the short prompt is still prefilling
    Rng rng(6);
    std::vector<Request> reqs;
    for (int n : {c.long_prompt, c.short_prompt}) {
      reqs.push_back(Prompt(rng, static_cast<RequestId>(reqs.size() + 1), n, 5));
      reqs.back().sampling.ignore_eos = true;
    }
    DriveOptions d;
    d.arrivals[0] = reqs;
    FakeClock clock;
    d.clock = &clock;
    d.advance = &clock;
    const RunResult run = Drive(o, d);
    ExpectMatchesReference(run, reqs, c.name);
    EXPECT_LT(run.steps, 100) << c.name;
  }
}

// A stream of short prompts that would take every step's whole budget does not starve a long
// one: once it has waited max_overtake_micros it goes first, and then it is done in
// ceil(prompt / budget) steps.
TEST(SchedulerTest, ShortestFirstServesASequenceThatWaitedTooLongFirst) {
  SchedulerOptions o = Options(64, 16, 4096);
  o.max_model_len = 2048;
  o.prefill_order = PrefillOrder::kShortestFirst;
  o.max_overtake_micros = 10'000;  // 10 steps of 1 ms
  FakeClock clock;
  auto s = *Scheduler::Create(o, &clock);
  FakeRunner runner(o.kv.num_blocks, 16, kVocab);
  Rng rng(4);
  ASSERT_TRUE(s->Add(Prompt(rng, 1, 320, 1)).ok());
  int32_t long_done = 0;
  int first_long_step = -1, long_finished_step = -1;
  for (int step = 0; step < 40 && long_finished_step < 0; ++step) {
    // One token of output: it leaves in the step that prefills it.
    ASSERT_TRUE(s->Add(Prompt(rng, static_cast<RequestId>(100 + step), 64, 1)).ok());
    StepPlan plan = *s->Schedule();
    for (const ScheduledSeq& ps : plan.seqs) {
      if (ps.id != 1) continue;
      if (first_long_step < 0) first_long_step = step;
      long_done += ps.num_tokens;
    }
    for (const RequestOutput& e : Apply(*s, runner, plan)) {
      if (e.id == 1 && e.finish) long_finished_step = step;
    }
    clock.Advance(1000);
  }
  // Shorter prompts took every step until the long one had waited 10 ms.
  EXPECT_EQ(first_long_step, 10);
  EXPECT_EQ(long_done, 320);
  EXPECT_EQ(long_finished_step, 14);  // 5 steps of 64
}

// ---- Chunked prefill -------------------------------------------------------------------------

TEST(SchedulerTest, LongPromptDoesNotStallDecodes) {
  SchedulerOptions o = Options(64, 8, 4096);
  o.max_model_len = 2048;
  auto s = *Scheduler::Create(o);
  FakeRunner runner(o.kv.num_blocks, 16, kVocab);
  Rng rng(1);
  for (RequestId id = 1; id <= 4; ++id) {
    Request r;
    r.id = id;
    r.prompt = RandomTokens(rng, 10);
    r.sampling.max_tokens = 200;
    r.sampling.ignore_eos = true;
    r.sampling.seed = id;
    ASSERT_TRUE(s->Add(r).ok());
  }
  auto step = [&]() {
    StepPlan plan = *s->Schedule();
    EXPECT_TRUE(s->Update(plan, *runner.Run(plan)).ok());
    return plan;
  };
  step();  // 4 prompts prefilled, first tokens out
  Request big;
  big.id = 9;
  big.prompt = RandomTokens(rng, 1000);
  big.sampling.max_tokens = 3;
  big.sampling.seed = 5;
  ASSERT_TRUE(s->Add(big).ok());
  int prefill_steps = 0;
  int32_t prefilled = 0;
  for (int i = 0; i < 40; ++i) {
    StepPlan plan = step();
    int decodes = 0;
    for (const ScheduledSeq& ps : plan.seqs) {
      if (ps.id <= 4) {
        ++decodes;
        EXPECT_EQ(ps.num_tokens, 1);
        EXPECT_TRUE(ps.needs_logits);
        EXPECT_FALSE(ps.is_prefill);
      } else if (ps.is_prefill) {
        ++prefill_steps;
        EXPECT_EQ(ps.start_position, prefilled);
        prefilled += ps.num_tokens;
        EXPECT_EQ(ps.needs_logits, prefilled == 1000);  // only the chunk completing the prompt
        // It takes exactly what the decodes leave.
        EXPECT_EQ(ps.num_tokens, std::min(60, 1000 - (prefilled - ps.num_tokens)));
      }
    }
    EXPECT_EQ(decodes, 4) << "step " << i << ": every running sequence decodes every step";
  }
  EXPECT_EQ(prefilled, 1000);
  EXPECT_EQ(prefill_steps, 17);  // ceil(1000 / 60)
}

TEST(SchedulerTest, PrefixCacheHitsSkipComputedTokens) {
  SchedulerOptions o = Options(512, 8, 256);
  auto s = *Scheduler::Create(o);
  FakeRunner runner(o.kv.num_blocks, 16, kVocab);
  Rng rng(4);
  const std::vector<int32_t> prefix = RandomTokens(rng, 40);
  auto request = [&](RequestId id, int32_t adapter) {
    Request r;
    r.id = id;
    r.prompt = prefix;
    const std::vector<int32_t> tail = RandomTokens(rng, 8);
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    r.sampling.max_tokens = 4;
    r.sampling.seed = id;
    r.adapter_id = adapter;
    return r;
  };
  std::vector<Request> reqs = {request(1, 0), request(2, 0), request(3, 5)};
  std::map<RequestId, int32_t> first_start;
  std::map<RequestId, RequestStats> stats;
  std::map<RequestId, std::vector<int32_t>> toks;
  ASSERT_TRUE(s->Add(reqs[0]).ok());
  for (int i = 0; i < 12; ++i) {
    if (i == 2) {  // after request 1's prompt is computed
      ASSERT_TRUE(s->Add(reqs[1]).ok());
      ASSERT_TRUE(s->Add(reqs[2]).ok());
    }
    StepPlan plan = *s->Schedule();
    if (plan.empty()) break;
    for (const ScheduledSeq& ps : plan.seqs) first_start.emplace(ps.id, ps.start_position);
    for (RequestOutput& e : Apply(*s, runner, plan)) {
      toks[e.id].push_back(e.sample->token);
      if (e.finish) stats[e.id] = e.stats;
    }
  }
  EXPECT_EQ(first_start[1], 0);
  EXPECT_EQ(first_start[2], 32);  // two full 16-token blocks of the 40-token prefix
  EXPECT_EQ(first_start[3], 0);   // another adapter never shares
  EXPECT_EQ(stats[2].num_cached_tokens, 32);
  EXPECT_EQ(stats[3].num_cached_tokens, 0);
  for (const Request& r : reqs) {
    EXPECT_EQ(toks[r.id], ReferenceGenerate(r, r.id, {kEos}, kMaxModelLen, kVocab).tokens) << r.id;
  }
  EXPECT_EQ(s->Stats().kv.prefix_hits, 32);
}

// ---- Preemption ------------------------------------------------------------------------------

TEST(SchedulerTest, PreemptsTheMostRecentArrivalAndRecomputes) {
  // 6 blocks of 16; three requests of 30-token prompts growing to 79 tokens (5 blocks) each.
  SchedulerOptions o = Options(512, 8, 6);
  auto s = *Scheduler::Create(o);
  FakeRunner runner(6, 16, kVocab);
  Rng rng(9);
  std::vector<Request> reqs;
  for (RequestId id = 1; id <= 3; ++id) {
    Request r;
    r.id = id;
    r.prompt = RandomTokens(rng, 30);
    r.sampling.max_tokens = 50;
    r.sampling.ignore_eos = true;
    r.sampling.seed = id * 10;
    ASSERT_TRUE(s->Add(r).ok());
    reqs.push_back(r);
  }
  std::map<RequestId, std::vector<int32_t>> toks;
  std::vector<RequestId> victims;
  std::set<RequestId> running;
  for (int i = 0; i < 2000 && s->NumUnfinished() > 0; ++i) {
    StepPlan plan = *s->Schedule();
    for (RequestId v : plan.preempted) {
      // The victim is the latest arrival among those running before this step.
      EXPECT_EQ(v, *running.rbegin()) << "step " << i;
      running.erase(v);
      victims.push_back(v);
    }
    running.clear();
    for (const ScheduledSeq& ps : plan.seqs) running.insert(ps.id);
    if (plan.empty()) continue;
    for (RequestOutput& e : Apply(*s, runner, plan)) {
      toks[e.id].push_back(e.sample->token);
      if (e.finish) running.erase(e.id);
    }
    ASSERT_TRUE(s->kv().CheckInvariants().ok());
  }
  ASSERT_EQ(s->NumUnfinished(), 0);
  ASSERT_FALSE(victims.empty());
  EXPECT_EQ(std::count(victims.begin(), victims.end(), 1), 0) << "the oldest is never the victim";
  for (const Request& r : reqs) {
    EXPECT_EQ(toks[r.id], ReferenceGenerate(r, *r.sampling.seed, {kEos}, kMaxModelLen, kVocab).tokens);
  }
  EXPECT_EQ(s->Stats().num_preemptions, static_cast<int64_t>(victims.size()));
}

// ---- Aborts ----------------------------------------------------------------------------------

TEST(SchedulerTest, AbortFreesBlocksAndFinishesOnce) {
  SchedulerOptions o = Options(512, 2, 64);
  auto s = *Scheduler::Create(o);
  FakeRunner runner(64, 16, kVocab);
  Rng rng(2);
  for (RequestId id = 1; id <= 3; ++id) {
    Request r;
    r.id = id;
    r.prompt = RandomTokens(rng, 40);
    r.sampling.max_tokens = 100;
    r.sampling.ignore_eos = true;
    ASSERT_TRUE(s->Add(r).ok());
  }
  for (int i = 0; i < 3; ++i) {
    StepPlan plan = *s->Schedule();
    ASSERT_TRUE(s->Update(plan, *runner.Run(plan)).ok());
  }
  // 1 and 2 run (max_num_seqs 2), 3 waits.
  EXPECT_EQ(s->Stats().num_running, 2);
  EXPECT_EQ(s->Stats().num_waiting, 1);
  const int32_t used = s->Stats().kv.num_used_blocks;
  EXPECT_EQ(used, 2 * 3);  // 43 tokens each: 3 blocks
  s->Abort(2);
  s->Abort(3, FinishReason::kStopString);
  s->Abort(77);  // unknown: ignored
  Request late;
  late.id = 8;
  late.prompt = {2, 3};
  ASSERT_TRUE(s->Add(late).ok());
  s->Abort(8);  // aborted before it was ever scheduled
  StepPlan plan = *s->Schedule();
  std::map<RequestId, FinishReason> finished;
  for (const RequestOutput& e : plan.outputs) {
    EXPECT_FALSE(e.sample.has_value());
    finished[e.id] = *e.finish;
  }
  EXPECT_EQ(finished, (std::map<RequestId, FinishReason>{{2, FinishReason::kAborted},
                                                          {3, FinishReason::kStopString},
                                                          {8, FinishReason::kAborted}}));
  for (const ScheduledSeq& ps : plan.seqs) EXPECT_EQ(ps.id, 1u);
  ASSERT_TRUE(s->Update(plan, *runner.Run(plan)).ok());
  EXPECT_EQ(s->Stats().kv.num_used_blocks, 3);  // request 2's blocks are back
  EXPECT_EQ(s->NumUnfinished(), 1);
  s->Abort(2);  // finished already: no second event
  plan = *s->Schedule();
  EXPECT_TRUE(plan.outputs.empty());
  ASSERT_TRUE(s->Update(plan, *runner.Run(plan)).ok());
  s->Abort(1);
  plan = *s->Schedule();
  EXPECT_TRUE(plan.empty());
  EXPECT_EQ(plan.outputs.size(), 1u);
  EXPECT_EQ(s->Stats().kv.num_used_blocks, 0);
  EXPECT_TRUE(s->kv().CheckInvariants().ok());
}

// ---- Adapters and static batching ----------------------------------------------------------

TEST(SchedulerTest, MaxLorasBoundsDistinctAdaptersPerStep) {
  std::vector<Request> reqs = Workload(3, 24);
  for (size_t i = 0; i < reqs.size(); ++i) reqs[i].adapter_id = static_cast<int32_t>(i % 4);  // 0..3
  for (int32_t max_loras : {1, 2}) {
    SchedulerOptions o = Options(256, 16, 4096);
    o.max_loras = max_loras;
    DriveOptions d;
    d.arrivals[0] = reqs;
    d.keep_plans = true;
    const RunResult run = Drive(o, d);  // Drive checks the bound every step
    ExpectMatchesReference(run, reqs, "max_loras " + std::to_string(max_loras));
    // And the bound is reached: it limits something.
    size_t widest = 0;
    for (const StepPlan& p : run.plans) {
      std::set<int32_t> a;
      for (const ScheduledSeq& ps : p.seqs) if (ps.adapter_id) a.insert(ps.adapter_id);
      widest = std::max(widest, a.size());
    }
    EXPECT_EQ(widest, static_cast<size_t>(max_loras));
  }
}

TEST(SchedulerTest, StaticBatchingRunsEachBatchToCompletion) {
  std::vector<Request> reqs = Workload(5, 10);
  SchedulerOptions o = Options(512, 64, 4096);
  o.static_batch_size = 4;
  DriveOptions d;
  d.arrivals[0] = reqs;
  d.keep_plans = true;
  const RunResult run = Drive(o, d);
  ExpectMatchesReference(run, reqs, "static");
  // Batches {1..4}, {5..8}, {9, 10}: a request of batch k+1 runs only after all of batch k end.
  std::map<RequestId, int64_t> first, last;
  for (size_t i = 0; i < run.plans.size(); ++i) {
    for (const ScheduledSeq& ps : run.plans[i].seqs) {
      first.emplace(ps.id, static_cast<int64_t>(i));
      last[ps.id] = static_cast<int64_t>(i);
    }
  }
  auto batch_of = [](RequestId id) { return (id - 1) / 4; };
  for (const auto& [a, fa] : first) {
    for (const auto& [b, lb] : last) {
      if (batch_of(a) == batch_of(b) + 1) {
        EXPECT_GT(fa, lb) << a << " started before " << b << " ended";
      }
    }
    if ((a - 1) % 4 != 0) {
      EXPECT_EQ(fa, first[a - (a - 1) % 4]) << "a batch starts together";
    }
  }
}

// ---- Events, timings and stop conditions -------------------------------------------------------

TEST(SchedulerTest, EventsCarryTimesAndFinishReasons) {
  FakeClock clock(1'000'000);
  SchedulerOptions o = Options(512, 8, 256);
  o.max_model_len = 40;
  // Find a greedy prompt whose first token under the fake model is not EOS, and note what the
  // first two tokens are so the stop conditions can be aimed at them.
  Rng rng(12);
  Request base;
  base.prompt = RandomTokens(rng, 20);
  base.sampling.temperature = 0;
  base.sampling.max_tokens = 100;
  base.sampling.ignore_eos = true;
  const std::vector<int32_t> greedy =
      ReferenceGenerate(base, 0, {kEos}, 40, kVocab).tokens;
  ASSERT_EQ(greedy.size(), 20u);  // 20 prompt + 20 output = the 40-token context

  struct Case {
    const char* name;
    void (*edit)(Request&, const std::vector<int32_t>&);
    FinishReason want;
    size_t want_tokens;
  };
  const Case cases[] = {
      {"max_tokens", [](Request& r, const std::vector<int32_t>&) { r.sampling.max_tokens = 3; },
       FinishReason::kMaxTokens, 3},
      {"context cap", [](Request&, const std::vector<int32_t>&) {}, FinishReason::kLengthCap, 20},
      {"stop token", [](Request& r, const std::vector<int32_t>& g) { r.sampling.stop_token_ids = {g[1]}; },
       FinishReason::kStopToken, 0 /* first occurrence + 1, computed below */},
      // The stop token cannot be sampled before min_tokens (it is masked), so greedy takes
      // another first token and the run continues to wherever the reference goes.
      {"min_tokens masks the stop token",
       [](Request& r, const std::vector<int32_t>& g) {
         r.sampling.stop_token_ids = {g[0]};
         r.sampling.min_tokens = 1;
       },
       FinishReason::kAborted /* = as the reference says */, 0},
  };
  for (const Case& c : cases) {
    auto s = *Scheduler::Create(o, &clock);
    FakeRunner runner(256, 16, kVocab);
    Request r = base;
    r.id = 42;
    r.arrival_micros = clock.NowMicros() - 500;
    c.edit(r, greedy);
    ASSERT_TRUE(s->Add(r).ok());
    const ReferenceResult want = ReferenceGenerate(r, 0, {kEos}, 40, kVocab);
    std::vector<RequestOutput> events;
    while (s->NumUnfinished() > 0) {
      clock.Advance(10'000);
      StepPlan plan = *s->Schedule();
      for (RequestOutput& e : Apply(*s, runner, plan)) events.push_back(std::move(e));
    }
    ASSERT_FALSE(events.empty()) << c.name;
    EXPECT_EQ(*events.back().finish, want.finish) << c.name;
    if (c.want != FinishReason::kAborted) {
      EXPECT_EQ(want.finish, c.want) << c.name;
    } else {
      EXPECT_NE(events[0].sample->token, greedy[0]) << c.name;
    }
    for (size_t i = 0; i < events.size(); ++i) {
      EXPECT_EQ(events[i].sample->token, want.tokens[i]) << c.name << " token " << i;
    }
    if (c.want_tokens) {
      EXPECT_EQ(events.size(), c.want_tokens) << c.name;
    }
    EXPECT_EQ(events.size(), want.tokens.size()) << c.name;
    const RequestStats& st = events.back().stats;
    EXPECT_EQ(st.arrival_micros, r.arrival_micros);
    EXPECT_EQ(st.first_scheduled_micros - st.arrival_micros, 10'500) << c.name;  // queue time
    EXPECT_EQ(st.first_token_micros, st.first_scheduled_micros) << c.name;  // one-step prefill
    EXPECT_EQ(st.num_output_tokens, static_cast<int32_t>(events.size()));
    EXPECT_EQ(st.num_prompt_tokens, 20);
    for (size_t i = 1; i < events.size(); ++i) {
      EXPECT_EQ(events[i].time_micros - events[i - 1].time_micros, 10'000);  // inter-token
    }
  }
  EXPECT_EQ(OpenAiFinishReason(FinishReason::kLengthCap), "length");
  EXPECT_EQ(OpenAiFinishReason(FinishReason::kStopString), "stop");
  EXPECT_EQ(OpenAiFinishReason(FinishReason::kAborted), "abort");
  EXPECT_EQ(FinishReasonName(FinishReason::kEos), "eos");
}

TEST(SchedulerTest, UnseededRequestsAreReproducibleFromTheSchedulerSeed) {
  std::vector<Request> reqs = Workload(8, 8);
  for (Request& r : reqs) {
    r.sampling.seed.reset();
    r.sampling.temperature = 1.0f;
  }
  auto once = [&](uint64_t seed) {
    SchedulerOptions o = Options(64, 8, 512);
    o.seed = seed;
    DriveOptions d;
    d.arrivals = Staggered(reqs, 1);
    return Drive(o, d).tokens;
  };
  EXPECT_EQ(once(1), once(1));
  EXPECT_NE(once(1), once(2));
}

// ---- Misuse --------------------------------------------------------------------------------------

TEST(SchedulerTest, UpdateRejectsMismatchedResults) {
  auto s = *Scheduler::Create(Options(64, 8, 64));
  FakeRunner runner(64, 16, kVocab);
  for (RequestId id = 1; id <= 2; ++id) {
    Request r;
    r.id = id;
    r.prompt = {2, 3, 4};
    ASSERT_TRUE(s->Add(r).ok());
  }
  StepPlan plan = *s->Schedule();
  EXPECT_EQ(s->Schedule().status().code(), StatusCode::kFailedPrecondition);
  std::vector<SampledToken> good = *runner.Run(plan);
  ASSERT_EQ(good.size(), 2u);
  struct Case {
    const char* name;
    std::vector<SampledToken> (*edit)(std::vector<SampledToken>);
    const char* error;
  };
  const Case cases[] = {
      {"missing", [](std::vector<SampledToken> v) { v.pop_back(); return v; }, "no sampled token for request 2"},
      {"extra", [](std::vector<SampledToken> v) { v.push_back(v[0]); return v; }, "3 sampled tokens for 2"},
      {"swapped", [](std::vector<SampledToken> v) { std::swap(v[0], v[1]); return v; }, "is for request 2"},
      {"outside vocab", [](std::vector<SampledToken> v) { v[1].sample.token = 64; return v; }, "outside the vocabulary"},
      {"negative", [](std::vector<SampledToken> v) { v[0].sample.token = -1; return v; }, "outside the vocabulary"},
  };
  for (const Case& c : cases) {
    auto r = s->Update(plan, c.edit(good));
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(r.status().message().find(c.error), std::string::npos) << c.name << ": " << r.status();
  }
  StepPlan stale = plan;
  stale.step += 1;
  EXPECT_EQ(s->Update(stale, good).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s->Update(plan, good).ok());  // the real answer still applies after the errors
  EXPECT_EQ(s->Update(plan, good).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s->Schedule().ok());
}

// ---- Threads -----------------------------------------------------------------------------------

TEST(SchedulerTest, ServerThreadsAddAndAbortWhileTheEngineRuns) {
  SchedulerOptions o = Options(128, 16, 256);
  auto s = *Scheduler::Create(o);
  FakeRunner runner(256, 16, kVocab);
  constexpr int kThreads = 4, kPerThread = 50;
  std::atomic<int> accepted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Rng rng(static_cast<uint64_t>(t) + 100);
      for (int i = 0; i < kPerThread; ++i) {
        Request r;
        r.id = static_cast<RequestId>(t * 1000 + i);
        r.prompt = RandomTokens(rng, 1 + static_cast<int>(rng.Uniform(40)));
        r.sampling.max_tokens = 1 + static_cast<int32_t>(rng.Uniform(20));
        if (s->Add(r).ok()) accepted.fetch_add(1);
        if (i % 5 == 0) s->Abort(r.id);
        if (i % 7 == 0) s->Abort(static_cast<RequestId>(t * 1000 + i / 2));
      }
    });
  }
  std::set<RequestId> finished;
  int idle = 0;
  while (idle < 50) {
    if (!s->WaitForWork(2000)) {
      ++idle;
      continue;
    }
    idle = 0;
    StepPlan plan = *s->Schedule();
    for (const RequestOutput& e : plan.outputs) EXPECT_TRUE(finished.insert(e.id).second);
    if (plan.empty()) continue;
    for (const RequestOutput& e : Apply(*s, runner, plan)) {
      if (e.finish) {
        EXPECT_TRUE(finished.insert(e.id).second) << "finished twice: " << e.id;
      }
    }
  }
  for (std::thread& th : threads) th.join();
  // Drain whatever came in after the engine went idle.
  while (s->NumUnfinished() > 0) {
    StepPlan plan = *s->Schedule();
    for (const RequestOutput& e : plan.outputs) finished.insert(e.id);
    if (plan.empty()) continue;
    for (const RequestOutput& e : Apply(*s, runner, plan)) {
      if (e.finish) finished.insert(e.id);
    }
  }
  EXPECT_EQ(accepted.load(), kThreads * kPerThread);
  EXPECT_EQ(static_cast<int>(finished.size()), kThreads * kPerThread);
  EXPECT_EQ(s->Stats().kv.num_used_blocks, 0);
  EXPECT_FALSE(s->WaitForWork(1000));
}

}  // namespace
}  // namespace aicloud::engine
