// engine_sched_bench: the scheduler's side of the engine's "continuous vs static batching"
// claim, plus what the KV block manager and the sampler cost.
//
//   engine_sched_bench [--trace PATH] [--requests 1000] [--a-ms 5] [--prefill-ms 2.25]
//                      [--decode-ms 4.2] [--max-seqs 64] [--budget 256] [--max-model-len 8192]
//                      [--kv-gib 8] [--bytes-per-block 368640] [--load 0.7] [--skip-micro]
//
// 1. Simulated serving of request lengths from the Azure LLM inference trace 2023 (conv; prompt
//    = ContextTokens, output forced to GeneratedTokens with ignore_eos) through the real
//    Scheduler and BlockManager. The fake model's step takes a + prefill_ms x prompt tokens +
//    decode_ms x decode tokens of simulated time. Defaults are fitted to llama.cpp Q8_0 on a
//    135M-parameter model on this 2-core machine (shared/research/serving-anchors.md B.4):
//    ~9.3 ms per single-stream decode step, 230 tokens/s aggregate at 32 sequences (139 ms a
//    step), 444 prefill tokens/s. Same budget, max_num_seqs (= static batch size) and KV pool
//    (8 GiB of F16 KV in SmolLM2-135M's shape, 368,640 bytes per 16-token block) for all.
//    Policies:
//      continuous     the Scheduler as the engine runs it;
//      static         the Scheduler's static_batch_size mode: batches of B run to completion,
//                     charged only for real tokens (the best case for static batching);
//      static padded  what a static-batching server computes (Hugging Face generate on a
//                     padded batch): prompts padded to the batch's longest, and every member
//                     decoded until the batch's longest output is done. Computed from the
//                     same cost model (arithmetic, no scheduler: nothing to schedule).
//    a) offline: every request at t = 0; b) online: the trace's arrival times rescaled to
//    `load` x the continuous scheduler's offline request rate.
//    Scheduler overhead is the CPU time of Schedule() + Update() per step (model excluded).
// 2. Micro: Sampler per call on a 50,257-token vocabulary; BlockManager allocate/commit/free of
//    1,024-token sequences with and without prefix hits.
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/csv.h"
#include "core/rng.h"
#include "engine/batch/scheduler.h"
#include "engine/kv/block_manager.h"
#include "engine/sample/sampler.h"

namespace {

using namespace aicloud;
using namespace aicloud::engine;

// CPU time of this thread in microseconds: on a machine shared with other builds, wall time
// mostly measures the neighbours.
double CpuMicros() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

struct Flags {
  std::string trace = std::string(AICLOUD_SOURCE_DIR) +
                      "/../shared/traces/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv";
  int requests = 1000;
  double a_ms = 5;
  double prefill_ms = 2.25;
  double decode_ms = 4.2;
  int max_seqs = SchedulerOptions().max_num_seqs;
  int budget = SchedulerOptions().max_num_batched_tokens;
  int max_model_len = 8192;
  double kv_gib = 8;
  int64_t bytes_per_block = KvBytesPerBlock(30, 3, 64, 2, 16);
  double load = 0.7;
  bool micro = true;
};

struct TraceRow {
  int64_t arrival_micros;  // relative to the first row
  int32_t prompt;
  int32_t output;
};

// "2023-11-16 18:15:46.6805900" -> microseconds since midnight (the trace spans one hour).
int64_t ParseTime(std::string_view s) {
  if (s.size() < 19) return 0;
  const int64_t h = std::atoi(std::string(s.substr(11, 2)).c_str());
  const int64_t m = std::atoi(std::string(s.substr(14, 2)).c_str());
  const double sec = std::atof(std::string(s.substr(17)).c_str());
  return (h * 3600 + m * 60) * kMicrosPerSecond + static_cast<int64_t>(sec * 1e6);
}

std::vector<TraceRow> LoadTrace(const Flags& f) {
  StatusOr<CsvTable> t = CsvTable::ReadFile(f.trace);
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
    std::exit(1);
  }
  std::vector<TraceRow> rows;
  int64_t t0 = -1;
  for (const CsvRow& r : t->rows()) {
    if (static_cast<int>(rows.size()) >= f.requests) break;
    TraceRow row;
    const int64_t ts = ParseTime(r.Get("TIMESTAMP"));
    if (t0 < 0) t0 = ts;
    row.arrival_micros = ts - t0;
    row.prompt = static_cast<int32_t>(*r.GetInt("ContextTokens"));
    row.output = std::max<int32_t>(1, static_cast<int32_t>(*r.GetInt("GeneratedTokens")));
    // Keep within the context: shorten the prompt, never the output.
    row.prompt = std::max(1, std::min(row.prompt, f.max_model_len - row.output - 1));
    rows.push_back(row);
  }
  return rows;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
  return v[i];
}

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

