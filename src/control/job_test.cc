#include "control/job.h"

#include <gtest/gtest.h>

namespace aicloud::control {
namespace {

using nlohmann::json;

TEST(JobSpecTest, ParsesTheThreeGpuForms) {
  StatusOr<JobSpec> whole = ParseJobSpec(json::parse(R"({"command": "x", "workers": 2,
      "resources": {"cpu": "2", "memory": "4Gi", "gpu": {"count": 4, "model": "H100", "topology": "nvlink"}}})"));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->gpu_kind, sched::GpuKind::kWhole);
  EXPECT_EQ(whole->gpu_count, 4);
  EXPECT_EQ(whole->gpu_models, std::vector<std::string>{"H100-SXM"});
  EXPECT_EQ(whole->topology, sched::Topology::kNvlink);
  EXPECT_EQ(whole->cpu_milli, 2000);
  EXPECT_EQ(whole->mem_mib, 4096);
  EXPECT_TRUE(whole->limits_given);
  EXPECT_DOUBLE_EQ(whole->GpusPerWorker(), 4);
  EXPECT_EQ(whole->argv, (std::vector<std::string>{"/bin/sh", "-c", "x"}));
  sched::PodRequest p = WorkerRequest(*whole, "t", "j", 1);
  EXPECT_EQ(p.name, "t/j/1");
  EXPECT_EQ(p.gang.name, "t/j");
  EXPECT_EQ(p.gang.size, 2);
  EXPECT_EQ(p.gang.min_available, 2);

  StatusOr<JobSpec> mig = ParseJobSpec(json::parse(R"({"command": ["a"], "resources": {"gpu": {"profile": "3g.40gb"}}})"));
  ASSERT_TRUE(mig.ok()) << mig.status();
  EXPECT_EQ(mig->gpu_kind, sched::GpuKind::kMig);
  EXPECT_NEAR(mig->GpusPerWorker(), 3.0 / 7, 1e-9);
  EXPECT_FALSE(mig->limits_given);

  StatusOr<JobSpec> frac = ParseJobSpec(json::parse(R"({"command": "a", "resources": {"gpu": {"fraction": 0.25, "memoryGiB": 10}}})"));
  ASSERT_TRUE(frac.ok()) << frac.status();
  EXPECT_EQ(frac->gpu_milli, 250);
  EXPECT_EQ(frac->gpu_mem_mib, 10240);
  EXPECT_TRUE(WorkerRequest(*frac, "t", "j", 0).gang.name.empty());
}

TEST(JobSpecTest, IsolationIsNoneUnlessNetworkIsAsked) {
  StatusOr<JobSpec> j = ParseJobSpec(json::parse(R"({"command": "x"})"));
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->isolation, "none");
  j = ParseJobSpec(json::parse(R"({"command": "x", "isolation": "network"})"));
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->isolation, "network");
  j = ParseJobSpec(json::parse(R"({"command": "x", "isolation": "host"})"));
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message(), "spec.isolation: \"host\" is not none or network");
}

// A workingDir is a plain absolute path: "." and ".." could lead the agent, which prepares a
// sandboxed job's directories as root, to its own work dir.
TEST(JobSpecTest, WorkingDirIsAPlainAbsolutePath) {
  StatusOr<JobSpec> j = ParseJobSpec(json::parse(R"({"command": "x", "workingDir": "/data/run1"})"));
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->working_dir, "/data/run1");
  for (const char* bad : {"/var/lib/aicloud/attempts/..", "/var/lib/aicloud/attempts/.", "relative/dir",
                          "/a/../b", "/a/./b"}) {
    j = ParseJobSpec(json{{"command", "x"}, {"workingDir", bad}});
    ASSERT_FALSE(j.ok()) << bad;
    EXPECT_EQ(j.status().message(),
              std::string("spec.workingDir: \"") + bad + "\" is not an absolute path without . or .. parts");
  }
}

TEST(JobSpecTest, RejectsImpossibleRequestsNamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"command": "x", "workers": 0})", "spec.workers"},
      {R"({"command": "x", "workers": 2, "minAvailable": 3})", "spec.minAvailable"},
      {R"({"command": ""})", "spec.command"},
      {R"({"command": "x", "resources": {"cpu": "lots"}})", "spec.resources.cpu"},
      {R"({"command": "x", "resources": {"memory": "12"}})", "spec.resources.memory"},
      {R"({"command": "x", "resources": {"gpu": {"count": 1, "fraction": 0.5}}})", "spec.resources.gpu"},
      {R"({"command": "x", "resources": {"gpu": {"count": 0}}})", "spec.resources.gpu.count"},
      {R"({"command": "x", "resources": {"gpu": {"count": 1, "model": "Z9000"}}})", "spec.resources.gpu.model"},
      {R"({"command": "x", "resources": {"gpu": {"profile": "5g.10gb"}}})", "spec.resources.gpu.profile"},
      {R"({"command": "x", "resources": {"gpu": {"fraction": 1.5}}})", "spec.resources.gpu.fraction"},
      {R"({"command": "x", "resources": {"gpu": {"count": 1, "topology": "moon"}}})", "spec.resources.gpu.topology"},
      {R"({"command": "x", "resources": {"gpu": {"profile": "1g.10gb", "topology": "node"}}})", "spec.resources.gpu.topology"},
      {R"({"command": "x", "restartPolicy": "Always"})", "spec.restartPolicy"},
      {R"({"command": "x", "maxRetries": -1})", "spec.maxRetries"},
      {R"({"command": "x", "env": {"AICLOUD_JOB": "y"}})", "spec.env.AICLOUD_JOB"},
      {R"({"command": "x", "isolation": "host"})", "spec.isolation"},
  };
  for (const auto& [text, field] : cases) {
    StatusOr<JobSpec> j = ParseJobSpec(json::parse(text));
    ASSERT_FALSE(j.ok()) << text;
    EXPECT_EQ(j.status().message().substr(0, field.size() + 1), field + ":") << j.status().message();
  }
}

}  // namespace
}  // namespace aicloud::control
