#include "cluster/inventory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

namespace aicloud::cluster {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Lines 1-2 of most test documents, so the line numbers below start counting at 3.
constexpr char kHeader[] = "apiVersion: aicloud/v1\nkind: Inventory\n";

std::string Doc(const std::string& body) { return kHeader + body; }

StatusOr<Cluster> Parse(const std::string& yaml) { return ParseInventory(yaml, "bad.yaml"); }

// --- Bad inputs: each must fail cleanly with the exact "file:line: field:" prefix -------------

struct BadCase {
  const char* name;
  std::string yaml;
  std::string prefix;  // expected start of the message
  std::string detail = "";  // expected somewhere in the message, when set
};

class BadInventoryTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadInventoryTest, FailsWithLocation) {
  const BadCase& c = GetParam();
  StatusOr<Cluster> got = Parse(c.yaml);
  ASSERT_FALSE(got.ok()) << c.yaml;
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), StartsWith(c.prefix));
  if (!c.detail.empty()) {
    EXPECT_THAT(got.status().message(), HasSubstr(c.detail));
  }
}

// A valid one-node body to mutate; line 3 is "nodes:", line 4 the node's name.
std::string OneNode(const std::string& extra) {
  return Doc("nodes:\n"
             "  - name: n0\n"
             "    cpu: 8\n"
             "    memory: 64Gi\n" +
             extra);
}

// A one-node body with 8 H100s; `gpu_extra` lines are appended to its gpus section (line 10 on).
std::string GpuNode(const std::string& gpu_extra) {
  return OneNode("    gpus:\n"           // line 7
                 "      model: H100\n"   // line 8
                 "      count: 8\n" +    // line 9
                 gpu_extra);
}

