// `aicloud inventory check FILE`: loads a node list (inventory YAML or openb CSV), reports the
// first problem as `file:line: field: what is wrong`, or summarises what the scheduler would see.
#include <iostream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cluster/catalog.h"
#include "cluster/load_nodes.h"

namespace aicloud::cli {
namespace {

int RunInventoryCheck(const std::string& path) {
  StatusOr<cluster::Cluster> c = cluster::LoadNodes(path);
  if (!c.ok()) {
    return Fail(c.status(), 2);
  }
  std::map<std::string, std::pair<int, int>> by_model;  // model -> (nodes, GPUs)
  std::map<std::string, int> by_pool;
  std::set<int32_t> domains;
  int64_t cpu = 0, mem = 0;
  int cpu_nodes = 0, cordoned = 0;
  for (const cluster::Node& n : c->nodes()) {
    cpu += n.cpu_milli;
    mem += n.mem_mib;
    ++by_pool[n.pool.empty() ? "(default)" : n.pool];
    cordoned += n.unschedulable ? 1 : 0;
    if (n.gpus.empty()) {
      ++cpu_nodes;
      continue;
    }
    auto& [nodes, gpus] = by_model[c->model_name(n.model)];
    ++nodes;
    gpus += n.gpu_count();
    for (const cluster::Gpu& g : n.gpus) {
      if (g.nvlink_domain >= 0) domains.insert(g.nvlink_domain);
    }
  }
  std::cout << fmt::format("{}: {} nodes ({} CPU-only, {} cordoned), {} GPUs, {:.0f} cores, {:.0f} GiB\n",
                           path, c->nodes().size(), cpu_nodes, cordoned, c->total_gpus(),
                           static_cast<double>(cpu) / 1000, static_cast<double>(mem) / 1024);
  for (const auto& [model, counts] : by_model) {
    const cluster::GpuModelSpec* spec = cluster::FindGpuModel(model);
    std::cout << fmt::format("  {:<12} {:>5} nodes {:>6} GPUs  {}\n", model, counts.first,
                             counts.second,
                             spec ? fmt::format("{:.0f} GB, {:.0f} W, MIG {}", spec->memory_gib,
                                                spec->tdp_w, spec->mig ? "yes" : "no")
                                  : std::string("not in the catalog"));
  }
  std::cout << fmt::format("  NVLink domains: {}\n", domains.size());
  for (const cluster::Rack& r : c->racks()) {
    std::cout << fmt::format("  rack {:<12} budget {} cooling {}\n", r.name,
                             r.power_budget_kw > 0 ? fmt::format("{:.1f} kW", r.power_budget_kw)
                                                   : std::string("none"),
                             r.cooling);
  }
  for (const auto& [pool, n] : by_pool) std::cout << fmt::format("  pool {:<12} {} nodes\n", pool, n);
  return 0;
}

}  // namespace

void AddInventory(CLI::App& app, int* exit_code) {
  CLI::App* inv = app.add_subcommand("inventory", "Node inventories");
  inv->require_subcommand(1);
  auto path = std::make_shared<std::string>();
  CLI::App* check = inv->add_subcommand(
      "check", "Load a node list (inventory .yaml or openb .csv) and summarise it, or name its first error");
  check->add_option("FILE", *path, "Inventory YAML or openb node CSV")->required();
  check->callback([path, exit_code] { *exit_code = RunInventoryCheck(*path); });
}

}  // namespace aicloud::cli
