#include "control/manifest.h"

#include <gtest/gtest.h>

namespace aicloud::control {
namespace {

TEST(ManifestTest, ParsesAYamlStreamWithCoreSchemaTypes) {
  StatusOr<std::vector<Manifest>> docs = ParseManifests(R"(apiVersion: aicloud/v1
kind: Tenant
metadata: {name: nlp}
spec: {sleeping: false, maxGpusPerJob: 8}
---
# a comment
apiVersion: aicloud/v1
kind: Job
metadata:
  name: train
  tenant: nlp
spec:
  workers: 2
  command: "echo 3"
  env: {N: "3", M: '4'}
  resources: {cpu: 500m, memory: 1Gi, gpu: {fraction: 0.5}}
---
)", "m.yaml");
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[0].object["spec"]["maxGpusPerJob"], 8);
  EXPECT_EQ((*docs)[0].object["spec"]["sleeping"], false);
  EXPECT_EQ((*docs)[1].line, 5);  // the "---" that opens it
  const json& job = (*docs)[1].object;
  EXPECT_EQ(job["spec"]["workers"], 2);
  EXPECT_TRUE(job["spec"]["env"]["N"].is_string());
  EXPECT_DOUBLE_EQ(job["spec"]["resources"]["gpu"]["fraction"].get<double>(), 0.5);
  for (const Manifest& m : *docs) EXPECT_TRUE(ValidateObject(m.object).ok()) << ValidateObject(m.object);
}

TEST(ManifestTest, ParsesJsonObjectsAndArrays) {
  auto one = ParseManifests(R"({"apiVersion":"aicloud/v1","kind":"User","metadata":{"name":"bob"}})", "b");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->size(), 1u);
  auto many = ParseManifests(R"([{"kind":"User"},{"kind":"Role"}])", "b");
  ASSERT_TRUE(many.ok());
  EXPECT_EQ(many->size(), 2u);
  EXPECT_TRUE(ParseManifests("  \n", "b")->empty());
}

struct BadInput {
  const char* text;
  const char* expect;  // substring of the error
};

TEST(ManifestTest, SyntaxErrorsNamePlace) {
  const BadInput cases[] = {
      {"{\"a\": }", "b: json: parse error at line 1"},
      {"[1, 2", "json: parse error"},
      {"a: [1, 2\nb: 3\n", "b:"},
      {"a: &x 1\nb: *x\n", "anchors"},
      {"a: !!binary AAAA\n", "tag"},
      {"a: 1\na: 2\n", "duplicate key \"a\""},
      {"- 1\n- 2\n", "is not an object"},
      {"x", "is not an object"},
      {"a: b\n\0", "NUL"},
      {"kind: Job\n---\n,\n", "b:"},
      {"? [1]\n: 2\n", "map key"},
  };
  for (const BadInput& c : cases) {
    std::string text(c.text, std::strlen(c.text) + (std::string(c.expect) == "NUL" ? 1 : 0));
    StatusOr<std::vector<Manifest>> r = ParseManifests(text, "b");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << c.text << " -> " << r.status().message();
  }
}

TEST(ManifestTest, RefusesHugeAndDeepInput) {
  std::string deep(200, '[');
  EXPECT_FALSE(ParseManifests("a: " + deep, "b").ok());
  std::string big(kMaxManifestBytes + 1, ' ');
  big[0] = 'a';
  StatusOr<std::vector<Manifest>> r = ParseManifests(big, "b");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("MiB limit"), std::string::npos);
  std::string docs;
  for (size_t i = 0; i <= kMaxDocuments; ++i) docs += "a: 1\n---\n";
  EXPECT_FALSE(ParseManifests(docs, "b").ok());
}

json Job(json spec) {
  return {{"apiVersion", "aicloud/v1"}, {"kind", "Job"},
          {"metadata", {{"name", "j"}, {"tenant", "t"}}}, {"spec", spec}};
}

TEST(ManifestTest, ValidationNamesTheField) {
  struct Case {
    json object;
    std::string field;
  };
  const std::vector<Case> cases = {
      {{{"kind", "Job"}}, "apiVersion"},
      {{{"apiVersion", "v2"}, {"kind", "Job"}}, "apiVersion"},
      {{{"apiVersion", "aicloud/v1"}, {"kind", "Pod"}, {"metadata", {{"name", "x"}}}}, "kind"},
      {{{"apiVersion", "aicloud/v1"}, {"kind", "Job"}}, "metadata"},
      {{{"apiVersion", "aicloud/v1"}, {"kind", "Job"}, {"metadata", {{"name", "x"}}}, {"spec", {{"command", "x"}}}},
       "metadata.tenant"},
      {{{"apiVersion", "aicloud/v1"}, {"kind", "Node"}, {"metadata", {{"name", "n"}, {"tenant", "t"}}},
        {"spec", {{"cpuMillis", 1}, {"memoryBytes", 1}}}},
       "metadata.tenant"},
      {{{"apiVersion", "aicloud/v1"}, {"kind", "User"}, {"metadata", {{"name", "Bad Name"}}}}, "metadata.name"},
      {{{"apiVersion", "aicloud/v1"}, {"kind", "User"}, {"metadata", {{"name", "u"}, {"colour", "x"}}}},
       "metadata.colour"},
      {{{"apiVersion", "aicloud/v1"}, {"kind", "User"}, {"metadata", {{"name", "u"}}}, {"extra", 1}}, "extra"},
      {Job({{"command", "x"}, {"workers", "2"}}), "spec.workers"},
      {Job({{"command", "x"}, {"workers", 1.5}}), "spec.workers"},
      {Job({{"workers", 1}}), "spec.command"},
      {Job({{"command", 3}}), "spec.command"},
      {Job({{"command", {"a", 1}}}), "spec.command[1]"},
      {Job({{"command", "x"}, {"resources", {{"gpu", {{"cores", 1}}}}}}), "spec.resources.gpu.cores"},
      {Job({{"command", "x"}, {"env", {{"A", 1}}}}), "spec.env.A"},
      {Job({{"command", "x"}, {"bogus", true}}), "spec.bogus"},
  };
  for (const Case& c : cases) {
    Status st = ValidateObject(c.object);
    ASSERT_FALSE(st.ok()) << c.object.dump();
    EXPECT_EQ(ValidationFieldOf(st), c.field) << st.message();
  }
}

TEST(ManifestTest, KindsByLooseName) {
  EXPECT_EQ(FindKindLoose("job")->plural, "jobs");
  EXPECT_EQ(FindKindLoose("Jobs")->kind, "Job");
  EXPECT_EQ(FindKindLoose("no")->kind, "Node");
  EXPECT_EQ(FindKindLoose("nope"), nullptr);
  EXPECT_TRUE(FindKind("Job")->tenant_scoped);
  EXPECT_FALSE(FindKind("Node")->tenant_scoped);
  EXPECT_FALSE(FindKind("AuditRecord")->user_writable);
}

}  // namespace
}  // namespace aicloud::control
