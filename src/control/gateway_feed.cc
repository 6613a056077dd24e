#include "control/gateway_feed.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <set>
#include <cstdio>
#include <thread>

namespace aicloud::control {

using nlohmann::json;

namespace {

// The kinds gateways share through the server (gateway/budget.cc, gateway/rate_share.cc,
// gateway/usage_tally.h).
bool GatewayKind(const std::string& kind) {
  return kind == "GatewayBudget" || kind == "GatewayRate" || kind == "ServingUsage";
}

Status CheckKind(const std::string& kind) {
  if (GatewayKind(kind)) return OkStatus();
  return InvalidArgumentError("kind \"" + kind +
                              "\": gateways reach only GatewayBudget, GatewayRate and ServingUsage objects");
}

constexpr int64_t kMaxSignalCount = 1'000'000;
constexpr std::chrono::milliseconds kRecheck{100};

}  // namespace

json ServingRouteJson(const ServingRoute& r) {
  json replicas = json::array();
  for (const ServingEndpoint& e : r.endpoints) {
    std::string url = e.url;
    if (url.rfind("http://", 0) == 0) url = url.substr(7);
    replicas.push_back({{"id", e.replica},
                        {"url", url},
                        {"ready", e.ready},
                        {"canary", !r.canary_revision.empty() && e.revision == r.canary_revision}});
  }
  return {{"deployment", r.tenant + "/" + r.deployment},
          {"tenant", r.tenant},
          {"model", r.model},
          {"adapters", r.adapters},
          {"maxAdapters", std::max<int>(4, static_cast<int>(r.adapters.size()))},
          {"canaryWeight", r.canary_weight},
          {"replicas", std::move(replicas)}};
}

GatewayFeed::GatewayFeed(store::Store* store, auth::AuthService* auth, DeploymentController* deployments)
    : store_(store), auth_(auth), deployments_(deployments) {}

StatusOr<json> GatewayFeed::Tenants() {
  const int64_t revision = store_->Revision();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (revision == tenants_revision_) return tenants_;
  }
  json tenants = json::object();
  std::string token;
  do {
    StatusOr<store::ListResult> page = store_->List({.kind = "Tenant", .limit = 500, .continue_token = token});
    if (!page.ok()) return UnavailableError("tenants: " + page.status().message());
    for (const json& t : page->items) {
      const json spec = t.value("spec", json::object());
      tenants[t["metadata"].value("name", "")] = spec.value("serving", json::object());
    }
    token = page->continue_token;
  } while (!token.empty());
  std::lock_guard<std::mutex> l(mu_);
  tenants_revision_ = revision;
  tenants_ = tenants;
  return tenants;
}

StatusOr<json> GatewayFeed::Build() {
  json routes = json::array();
  if (deployments_ != nullptr) {
    for (const ServingRoute& r : deployments_->Routes()) routes.push_back(ServingRouteJson(r));
  }
  StatusOr<std::vector<auth::ServingKey>> keys = auth_->ServingKeys();
  if (!keys.ok()) return keys.status();
  json key_list = json::array();
  for (const auth::ServingKey& k : *keys) {
    json j = {{"id", k.id}, {"hash", k.hash}, {"allModels", k.all_models}};
    if (k.tenant) j["tenant"] = *k.tenant;
    if (k.expires) {
      j["expiresAt"] = std::chrono::duration_cast<std::chrono::seconds>(k.expires->time_since_epoch()).count();
    }
    key_list.push_back(std::move(j));
  }
  StatusOr<json> tenants = Tenants();
  if (!tenants.ok()) return tenants.status();
  json doc = {{"routes", std::move(routes)}, {"keys", std::move(key_list)}, {"tenants", std::move(*tenants)}};
  char version[17];
  std::snprintf(version, sizeof version, "%016zx", std::hash<std::string>{}(doc.dump()));
  doc["version"] = version;
  return doc;
}

StatusOr<json> GatewayFeed::Wait(const std::string& seen, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    StatusOr<json> doc = Build();
    if (!doc.ok() || (*doc)["version"] != seen) return doc;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return doc;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(kRecheck, deadline - now));
  }
}

