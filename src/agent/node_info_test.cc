#include "agent/node_info.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace aicloud::agent {
namespace {

const std::string kInventory = std::string(AICLOUD_SOURCE_DIR) + "/examples/inventory.yaml";
constexpr int64_t kGiB = int64_t{1} << 30;

TEST(NodeSpecFromInventory, DeclaredH100Server) {
  StatusOr<nlohmann::json> s = NodeSpecFromInventory(kInventory, "h100-0");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const nlohmann::json& j = *s;
  EXPECT_EQ(j["name"], "h100-0");
  EXPECT_EQ(j["cpuMillis"], 112000);
  EXPECT_EQ(j["memoryBytes"], 2048 * kGiB);
  EXPECT_EQ(j["rack"], "rack-a1");
  EXPECT_EQ(j["pool"], "training");
  EXPECT_EQ(j["unschedulable"], false);
  EXPECT_EQ(j["labels"], (nlohmann::json{{"zone", "a"}, {"accelerator", "h100"}}));
  EXPECT_EQ(j["taints"], nlohmann::json::parse(
                             R"([{"key":"dedicated","value":"training","effect":"NoSchedule"}])"));
  ASSERT_EQ(j["gpus"].size(), 8u);
  const int numa[] = {0, 0, 0, 0, 1, 1, 1, 1};
  const int pcie[] = {0, 0, 1, 1, 2, 2, 3, 3};
  for (int i = 0; i < 8; ++i) {
    const nlohmann::json& g = j["gpus"][i];
    SCOPED_TRACE(i);
    EXPECT_EQ(g["index"], i);
    EXPECT_EQ(g["model"], "H100-SXM");  // the inventory says "H100", an alias
    EXPECT_EQ(g["uuid"], "GPU-sim-h100-0-" + std::to_string(i));
    EXPECT_EQ(g["memoryBytes"], 80 * kGiB);
    EXPECT_EQ(g["numa"], numa[i]);
    EXPECT_EQ(g["pcieSwitch"], pcie[i]);
    EXPECT_EQ(g["migEnabled"], false);
    EXPECT_EQ(g["nvlinkDomain"], j["gpus"][0]["nvlinkDomain"]);  // nvlink: all
  }
  EXPECT_TRUE(j["gpus"][0]["nvlinkDomain"].is_number_integer());
}

TEST(NodeSpecFromInventory, TopologyAcrossNodes) {
  StatusOr<nlohmann::json> gb0 = NodeSpecFromInventory(kInventory, "gb200-0");
  StatusOr<nlohmann::json> gb17 = NodeSpecFromInventory(kInventory, "gb200-17");
  StatusOr<nlohmann::json> h0 = NodeSpecFromInventory(kInventory, "h100-0");
  StatusOr<nlohmann::json> h1 = NodeSpecFromInventory(kInventory, "h100-1");
  ASSERT_TRUE(gb0.ok() && gb17.ok() && h0.ok() && h1.ok());
  // The NVL72 rack is one NVLink domain; each H100 server is its own.
  EXPECT_EQ((*gb0)["gpus"][0]["nvlinkDomain"], (*gb17)["gpus"][3]["nvlinkDomain"]);
  EXPECT_NE((*h0)["gpus"][0]["nvlinkDomain"], (*h1)["gpus"][0]["nvlinkDomain"]);
  EXPECT_EQ((*gb17)["gpus"][3]["uuid"], "GPU-sim-gb200-17-3");
  EXPECT_EQ((*gb17)["gpus"][3]["model"], "GB200");
  EXPECT_EQ((*gb17)["gpus"][2]["numa"], 1);
  EXPECT_FALSE((*gb17)["gpus"][2].contains("pcieSwitch"));
  EXPECT_EQ((*gb17)["rack"], "rack-nvl72");
}

TEST(NodeSpecFromInventory, TaintWithoutValueAndCpuOnlyNode) {
  StatusOr<nlohmann::json> a = NodeSpecFromInventory(kInventory, "a100-0");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)["taints"][1],
            (nlohmann::json{{"key", "latency-sensitive"}, {"effect", "PreferNoSchedule"}}));
  EXPECT_EQ((*a)["gpus"][0]["model"], "A100-80GB");

  StatusOr<nlohmann::json> c = NodeSpecFromInventory(kInventory, "cpu-1");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)["cpuMillis"], 64000);
  EXPECT_EQ((*c)["memoryBytes"], 256 * kGiB);
  EXPECT_TRUE((*c)["gpus"].empty());
  EXPECT_FALSE(c->contains("rack"));
  EXPECT_FALSE(c->contains("pool"));
}

