// Placement quality on the FGD paper's experiment: every policy on every bundled openb
// workload, mean ± std of GPU allocation at 130% arrived demand over seeds 42..51, next to the
// paper's published means. Prints a Markdown table (bench/RESULTS.md quotes it).
//
//   build/bench/fgd_quality [--seeds 10] [--workloads default,cpu050] [--policies fgd,fgd_tiered]
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "cluster/openb.h"
#include "sim/fgd_experiment.h"

namespace {

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');) out.push_back(part);
  return out;
}

// Means at 130% from the paper's published per-run results (research/scheduler-anchors.md §2.3).
const std::map<std::string, std::map<std::string, double>> kPaper = {
    {"default", {{"random", 87.47}, {"dotprod", 90.85}, {"clustering", 91.88}, {"packing", 92.00}, {"bestfit", 93.08}, {"fgd", 95.39}}},
    {"cpu050", {{"random", 91.24}, {"dotprod", 93.27}, {"clustering", 93.79}, {"packing", 93.72}, {"bestfit", 93.79}, {"fgd", 95.21}}},
    {"gpushare40", {{"random", 86.00}, {"dotprod", 89.56}, {"clustering", 90.02}, {"packing", 90.03}, {"bestfit", 91.69}, {"fgd", 94.15}}},
    {"gpuspec10", {{"random", 87.43}, {"dotprod", 90.39}, {"clustering", 92.18}, {"packing", 92.46}, {"bestfit", 93.30}, {"fgd", 94.95}}},
    {"multigpu20", {{"random", 88.69}, {"dotprod", 92.06}, {"clustering", 93.56}, {"packing", 93.71}, {"bestfit", 93.93}, {"fgd", 95.65}}},
};

}  // namespace

int main(int argc, char** argv) {
  int seeds = 10;
  std::string workloads = "default,cpu050,gpushare40,gpuspec10,multigpu20";
  std::string policies = "random,dotprod,clustering,packing,bestfit,fgd,fgd_tiered";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seeds")) seeds = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--workloads")) workloads = argv[i + 1];
    if (!std::strcmp(argv[i], "--policies")) policies = argv[i + 1];
  }
  if (seeds < 1 || seeds > 1000) return std::cerr << "--seeds must be 1..1000\n", 2;
  const std::string dir = std::string(AICLOUD_SOURCE_DIR) + "/data/traces/alibaba-gpu-v2023/";
  std::cout << "| workload | policy | ours: mean ± std (%) | paper mean (%) | diff | seeds above fgd "
               "(same seed) | s/run |\n|---|---|---|---|---|---|---|\n";
  for (const std::string& wl : Split(workloads)) {
    auto cluster = aicloud::cluster::LoadOpenbNodes(dir + "openb_node_list_gpu_node.csv");
    if (!cluster.ok()) return std::cerr << cluster.status().ToString() << "\n", 1;
    auto pods = aicloud::sim::LoadOpenbPods(dir + "openb_pod_list_" + wl + ".csv", &*cluster);
    if (!pods.ok()) return std::cerr << pods.status().ToString() << "\n", 1;
    aicloud::sim::FgdExperiment exp(*cluster, std::move(*pods), wl);
    std::map<std::string, std::vector<double>> results;
    std::map<std::string, double> seconds;
    for (const std::string& policy : Split(policies)) {
      for (int s = 0; s < seeds; ++s) {
        aicloud::sim::FgdConfig cfg;
        cfg.policy = policy;
        cfg.seed = 42 + s;
        auto run = exp.Run(cfg);
        if (!run.ok()) return std::cerr << run.status().ToString() << "\n", 1;
        results[policy].push_back(run->final_allocation_pct);
        seconds[policy] += run->schedule_seconds / seeds;
      }
    }
    for (const std::string& policy : Split(policies)) {
      const std::vector<double>& v = results[policy];
      double mean = 0, var = 0;
      for (double x : v) mean += x / static_cast<double>(v.size());
      for (double x : v) var += (x - mean) * (x - mean) / static_cast<double>(v.size());
      auto w = kPaper.find(wl);
      std::string paper = "-", diff = "-", wins = "-";
      if (w != kPaper.end() && w->second.count(policy)) {
        paper = fmt::format("{:.2f}", w->second.at(policy));
        diff = fmt::format("{:+.2f}", mean - w->second.at(policy));
      }
      if (policy != "fgd" && results.count("fgd")) {
        int above = 0;
        for (size_t i = 0; i < v.size(); ++i) above += v[i] > results["fgd"][i] ? 1 : 0;
        wins = fmt::format("{}/{}", above, v.size());
      }
      std::cout << fmt::format("| {} | {} | {:.2f} ± {:.2f} | {} | {} | {} | {:.3f} |\n", wl, policy,
                               mean, std::sqrt(var), paper, diff, wins, seconds[policy])
                << std::flush;
    }
  }
  return 0;
}
