// Table and JSON renderings of serving replays (declared in serving_sim.h).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/serving_sim.h"

namespace aicloud::sim {

std::string FormatServingTable(const std::vector<ServingRun>& runs) {
  std::string out = fmt::format("{:<16} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7} {:>6} {:>6} {:>6} {:>7}\n",
                                "policy", "TTFT-SLO", "TTFT p50", "TTFT p99", "TTFT avg", "TPOT p99",
                                "GPU-h", "node-h", "peak", "mean", "osc", "prefix");
  out += fmt::format("{:<16} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7} {:>6} {:>6} {:>6} {:>7}\n", "",
                     "met %", "ms", "ms", "ms", "ms", "", "", "GPUs", "GPUs", "", "hit %");
  for (const ServingRun& r : runs) {
    std::string name = r.policy;
    if (r.policy == "static" || r.policy == "peak") name = fmt::format("{} x{}", r.policy, r.static_replicas);
    if (r.policy == "ours" && r.history_days > 0) name = fmt::format("ours+{}d", r.history_days);
    if (r.policy == "static" && r.router != "score") name = fmt::format("{} x{}", r.router, r.static_replicas);
    out += fmt::format("{:<16} {:>9.2f} {:>9.0f} {:>9.0f} {:>9.0f} {:>8.1f} {:>8.2f} {:>7.2f} {:>6} {:>6.1f} {:>6} {:>7.1f}\n",
                       name, r.slo_attainment * 100, r.ttft_p50_ms, r.ttft_p99_ms, r.ttft_mean_ms,
                       r.tpot_p99_ms, r.gpu_hours, r.node_hours, r.peak_gpus, r.mean_gpus,
                       r.oscillations, r.prefix_hit_rate * 100);
  }
  if (!runs.empty()) {
    out += fmt::format("trace {} ({} requests over {:.0f} s), TTFT SLO {:.0f} ms, router {}\n",
                       runs[0].trace, runs[0].requests, runs[0].span_s, runs[0].slo_ttft_ms, runs[0].router);
  }
  return out;
}

std::string FormatServingJson(const std::vector<ServingRun>& runs) {
  nlohmann::json arr = nlohmann::json::array();
  for (const ServingRun& r : runs) {
    arr.push_back({{"policy", r.policy},
                   {"router", r.router},
                   {"trace", r.trace},
                   {"history_days", r.history_days},
                   {"static_replicas", r.static_replicas},
                   {"requests", r.requests},
                   {"completed", r.completed},
                   {"slo_ttft_ms", r.slo_ttft_ms},
                   {"slo_attainment", r.slo_attainment},
                   {"ttft_mean_ms", r.ttft_mean_ms},
                   {"ttft_p50_ms", r.ttft_p50_ms},
                   {"ttft_p99_ms", r.ttft_p99_ms},
                   {"tpot_p99_ms", r.tpot_p99_ms},
                   {"e2e_mean_s", r.e2e_mean_s},
                   {"gpu_hours", r.gpu_hours},
                   {"node_hours", r.node_hours},
                   {"warm_idle_hours", r.warm_idle_hours},
                   {"nodes_provisioned", r.nodes_provisioned},
                   {"peak_gpus", r.peak_gpus},
                   {"mean_gpus", r.mean_gpus},
                   {"oscillations", r.oscillations},
                   {"scale_events", r.scale_events},
                   {"prefix_hit_rate", r.prefix_hit_rate},
                   {"span_s", r.span_s},
                   {"missed_by_minute", r.missed_by_minute}});
  }
  return arr.dump(2) + "\n";
}

}  // namespace aicloud::sim