struct SimResult {
  double sim_seconds = 0;
  int64_t output_tokens = 0;
  int64_t prompt_tokens = 0;
  std::vector<double> e2e, ttft, itl, queue;  // seconds
  int64_t steps = 0;
  int64_t preemptions = 0;
  std::vector<double> overhead_us;  // Schedule + Update per step, wall
  double mean_step_tokens = 0;
  double mean_running = 0;
  double max_waste = 0, mean_waste = 0, max_usage = 0;
  int64_t max_unfilled = 0;
};

SimResult Simulate(const Flags& f, const std::vector<TraceRow>& rows, bool is_static,
                   double time_scale /* arrival multiplier; 0 = all at t=0 */) {
  SchedulerOptions o;
  o.max_num_batched_tokens = f.budget;
  o.max_num_seqs = f.max_seqs;
  o.max_model_len = f.max_model_len;
  o.vocab_size = 49152;
  o.eos_token_ids = {0};
  o.kv.num_blocks = NumBlocksForBudget(static_cast<int64_t>(f.kv_gib * (1 << 30)), f.bytes_per_block);
  o.kv.block_size = 16;
  o.static_batch_size = is_static ? f.max_seqs : 0;
  FakeClock clock(0);
  StatusOr<std::unique_ptr<Scheduler>> created = Scheduler::Create(o, &clock);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    std::exit(1);
  }
  Scheduler& s = **created;
  Rng rng(17);
  SimResult res;
  std::map<RequestId, int64_t> last_event;
  size_t next = 0;
  int64_t step_tokens = 0, running_sum = 0;
  double waste_sum = 0;
  auto arrival = [&](size_t i) {
    return static_cast<int64_t>(static_cast<double>(rows[i].arrival_micros) * time_scale);
  };
  while (next < rows.size() || s.NumUnfinished() > 0) {
    // Arrivals up to now; jump ahead when idle.
    if (s.NumUnfinished() == 0 && next < rows.size() && arrival(next) > clock.NowMicros()) {
      clock.SetMicros(arrival(next));
    }
    while (next < rows.size() && arrival(next) <= clock.NowMicros()) {
      Request r;
      r.id = next + 1;
      r.prompt.resize(static_cast<size_t>(rows[next].prompt));
      for (int32_t& t : r.prompt) t = 1 + static_cast<int32_t>(rng.Uniform(49151));
      r.sampling.temperature = 0;
      r.sampling.max_tokens = rows[next].output;
      r.sampling.ignore_eos = true;
      r.arrival_micros = arrival(next);
      Status st = s.Add(std::move(r));
      if (!st.ok()) {
        std::fprintf(stderr, "%s\n", st.ToString().c_str());
        std::exit(1);
      }
      ++next;
    }
    const double w0 = CpuMicros();
    StatusOr<StepPlan> plan = s.Schedule();
    const double w1 = CpuMicros();
    if (!plan.ok() || plan->empty()) {
      if (next < rows.size()) clock.SetMicros(std::max(clock.NowMicros() + 1, arrival(next)));
      continue;
    }
    // The fake model: the step's cost, and a token for every sequence that needs one.
    std::vector<SampledToken> sampled;
    for (const ScheduledSeq& ps : plan->seqs) {
      if (ps.needs_logits) {
        SampledToken t;
        t.id = ps.id;
        t.sample.token = 7;
        sampled.push_back(std::move(t));
      }
    }
    clock.Advance(static_cast<int64_t>(
        (f.a_ms + f.prefill_ms * plan->num_prefill_tokens + f.decode_ms * plan->num_decode_tokens) * 1000));
    const double w2 = CpuMicros();
    StatusOr<std::vector<RequestOutput>> events = s.Update(*plan, std::move(sampled));
    const double w3 = CpuMicros();
    res.overhead_us.push_back((w1 - w0) + (w3 - w2));
    ++res.steps;
    step_tokens += plan->num_tokens();
    res.prompt_tokens += plan->num_prefill_tokens;
    const SchedulerStats st = s.Stats();
    running_sum += st.num_running;
    res.max_waste = std::max(res.max_waste, st.kv.waste);
    waste_sum += st.kv.waste;
    res.max_usage = std::max(res.max_usage, st.kv.usage);
    res.max_unfilled = std::max(res.max_unfilled, st.kv.max_unfilled_slots_per_seq);
    res.preemptions = st.num_preemptions;
    for (const RequestOutput& e : *events) {
      ++res.output_tokens;
      auto it = last_event.find(e.id);
      if (it != last_event.end()) res.itl.push_back((e.time_micros - it->second) / 1e6);
      last_event[e.id] = e.time_micros;
      if (e.stats.num_output_tokens == 1) {
        res.ttft.push_back((e.stats.first_token_micros - e.stats.arrival_micros) / 1e6);
        res.queue.push_back((e.stats.first_scheduled_micros - e.stats.arrival_micros) / 1e6);
      }
      if (e.finish) {
        res.e2e.push_back((e.stats.finished_micros - e.stats.arrival_micros) / 1e6);
        last_event.erase(e.id);
      }
    }
  }
  res.sim_seconds = clock.NowMicros() / 1e6;
  res.mean_step_tokens = res.steps ? static_cast<double>(step_tokens) / static_cast<double>(res.steps) : 0;
  res.mean_running = res.steps ? static_cast<double>(running_sum) / static_cast<double>(res.steps) : 0;
  res.mean_waste = res.steps ? waste_sum / static_cast<double>(res.steps) : 0;
  return res;
}

