#include "agent/host_metrics.h"

#include <gtest/gtest.h>

namespace aicloud::agent {
namespace {

TEST(HostMetrics, ParseProcStat) {
  const char* stat =
      "cpu  100 5 50 800 40 3 2 0 10 0\n"
      "cpu0 50 2 25 400 20 1 1 0 5 0\n"
      "intr 12345\n";
  StatusOr<CpuTimes> t = ParseProcStat(stat);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->busy, 100u + 5 + 50 + 3 + 2 + 0);  // guest is already inside user
  EXPECT_EQ(t->total, t->busy + 800 + 40);

  for (const char* bad : {"", "cpu0 1 2 3 4\n", "cpu  1 2\n", "cpu  x y z w\n"}) {
    EXPECT_EQ(ParseProcStat(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(HostMetrics, CpuUtilizationTable) {
  struct Case {
    CpuTimes before, after;
    double want;
  };
  const Case cases[] = {
      {{0, 0}, {50, 100}, 50},
      {{100, 1000}, {100, 1100}, 0},    // idle
      {{100, 1000}, {200, 1100}, 100},  // fully busy
      {{100, 1000}, {100, 1000}, 0},    // no ticks passed
      {{500, 1000}, {100, 900}, 0},     // counters went backwards (new boot)
  };
  for (const Case& c : cases) {
    EXPECT_DOUBLE_EQ(CpuUtilizationPct(c.before, c.after), c.want);
  }
}

TEST(HostMetrics, ParseMeminfo) {
  StatusOr<std::pair<int64_t, int64_t>> m = ParseMeminfo(
      "MemTotal:       16384 kB\nMemFree:  1024 kB\nMemAvailable:   8192 kB\nBuffers: 1 kB\n");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->first, 16384 * 1024);
  EXPECT_EQ(m->second, 8192 * 1024);
  // Old kernels: no MemAvailable.
  m = ParseMeminfo("MemTotal: 100 kB\nMemFree: 10 kB\nBuffers: 5 kB\nCached: 20 kB\n");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->second, 35 * 1024);
  EXPECT_EQ(ParseMeminfo("MemFree: 10 kB\n").status().code(), StatusCode::kInvalidArgument);
}

TEST(HostMetrics, ParseLoadavg) {
  StatusOr<HostSample> s = ParseLoadavg("0.42 1.50 2.00 3/456 7890\n");
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->load1, 0.42);
  EXPECT_DOUBLE_EQ(s->load5, 1.5);
  EXPECT_DOUBLE_EQ(s->load15, 2.0);
  EXPECT_FALSE(ParseLoadavg("garbage").ok());
}

TEST(HostMetrics, LiveSample) {
  HostMetrics host;
  // Burn a little CPU so the interval has ticks.
  volatile double x = 0;
  for (int i = 0; i < 20'000'000; ++i) x = x + i * 0.5;
  StatusOr<HostSample> s = host.Sample();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_GE(s->cpu_utilization_pct, 0);
  EXPECT_LE(s->cpu_utilization_pct, 100);
  EXPECT_GT(s->memory_total_bytes, 0);
  EXPECT_GT(s->memory_available_bytes, 0);
  EXPECT_LE(s->memory_available_bytes, s->memory_total_bytes);
  EXPECT_GE(s->load1, 0);
  s = host.Sample();
  ASSERT_TRUE(s.ok());
  EXPECT_GE(s->cpu_utilization_pct, 0);
  EXPECT_LE(s->cpu_utilization_pct, 100);

  HostMetrics missing("/nonexistent-proc");
  EXPECT_EQ(missing.Sample().status().code(), StatusCode::kNotFound);
}

TEST(HostMetrics, PayloadUsesExporterNames) {
  HostSample h;
  h.cpu_utilization_pct = 12.5;
  h.memory_total_bytes = 1000;
  h.memory_available_bytes = 400;
  h.load1 = 0.5;
  GpuSample full;
  full.index = 0;
  full.utilization_pct = 97;
  full.memory_used_bytes = 40.0 * 1024 * 1024 * 1024;
  full.temperature_c = 61;
  full.power_w = 612.5;
  GpuSample partial;
  partial.index = 1;
  partial.utilization_pct = 3;
  nlohmann::json p = MetricsPayload(h, {full, partial});
  EXPECT_EQ(p["host"]["node_cpu_utilization"], 12.5);
  EXPECT_EQ(p["host"]["node_memory_MemTotal_bytes"], 1000);
  EXPECT_EQ(p["host"]["node_memory_MemAvailable_bytes"], 400);
  EXPECT_EQ(p["host"]["node_load1"], 0.5);
  ASSERT_EQ(p["gpus"].size(), 2u);
  EXPECT_EQ(p["gpus"][0]["index"], 0);
  EXPECT_EQ(p["gpus"][0]["DCGM_FI_DEV_GPU_UTIL"], 97);
  EXPECT_EQ(p["gpus"][0]["DCGM_FI_DEV_FB_USED"], 40960);  // MiB
  EXPECT_EQ(p["gpus"][0]["DCGM_FI_DEV_GPU_TEMP"], 61);
  EXPECT_EQ(p["gpus"][0]["DCGM_FI_DEV_POWER_USAGE"], 612.5);
  EXPECT_EQ(p["gpus"][1], (nlohmann::json{{"index", 1}, {"DCGM_FI_DEV_GPU_UTIL", 3}}));
  EXPECT_TRUE(MetricsPayload(h, {})["gpus"].is_array());
}

}  // namespace
}  // namespace aicloud::agent
