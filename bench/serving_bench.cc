// Autoscaling and routing on the bundled LLM traces, and the cost of the fleet decisions:
//   1. Azure LLM 2023 conv and code: three static fleets — peak provisioning at 70% on the
//      busiest minute's work and on the arrival curve at the TTFT SLO's timescale (both from the
//      profiled replica capacity), and the smallest fixed count meeting the TTFT SLO for 99% of
//      requests (found by replaying the trace: hindsight) — vs HPA, KPA, AIBrix and ours
//      (without history, and with N re-sampled days of history — bursts moved as a whole, and each
//      request moved alone; each also without its arrival-curve sizing): attainment, GPU-hours,
//      oscillations;
//   2. Mooncake conversation trace on a fixed fleet: round-robin, least-request, prefix, score;
//   3. router Pick and autoscaler Recommend time per call, and replay wall time.
// Prints Markdown tables (bench/RESULTS.md section 7 quotes them).
//
//   build/bench/serving_bench [--history-days 3] [--replicas 16] [--speedup 4] [--ttft-slo-ms 5000]
//                             [--routing-speedup 8] [--utilization 0.7] [--plot-dir docs/img]
//                             [--prefill-order fcfs|shortest-first]
// --prefill-order applies to every replica of every fleet (static ones included).
#include <chrono>
#include <cstring>
#include <iostream>
#include <string>

#include <fmt/format.h>

#include "fleet/autoscaler.h"
#include "fleet/router.h"
#include "sim/plot.h"
#include "sim/serving_sim.h"
#include "sim/serving_trace.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

