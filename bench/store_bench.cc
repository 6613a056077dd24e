// Durable creates/s into the SQLite store with 1, 4 and 16 concurrent writers, group commit
// against one transaction (one fsync) per write, in the same run on the same disk. Each write
// is a Create that returns only after its commit is fsynced (WAL, synchronous=FULL).
//
//   store_bench --benchmark_counters_tabular=true
//
// After the table it prints group/single throughput ratios per writer count.
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include "store/sqlite/sqlite_store.h"

namespace {

using aicloud::store::json;
using aicloud::store::sqlite::SqliteStore;

constexpr int kWritesPerRun = 2000;

json JobManifest(int thread, int i) {
  return {{"apiVersion", "aicloud/v1"},
          {"kind", "Job"},
          {"metadata",
           {{"name", "job-" + std::to_string(thread) + "-" + std::to_string(i)},
            {"tenant", "bench"},
            {"labels", {{"team", "nlp"}, {"queue", "default"}}}}},
          {"spec",
           {{"workers", 2},
            {"command", "python train.py --epochs 3"},
            {"resources", {{"gpu", {{"count", 8}, {"model", "H100"}}}, {"cpu", 32}}}}}};
}

// Args: {writer threads, group_commit (1/0)}.
void BM_DurableCreates(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const bool group = state.range(1) != 0;
  std::string tmpl = (std::filesystem::temp_directory_path() / "aicloud-bench-XXXXXX").string();
  std::string dir = mkdtemp(tmpl.data());
  std::vector<double> latencies_ms;
  int64_t commits = 0, txns = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::filesystem::remove_all(dir + "/state.db");
    auto store = SqliteStore::Open({.path = dir + "/state.db", .group_commit = group});
    if (!store.ok()) {
      state.SkipWithError(store.status().ToString().c_str());
      break;
    }
    std::vector<std::vector<double>> per_thread(threads);
    state.ResumeTiming();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (int i = 0; i < kWritesPerRun / threads; ++i) {
          auto start = std::chrono::steady_clock::now();
          if (!(*store)->Create(JobManifest(t, i)).ok()) std::abort();
          per_thread[t].push_back(
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count());
        }
      });
    }
    for (auto& w : workers) w.join();
    state.PauseTiming();
    for (auto& v : per_thread) latencies_ms.insert(latencies_ms.end(), v.begin(), v.end());
    commits += (*store)->commits();
    txns += (*store)->committed_transactions();
    store->reset();
    state.ResumeTiming();
  }
  std::filesystem::remove_all(dir);
  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto pct = [&](double p) {
    return latencies_ms.empty() ? 0.0
                                : latencies_ms[static_cast<size_t>(p * (latencies_ms.size() - 1))];
  };
  state.counters["creates/s"] =
      benchmark::Counter(static_cast<double>(txns), benchmark::Counter::kIsRate);
  state.counters["writes/commit"] = commits ? static_cast<double>(txns) / commits : 0;
  state.counters["p50_ms"] = pct(0.50);
  state.counters["p99_ms"] = pct(0.99);
}

BENCHMARK(BM_DurableCreates)
    ->ArgNames({"threads", "group_commit"})
    ->ArgsProduct({{1, 4, 16}, {0, 1}})
    ->Iterations(1)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Prints the table as usual, then the group/single ratio of median creates/s per thread count.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.aggregate_name != "median") continue;
      auto it = run.counters.find("creates/s");
      if (it == run.counters.end()) continue;
      // run_name.args is "threads:N/group_commit:G".
      std::string args = run.run_name.args;
      int threads = 0, group = 0;
      std::sscanf(args.c_str(), "threads:%d/group_commit:%d", &threads, &group);
      rates_[threads][group] = it->second.value;
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\nmedian creates/s: group commit vs one commit per write\n");
    for (const auto& [threads, by_mode] : rates_) {
      if (by_mode.count(0) == 0 || by_mode.count(1) == 0) continue;
      std::printf("  %2d writers: %8.0f vs %8.0f  ratio %.1fx\n", threads, by_mode.at(1),
                  by_mode.at(0), by_mode.at(1) / by_mode.at(0));
    }
  }

 private:
  std::map<int, std::map<int, double>> rates_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