const BadCase kBadCases[] = {
    {"NotYamlUnclosedFlow", Doc("racks: [\n"), "bad.yaml:4: yaml: end of sequence flow not found"},
    {"NotYamlBadIndent", "apiVersion: aicloud/v1\n  kind: Inventory\n",
     "bad.yaml:2: yaml: illegal map value"},
    {"NotYamlTabIndent", Doc("nodes:\n\t- name: n0\n"), "bad.yaml:4: yaml: "},
    {"NotAMapping", "just some words\n", "bad.yaml:1: document: expected a mapping"},
    {"ListDocument", "- a\n- b\n", "bad.yaml:1: document: expected a mapping"},
    {"Empty", "", "bad.yaml:1: document: empty"},
    {"TwoDocuments", Doc("---\napiVersion: aicloud/v1\n"),
     "bad.yaml:3: document: expected one YAML document, but a second one starts here"},
    // yaml-cpp 0.7's LoadAll never returns on these (jbeder/yaml-cpp#1040).
    {"StrayComma", " ,\n", "bad.yaml:1: yaml: unexpected \",\""},
    {"StrayCommaAfterFields", Doc("# comment\n ,\nnodes: []\n"), "bad.yaml:"},
    {"WrongKind", "apiVersion: aicloud/v1\nkind: Deployment\n",
     "bad.yaml:2: kind: expected Inventory, got \"Deployment\""},
    {"WrongApiVersion", "apiVersion: aicloud/v2\nkind: Inventory\n",
     "bad.yaml:1: apiVersion: unsupported version"},
    {"MissingKind", "apiVersion: aicloud/v1\nnodes: []\n",
     "bad.yaml:1: kind: required field is missing"},
    {"UnknownTopLevelField", Doc("nodez: []\n"), "bad.yaml:3: nodez: unknown field"},
    {"UnknownNodeField", OneNode("    gpuz: 8\n"), "bad.yaml:7: nodes[0].gpuz: unknown field",
     "known fields: name, namePrefix"},
    {"UnknownGpuField", GpuNode("      nvlnk: all\n"),
     "bad.yaml:10: nodes[0].gpus.nvlnk: unknown field"},
    {"UnknownRackField", Doc("racks:\n  - name: r\n    power: 3\n"),
     "bad.yaml:5: racks[0].power: unknown field"},
    {"RepeatedField", OneNode("    cpu: 16\n"),
     "bad.yaml:7: nodes[0].cpu: field given more than once"},
    {"NodesNotAList", Doc("nodes: {a: 1}\n"), "bad.yaml:3: nodes: expected a list, got a mapping"},
    {"MissingName", Doc("nodes:\n  - cpu: 4\n    memory: 1Gi\n"),
     "bad.yaml:4: nodes[0].name: required field is missing"},
    {"InvalidName", Doc("nodes:\n  - name: \"my node\"\n    cpu: 4\n    memory: 1Gi\n"),
     "bad.yaml:4: nodes[0].name: invalid name \"my node\""},
    {"MissingCpu", Doc("nodes:\n  - name: n0\n    memory: 1Gi\n"),
     "bad.yaml:4: nodes[0].cpu: required field is missing"},
    {"DuplicateNodeName",
     Doc("nodes:\n  - {name: n0, cpu: 1, memory: 1Gi}\n  - {name: n0, cpu: 1, memory: 1Gi}\n"),
     "bad.yaml:5: nodes[1].name: duplicate node name \"n0\" (first defined at line 4)"},
    {"DuplicateNameViaReplicas",
     Doc("nodes:\n  - {name: t4-1, cpu: 1, memory: 1Gi}\n"
         "  - {namePrefix: t4-, replicas: 3, cpu: 1, memory: 1Gi}\n"),
     "bad.yaml:5: nodes[1].namePrefix: duplicate node name \"t4-1\""},
    {"NameAndPrefix",
     Doc("nodes:\n  - {name: a, namePrefix: b, replicas: 2, cpu: 1, memory: 1Gi}\n"),
     "bad.yaml:4: nodes[0].namePrefix: give either name or namePrefix"},
    {"PrefixWithoutReplicas", Doc("nodes:\n  - {namePrefix: b-, cpu: 1, memory: 1Gi}\n"),
     "bad.yaml:4: nodes[0].replicas: required with namePrefix"},
    {"ZeroReplicas", Doc("nodes:\n  - {namePrefix: b-, replicas: 0, cpu: 1, memory: 1Gi}\n"),
     "bad.yaml:4: nodes[0].replicas: must be between 1 and 100000, got 0"},
    {"NegativeCpu", Doc("nodes:\n  - name: n0\n    cpu: -4\n    memory: 1Gi\n"),
     "bad.yaml:5: nodes[0].cpu: must be positive"},
    {"ZeroCpu", Doc("nodes:\n  - name: n0\n    cpu: 0\n    memory: 1Gi\n"),
     "bad.yaml:5: nodes[0].cpu: must be positive"},
    {"NonNumericCpu", Doc("nodes:\n  - name: n0\n    cpu: lots\n    memory: 1Gi\n"),
     "bad.yaml:5: nodes[0].cpu: not a CPU quantity \"lots\""},
    {"CpuAsList", Doc("nodes:\n  - name: n0\n    cpu: [4]\n    memory: 1Gi\n"),
     "bad.yaml:5: nodes[0].cpu: expected a CPU quantity, got a list"},
    {"BadMemorySuffix", Doc("nodes:\n  - name: n0\n    cpu: 4\n    memory: 16GB\n"),
     "bad.yaml:6: nodes[0].memory: bad memory quantity \"16GB\""},
    {"BareMemoryNumber", Doc("nodes:\n  - name: n0\n    cpu: 4\n    memory: 1024\n"),
     "bad.yaml:6: nodes[0].memory: bad memory quantity \"1024\""},
    {"NegativeMemory", Doc("nodes:\n  - name: n0\n    cpu: 4\n    memory: -1Gi\n"),
     "bad.yaml:6: nodes[0].memory: must be positive"},
    {"UnknownGpuModel", OneNode("    gpus: {model: Z9000, count: 2}\n"),
     "bad.yaml:7: nodes[0].gpus.model: unknown GPU model \"Z9000\""},
    {"MissingGpuModel", OneNode("    gpus:\n      count: 2\n"),
     "bad.yaml:8: nodes[0].gpus.model: required field is missing"},
    {"GpuCountZero", OneNode("    gpus:\n      model: H100\n      count: 0\n"),
     "bad.yaml:9: nodes[0].gpus.count: must be between 1 and 64, got 0"},
    {"GpuCountTooMany", OneNode("    gpus:\n      model: H100\n      count: 65\n"),
     "bad.yaml:9: nodes[0].gpus.count: must be between 1 and 64, got 65"},
    {"GpuCountNotInteger", OneNode("    gpus:\n      model: H100\n      count: 8.5\n"),
     "bad.yaml:9: nodes[0].gpus.count: not an integer: \"8.5\""},
    {"NvlinkIndexOutOfRange", GpuNode("      nvlink: [[0, 1, 2, 3], [4, 5, 6, 8]]\n"),
     "bad.yaml:10: nodes[0].gpus.nvlink[1][3]: GPU index 8 out of range"},
    {"NvlinkIndexTwice", GpuNode("      nvlink:\n        - [0, 1]\n        - [1, 2]\n"),
     "bad.yaml:12: nodes[0].gpus.nvlink[1][0]: GPU 1 is already in an NVLink group"},
    {"NvlinkEmptyGroup", GpuNode("      nvlink: [[0, 1], []]\n"),
     "bad.yaml:10: nodes[0].gpus.nvlink[1]: empty NVLink group"},
    {"NvlinkBadWord", GpuNode("      nvlink: some\n"),
     "bad.yaml:10: nodes[0].gpus.nvlink: expected all, none or a list"},
    {"NumaLengthMismatch", GpuNode("      numa: [0, 0, 1, 1]\n"),
     "bad.yaml:10: nodes[0].gpus.numa: has 4 entries but count is 8"},
    {"NumaNegative", GpuNode("      numa: [0, 0, 0, 0, 1, 1, 1, -1]\n"),
     "bad.yaml:10: nodes[0].gpus.numa[7]: must be between 0 and 1023, got -1"},
    {"PcieLengthMismatch", GpuNode("      pcieSwitch: [0]\n"),
     "bad.yaml:10: nodes[0].gpus.pcieSwitch: has 1 entries but count is 8"},
    {"BadGpuMemory", GpuNode("      memory: 80\n"),
     "bad.yaml:10: nodes[0].gpus.memory: bad memory quantity \"80\""},
    {"UnknownRack", OneNode("    rack: rack-zz\n"),
     "bad.yaml:7: nodes[0].rack: unknown rack \"rack-zz\""},
    {"BadTaintEffect", OneNode("    taints:\n      - {key: a, effect: NoPlease}\n"),
     "bad.yaml:8: nodes[0].taints[0].effect: must be NoSchedule, PreferNoSchedule or NoExecute"},
    {"TaintWithoutKey", OneNode("    taints:\n      - {value: a}\n"),
     "bad.yaml:8: nodes[0].taints[0].key: required field is missing"},
    {"RepeatedTaint", OneNode("    taints: [{key: a}, {key: a, value: b}]\n"),
     "bad.yaml:7: nodes[0].taints[1]: taint a:NoSchedule given more than once"},
    {"LabelsNotAMap", OneNode("    labels: [a, b]\n"),
     "bad.yaml:7: nodes[0].labels: expected a mapping, got a list"},
    {"BadUnschedulable", OneNode("    unschedulable: maybe\n"),
     "bad.yaml:7: nodes[0].unschedulable: expected true or false"},
    {"DuplicateRack", Doc("racks:\n  - name: r\n  - name: r\n"),
     "bad.yaml:5: racks[1].name: duplicate rack name \"r\" (first defined at line 4)"},
    {"BadCooling", Doc("racks:\n  - name: r\n    cooling: water\n"),
     "bad.yaml:5: racks[0].cooling: must be air or liquid"},
    {"NegativePower", Doc("racks:\n  - name: r\n    powerBudgetKW: -1\n"),
     "bad.yaml:5: racks[0].powerBudgetKW: must be 0 (unlimited) or more"},
    {"NonNumericPower", Doc("racks:\n  - name: r\n    powerBudgetKW: lots\n"),
     "bad.yaml:5: racks[0].powerBudgetKW: not a number"},
    {"NvlinkNoneInNvlinkRack",
     Doc("racks:\n  - {name: r, nvlinkDomain: true}\n"
         "nodes:\n  - name: n0\n    rack: r\n    cpu: 8\n    memory: 8Gi\n"
         "    gpus: {model: GB200, count: 4, nvlink: none}\n"),
     "bad.yaml:10: nodes[0].gpus.nvlink: rack \"r\" is one NVLink domain"},
};

