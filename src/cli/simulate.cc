// `aicloud simulate fgd`: the FGD paper's placement experiment on a node list and a pod list.
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cluster/load_nodes.h"
#include "sched/profile.h"
#include "sim/fgd_experiment.h"
#include "sim/plot.h"
#include "sim/report.h"

namespace aicloud::cli {
namespace {

struct SimulateFgdOptions {
  std::string nodes = "data/traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv";
  std::string pods = "data/traces/alibaba-gpu-v2023/openb_pod_list_default.csv";
  std::string policies = "fgd";
  uint64_t seed = 42;
  std::string seeds;
  double inflate = 1.3;
  std::string format = "table";
  std::string plot;
  std::string tie_break = "first";
  bool quiet = false;
};

// "42-51" or "42,43,50" or "7".
StatusOr<std::vector<uint64_t>> ParseSeeds(const std::string& text) {
  std::vector<uint64_t> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string part = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t dash = part.find('-');
    try {
      if (dash == std::string::npos) {
        out.push_back(std::stoull(part));
      } else {
        uint64_t a = std::stoull(part.substr(0, dash)), b = std::stoull(part.substr(dash + 1));
        if (b < a || b - a > 10000) return InvalidArgumentError("--seeds: bad range '" + part + "'");
        for (uint64_t s = a; s <= b; ++s) out.push_back(s);
      }
    } catch (const std::exception&) {
      return InvalidArgumentError("--seeds: '" + part + "' is not a seed or a range like 42-51");
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

int RunSimulateFgd(const SimulateFgdOptions& o) {
  StatusOr<cluster::Cluster> cluster = cluster::LoadNodes(o.nodes);
  if (!cluster.ok()) return Fail(cluster.status(), 2);
  StatusOr<std::vector<sim::TracePod>> pods = sim::LoadOpenbPods(o.pods, &*cluster);
  if (!pods.ok()) return Fail(pods.status(), 2);
  std::vector<uint64_t> seeds{o.seed};
  std::string seed_text = std::to_string(o.seed);
  if (!o.seeds.empty()) {
    StatusOr<std::vector<uint64_t>> s = ParseSeeds(o.seeds);
    if (!s.ok()) {
      return Fail(s.status(), 2);
    }
    seeds = *s;
    seed_text = o.seeds;
  }
  const std::vector<std::string> policies = SplitCommas(o.policies);
  if (Status st = CheckPolicies(policies); !st.ok()) return Fail(st, 2);
  sim::FgdExperiment exp(*cluster, std::move(*pods), WorkloadName(o.pods));
  std::vector<sim::FgdRun> means;
  for (const std::string& policy : policies) {
    std::vector<sim::FgdRun> runs;
    for (uint64_t seed : seeds) {
      sim::FgdConfig cfg;
      cfg.policy = policy;
      cfg.seed = seed;
      cfg.inflate = o.inflate;
      cfg.tie_break = o.tie_break == "random" ? sched::SchedulerOptions::TieBreak::kRandom
                                              : sched::SchedulerOptions::TieBreak::kFirst;
      StatusOr<sim::FgdRun> run = exp.Run(cfg);
      if (!run.ok()) {
        return Fail(run.status(), 1);
      }
      if (!o.quiet && seeds.size() > 1) {
        std::cerr << fmt::format("  {} seed {}: {:.2f}% allocated ({:.3f} s)\n", policy, seed,
                                 run->final_allocation_pct, run->schedule_seconds);
      }
      runs.push_back(std::move(*run));
    }
    means.push_back(sim::MeanRun(runs));
  }
  if (o.format == "json") {
    std::cout << sim::FormatJson(means, seed_text);
  } else if (o.format == "csv") {
    std::cout << sim::FormatCsv(means);
  } else {
    std::cout << sim::FormatTable(means, seed_text);
  }
  if (!o.plot.empty()) {
    sim::PlotSpec spec;
    spec.title = fmt::format("GPU allocation vs arrived demand - openb {} (seeds {})",
                             means[0].workload, seed_text);
    spec.x_label = "Arrived GPU demand (% of cluster GPUs)";
    spec.y_label = "GPU allocation ratio (%)";
    spec.x_min = 0;
    spec.y_min = 0;
    spec.x_max = means[0].curve.empty() ? 130 : means[0].curve.back().arrived_pct;
    spec.x_markers.push_back({100.0, "demand = capacity"});
    for (const sim::FgdRun& r : means) {
      sim::Series s;
      s.label = fmt::format("{} ({:.2f}%)", r.policy, r.final_allocation_pct);
      for (const sim::CurvePoint& p : r.curve) s.points.emplace_back(p.arrived_pct, p.allocation_pct);
      spec.series.push_back(std::move(s));
    }
    if (Status st = sim::WritePlot(spec, o.plot); !st.ok()) return Fail(st, 1);
    if (!o.quiet) std::cerr << "wrote " << o.plot << "\n";
  }
  return 0;
}

}  // namespace

void AddSimulate(CLI::App& app, int* exit_code) {
  CLI::App* sim = app.add_subcommand("simulate", "Replay cluster traces through the scheduler");
  sim->require_subcommand(1);
  auto o = std::make_shared<SimulateFgdOptions>();
  CLI::App* fgd = sim->add_subcommand(
      "fgd", "The FGD paper's experiment: fill the cluster to --inflate x its GPUs, no departures");
  fgd->add_option("--nodes", o->nodes, "Node list: openb CSV, or an inventory YAML (.yaml)")->capture_default_str();
  fgd->add_option("--pods", o->pods, "Pod list CSV (openb format)")->capture_default_str();
  fgd->add_option("--policy", o->policies,
                  "Placement policy, or several separated by commas: " +
                      fmt::format("{}", fmt::join(sched::PolicyNames(), "|")))
      ->capture_default_str();
  fgd->add_option("--seed", o->seed, "Seed of the shuffle and resampling")->capture_default_str();
  fgd->add_option("--seeds", o->seeds, "Several seeds, e.g. 42-51; reports the mean");
  fgd->add_option("--inflate", o->inflate, "Requested GPUs as a multiple of cluster GPUs")
      ->capture_default_str();
  fgd->add_option("--format", o->format, "Output format")
      ->check(CLI::IsMember({"table", "json", "csv"}))
      ->capture_default_str();
  fgd->add_option("--plot", o->plot, "Write allocation vs arrived demand to FILE (.svg or .png)");
  fgd->add_option("--tie-break", o->tie_break,
                  "Equal best scores: first node in a seeded random node order (as the paper's "
                  "artifact), or uniformly random (kube-scheduler)")
      ->check(CLI::IsMember({"first", "random"}))
      ->capture_default_str();
  fgd->add_flag("--quiet", o->quiet, "No progress on stderr");
  fgd->callback([o, exit_code] { *exit_code = RunSimulateFgd(*o); });
  AddSimulateEvents(*sim, exit_code);
}

}  // namespace aicloud::cli
