// Scheduler throughput: placement decisions per second on synthetic 8-GPU-node clusters of
// 1k, 5k and 20k nodes, filled with openb default pods to 90% of their GPUs, one core.
//
// Compares, in the same run:
//   Fgd/indexed     the production path (per-shape score index + memo; only changed nodes
//                   are re-scored),
//   Fgd/full_scan   the same plugins evaluated on every node every cycle (kube-scheduler's
//                   shape, no memo) — the baseline,
//   BestFit/*       a cheaper score with min-max normalisation (always a full scan).
// items_per_second = decisions per second (placed or not).
#include <benchmark/benchmark.h>

#include <map>
#include <memory>

#include "sched/profile.h"
#include "sched/registry.h"
#include "sched/scheduler.h"
#include "synthetic.h"

namespace aicloud::bench {
namespace {

const Synthetic& Get(int nodes, double fill) {
  static std::map<std::pair<int, double>, std::unique_ptr<Synthetic>> cache;
  auto& p = cache[{nodes, fill}];
  if (!p) p = std::make_unique<Synthetic>(MakeSynthetic(nodes, fill, 7));
  return *p;
}

void Fill(benchmark::State& state, const char* policy, bool memoize, int max_decisions,
          double fill = 0.9) {
  const Synthetic& syn = Get(static_cast<int>(state.range(0)), fill);
  int64_t decisions = 0, placed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    cluster::Cluster c = syn.cluster;
    sched::SchedulerOptions o;
    o.workload = syn.target;
    o.memoize = memoize;
    o.tie_break = sched::SchedulerOptions::TieBreak::kFirst;
    auto s = sched::Scheduler::Create(&c, *sched::PolicyProfile(policy), sched::Registry::BuiltIn(), o);
    state.ResumeTiming();
    int n = 0;
    for (const sched::PodRequest& p : syn.pods) {
      if (max_decisions > 0 && n++ >= max_decisions) break;
      placed += (*s)->ScheduleOne(p).placed ? 1 : 0;
      ++decisions;
    }
  }
  state.SetItemsProcessed(decisions);
  state.counters["placed_pct"] = decisions ? 100.0 * static_cast<double>(placed) / static_cast<double>(decisions) : 0;
}

// Fill to 90% of GPUs: every decision places.
void BM_Fgd_indexed(benchmark::State& s) { Fill(s, "fgd", true, 0); }
// Fill to 130% of GPUs: the last quarter of decisions find no node (the FGD paper's regime).
void BM_Fgd_indexed_saturated(benchmark::State& s) { Fill(s, "fgd", true, 0, 1.3); }
// The same first 5,000 decisions on both paths: the ratio of these two is the index's gain.
void BM_Fgd_indexed_first5000(benchmark::State& s) { Fill(s, "fgd", true, 5000); }
void BM_Fgd_full_scan_first5000(benchmark::State& s) { Fill(s, "fgd", false, 5000); }
void BM_BestFit_full_scan(benchmark::State& s) { Fill(s, "bestfit", true, 20000); }

BENCHMARK(BM_Fgd_indexed)->Arg(1000)->Arg(5000)->Arg(20000)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Fgd_indexed_saturated)->Arg(1000)->Arg(5000)->Arg(20000)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Fgd_indexed_first5000)->Arg(1000)->Arg(5000)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Fgd_full_scan_first5000)->Arg(1000)->Arg(5000)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_BestFit_full_scan)->Arg(1000)->Arg(5000)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace aicloud::bench

BENCHMARK_MAIN();
