// `aicloud simulate events`: replays a timed pod list (arrivals and departures) through the
// scheduler on a simulated clock and reports queue waits and GPU allocation over time.
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cluster/load_nodes.h"
#include "sched/profile.h"
#include "sim/event_sim.h"
#include "sim/plot.h"

namespace aicloud::cli {
namespace {

struct SimulateEventsOptions {
  std::string nodes = "data/traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv";
  std::string pods = "data/traces/alibaba-gpu-v2023/openb_pod_list_default.csv";
  std::string policies = "fgd";
  uint64_t seed = 42;
  double time_scale = 1.0;
  double max_wait = -1;
  double sample_every = 3600;
  std::string format = "table";
  std::string plot;
  bool quiet = false;
};

Status WriteAllocationPlot(const std::vector<sim::EventRun>& runs, const std::string& path) {
  sim::PlotSpec spec;
  spec.title = fmt::format("GPU allocation over trace time - {} (seed {}, time scale {})",
                           runs[0].workload, runs[0].seed, runs[0].time_scale);
  spec.x_label = "Trace time (days)";
  spec.y_label = "GPU allocation (% of cluster GPUs)";
  spec.x_min = 0;
  spec.y_min = 0;
  for (const sim::EventRun& r : runs) {
    sim::Series s;
    s.label = fmt::format("{} (mean {:.2f}%)", r.policy, r.time_weighted_allocation_pct);
    for (const auto& [t, pct] : r.allocation_curve) s.points.emplace_back(t / 86400, pct);
    spec.series.push_back(std::move(s));
  }
  return sim::WritePlot(spec, path);
}

int RunSimulateEvents(const SimulateEventsOptions& o) {
  StatusOr<cluster::Cluster> cluster = cluster::LoadNodes(o.nodes);
  if (!cluster.ok()) return Fail(cluster.status(), 2);
  StatusOr<std::vector<sim::TracePod>> pods = sim::LoadTimedPods(o.pods, &*cluster);
  if (!pods.ok()) return Fail(pods.status(), 2);
  const std::vector<std::string> policies = SplitCommas(o.policies);
  if (Status st = CheckPolicies(policies); !st.ok()) return Fail(st, 2);
  sim::EventSim sim(*cluster, std::move(*pods), WorkloadName(o.pods));
  std::vector<sim::EventRun> runs;
  for (const std::string& policy : policies) {
    sim::EventConfig cfg;
    cfg.policy = policy;
    cfg.seed = o.seed;
    cfg.time_scale = o.time_scale;
    cfg.max_wait_seconds = o.max_wait;
    cfg.sample_every_seconds = o.sample_every;
    StatusOr<sim::EventRun> run = sim.Run(cfg);
    if (!run.ok()) {
      std::cerr << "error: " << run.status().message() << "\n";
      return run.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
    if (!o.quiet) {
      std::cerr << fmt::format("  {}: {} pods replayed in {:.2f} s ({} scheduling cycles)\n",
                               policy, run->pods, run->wall_seconds, run->scheduling_cycles);
    }
    runs.push_back(std::move(*run));
  }
  if (o.format == "json") {
    std::cout << sim::FormatEventJson(runs);
  } else if (o.format == "csv") {
    std::cout << sim::FormatEventCsv(runs);
  } else {
    std::cout << sim::FormatEventTable(runs);
  }
  if (!o.plot.empty()) {
    if (Status st = WriteAllocationPlot(runs, o.plot); !st.ok()) return Fail(st, 1);
    if (!o.quiet) std::cerr << "wrote " << o.plot << "\n";
  }
  return 0;
}

}  // namespace

void AddSimulateEvents(CLI::App& simulate, int* exit_code) {
  auto o = std::make_shared<SimulateEventsOptions>();
  CLI::App* ev = simulate.add_subcommand(
      "events", "Replay pod arrivals and departures on a simulated clock: queue waits and GPU "
                "allocation over time");
  ev->add_option("--nodes", o->nodes, "Node list: openb CSV, or an inventory YAML (.yaml)")->capture_default_str();
  ev->add_option("--pods", o->pods, "Pod list CSV with creation_time and deletion_time")
      ->capture_default_str();
  ev->add_option("--policy", o->policies,
                 "Placement policy, or several separated by commas: " +
                     fmt::format("{}", fmt::join(sched::PolicyNames(), "|")))
      ->capture_default_str();
  ev->add_option("--seed", o->seed, "Seed of the node order and the scheduler")
      ->capture_default_str();
  ev->add_option("--time-scale", o->time_scale,
                 "Multiply arrival times by S (run times are kept); S < 1 compresses arrivals "
                 "and raises the load")
      ->check(CLI::Range(1e-9, 1000.0))
      ->capture_default_str();
  ev->add_option("--max-wait", o->max_wait,
                 "Drop a pod still pending after SECONDS (default: wait forever)")
      ->check(CLI::NonNegativeNumber);
  ev->add_option("--sample-every", o->sample_every,
                 "Seconds of trace time between points of the allocation curve")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  ev->add_option("--format", o->format, "Output format (csv: one row per pod and policy)")
      ->check(CLI::IsMember({"table", "json", "csv"}))
      ->capture_default_str();
  ev->add_option("--plot", o->plot, "Write GPU allocation over trace time to FILE (.svg or .png)");
  ev->add_flag("--quiet", o->quiet, "No progress on stderr");
  ev->callback([o, exit_code] { *exit_code = RunSimulateEvents(*o); });
}

}  // namespace aicloud::cli