// Static batching as a padded-batch server does it: FCFS batches of up to B of the requests
// that have arrived when the previous batch ends; prefill of B x the longest prompt in chunks
// of `budget` tokens; then max-output decode steps of B tokens each. A request's tokens stream
// out as produced (its e2e ends at its own last token), but the batch holds the slots until
// its longest member is done.
SimResult SimulatePadded(const Flags& f, const std::vector<TraceRow>& rows, double time_scale) {
  SimResult res;
  auto arrival = [&](size_t i) {
    return static_cast<double>(rows[i].arrival_micros) * time_scale / 1e6;
  };
  double now = 0;
  size_t next = 0;
  int64_t step_tokens = 0;
  while (next < rows.size()) {
    now = std::max(now, arrival(next));
    std::vector<size_t> batch;
    while (next < rows.size() && static_cast<int>(batch.size()) < f.max_seqs && arrival(next) <= now) {
      batch.push_back(next++);
    }
    int64_t max_prompt = 0, max_out = 0;
    for (size_t i : batch) {
      max_prompt = std::max<int64_t>(max_prompt, rows[i].prompt);
      max_out = std::max<int64_t>(max_out, rows[i].output);
    }
    const int64_t b = static_cast<int64_t>(batch.size());
    const int64_t prefill_tokens = b * max_prompt;
    const int64_t prefill_steps = (prefill_tokens + f.budget - 1) / f.budget;
    const double prefill_s = (f.a_ms * static_cast<double>(prefill_steps) + f.prefill_ms * static_cast<double>(prefill_tokens)) / 1e3;
    const double step_s = (f.a_ms + f.decode_ms * static_cast<double>(b)) / 1e3;
    // The first token comes out of the prefill; each further token takes a decode step.
    for (size_t i : batch) {
      const double first = now + prefill_s;
      res.ttft.push_back(first - arrival(i));
      res.queue.push_back(now - arrival(i));
      res.e2e.push_back(first + step_s * static_cast<double>(rows[i].output - 1) - arrival(i));
      for (int32_t k = 1; k < rows[i].output; ++k) res.itl.push_back(step_s);
      res.output_tokens += rows[i].output;
      res.prompt_tokens += rows[i].prompt;
    }
    now += prefill_s + step_s * static_cast<double>(max_out - 1);
    res.steps += prefill_steps + max_out - 1;
    step_tokens += prefill_tokens + b * (max_out - 1);
  }
  res.sim_seconds = now;
  res.mean_step_tokens = res.steps ? static_cast<double>(step_tokens) / static_cast<double>(res.steps) : 0;
  return res;
}

