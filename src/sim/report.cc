#include "sim/report.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace aicloud::sim {
namespace {

const CurvePoint* At(const FgdRun& r, int x) {
  for (const CurvePoint& p : r.curve) {
    if (p.arrived_pct == x) return &p;
  }
  return nullptr;
}

nlohmann::json RunJson(const FgdRun& r, const std::string& seeds) {
  nlohmann::json j;
  j["policy"] = r.policy;
  j["seed"] = seeds.find('-') == std::string::npos ? nlohmann::json(r.seed) : nlohmann::json(seeds);
  j["workload"] = r.workload;
  j["final_allocation_pct"] = r.final_allocation_pct;
  nlohmann::json curve = nlohmann::json::array(), amount = nlohmann::json::array(),
                 ratio = nlohmann::json::array();
  for (const CurvePoint& p : r.curve) {
    curve.push_back({p.arrived_pct, p.allocation_pct});
    amount.push_back({p.arrived_pct, p.frag_amount_pct});
    ratio.push_back({p.arrived_pct, p.frag_ratio_pct});
  }
  j["curve"] = curve;
  j["frag_amount_curve"] = amount;
  j["frag_ratio_curve"] = ratio;
  j["pods"] = r.pods;
  j["placed"] = r.placed;
  j["failed"] = r.failed;
  j["schedule_seconds"] = r.schedule_seconds;
  return j;
}

}  // namespace

std::string FormatTable(const std::vector<FgdRun>& runs, const std::string& seeds) {
  if (runs.empty()) return "no runs\n";
  std::string out = fmt::format("FGD experiment: workload {}, seed(s) {}, cluster filled to {}% of GPUs\n\n",
                                runs[0].workload, seeds,
                                runs[0].curve.empty() ? 0 : runs[0].curve.back().arrived_pct);
  out += fmt::format("{:<36}", "GPU allocation % at arrived demand");
  for (const FgdRun& r : runs) out += fmt::format("{:>14}", r.policy);
  out += "\n";
  const int last = runs[0].curve.empty() ? 0 : runs[0].curve.back().arrived_pct;
  std::vector<int> xs = {50, 80, 90, 94, 100, 110, 120};
  xs.push_back(last);
  for (int x : xs) {
    if (x > last || (x == last && &x != &xs.back())) continue;
    out += fmt::format("{:<36}", fmt::format("  {}%", x));
    for (const FgdRun& r : runs) {
      const CurvePoint* p = At(r, x);
      out += p ? fmt::format("{:>14.2f}", p->allocation_pct) : fmt::format("{:>14}", "-");
    }
    out += "\n";
  }
  auto row = [&](const std::string& label, auto value) {
    out += fmt::format("{:<36}", label);
    for (const FgdRun& r : runs) out += value(r);
    out += "\n";
  };
  row("fragmented GPU % of cluster @50%", [](const FgdRun& r) {
    const CurvePoint* p = At(r, 50);
    return p ? fmt::format("{:>14.2f}", p->frag_amount_pct) : fmt::format("{:>14}", "-");
  });
  row("fragmented GPU % of cluster @90%", [](const FgdRun& r) {
    const CurvePoint* p = At(r, 90);
    return p ? fmt::format("{:>14.2f}", p->frag_amount_pct) : fmt::format("{:>14}", "-");
  });
  row("fragmented / idle GPU % @90%", [](const FgdRun& r) {
    const CurvePoint* p = At(r, 90);
    return p ? fmt::format("{:>14.2f}", p->frag_ratio_pct) : fmt::format("{:>14}", "-");
  });
  row("pods placed / arrived", [](const FgdRun& r) {
    return fmt::format("{:>14}", fmt::format("{}/{}", r.placed, r.pods));
  });
  row("placement loop, seconds per run", [](const FgdRun& r) {
    return fmt::format("{:>14.3f}", r.schedule_seconds);
  });
  out += fmt::format("{:<36}", "FINAL GPU allocation %");
  for (const FgdRun& r : runs) out += fmt::format("{:>14.2f}", r.final_allocation_pct);
  out += "\n";
  return out;
}

std::string FormatJson(const std::vector<FgdRun>& runs, const std::string& seeds) {
  if (runs.size() == 1) return RunJson(runs[0], seeds).dump() + "\n";
  nlohmann::json j;
  j["workload"] = runs.empty() ? "" : runs[0].workload;
  j["seeds"] = seeds;
  j["runs"] = nlohmann::json::array();
  for (const FgdRun& r : runs) j["runs"].push_back(RunJson(r, seeds));
  return j.dump() + "\n";
}

std::string FormatCsv(const std::vector<FgdRun>& runs) {
  std::string out = "policy,workload,arrived_pct,allocation_pct,frag_amount_pct,frag_ratio_pct\n";
  for (const FgdRun& r : runs) {
    for (const CurvePoint& p : r.curve) {
      out += fmt::format("{},{},{},{:.4f},{:.4f},{:.4f}\n", r.policy, r.workload, p.arrived_pct,
                         p.allocation_pct, p.frag_amount_pct, p.frag_ratio_pct);
    }
  }
  return out;
}

}  // namespace aicloud::sim