TEST(NodeSpecFromInventory, Errors) {
  const std::string dir = ::testing::TempDir();
  const std::string bad = dir + "/agent_bad_inventory.yaml";
  std::ofstream(bad) << "apiVersion: aicloud/v1\nkind: Inventory\nnodes:\n  - name: n\n    cpux: 4\n";
  const std::string single = dir + "/agent_single_inventory.yaml";
  std::ofstream(single) << "apiVersion: aicloud/v1\nkind: Inventory\nnodes:\n"
                           "  - name: solo\n    cpu: 4\n    memory: 16Gi\n"
                           "    gpus: {model: T4, count: 2}\n";
  struct Case {
    std::string file, node;
    StatusCode code;
    std::string in_message;
  };
  const Case cases[] = {
      {kInventory, "no-such-node", StatusCode::kNotFound, "no node named 'no-such-node'"},
      {kInventory, "", StatusCode::kInvalidArgument, "holds 23 nodes"},
      {dir + "/agent_missing.yaml", "n", StatusCode::kNotFound, "agent_missing.yaml"},
      {bad, "n", StatusCode::kInvalidArgument, "cpux"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file + " " + c.node);
    StatusOr<nlohmann::json> s = NodeSpecFromInventory(c.file, c.node);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), c.code) << s.status().ToString();
    EXPECT_NE(s.status().message().find(c.in_message), std::string::npos)
        << s.status().ToString();
  }
  StatusOr<nlohmann::json> s = NodeSpecFromInventory(single, "");  // the only node
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)["name"], "solo");
  EXPECT_EQ((*s)["gpus"][1]["model"], "T4");
  EXPECT_EQ((*s)["gpus"][1]["uuid"], "GPU-sim-solo-1");
  EXPECT_EQ((*s)["gpus"][1]["memoryBytes"], 16 * kGiB);
  std::filesystem::remove(bad);
  std::filesystem::remove(single);
}

TEST(NodeSpecFromDiscovery, CpuOnlyHost) {
  StatusOr<nlohmann::json> s = NodeSpecFromDiscovery(nullptr);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE((*s)["name"].get<std::string>().empty());
  const int64_t cpu = (*s)["cpuMillis"];
  EXPECT_GE(cpu, 1000);
  EXPECT_EQ(cpu % 1000, 0);
  EXPECT_GT((*s)["memoryBytes"].get<int64_t>(), 0);
  EXPECT_TRUE((*s)["gpus"].is_array());
  EXPECT_TRUE((*s)["gpus"].empty());
}

TEST(GpusFromDevices, ModelsAndNvlinkDomains) {
  std::vector<GpuInfo> devices(5);
  const char* names[] = {"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3",
                         "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA L4"};
  const std::vector<int> peers[] = {{1}, {0}, {3}, {2}, {}};
  for (int i = 0; i < 5; ++i) {
    devices[i].index = i;
    devices[i].name = names[i];
    devices[i].uuid = "GPU-" + std::to_string(i);
    devices[i].memory_bytes = 80 * kGiB;
    devices[i].numa_node = i < 2 ? 0 : -1;
    devices[i].pci_bus_id = "00000000:1" + std::to_string(i) + ":00.0";
    devices[i].nvlink_peers = peers[i];
  }
  devices[3].mig_enabled = true;
  nlohmann::json g = GpusFromDevices(devices);
  ASSERT_EQ(g.size(), 5u);
  EXPECT_EQ(g[0]["model"], "H100-SXM");
  EXPECT_EQ(g[0]["nvmlName"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g[4]["model"], "NVIDIA L4");  // not in the catalog: the product name
  EXPECT_EQ(g[0]["nvlinkDomain"], 0);
  EXPECT_EQ(g[1]["nvlinkDomain"], 0);
  EXPECT_EQ(g[2]["nvlinkDomain"], 2);
  EXPECT_EQ(g[3]["nvlinkDomain"], 2);
  EXPECT_FALSE(g[4].contains("nvlinkDomain"));
  EXPECT_EQ(g[0]["numa"], 0);
  EXPECT_FALSE(g[2].contains("numa"));
  EXPECT_EQ(g[3]["migEnabled"], true);
  EXPECT_EQ(g[1]["uuid"], "GPU-1");
  EXPECT_EQ(g[1]["pciBusId"], "00000000:11:00.0");
  EXPECT_EQ(g[1]["memoryBytes"], 80 * kGiB);
}

}  // namespace
}  // namespace aicloud::agent