INSTANTIATE_TEST_SUITE_P(Inventory, BadInventoryTest, ::testing::ValuesIn(kBadCases),
                         [](const ::testing::TestParamInfo<BadCase>& param_info) {
                           return std::string(param_info.param.name);
                         });

// Garbage of every kind must come back as a Status, never an exception or a crash.
TEST(InventoryTest, GarbageNeverThrows) {
  const std::vector<std::string> inputs = {
      std::string("\0\1\2\3", 4), "{{{{", "]]]]", "- - - -", "&a [*a]", "*unknown",
      "apiVersion: !!binary ZZZ\nkind: Inventory\n", std::string(5000, '['),
      "apiVersion: aicloud/v1\nkind: Inventory\nnodes: [[1], {}]\n",
      "apiVersion: aicloud/v1\nkind: Inventory\nnodes:\n  - {? [a]: b}\n",
      "apiVersion: aicloud/v1\nkind: Inventory\nnodes:\n  - {name: [x], cpu: 1, memory: 1Gi}\n",
      "apiVersion: aicloud/v1\nkind: Inventory\nracks: [{name: r, nvlinkDomain: {a: b}}]\n"};
  for (const std::string& in : inputs) {
    StatusOr<Cluster> got = Parse(in);
    EXPECT_FALSE(got.ok()) << in;
    EXPECT_THAT(got.status().message(), StartsWith("bad.yaml:")) << in;
  }
}