void Row(const aicloud::sim::ServingRun& r, const std::string& label, double static_gpu_h, double peak_gpu_h,
         double slo_peak_gpu_h, double wall) {
  std::cout << fmt::format("| {} | {:.2f}% | {:.0f} | {:.0f} | {:.2f} | {:+.1f}% | {:+.1f}% | {:+.1f}% | {} | {:.1f} | {} | {:.2f} s |\n",
                           label, r.slo_attainment * 100, r.ttft_p50_ms, r.ttft_p99_ms, r.gpu_hours,
                           (r.gpu_hours / peak_gpu_h - 1) * 100, (r.gpu_hours / slo_peak_gpu_h - 1) * 100,
                           (r.gpu_hours / static_gpu_h - 1) * 100, r.peak_gpus, r.mean_gpus, r.oscillations, wall);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace aicloud;
  int history_days = 3;
  int replicas = 16;
  double speedup = 4;
  double routing_speedup = 8;
  double slo_ms = 5000;
  std::string plot_dir;
  double utilization = 0.7;
  std::string prefill_order = "fcfs";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--prefill-order")) prefill_order = argv[i + 1];
    if (!std::strcmp(argv[i], "--history-days")) history_days = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--replicas")) replicas = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--speedup")) speedup = std::stod(argv[i + 1]);
    if (!std::strcmp(argv[i], "--routing-speedup")) routing_speedup = std::stod(argv[i + 1]);
    if (!std::strcmp(argv[i], "--ttft-slo-ms")) slo_ms = std::stod(argv[i + 1]);
    if (!std::strcmp(argv[i], "--utilization")) utilization = std::stod(argv[i + 1]);
    if (!std::strcmp(argv[i], "--plot-dir")) plot_dir = argv[i + 1];
  }
  if (prefill_order != "fcfs" && prefill_order != "shortest-first") {
    std::cerr << "error: --prefill-order: \"" << prefill_order << "\" is not fcfs or shortest-first\n";
    return 2;
  }
  const std::string dir = std::string(AICLOUD_SOURCE_DIR) + "/data/traces/";

  for (const char* name : {"conv", "code"}) {
    StatusOr<sim::ServingTrace> trace =
        sim::LoadAzureLlmTrace(dir + "azure-llm-inference-2023/AzureLLMInferenceTrace_" + name + ".csv");
    if (!trace.ok()) {
      std::cerr << trace.status() << "\n";
      return 1;
    }
    sim::ServingConfig c;
    c.model.speedup = speedup;
    c.model.prefill_order =
        prefill_order == "shortest-first" ? sim::PrefillOrder::kShortestFirst : sim::PrefillOrder::kFcfs;
    c.slo.ttft_p99_ms = slo_ms;
    c.target_utilization = utilization;
    std::cout << fmt::format("\n### Azure {} ({} requests, {:.0f} s), TTFT SLO {:.0f} ms, speedup {}, prefill {}\n\n",
                             name, trace->requests.size(), trace->span_s(), c.slo.ttft_p99_ms, speedup, prefill_order);
    std::cout << "| policy | TTFT within SLO | TTFT p50 ms | TTFT p99 ms | GPU-hours | vs peak minute | vs peak at SLO timescale | vs smallest static | peak GPUs | mean GPUs | direction changes | replay wall |\n";
    std::cout << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    Clock::time_point t0 = Clock::now();
    sim::ServingConfig peak_c = c;
    peak_c.policy = "static";
    // Peak provisioning plans for 70% of capacity (HPA's customary target), whatever --utilization
    // tells "ours".
    peak_c.static_replicas = sim::PeakProvisionedReplicas(*trace, c.model, 60, 0.7);
    StatusOr<sim::ServingRun> peak = sim::RunServing(*trace, peak_c);
    if (!peak.ok()) {
      std::cerr << peak.status() << "\n";
      return 1;
    }
    const double peak_h = peak->gpu_hours;
    const double peak_wall = Seconds(t0);
    // The same 70%, on the arrival curve at the SLO's timescale (the busiest stretch of any
    // length served within its length plus the SLO).
    t0 = Clock::now();
    sim::ServingConfig slo_peak_c = peak_c;
    slo_peak_c.static_replicas = sim::SloPeakProvisionedReplicas(*trace, c.model, slo_ms / 1000, 0.7);
    StatusOr<sim::ServingRun> slo_peak = sim::RunServing(*trace, slo_peak_c);
    if (!slo_peak.ok()) {
      std::cerr << slo_peak.status() << "\n";
      return 1;
    }
    const double slo_peak_h = slo_peak->gpu_hours;
    const double slo_peak_wall = Seconds(t0);
    t0 = Clock::now();
    StatusOr<sim::ServingRun> st = sim::RunStaticBaseline(*trace, c, 0.99, 200);
    if (!st.ok()) {
      std::cerr << st.status() << "\n";
      return 1;
    }
    const double static_h = st->gpu_hours;
    Row(*peak, fmt::format("static x{} (peak minute at 70%)", peak->static_replicas), static_h, peak_h, slo_peak_h,
        peak_wall);
    Row(*slo_peak, fmt::format("static x{} (peak at SLO timescale, 70%)", slo_peak->static_replicas), static_h, peak_h,
        slo_peak_h, slo_peak_wall);
    Row(*st, fmt::format("static x{} (smallest meeting 99%, by search)", st->static_replicas), static_h, peak_h,
        slo_peak_h, Seconds(t0));
    c.max_concurrency = sim::ProfiledConcurrency(*st);
    std::vector<sim::ServingRun> runs{*st};
    for (const char* policy :
         {"hpa", "kpa", "aibrix", "ours-curve", "ours+history-curve", "ours-burst", "ours", "ours+history-alone",
          "ours+history"}) {
      const std::string p = policy;
      sim::ServingConfig pc = c;
      pc.policy = p.starts_with("ours") ? "ours" : p;
      pc.history_days = p.starts_with("ours+history") ? history_days : 0;
      // "-curve": neither the arrival curve (step 1b) nor the burst hold built on it (1c).
      pc.arrival_curve = !p.ends_with("-curve");
      if (p.ends_with("-curve") || p.ends_with("-burst")) pc.burst_ratio = 0;
      // "-alone": history days whose requests move on their own, which smears every burst.
      if (p.ends_with("-alone")) pc.history_burst_gap_s = 0;
      std::string label = pc.history_days > 0 ? fmt::format("ours, {} days of history", pc.history_days) : pc.policy;
      if (p.ends_with("-alone")) label += " (each request moved alone)";
      if (!pc.arrival_curve) label += ", without arrival-curve sizing";
      else if (pc.burst_ratio == 0) label += ", without burst hold";
      t0 = Clock::now();
      StatusOr<sim::ServingRun> run = sim::RunServing(*trace, pc);
      if (!run.ok()) {
        std::cerr << run.status() << "\n";
        return 1;
      }
      Row(*run, label, static_h, peak_h, slo_peak_h, Seconds(t0));
      if (pc.arrival_curve && !p.ends_with("-alone")) runs.push_back(std::move(*run));
    }
    if (!plot_dir.empty()) {
      sim::PlotSpec spec;
      spec.title = fmt::format("GPUs held, Azure {} trace (TTFT SLO {:.0f} ms)", name, slo_ms);
      spec.x_label = "Trace time (minutes)";
      spec.y_label = "GPUs (replicas holding one)";
      spec.x_min = 0;
      spec.y_min = 0;
      sim::Series load{"offered load / 0.7", {}};
      for (const sim::TimelinePoint& p : runs[0].timeline) load.points.emplace_back(p.t_s / 60, p.load_replicas / 0.7);
      spec.series.push_back(std::move(load));
      for (const sim::ServingRun& r : runs) {
        std::string label = r.policy == "static" ? fmt::format("static x{}", r.static_replicas)
                            : r.history_days > 0 ? fmt::format("ours +{}d history", r.history_days) : r.policy;
        sim::Series s{fmt::format("{} ({:.1f} GPU-h, {:.1f}%)", label, r.gpu_hours, r.slo_attainment * 100), {}};
        for (const sim::TimelinePoint& p : r.timeline) s.points.emplace_back(p.t_s / 60, p.gpus);
        spec.series.push_back(std::move(s));
      }
      if (Status w = sim::WritePlot(spec, plot_dir + "/autoscale_" + name + ".svg"); !w.ok()) std::cerr << w << "\n";
    }
    std::cout << fmt::format("\nPer-replica concurrency profiled on the static run: {:.1f} in flight; HPA, KPA and "
                             "AIBrix target 70% of it ({:.1f}).\n", c.max_concurrency, 0.7 * c.max_concurrency);
  }

  StatusOr<sim::ServingTrace> moon = sim::LoadMooncakeTrace(dir + "mooncake-fast25/conversation_trace.jsonl");
  if (!moon.ok()) {
    std::cerr << moon.status() << "\n";
    return 1;
  }
  std::cout << fmt::format("\n### Mooncake conversation ({} requests), {} static replicas, speedup {}\n\n",
                           moon->requests.size(), replicas, routing_speedup);
  std::cout << "| router | TTFT mean ms | TTFT p50 ms | TTFT p99 ms | prefix-cache hit | E2E mean s | replay wall |\n";
  std::cout << "|---|---|---|---|---|---|---|\n";
  for (const std::string& router : fleet::RouterNames()) {
    sim::ServingConfig c;
    c.policy = "static";
    c.router = router;
    c.static_replicas = replicas;
    c.model.speedup = routing_speedup;
    const Clock::time_point t0 = Clock::now();
    StatusOr<sim::ServingRun> run = sim::RunServing(*moon, c);
    if (!run.ok()) {
      std::cerr << run.status() << "\n";
      return 1;
    }
    std::cout << fmt::format("| {} | {:.0f} | {:.0f} | {:.0f} | {:.1f}% | {:.1f} | {:.2f} s |\n", router,
                             run->ttft_mean_ms, run->ttft_p50_ms, run->ttft_p99_ms, run->prefix_hit_rate * 100,
                             run->e2e_mean_s, Seconds(t0));
  }

  // Decision cost: 32 replicas, requests of 24 blocks from 200 conversations.
  std::cout << "\n### Decision cost (32 replicas)\n\n| call | ns per call |\n|---|---|\n";
  std::vector<fleet::ReplicaView> views(32);
  for (size_t i = 0; i < views.size(); ++i) {
    views[i].id = "replica-" + std::to_string(i);
    views[i].ready = true;
    views[i].queue_depth = static_cast<int>(i % 4);
    views[i].running = static_cast<int>(i % 9);
    views[i].kv_usage = 0.02 * static_cast<double>(i % 30);
  }
  for (const std::string& name : fleet::RouterNames()) {
    std::unique_ptr<fleet::Router> router = std::move(*fleet::MakeRouter(name));
    const int n = 200000;
    const Clock::time_point t0 = Clock::now();
    size_t sink = 0;
    for (int i = 0; i < n; ++i) {
      fleet::RouteRequest req;
      const uint64_t conv = static_cast<uint64_t>(i % 200);
      for (uint64_t b = 0; b < 24; ++b) req.prefix_hashes.push_back(conv * 100000 + b);
      sink += *router->Pick(req, views);
    }
    std::cout << fmt::format("| {} Pick | {:.0f} |\n", name, Seconds(t0) / n * 1e9 + 0 * static_cast<double>(sink));
  }
  for (const std::string& name : fleet::AutoscalerNames()) {
    std::unique_ptr<fleet::Autoscaler> a = std::move(*fleet::MakeAutoscaler(name, {1, 100}));
    fleet::DeploymentSnapshot s;
    s.capacity = {64, 8000, 3000};
    s.replicas.resize(32);
    s.current_replicas = 32;
    const int n = 100000;
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      s.now_s = i * a->tick_seconds();
      s.replicas[static_cast<size_t>(i % 32)].running = i % 50;
      s.prompt_tokens_per_s = 1000.0 * (i % 100);
      a->Recommend(s);
    }
    std::cout << fmt::format("| {} Recommend | {:.0f} |\n", name, Seconds(t0) / n * 1e9);
  }
  return 0;
}
