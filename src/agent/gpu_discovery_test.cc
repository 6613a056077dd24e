#include "agent/gpu_discovery.h"

#include <gtest/gtest.h>

#include "cluster/catalog.h"

namespace aicloud::agent {
namespace {

TEST(GpuDiscovery, MissingLibraryIsUnavailable) {
  StatusOr<std::unique_ptr<GpuDiscovery>> d = GpuDiscovery::Open("libaicloud-no-nvml.so.1");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(d.status().message().rfind("NVML not found: libaicloud-no-nvml.so.1: ", 0), 0u)
      << d.status().message();
}

TEST(GpuDiscovery, LibraryWithoutNvmlSymbolsIsUnavailable) {
  StatusOr<std::unique_ptr<GpuDiscovery>> d = GpuDiscovery::Open("libm.so.6");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(d.status().message(), "NVML: nvmlInit_v2 missing in libm.so.6");
}

// On a machine without the NVIDIA driver this is UNAVAILABLE naming the library; on a GPU host
// it opens and reports real devices.
TEST(GpuDiscovery, DefaultLibrary) {
  StatusOr<std::unique_ptr<GpuDiscovery>> d = GpuDiscovery::Open();
  if (!d.ok()) {
    EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(d.status().message().find("libnvidia-ml.so.1"), std::string::npos)
        << d.status().message();
    return;
  }
  std::vector<GpuInfo> devices = (*d)->Devices();
  ASSERT_FALSE(devices.empty());
  for (const GpuInfo& g : devices) {
    EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u) << g.uuid;
    EXPECT_FALSE(g.name.empty());
    EXPECT_GT(g.memory_bytes, 0);
    EXPECT_FALSE(g.pci_bus_id.empty());
  }
  std::vector<GpuSample> samples = (*d)->Sample();
  ASSERT_EQ(samples.size(), devices.size());
  for (const GpuSample& s : samples) {
    EXPECT_GE(s.memory_used_bytes, 0);
    EXPECT_GE(s.utilization_pct, 0);
    EXPECT_LE(s.utilization_pct, 100);
  }
}

TEST(CatalogModelForNvmlName, RealProductNames) {
  const std::pair<const char*, const char*> cases[] = {
      {"NVIDIA H100 80GB HBM3", "H100-SXM"},
      {"NVIDIA H100 PCIe", "H100-PCIE"},
      {"NVIDIA H100 NVL", ""},
      {"NVIDIA H200", "H200"},
      {"NVIDIA H200 NVL", ""},
      {"NVIDIA B200", "B200"},
      {"NVIDIA GB200", "GB200"},
      {"NVIDIA GH200 480GB", ""},
      {"NVIDIA H800", ""},
      {"NVIDIA A100-SXM4-40GB", "A100-40GB"},
      {"NVIDIA A100-SXM4-80GB", "A100-80GB"},
      {"NVIDIA A100-PCIE-40GB", "A100-40GB"},
      {"NVIDIA A100 80GB PCIe", "A100-80GB"},
      {"A100-SXM4-40GB", "A100-40GB"},
      {"NVIDIA A10", "A10"},
      {"NVIDIA A10G", ""},
      {"NVIDIA L40S", "L40S"},
      {"NVIDIA L40", ""},
      {"NVIDIA L4", ""},
      {"NVIDIA GeForce RTX 4090", "RTX4090"},
      {"NVIDIA GeForce RTX 3090", ""},
      {"Tesla T4", "T4"},
      {"tesla t4", "T4"},
      {"Tesla V100-SXM2-16GB", "V100-16GB"},
      {"Tesla V100-SXM2-32GB", "V100-32GB"},
      {"Tesla V100-PCIE-32GB", "V100-32GB"},
      {"Tesla V100S-PCIE-32GB", ""},
      {"Tesla P100-PCIE-16GB", "P100"},
      {"Tesla P100-PCIE-12GB", ""},
      {"Tesla K80", ""},
      {"", ""},
  };
  for (const auto& [nvml, want] : cases) {
    EXPECT_EQ(CatalogModelForNvmlName(nvml), want) << nvml;
  }
}

TEST(CatalogModelForNvmlName, EveryAnswerIsACanonicalCatalogName) {
  for (const char* name :
       {"NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA B200", "NVIDIA GB200",
        "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A10", "NVIDIA L40S",
        "NVIDIA GeForce RTX 4090", "Tesla T4", "Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB",
        "Tesla P100-PCIE-16GB"}) {
    const std::string model = CatalogModelForNvmlName(name);
    const cluster::GpuModelSpec* spec = cluster::FindGpuModel(model);
    ASSERT_NE(spec, nullptr) << name << " -> " << model;
    EXPECT_EQ(spec->name, model) << name;
  }
}

}  // namespace
}  // namespace aicloud::agent
