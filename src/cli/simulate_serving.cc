// `aicloud simulate autoscale` and `aicloud simulate routing`: replay LLM request traces through
// the fleet room's autoscalers and routers on a simulated clock (sim/serving_sim.h).
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "fleet/router.h"
#include "sim/plot.h"
#include "sim/serving_sim.h"
#include "sim/serving_trace.h"

namespace aicloud::cli {
namespace {

constexpr const char* kAzureDir = "data/traces/azure-llm-inference-2023/";
constexpr const char* kMooncakeConv = "data/traces/mooncake-fast25/conversation_trace.jsonl";

StatusOr<sim::ServingTrace> LoadTrace(const std::string& trace) {
  if (trace == "conv" || trace == "code") {
    return sim::LoadAzureLlmTrace(std::string(kAzureDir) + "AzureLLMInferenceTrace_" + trace + ".csv");
  }
  if (trace.size() > 6 && trace.substr(trace.size() - 6) == ".jsonl") return sim::LoadMooncakeTrace(trace);
  return sim::LoadAzureLlmTrace(trace);
}

struct CommonOptions {
  std::string trace;
  std::string policies;
  double ttft_slo_ms = 0;
  double speedup = 0;
  uint64_t seed = 42;
  std::string format = "table";
  std::string plot;
  bool quiet = false;
};

struct AutoscaleOptions : CommonOptions {
  int history_days = 0;
  double provision_delay = 180;
  int warm_pool = 2;
  double cold_start = 30;
  double tick = 5;
  int min_replicas = 1;
  int max_replicas = 200;
  int static_replicas = 0;
  double target = 99;
  std::string router = "score";
  std::string prefill_order = "fcfs";
  double max_overtake = 60;
  double scale_down_window = 180;
  double burst_ratio = 2;
  double burst_hold = 600;
  double burst_early = 120;
  double burst_utilization = 0.6;
  double utilization = 0.7;
  double history_burst_gap = 5;
  double history_shift = 120;
  std::string history_trace;
};

struct RoutingOptions : CommonOptions {
  int replicas = 16;
};

void Emit(const std::vector<sim::ServingRun>& runs, const std::string& format) {
  std::cout << (format == "json" ? sim::FormatServingJson(runs) : sim::FormatServingTable(runs));
}

std::string RunLabel(const sim::ServingRun& r) {
  if (r.policy == "static" || r.policy == "peak") return fmt::format("{} x{}", r.policy, r.static_replicas);
  if (r.policy == "ours" && r.history_days > 0) return fmt::format("ours (+{} days of history)", r.history_days);
  return r.policy;
}

Status WriteReplicaPlot(const std::vector<sim::ServingRun>& runs, const std::string& path) {
  sim::PlotSpec spec;
  spec.title = fmt::format("GPUs held over the {} trace (TTFT SLO {:.0f} ms)", runs[0].trace, runs[0].slo_ttft_ms);
  spec.x_label = "Trace time (minutes)";
  spec.y_label = "GPUs (replicas holding one)";
  spec.x_min = 0;
  spec.y_min = 0;
  sim::Series load{"offered load / 0.7 (replicas)", {}};
  for (const sim::TimelinePoint& p : runs[0].timeline) load.points.emplace_back(p.t_s / 60, p.load_replicas / 0.7);
  spec.series.push_back(std::move(load));
  for (const sim::ServingRun& r : runs) {
    sim::Series s{fmt::format("{}: {:.1f} GPU-h, {:.2f}% met", RunLabel(r), r.gpu_hours, r.slo_attainment * 100), {}};
    for (const sim::TimelinePoint& p : r.timeline) s.points.emplace_back(p.t_s / 60, p.gpus);
    spec.series.push_back(std::move(s));
  }
  return sim::WritePlot(spec, path);
}

int RunAutoscale(const AutoscaleOptions& o) {
  StatusOr<sim::ServingTrace> trace = LoadTrace(o.trace);
  if (!trace.ok()) return Fail(trace.status(), 2);
  std::vector<std::string> policies = SplitCommas(o.policies);
  if (policies.size() == 1 && policies[0] == "all") policies = {"peak", "static", "hpa", "kpa", "aibrix", "ours"};
  sim::ServingConfig base;
  base.router = o.router;
  if (o.speedup > 0) base.model.speedup = o.speedup;
  base.model.cold_start_s = o.cold_start;
  base.model.prefill_order = o.prefill_order == "shortest-first" ? sim::PrefillOrder::kShortestFirst : sim::PrefillOrder::kFcfs;
  base.model.max_overtake_s = o.max_overtake;
  base.tick_s = o.tick;
  base.scale_down_window_s = o.scale_down_window;
  base.burst_ratio = o.burst_ratio;
  base.burst_hold_s = o.burst_hold;
  base.burst_early_s = o.burst_early;
  base.burst_utilization = o.burst_utilization;
  base.target_utilization = o.utilization;
  base.history_burst_gap_s = o.history_burst_gap;
  base.history_max_shift_s = o.history_shift;
  base.slo.ttft_p99_ms = o.ttft_slo_ms;
  base.provision_delay_s = o.provision_delay;
  base.warm_pool = o.warm_pool;
  base.bounds = {o.min_replicas, o.max_replicas};
  base.seed = o.seed;
  base.history_days = o.history_days;
  std::optional<sim::ServingTrace> history;
  if (!o.history_trace.empty()) {
    StatusOr<sim::ServingTrace> h = LoadTrace(o.history_trace);
    if (!h.ok()) return Fail(Status(h.status().code(), "--history-trace: " + std::string(h.status().message())), 2);
    history = std::move(*h);
    base.history_trace = &*history;
  }
  // HPA, KPA and AIBrix aim at a per-replica concurrency: profile it on the static baseline, as
  // an operator would load-test a replica before setting the target.
  std::optional<sim::ServingRun> baseline;
  for (const std::string& policy : policies) {
    if (policy == "static" || policy == "hpa" || policy == "kpa" || policy == "aibrix") {
      sim::ServingConfig c = base;
      StatusOr<sim::ServingRun> st = InvalidArgumentError("");
      if (o.static_replicas > 0) {
        c.policy = "static";
        c.static_replicas = o.static_replicas;
        st = sim::RunServing(*trace, c);
      } else {
        st = sim::RunStaticBaseline(*trace, c, o.target / 100, o.max_replicas);
      }
      if (!st.ok()) return Fail(st.status(), st.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
      base.max_concurrency = sim::ProfiledConcurrency(*st);
      baseline = std::move(*st);
      break;
    }
  }
  std::vector<sim::ServingRun> runs;
  for (const std::string& policy : policies) {
    sim::ServingConfig c = base;
    c.policy = policy;
    StatusOr<sim::ServingRun> run = InvalidArgumentError("");
    if (policy == "static" && baseline.has_value()) {
      run = *baseline;
    } else if (policy == "peak") {  // static peak provisioning: the busiest minute at 70%
      c.policy = "static";
      c.static_replicas = sim::PeakProvisionedReplicas(*trace, c.model, 60, 0.7);
      run = sim::RunServing(*trace, c);
      if (run.ok()) run->policy = "peak";
    } else {
      c.static_replicas = std::max(o.static_replicas, 1);
      run = sim::RunServing(*trace, c);
    }
    if (!run.ok()) return Fail(run.status(), run.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
    if (!o.quiet) {
      std::cerr << fmt::format("  {}: {:.2f}% of TTFTs within {:.0f} ms, {:.2f} GPU-hours\n", RunLabel(*run),
                               run->slo_attainment * 100, o.ttft_slo_ms, run->gpu_hours);
    }
    runs.push_back(std::move(*run));
  }
  Emit(runs, o.format);
  if (!o.plot.empty()) {
    if (Status st = WriteReplicaPlot(runs, o.plot); !st.ok()) return Fail(st, 1);
    if (!o.quiet) std::cerr << "wrote " << o.plot << "\n";
  }
  return 0;
}

int RunRouting(const RoutingOptions& o) {
  StatusOr<sim::ServingTrace> trace = LoadTrace(o.trace);
  if (!trace.ok()) return Fail(trace.status(), 2);
  std::vector<std::string> routers = SplitCommas(o.policies);
  if (routers.size() == 1 && routers[0] == "all") routers = fleet::RouterNames();
  std::vector<sim::ServingRun> runs;
  for (const std::string& router : routers) {
    sim::ServingConfig c;
    c.policy = "static";
    c.router = router;
    c.static_replicas = o.replicas;
    c.slo.ttft_p99_ms = o.ttft_slo_ms;
    if (o.speedup > 0) c.model.speedup = o.speedup;
    c.seed = o.seed;
    StatusOr<sim::ServingRun> run = sim::RunServing(*trace, c);
    if (!run.ok()) return Fail(run.status(), run.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
    if (!o.quiet) {
      std::cerr << fmt::format("  {}: TTFT mean {:.0f} ms, p99 {:.0f} ms, prefix hits {:.1f}%\n", router,
                               run->ttft_mean_ms, run->ttft_p99_ms, run->prefix_hit_rate * 100);
    }
    runs.push_back(std::move(*run));
  }
  Emit(runs, o.format);
  return 0;
}

}  // namespace

void AddSimulateServing(CLI::App& simulate, int* exit_code) {
  auto a = std::make_shared<AutoscaleOptions>();
  a->trace = "conv";
  a->policies = "all";
  a->ttft_slo_ms = 5000;
  CLI::App* as = simulate.add_subcommand(
      "autoscale", "Replay an LLM request trace through a replica autoscaler and the router: TTFT-SLO "
                   "attainment, GPU-hours, oscillations");
  as->add_option("--trace", a->trace, "conv | code (Azure LLM inference 2023) | a trace file (.csv Azure, .jsonl Mooncake)")
      ->capture_default_str();
  as->add_option("--policy", a->policies,
                 "hpa|kpa|aibrix|ours|static|peak|all, or several separated by commas (static: the smallest fleet "
                 "meeting --target, by search; peak: sized for the busiest minute at 70%)")
      ->capture_default_str();
  as->add_option("--ttft-slo-ms", a->ttft_slo_ms, "TTFT objective; attainment = share of requests within it")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  as->add_option("--target", a->target, "static: the smallest replica count reaching this attainment (%)")
      ->check(CLI::Range(1.0, 100.0))
      ->capture_default_str();
  as->add_option("--static-replicas", a->static_replicas, "static: use N replicas instead of searching")
      ->check(CLI::PositiveNumber);
  as->add_option("--history-days", a->history_days,
                 "ours: days of re-sampled load history the forecaster learns first (0 = none)")
      ->check(CLI::Range(0, 60))
      ->capture_default_str();
  as->add_option("--speedup", a->speedup, "Replica = the CPU engine's latency curve x this factor (default 4)")
      ->check(CLI::Range(0.01, 10000.0));
  as->add_option("--provision-delay", a->provision_delay, "Seconds until a new GPU node is ready")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  as->add_option("--warm-pool", a->warm_pool, "Nodes kept provisioned and idle")->check(CLI::Range(0, 1000))->capture_default_str();
  as->add_option("--cold-start", a->cold_start, "Seconds a replica takes to load on a ready node")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  as->add_option("--tick", a->tick, "ours: seconds between scaling decisions")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  as->add_option("--scale-down-window", a->scale_down_window,
                 "ours: seconds a higher recommendation holds before replicas are removed")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  as->add_option("--burst-ratio", a->burst_ratio,
                 "ours: arrivals at the SLO's timescale above this many times the mean load are a burst, whose "
                 "size is kept --burst-hold seconds (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  as->add_option("--burst-hold", a->burst_hold, "ours: seconds a burst's size is kept")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  as->add_option("--burst-early", a->burst_early,
                 "ours: a burst learned from history is looked for this many seconds beyond the provisioning lead")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  as->add_option("--utilization", a->utilization, "ours: share of a replica's capacity the sizing plans to use")
      ->check(CLI::Range(0.05, 1.0))
      ->capture_default_str();
  as->add_option("--burst-utilization", a->burst_utilization,
                 "ours: a burst learned from history is served at this share of a replica's capacity")
      ->check(CLI::Range(0.05, 1.0))
      ->capture_default_str();
  as->add_option("--history-trace", a->history_trace,
                 "History days: re-sampled from this trace (conv | code | a file) instead of the replayed one, to "
                 "see what history that does not repeat costs");
  as->add_option("--history-shift", a->history_shift,
                 "History days: the most seconds a burst (or request) moves either way from its time")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  as->add_option("--history-burst-gap", a->history_burst_gap,
                 "History days: a run of arrivals without a gap this long moves as one burst (0: every request "
                 "moves alone)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  as->add_option("--prefill-order", a->prefill_order,
                 "Which running sequences a replica prefills first: fcfs (oldest) or shortest-first (fewest "
                 "prompt tokens left; none overtaken for longer than --max-overtake)")
      ->check(CLI::IsMember({"fcfs", "shortest-first"}))
      ->capture_default_str();
  as->add_option("--max-overtake", a->max_overtake,
                 "shortest-first: seconds after its arrival a sequence goes ahead of every other")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  as->add_option("--min-replicas", a->min_replicas)->check(CLI::Range(0, 10000))->capture_default_str();
  as->add_option("--max-replicas", a->max_replicas)->check(CLI::Range(1, 10000))->capture_default_str();
  as->add_option("--router", a->router, "round-robin|least-request|prefix|score")
      ->check(CLI::IsMember(fleet::RouterNames()))
      ->capture_default_str();
  as->add_option("--seed", a->seed, "Seed of the re-sampled history days")->capture_default_str();
  as->add_option("--format", a->format)->check(CLI::IsMember({"table", "json"}))->capture_default_str();
  as->add_option("--plot", a->plot, "Write GPUs and offered load over time to FILE (.svg or .png)");
  as->add_flag("--quiet", a->quiet, "No progress on stderr");
  as->callback([a, exit_code] { *exit_code = RunAutoscale(*a); });

  auto r = std::make_shared<RoutingOptions>();
  r->trace = kMooncakeConv;
  r->policies = "all";
  r->ttft_slo_ms = 10000;
  r->speedup = 8;
  CLI::App* rt = simulate.add_subcommand(
      "routing", "Replay a trace on a fixed number of replicas under each routing policy: TTFT and "
                 "prefix-cache hits");
  rt->add_option("--trace", r->trace, "Trace file (.jsonl Mooncake with hash_ids, or an Azure .csv)")
      ->capture_default_str();
  rt->add_option("--policy", r->policies, "round-robin|least-request|prefix|score|all, or several separated by commas")
      ->capture_default_str();
  rt->add_option("--replicas", r->replicas)->check(CLI::Range(1, 10000))->capture_default_str();
  rt->add_option("--ttft-slo-ms", r->ttft_slo_ms)->check(CLI::PositiveNumber)->capture_default_str();
  rt->add_option("--speedup", r->speedup, "Replica = the CPU engine's latency curve x this factor (default 8)")
      ->check(CLI::Range(0.01, 10000.0));
  rt->add_option("--seed", r->seed)->capture_default_str();
  rt->add_option("--format", r->format)->check(CLI::IsMember({"table", "json"}))->capture_default_str();
  rt->add_flag("--quiet", r->quiet, "No progress on stderr");
  rt->callback([r, exit_code] { *exit_code = RunRouting(*r); });
}

}  // namespace aicloud::cli