Status GatewayFeed::Signal(const json& body) {
  if (!body.is_object() || !body.contains("deployments") || !body["deployments"].is_array()) {
    return InvalidArgumentError("deployments: expected an array of {name, arrivals, active, held}");
  }
  std::set<std::string> served;
  if (deployments_ != nullptr) {
    for (const ServingRoute& r : deployments_->Routes()) served.insert(r.tenant + "/" + r.deployment);
  }
  struct One {
    std::string tenant, deployment;
    int64_t arrivals = 0, held = 0;
    bool active = false, has_held = false;
  };
  std::vector<One> ones;
  const json& list = body["deployments"];
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = "deployments[" + std::to_string(i) + "]";
    const json& d = list[i];
    if (!d.is_object()) return InvalidArgumentError(at + ": expected an object");
    if (!d.contains("name") || !d["name"].is_string()) return InvalidArgumentError(at + ".name: expected \"tenant/name\"");
    const std::string name = d["name"];
    const size_t slash = name.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == name.size()) {
      return InvalidArgumentError(at + ".name: \"" + name + "\" is not \"tenant/name\"");
    }
    One o{.tenant = name.substr(0, slash), .deployment = name.substr(slash + 1)};
    for (const auto& [k, v] : d.items()) {
      if (k == "name") continue;
      if (k == "active") {
        if (!v.is_boolean()) return InvalidArgumentError(at + ".active: expected true or false");
        o.active = v.get<bool>();
      } else if (k == "arrivals" || k == "held") {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxSignalCount) {
          return InvalidArgumentError(at + "." + k + ": expected an integer from 0 to " + std::to_string(kMaxSignalCount));
        }
        (k == "arrivals" ? o.arrivals : o.held) = v.get<int64_t>();
        if (k == "held") o.has_held = true;
      } else {
        return InvalidArgumentError(at + "." + k + ": unknown field (known: name, arrivals, active, held)");
      }
    }
    if (served.contains(name)) ones.push_back(std::move(o));
  }
  for (const One& o : ones) {  // all checked before any is applied
    if (o.arrivals > 0) deployments_->NoteArrival(o.tenant, o.deployment, o.arrivals);
    if (o.active) deployments_->NoteActivity(o.tenant, o.deployment);
    if (o.has_held) deployments_->NoteRequests(o.tenant, o.deployment, static_cast<int>(o.held));
  }
  return OkStatus();
}

StatusOr<json> GatewayFeed::Get(const std::string& kind, const std::string& tenant, const std::string& name) {
  AICLOUD_RETURN_IF_ERROR(CheckKind(kind));
  return store_->Get({kind, tenant, name});
}

StatusOr<json> GatewayFeed::List(const std::string& kind, const std::optional<std::string>& tenant, int64_t limit,
                                 const std::string& continue_token) {
  AICLOUD_RETURN_IF_ERROR(CheckKind(kind));
  StatusOr<store::ListResult> page =
      store_->List({.kind = kind, .tenant = tenant, .limit = limit, .continue_token = continue_token});
  if (!page.ok()) return page.status();
  return json{{"items", std::move(page->items)},
              {"continue", page->continue_token},
              {"resourceVersion", std::to_string(page->resource_version)}};
}

StatusOr<json> GatewayFeed::Commit(const json& body) {
  if (!body.is_object() || !body.contains("ops") || !body["ops"].is_array() || body["ops"].empty()) {
    return InvalidArgumentError("ops: expected a non-empty array of {op, object | key, expectedResourceVersion}");
  }
  std::vector<store::WriteOp> ops;
  const json& list = body["ops"];
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = "ops[" + std::to_string(i) + "]";
    const json& o = list[i];
    if (!o.is_object()) return InvalidArgumentError(at + ": expected an object");
    const std::string op = o.value("op", "");
    int64_t expected = 0;
    if (o.contains("expectedResourceVersion")) {
      if (!o["expectedResourceVersion"].is_number_integer() || o["expectedResourceVersion"].get<int64_t>() < 0) {
        return InvalidArgumentError(at + ".expectedResourceVersion: expected an integer >= 0");
      }
      expected = o["expectedResourceVersion"].get<int64_t>();
    }
    if (op == "create" || op == "update") {
      if (!o.contains("object") || !o["object"].is_object()) return InvalidArgumentError(at + ".object: expected an object");
      AICLOUD_RETURN_IF_ERROR(CheckKind(o["object"].value("kind", "")));
      ops.push_back(op == "create" ? store::WriteOp::Create(o["object"]) : store::WriteOp::Update(o["object"], expected));
    } else if (op == "delete") {
      const json k = o.value("key", json::object());
      if (!k.is_object() || !k.contains("kind") || !k["kind"].is_string() || !k.contains("name") || !k["name"].is_string() ||
          (k.contains("tenant") && !k["tenant"].is_string())) {
        return InvalidArgumentError(at + ".key: expected {kind, tenant, name}");
      }
      AICLOUD_RETURN_IF_ERROR(CheckKind(k["kind"]));
      ops.push_back(store::WriteOp::Delete({k["kind"], k.value("tenant", ""), k["name"]}, expected));
    } else {
      return InvalidArgumentError(at + ".op: \"" + op + "\" is not create, update or delete");
    }
  }
  StatusOr<std::vector<json>> done = store_->Commit(std::move(ops));
  if (!done.ok()) return done.status();
  return json{{"objects", std::move(*done)}};
}

}  // namespace aicloud::control
