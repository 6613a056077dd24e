#include "gateway/config.h"

#include <gtest/gtest.h>

namespace aicloud::gateway {
namespace {

TEST(UpstreamsConfig, ParsesModelsTenantsAndKeys) {
  StatusOr<UpstreamsConfig> c = ParseUpstreams(R"(
models:
  - model: llama-8b
    tenant: nlp
    adapters: [sql-lora]
    price: {prompt: 0.5, completion: 1.5}
    replicas:
      - {url: 127.0.0.1:8001, id: r1}
      - url: http://127.0.0.1:8002
        ready: false
        canary: true
    canary_weight: 20
tenants:
  nlp: {rpm: 100, budget: {tokens: 5000, period: 1d}}
keys:
  - {key: sk-a, id: alice, tenant: nlp, team: search, models: [other], tpm: 900}
)", "up.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->routes.size(), 1u);
  const Route& r = c->routes[0];
  EXPECT_EQ(r.deployment, "llama-8b");
  EXPECT_EQ(r.base_model, "llama-8b");
  EXPECT_EQ(r.adapters, std::vector<std::string>{"sql-lora"});
  EXPECT_DOUBLE_EQ(r.completion_price_per_m, 1.5);
  ASSERT_EQ(r.replicas.size(), 2u);
  EXPECT_EQ(r.replicas[0].id, "r1");
  EXPECT_TRUE(r.replicas[0].ready);
  EXPECT_EQ(r.replicas[1].url, "127.0.0.1:8002");
  EXPECT_EQ(r.replicas[1].id, "127.0.0.1:8002");
  EXPECT_FALSE(r.replicas[1].ready);
  EXPECT_FALSE(r.replicas[0].canary);
  EXPECT_TRUE(r.replicas[1].canary);
  EXPECT_EQ(r.canary_weight, 20);
  ASSERT_EQ(c->keys.size(), 1u);
  const Caller& k = c->keys[0].second;
  EXPECT_EQ(c->keys[0].first, "sk-a");
  EXPECT_EQ(k.key_id, "alice");
  EXPECT_EQ(k.team, "search");
  EXPECT_EQ(k.key_limits.tpm, 900);
  EXPECT_EQ(k.tenant_limits.rpm, 100);
  EXPECT_EQ(k.tenant_limits.budget_tokens, 5000);
  EXPECT_EQ(k.tenant_limits.budget_period_s, 86400);
}

TEST(UpstreamsConfig, JsonIsAccepted) {
  StatusOr<UpstreamsConfig> c = ParseUpstreams(
      R"({"models": [{"model": "m", "tenant": "t", "replicas": ["127.0.0.1:9000"]}], "keys": [{"key": "k", "tenant": "t"}]})",
      "up.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->routes[0].replicas[0].url, "127.0.0.1:9000");
  EXPECT_EQ(c->keys[0].second.key_id.size(), 12u);  // sha256 prefix, not the secret
}

TEST(UpstreamsConfig, ErrorsNameTheField) {
  struct Case {
    const char* text;
    const char* want;
  } cases[] = {
      {"models: []", "models: required, a non-empty list"},
      {"models:\n  - tenant: t\n", "models[0].model: required"},
      {"models:\n  - {model: m}\n", "models[0].tenant: required"},
      {"models:\n  - {model: m, tenant: t, replicas: [{url: nohost}]}\n", "models[0].replicas[0].url: \"nohost\": want host:port"},
      {"models:\n  - {model: m, tenant: t, replcas: []}\n", "models[0].replcas: unknown field"},
      {"models:\n  - {model: m, tenant: t, canary_weight: 120}\n", "models[0].canary_weight: want a percentage 0-100"},
      {"models:\n  - {model: m, tenant: t}\n  - {model: m, tenant: u, deployment: d2}\n", "already served by m"},
      {"models:\n  - {model: m, tenant: t}\nkeys:\n  - {key: k, tenant: t, rpm: -1}\n", "keys[0].rpm: want a non-negative integer"},
      {"models:\n  - {model: m, tenant: t}\nkeys:\n  - {key: k, tenant: t, budget: {tokens: 5, period: 1w}}\n",
       "keys[0].budget.period: \"1w\" is not a period"},
      {"models:\n  - {model: m, tenant: t}\nkeys:\n  - {key: k, tenant: t}\n  - {key: k, tenant: t}\n", "keys[1].key: the same key is listed twice"},
      {"models: [", "up.yaml:1:"},
  };
  for (const Case& c : cases) {
    StatusOr<UpstreamsConfig> r = ParseUpstreams(c.text, "up.yaml");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().rfind("up.yaml", 0), 0u) << r.status().message();
  }
}

TEST(UpstreamsConfig, MissingFileIsAnError) {
  StatusOr<UpstreamsConfig> r = LoadUpstreams("/nonexistent/up.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/up.yaml"), std::string::npos);
}

}  // namespace
}  // namespace aicloud::gateway