TEST(InventoryTest, MissingFileIsNotFound) {
  StatusOr<Cluster> got = LoadInventoryFile("/nonexistent/inventory.yaml");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), StartsWith("/nonexistent/inventory.yaml: cannot open"));
}

TEST(InventoryTest, DirectoryIsRejected) {
  StatusOr<Cluster> got = LoadInventoryFile(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
}

// --- The shipped example -----------------------------------------------------------------------

TEST(InventoryTest, ExampleLoads) {
  const std::string path = std::string(AICLOUD_SOURCE_DIR) + "/examples/inventory.yaml";
  StatusOr<Cluster> got = LoadInventoryFile(path);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const Cluster& c = *got;

  ASSERT_EQ(c.racks().size(), 2u);
  EXPECT_EQ(c.racks()[0].name, "rack-nvl72");
  EXPECT_EQ(c.racks()[0].cooling, "liquid");
  EXPECT_DOUBLE_EQ(c.racks()[0].power_budget_kw, 132);
  EXPECT_EQ(c.racks()[1].cooling, "air");
  EXPECT_NE(c.racks()[0].leaf_switch, c.racks()[1].leaf_switch);

  EXPECT_EQ(c.nodes().size(), 23u);
  EXPECT_EQ(c.total_gpus(), 96);

  // The NVL72 rack is one domain of 72 GPUs; each 8-GPU server is its own domain.
  std::map<int32_t, int> domain_size;
  for (const Node& n : c.nodes()) {
    for (const Gpu& g : n.gpus) {
      ASSERT_GE(g.nvlink_domain, 0) << n.name;
      ++domain_size[g.nvlink_domain];
    }
  }
  EXPECT_EQ(domain_size.size(), 4u);
  std::multiset<int> sizes;
  for (const auto& [id, size] : domain_size) sizes.insert(size);
  EXPECT_EQ(sizes, (std::multiset<int>{8, 8, 8, 72}));

  const int32_t gb0 = c.FindNode("gb200-0");
  const int32_t gb17 = c.FindNode("gb200-17");
  ASSERT_GE(gb0, 0);
  ASSERT_GE(gb17, 0);
  EXPECT_EQ(c.FindNode("gb200-18"), -1);
  const Node& tray = c.node(gb0);
  EXPECT_EQ(c.model_name(tray.model), "GB200");
  EXPECT_EQ(tray.gpu_count(), 4);
  EXPECT_EQ(tray.gpus[0].nvlink_domain, c.node(gb17).gpus[3].nvlink_domain);
  EXPECT_EQ(tray.rack, 0);
  EXPECT_EQ(tray.leaf_switch, c.racks()[0].leaf_switch);
  EXPECT_EQ(tray.pool, "training");
  EXPECT_EQ(tray.cpu_milli, 144000);
  EXPECT_EQ(tray.mem_mib, 960 * 1024);
  EXPECT_EQ(tray.labels.at("accelerator"), "gb200");
  ASSERT_EQ(tray.taints.size(), 1u);
  EXPECT_EQ(tray.taints[0].key, "dedicated");
  EXPECT_EQ(tray.taints[0].value, "training");
  EXPECT_EQ(tray.taints[0].effect, "NoSchedule");
  EXPECT_EQ(tray.gpus[1].numa, 0);
  EXPECT_EQ(tray.gpus[2].numa, 1);

  const Node& h100 = c.node(c.FindNode("h100-0"));
  EXPECT_EQ(c.model_name(h100.model), "H100-SXM");  // the alias "H100" resolves to the canonical
  EXPECT_EQ(h100.model, c.node(c.FindNode("h100-1")).model);
  EXPECT_EQ(h100.gpus[0].mem_mib, 80 * 1024);
  EXPECT_EQ(h100.gpus[0].mem_free_mib, 80 * 1024);
  EXPECT_EQ(h100.gpus[5].pcie_switch, 2);
  EXPECT_EQ(h100.gpus[3].numa, 0);
  EXPECT_EQ(h100.gpus[4].numa, 1);
  EXPECT_NE(h100.gpus[0].nvlink_domain, c.node(c.FindNode("h100-1")).gpus[0].nvlink_domain);

  const Node& a100 = c.node(c.FindNode("a100-0"));
  EXPECT_EQ(c.model_name(a100.model), "A100-80GB");
  EXPECT_EQ(a100.pool, "inference");
  ASSERT_EQ(a100.taints.size(), 2u);
  EXPECT_EQ(a100.taints[1].effect, "PreferNoSchedule");
  EXPECT_EQ(a100.rack, 1);

  const Node& cpu0 = c.node(c.FindNode("cpu-0"));
  const Node& cpu1 = c.node(c.FindNode("cpu-1"));
  EXPECT_EQ(cpu0.model, kNoModel);
  EXPECT_TRUE(cpu0.gpus.empty());
  EXPECT_EQ(cpu0.rack, -1);
  EXPECT_GE(cpu0.leaf_switch, 0);
  EXPECT_EQ(cpu0.leaf_switch, cpu1.leaf_switch);
  EXPECT_NE(cpu0.leaf_switch, c.racks()[1].leaf_switch);
  EXPECT_EQ(cpu0.pool, "");
  EXPECT_EQ(cpu0.cpu_milli, cpu1.cpu_milli);
  EXPECT_EQ(cpu0.mem_mib, cpu1.mem_mib);
  EXPECT_EQ(cpu0.cpu_free_milli, 64000);
  EXPECT_FALSE(cpu1.unschedulable);
}

// --- Features ----------------------------------------------------------------------------------

TEST(InventoryTest, ReplicasExpandWithOwnNvlinkDomains) {
  StatusOr<Cluster> got = Parse(Doc("nodes:\n"
                                    "  - namePrefix: t4-\n"
                                    "    replicas: 4\n"
                                    "    cpu: 16\n"
                                    "    memory: 64Gi\n"
                                    "    pool: inference\n"
                                    "    gpus: {model: t4, count: 2, nvlink: all}\n"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const Cluster& c = *got;
  ASSERT_EQ(c.nodes().size(), 4u);
  std::set<int32_t> domains;
  for (int i = 0; i < 4; ++i) {
    const Node& n = c.node(i);
    EXPECT_EQ(n.name, "t4-" + std::to_string(i));
    EXPECT_EQ(n.id, i);
    EXPECT_EQ(n.pool, "inference");
    EXPECT_EQ(c.model_name(n.model), "T4");  // lookup is case-insensitive
    ASSERT_EQ(n.gpu_count(), 2);
    EXPECT_EQ(n.gpus[0].nvlink_domain, n.gpus[1].nvlink_domain);
    domains.insert(n.gpus[0].nvlink_domain);
  }
  EXPECT_EQ(domains.size(), 4u);  // cluster-wide unique, one per node
  EXPECT_EQ(c.models().size(), 1u);
}

TEST(InventoryTest, MemoryUnits) {
  StatusOr<Cluster> got = Parse(Doc("nodes:\n"
                                    "  - {name: a, cpu: 1, memory: 1048576Ki}\n"
                                    "  - {name: b, cpu: 1, memory: 512Mi}\n"
                                    "  - {name: c, cpu: 1, memory: 1.5Gi}\n"
                                    "  - {name: d, cpu: 1, memory: 2Ti}\n"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->node(0).mem_mib, 1024);
  EXPECT_EQ(got->node(1).mem_mib, 512);
  EXPECT_EQ(got->node(2).mem_mib, 1536);
  EXPECT_EQ(got->node(3).mem_mib, 2 * 1024 * 1024);
}

TEST(InventoryTest, ParseMemoryMib) {
  struct Case {
    const char* in;
    int64_t mib;
  };
  for (const Case& c : std::vector<Case>{{"1Mi", 1},
                                         {"1024Ki", 1},
                                         {"1536Ki", 1},  // rounded down to whole MiB
                                         {"80Gi", 81920},
                                         {"0.5Gi", 512},
                                         {"1.5Ti", 1572864},
                                         {"1Pi", int64_t{1} << 30},
                                         {"186.000001Gi", 190464}}) {
    StatusOr<int64_t> got = ParseMemoryMib(c.in);
    ASSERT_TRUE(got.ok()) << c.in << ": " << got.status().ToString();
    EXPECT_EQ(*got, c.mib) << c.in;
  }
  for (const char* bad : {"", "1Ki", "0Gi", "1G", "1GB", "1024", "-1Gi", "Gi", "1.Gi", ".5Gi",
                          "1e3Gi", "abc", "1 Gi", "1gi", "99999999999999Pi", "0.0000001Gi"}) {
    EXPECT_FALSE(ParseMemoryMib(bad).ok()) << bad;
  }
}

TEST(InventoryTest, ParseCpuMilli) {
  EXPECT_EQ(*ParseCpuMilli("96"), 96000);
  EXPECT_EQ(*ParseCpuMilli("0.5"), 500);
  EXPECT_EQ(*ParseCpuMilli("1.25"), 1250);
  EXPECT_EQ(*ParseCpuMilli("96000m"), 96000);
  EXPECT_EQ(*ParseCpuMilli("250m"), 250);
  for (const char* bad : {"", "0", "0m", "-1", "-500m", "0.0005", "1.5m", "m", "1e3", "lots",
                          "4 cores", "0x10", ".5", "5."}) {
    EXPECT_FALSE(ParseCpuMilli(bad).ok()) << bad;
  }
  EXPECT_THAT(ParseCpuMilli("0.0005").status().message(), StartsWith("finer than a millicore"));
  EXPECT_THAT(ParseCpuMilli("lots").status().message(), StartsWith("not a CPU quantity"));
}

TEST(InventoryTest, UnknownModelWithExplicitMemory) {
  StatusOr<Cluster> got = Parse(Doc("nodes:\n"
                                    "  - name: n0\n"
                                    "    cpu: 8\n"
                                    "    memory: 64Gi\n"
                                    "    gpus: {model: Gaudi3, count: 8, memory: 128Gi}\n"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const Node& n = got->node(0);
  EXPECT_EQ(got->model_name(n.model), "Gaudi3");
  EXPECT_EQ(n.gpus[7].mem_mib, 128 * 1024);
  // Not in the catalog, so nothing says it has NVLink: none unless the file says so.
  EXPECT_EQ(n.gpus[0].nvlink_domain, -1);
}

TEST(InventoryTest, ExplicitMemoryOverridesCatalog) {
  StatusOr<Cluster> got =
      Parse(Doc("nodes:\n  - {name: n0, cpu: 8, memory: 64Gi, "
                "gpus: {model: H100, count: 1, memory: 94Gi}}\n"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->model_name(got->node(0).model), "H100-SXM");
  EXPECT_EQ(got->node(0).gpus[0].mem_mib, 94 * 1024);
}

TEST(InventoryTest, NvlinkGroupsAndDefaults) {
  StatusOr<Cluster> got = Parse(Doc("nodes:\n"
                                    "  - name: grouped\n"
                                    "    cpu: 8\n"
                                    "    memory: 64Gi\n"
                                    "    gpus:\n"
                                    "      model: A100\n"
                                    "      count: 8\n"
                                    "      nvlink: [[0, 1, 2], [5, 4]]\n"
                                    "  - {name: unlinked, cpu: 8, memory: 64Gi,"
                                    " gpus: {model: H100, count: 8, nvlink: none}}\n"
                                    "  - {name: pcie, cpu: 8, memory: 64Gi,"
                                    " gpus: {model: H100-PCIE, count: 4}}\n"
                                    "  - {name: l40s, cpu: 8, memory: 64Gi,"
                                    " gpus: {model: L40S, count: 3}}\n"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const Node& g = got->node(0);
  EXPECT_GE(g.gpus[0].nvlink_domain, 0);
  EXPECT_EQ(g.gpus[0].nvlink_domain, g.gpus[2].nvlink_domain);
  EXPECT_EQ(g.gpus[4].nvlink_domain, g.gpus[5].nvlink_domain);
  EXPECT_NE(g.gpus[0].nvlink_domain, g.gpus[4].nvlink_domain);
  EXPECT_EQ(g.gpus[3].nvlink_domain, -1);
  EXPECT_EQ(g.gpus[6].nvlink_domain, -1);
  for (const Gpu& gpu : got->node(1).gpus) EXPECT_EQ(gpu.nvlink_domain, -1);
  // H100 PCIe cards pair over bridges (catalog: 2 per domain).
  const Node& p = got->node(2);
  EXPECT_EQ(p.gpus[0].nvlink_domain, p.gpus[1].nvlink_domain);
  EXPECT_EQ(p.gpus[2].nvlink_domain, p.gpus[3].nvlink_domain);
  EXPECT_NE(p.gpus[0].nvlink_domain, p.gpus[2].nvlink_domain);
  EXPECT_NE(p.gpus[0].nvlink_domain, g.gpus[0].nvlink_domain);
  for (const Gpu& gpu : got->node(3).gpus) EXPECT_EQ(gpu.nvlink_domain, -1);
  // Default NUMA: first half on 0, second half on 1; PCIe switch unknown.
  EXPECT_EQ(got->node(3).gpus[0].numa, 0);
  EXPECT_EQ(got->node(3).gpus[1].numa, 0);
  EXPECT_EQ(got->node(3).gpus[2].numa, 1);
  EXPECT_EQ(got->node(3).gpus[0].pcie_switch, -1);
}

TEST(InventoryTest, NvlinkRackSharesOneDomainAcrossEntries) {
  StatusOr<Cluster> got = Parse(Doc("racks:\n"
                                    "  - {name: nvl, nvlinkDomain: true, leafSwitch: leaf-9}\n"
                                    "  - {name: other, nvlinkDomain: false}\n"
                                    "nodes:\n"
                                    "  - {namePrefix: a-, replicas: 2, rack: nvl, cpu: 8,"
                                    " memory: 8Gi, gpus: {model: GB200, count: 4}}\n"
                                    "  - {name: b, rack: nvl, cpu: 8, memory: 8Gi,"
                                    " gpus: {model: GB200, count: 4, nvlink: all}}\n"
                                    "  - {name: c, rack: other, cpu: 8, memory: 8Gi,"
                                    " gpus: {model: GB200, count: 4}}\n"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const Cluster& c = *got;
  const int32_t d = c.node(0).gpus[0].nvlink_domain;
  EXPECT_GE(d, 0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c.node(i).leaf_switch, c.racks()[0].leaf_switch);
    for (const Gpu& g : c.node(i).gpus) EXPECT_EQ(g.nvlink_domain, d);
  }
  // Outside the NVLink rack a GB200 node is its own domain.
  EXPECT_NE(c.node(3).gpus[0].nvlink_domain, d);
  EXPECT_EQ(c.node(3).gpus[0].nvlink_domain, c.node(3).gpus[3].nvlink_domain);
  EXPECT_EQ(c.node(3).leaf_switch, -1);
}

TEST(InventoryTest, EmptyInventoryAndNulls) {
  StatusOr<Cluster> got = Parse(Doc("racks:\nnodes: []\n"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->nodes().empty());
  EXPECT_TRUE(got->racks().empty());
}

TEST(InventoryTest, LabelsAndTaintDefaults) {
  StatusOr<Cluster> got = Parse(Doc("nodes:\n"
                                    "  - name: n0\n"
                                    "    cpu: 2\n"
                                    "    memory: 4Gi\n"
                                    "    unschedulable: true\n"
                                    "    labels: {zone: b, gpu: \"no\", empty: }\n"
                                    "    taints: [{key: maintenance}]\n"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const Node& n = got->node(0);
  EXPECT_TRUE(n.unschedulable);
  EXPECT_EQ(n.labels.at("zone"), "b");
  EXPECT_EQ(n.labels.at("gpu"), "no");
  EXPECT_EQ(n.labels.at("empty"), "");
  ASSERT_EQ(n.taints.size(), 1u);
  EXPECT_EQ(n.taints[0].value, "");
  EXPECT_EQ(n.taints[0].effect, "NoSchedule");
}

}  // namespace
}  // namespace aicloud::cluster