void PrintHeader() {
  std::printf("| policy | sim s | out tok/s | req/s | e2e p50 / p99 s | TTFT p50 / p99 s | ITL p50 / p99 s "
              "| steps | tok/step | running | preempt | sched us/step mean / p99 |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
}

void PrintRow(const char* name, const SimResult& r) {
  std::printf("| %s | %.0f | %.1f | %.3f | %.1f / %.1f | %.2f / %.1f | %.3f / %.3f | %lld | %.0f | %.1f | %lld | %.1f / %.1f |\n",
              name, r.sim_seconds, static_cast<double>(r.output_tokens) / r.sim_seconds,
              static_cast<double>(r.e2e.size()) / r.sim_seconds, Percentile(r.e2e, 50),
              Percentile(r.e2e, 99), Percentile(r.ttft, 50), Percentile(r.ttft, 99),
              Percentile(r.itl, 50), Percentile(r.itl, 99), static_cast<long long>(r.steps),
              r.mean_step_tokens, r.mean_running, static_cast<long long>(r.preemptions),
              Mean(r.overhead_us), Percentile(r.overhead_us, 99));
}

// Median over 5 rounds of the CPU time per call.
template <typename Fn>
double MicrosPerCall(int n, Fn fn) {
  std::vector<double> rounds;
  for (int r = 0; r < 5; ++r) {
    const double t0 = CpuMicros();
    for (int i = 0; i < n; ++i) fn(r * n + i);
    rounds.push_back((CpuMicros() - t0) / n);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[2];
}

void Micro() {
  std::printf("\n## Sampler, 50,257-token vocabulary (us per call)\n\n| params | us |\n|---|---:|\n");
  Rng rng(3);
  std::vector<float> logits(50257);
  for (float& v : logits) v = static_cast<float>(rng.UniformDouble() * 20 - 10);
  std::vector<int32_t> prompt(1000);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng.Uniform(50257));
  struct Case {
    const char* name;
    SamplingParams p;
  };
  std::vector<Case> cases;
  auto add = [&](const char* name, float t, int k, float top_p, float min_p, float rep) {
    SamplingParams p;
    p.temperature = t;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.repetition_penalty = rep;
    cases.push_back({name, p});
  };
  add("greedy", 0, 0, 1, 0, 1);
  add("T=1, no filter", 1, 0, 1, 0, 1);
  add("T=0.7, top_k=50", 0.7f, 50, 1, 0, 1);
  add("T=0.7, top_p=0.9 (flat logits)", 0.7f, 0, 0.9f, 0, 1);
  add("T=0.7, top_k=50, top_p=0.9", 0.7f, 50, 0.9f, 0, 1);
  add("T=1, min_p=0.05", 1, 0, 1, 0.05f, 1);
  add("T=0.7, top_p=0.9, repetition 1.1 (1000-token prompt)", 0.7f, 0, 0.9f, 0, 1.1f);
  Sampler sampler;
  for (const Case& c : cases) {
    SequenceSampling seq(c.p, 1, prompt);
    const double us = MicrosPerCall(200, [&](int) { seq.Append(sampler.Sample(seq, logits)->token); });
    std::printf("| %s | %.1f |\n", c.name, us);
  }

  std::printf("\n## BlockManager, 1,024-token sequences, 16-token blocks (us per sequence)\n\n"
              "| operation | us |\n|---|---:|\n");
  BlockManagerOptions o;
  o.num_blocks = 65536;
  StatusOr<BlockManager> bm = BlockManager::Create(o);
  std::vector<int32_t> toks(1024);
  for (int32_t& t : toks) t = static_cast<int32_t>(rng.Uniform(50257));
  const double miss = MicrosPerCall(400, [&](int i) {
    toks[0] = i;  // a different first token each time: no hits
    (void)bm->Allocate(static_cast<SeqId>(i), toks, {}, 1024);
    bm->MarkComputed(static_cast<SeqId>(i), toks);
    bm->Free(static_cast<SeqId>(i));
  });
  std::printf("| allocate + commit (64 hashes) + free, no prefix hit | %.1f |\n", miss);
  toks[0] = 7;
  (void)bm->Allocate(1u << 30, toks, {}, 1024);
  bm->MarkComputed(1u << 30, toks);
  const double hit = MicrosPerCall(400, [&](int i) {
    const SeqId id = static_cast<SeqId>(i) + (1u << 20);
    (void)bm->Allocate(id, toks, {}, 16);
    bm->MarkComputed(id, toks);
    bm->Free(id);
  });
  std::printf("| allocate sharing 63 cached blocks + free | %.1f |\n", hit);
  std::vector<int64_t> slots;
  const double map = MicrosPerCall(2000, [&](int) {
    slots.clear();
    bm->AppendSlotMapping(1u << 30, 0, 1024, &slots);
  });
  std::printf("| slot mapping for 1,024 positions | %.1f |\n", map);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--trace") f.trace = next();
    else if (a == "--requests") f.requests = std::atoi(next().c_str());
    else if (a == "--a-ms") f.a_ms = std::atof(next().c_str());
    else if (a == "--prefill-ms") f.prefill_ms = std::atof(next().c_str());
    else if (a == "--decode-ms") f.decode_ms = std::atof(next().c_str());
    else if (a == "--max-seqs") f.max_seqs = std::atoi(next().c_str());
    else if (a == "--budget") f.budget = std::atoi(next().c_str());
    else if (a == "--max-model-len") f.max_model_len = std::atoi(next().c_str());
    else if (a == "--kv-gib") f.kv_gib = std::atof(next().c_str());
    else if (a == "--bytes-per-block") f.bytes_per_block = std::atoll(next().c_str());
    else if (a == "--load") f.load = std::atof(next().c_str());
    else if (a == "--skip-micro") f.micro = false;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  const std::vector<TraceRow> rows = LoadTrace(f);
  double prompt_mean = 0, out_mean = 0;
  for (const TraceRow& r : rows) {
    prompt_mean += r.prompt;
    out_mean += r.output;
  }
  prompt_mean /= static_cast<double>(rows.size());
  out_mean /= static_cast<double>(rows.size());
  std::printf("# engine_sched_bench\n\n%zu requests of %s (prompt mean %.0f, output mean %.0f); "
              "step = %.1f ms + %.2f ms x prompt tokens + %.2f ms x decode tokens; budget %d tokens, %d seqs (static batch %d); "
              "KV %.1f GiB = %d blocks of 16\n",
              rows.size(), f.trace.c_str(), prompt_mean, out_mean, f.a_ms, f.prefill_ms, f.decode_ms, f.budget,
              f.max_seqs, f.max_seqs, f.kv_gib,
              NumBlocksForBudget(static_cast<int64_t>(f.kv_gib * (1 << 30)), f.bytes_per_block));

  std::printf("\n## Offline: every request at t = 0\n\n");
  PrintHeader();
  const SimResult cont = Simulate(f, rows, false, 0);
  const SimResult stat = Simulate(f, rows, true, 0);
  const SimResult pad = SimulatePadded(f, rows, 0);
  PrintRow("continuous", cont);
  PrintRow("static", stat);
  PrintRow("static padded", pad);
  auto tput = [](const SimResult& r) { return static_cast<double>(r.output_tokens) / r.sim_seconds; };
  std::printf("\nthroughput continuous / static: %.2fx, / static padded: %.2fx; e2e p99 static / "
              "continuous: %.2fx, static padded / continuous: %.2fx\n",
              tput(cont) / tput(stat), tput(cont) / tput(pad),
              Percentile(stat.e2e, 99) / Percentile(cont.e2e, 99),
              Percentile(pad.e2e, 99) / Percentile(cont.e2e, 99));
  std::printf("KV (continuous): peak usage %.3f, waste mean %.4f max %.4f, max unfilled slots per "
              "sequence %lld (< 16)\n",
              cont.max_usage, cont.mean_waste, cont.max_waste, static_cast<long long>(cont.max_unfilled));

  // Online: trace inter-arrivals rescaled to `load` x continuous offline capacity.
  const double capacity_rps = static_cast<double>(rows.size()) / cont.sim_seconds;
  const double span = static_cast<double>(rows.back().arrival_micros) / 1e6;
  const double trace_rps = static_cast<double>(rows.size()) / std::max(span, 1e-9);
  const double scale = trace_rps / (f.load * capacity_rps);
  std::printf("\n## Online: trace arrivals rescaled to %.3f req/s (%.0f%% of continuous capacity "
              "%.3f req/s)\n\n",
              f.load * capacity_rps, f.load * 100, capacity_rps);
  PrintHeader();
  PrintRow("continuous", Simulate(f, rows, false, scale));
  PrintRow("static", Simulate(f, rows, true, scale));
  PrintRow("static padded", SimulatePadded(f, rows, scale));
  if (f.micro) Micro();
  return 0;
}
