#include "cluster/openb.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace aicloud::cluster {
namespace {

const std::string kNodeList =
    std::string(AICLOUD_SOURCE_DIR) + "/data/traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv";

StatusOr<Cluster> ParseText(const std::string& text) {
  StatusOr<CsvTable> t = CsvTable::Parse(text, "nodes.csv");
  if (!t.ok()) return t.status();
  return ParseOpenbNodes(*t);
}

TEST(OpenbNodesTest, LoadsTheAlibabaGpuNodeList) {
  StatusOr<Cluster> c = LoadOpenbNodes(kNodeList);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->nodes().size(), 1213u);
  EXPECT_EQ(c->total_gpus(), 6212);
  EXPECT_EQ(c->allocated_gpu_milli(), 0);

  // GPUs per model, from the file (cut -d, -f5 | sort | uniq -c, weighted by the gpu column).
  std::map<std::string, int> nodes_per_model;
  for (const Node& n : c->nodes()) {
    ASSERT_NE(n.model, kNoModel) << n.name;
    ++nodes_per_model[c->model_name(n.model)];
    EXPECT_EQ(n.cpu_free_milli, n.cpu_milli) << n.name;
    EXPECT_EQ(n.mem_free_mib, n.mem_mib) << n.name;
  }
  const std::map<std::string, int> expected = {{"A10", 2},  {"G2", 549},     {"G3", 39},
                                               {"P100", 134}, {"T4", 404},   {"V100M16", 55},
                                               {"V100M32", 30}};
  EXPECT_EQ(nodes_per_model, expected);
  EXPECT_EQ(c->models().size(), 7u);

  const int32_t first = c->FindNode("openb-node-0000");
  ASSERT_GE(first, 0);
  const Node& n = c->node(first);
  EXPECT_EQ(c->model_name(n.model), "P100");
  EXPECT_EQ(n.cpu_milli, 64000);
  EXPECT_EQ(n.mem_mib, 262144);
  ASSERT_EQ(n.gpu_count(), 2);
  EXPECT_EQ(n.gpus[0].mem_mib, 16 * 1024) << "P100 memory from the catalog";
  EXPECT_EQ(n.gpus[0].mem_free_mib, 16 * 1024);
  EXPECT_EQ(n.gpus[0].numa, 0);
  EXPECT_EQ(n.gpus[1].numa, 1);
  EXPECT_TRUE(n.gpus[0].whole_free());

  // G2 is an undisclosed model: no catalog memory.
  for (const Node& g2 : c->nodes()) {
    if (c->model_name(g2.model) != "G2") continue;
    EXPECT_EQ(g2.gpus[0].mem_mib, 0);
    break;
  }
}

TEST(OpenbNodesTest, MissingFileIsNotFound) {
  StatusOr<Cluster> c = LoadOpenbNodes("/nonexistent/nodes.csv");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.status().message(), "/nonexistent/nodes.csv: cannot open file");
}

TEST(OpenbNodesTest, ParsesAValidTable) {
  StatusOr<Cluster> c = ParseText(
      "sn,cpu_milli,memory_mib,gpu,model\n"
      "a,96000,786432,8,V100M32\n"
      "b,32000,131072,0,\n"
      "c,8000,32768,1,T4\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->nodes().size(), 3u);
  EXPECT_EQ(c->total_gpus(), 9);
  const Node& a = c->node(c->FindNode("a"));
  EXPECT_EQ(c->model_name(a.model), "V100M32");
  EXPECT_EQ(a.gpus[0].mem_mib, 32 * 1024);
  EXPECT_EQ(a.gpus[3].numa, 0);
  EXPECT_EQ(a.gpus[4].numa, 1);
  const Node& b = c->node(c->FindNode("b"));
  EXPECT_EQ(b.model, kNoModel);
  EXPECT_TRUE(b.gpus.empty());
  EXPECT_EQ(b.cpu_free_milli, 32000);
}

struct MalformedCase {
  const char* name;
  const char* text;
  const char* message;
};

TEST(OpenbNodesTest, MalformedRowsNameFileLineAndColumn) {
  const MalformedCase cases[] = {
      {"missing column", "sn,cpu_milli,memory_mib,gpu\nn0,1000,1024,0\n",
       "nodes.csv:1: model: required column missing"},
      {"cpu not a number", "sn,cpu_milli,memory_mib,gpu,model\nn0,abc,1024,0,\n",
       "nodes.csv:2: cpu_milli: 'abc' is not an integer"},
      {"memory not a number", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,12x,0,\n",
       "nodes.csv:2: memory_mib: '12x' is not an integer"},
      {"gpu empty", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,,T4\n",
       "nodes.csv:2: gpu: empty, expected an integer"},
      {"negative cpu", "sn,cpu_milli,memory_mib,gpu,model\nn0,-1,1024,0,\n",
       "nodes.csv:2: cpu_milli: must be positive"},
      {"zero cpu", "sn,cpu_milli,memory_mib,gpu,model\nn0,0,1024,0,\n",
       "nodes.csv:2: cpu_milli: must be positive"},
      {"zero memory", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,0,0,\n",
       "nodes.csv:2: memory_mib: must be positive"},
      {"gpu above 64", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,65,T4\n",
       "nodes.csv:2: gpu: must be between 0 and 64"},
      {"negative gpu", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,-1,T4\n",
       "nodes.csv:2: gpu: must be between 0 and 64"},
      {"gpu without model", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,2,\n",
       "nodes.csv:2: model: GPU node without a model"},
      {"model without gpu", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,0,T4\n",
       "nodes.csv:2: model: model given for a node without GPUs"},
      {"duplicate node",
       "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,0,\nn1,1000,1024,0,\nn0,2000,1024,1,T4\n",
       "nodes.csv:4: sn: node 'n0' listed twice"},
      {"empty name", "sn,cpu_milli,memory_mib,gpu,model\n,1000,1024,0,\n",
       "nodes.csv:2: sn: empty node name"},
      {"line numbers count blank lines",
       "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,1,T4\n\n\nn1,1000,1024,1,\n",
       "nodes.csv:5: model: GPU node without a model"},
      {"wrong field count", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,0\n",
       "nodes.csv:2: expected 5 fields, found 4"},
  };
  for (const MalformedCase& tc : cases) {
    SCOPED_TRACE(tc.name);
    StatusOr<Cluster> c = ParseText(tc.text);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c.status().message(), tc.message);
  }
}

}  // namespace
}  // namespace aicloud::cluster
