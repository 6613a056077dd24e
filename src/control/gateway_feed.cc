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
  bool any_tls = false;
  for (const ServingEndpoint& e : r.endpoints) {
    std::string url = e.url;
    const bool tls = url.rfind("https://", 0) == 0;
    if (tls) url = url.substr(8);
    if (url.rfind("http://", 0) == 0) url = url.substr(7);
    json replica = {{"id", e.replica},
                    {"url", url},
                    {"ready", e.ready},
                    {"canary", !r.canary_revision.empty() && e.revision == r.canary_revision}};
    if (!e.secret.empty()) replica["secret"] = e.secret;
    if (tls) replica["tls"] = true;
    any_tls |= tls;
    replicas.push_back(std::move(replica));
  }
  json out = {{"deployment", r.tenant + "/" + r.deployment},
              {"tenant", r.tenant},
              {"model", r.model},
              {"adapters", r.adapters},
              {"maxAdapters", std::max<int>(4, static_cast<int>(r.adapters.size()))},
              {"canaryWeight", r.canary_weight},
              {"replicas", std::move(replicas)}};
  // Once per route (not per replica): the CA its https replicas' certificates chain to.
  if (any_tls && !r.ca_pem.empty()) out["replicaCa"] = r.ca_pem;
  return out;
}

GatewayFeed::GatewayFeed(store::Store* store, auth::AuthService* auth, DeploymentController* deployments,
                         int max_waiters)
    : store_(store), auth_(auth), deployments_(deployments), max_waiters_(std::max(0, max_waiters)) {}

void GatewayFeed::Stop() { stopping_ = true; }

GatewayFeed::Part GatewayFeed::PartOf(json value) {
  Part p;
  p.hash = std::hash<std::string>{}(value.dump());
  p.value = std::make_shared<const json>(std::move(value));
  return p;
}

StatusOr<GatewayFeed::Part> GatewayFeed::Tenants() {
  // Other kinds change all the time (budgets, rates, usage, nodes' reports): the tenants are
  // read again only when the change log shows a Tenant change since they were.
  int64_t since;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (store_->Revision() == tenants_revision_) return tenants_;
    since = tenants_revision_;
  }
  const int64_t revision = store_->Revision();
  if (since >= 0) {
    StatusOr<store::ChangesResult> changes = store_->Changes("Tenant", since, 1);
    if (changes.ok() && changes->events.empty()) {
      std::lock_guard<std::mutex> l(mu_);
      if (tenants_revision_ == since) tenants_revision_ = changes->resource_version;
      return tenants_;
    }
    // A Tenant changed, or the log no longer reaches back that far: read them all.
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
  Part part = PartOf(std::move(tenants));
  std::lock_guard<std::mutex> l(mu_);
  tenants_revision_ = revision;
  tenants_ = part;
  return part;
}

StatusOr<GatewayFeed::Part> GatewayFeed::Keys() {
  // What keys authenticate to changes only with the auth service's epoch (a new RBAC snapshot,
  // or a key's expiry passing).
  const uint64_t epoch = auth_->Epoch();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (keys_epoch_ && *keys_epoch_ == epoch) return keys_;
  }
  StatusOr<std::vector<auth::ServingKey>> keys = auth_->ServingKeys();
  if (!keys.ok()) return keys.status();
  json list = json::array();
  for (const auth::ServingKey& k : *keys) {
    json j = {{"id", k.id}, {"hash", k.hash}, {"allModels", k.all_models}};
    if (k.tenant) j["tenant"] = *k.tenant;
    if (k.expires) {
      j["expiresAt"] = std::chrono::duration_cast<std::chrono::seconds>(k.expires->time_since_epoch()).count();
    }
    list.push_back(std::move(j));
  }
  Part part = PartOf(std::move(list));
  std::lock_guard<std::mutex> l(mu_);
  keys_epoch_ = epoch;
  keys_ = part;
  return part;
}

StatusOr<GatewayFeed::Parts> GatewayFeed::Current() {
  json routes = json::array();
  if (deployments_ != nullptr) {
    for (const ServingRoute& r : deployments_->Routes()) routes.push_back(ServingRouteJson(r));
  }
  StatusOr<Part> keys = Keys();
  if (!keys.ok()) return keys.status();
  StatusOr<Part> tenants = Tenants();
  if (!tenants.ok()) return tenants.status();
  Parts p{PartOf(std::move(routes)), std::move(*keys), std::move(*tenants), ""};
  size_t h = p.routes.hash;
  for (size_t x : {p.keys.hash, p.tenants.hash}) h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  char version[17];
  std::snprintf(version, sizeof version, "%016zx", h);
  p.version = version;
  return p;
}

json GatewayFeed::Document(const Parts& p) {
  return {{"version", p.version}, {"routes", *p.routes.value}, {"keys", *p.keys.value}, {"tenants", *p.tenants.value}};
}

StatusOr<json> GatewayFeed::Build() {
  StatusOr<Parts> p = Current();
  if (!p.ok()) return p.status();
  return Document(*p);
}

StatusOr<json> GatewayFeed::Wait(const std::string& seen, std::chrono::milliseconds wait,
                                 const http::CancelSignal* client_gone) {
  auto deadline = std::chrono::steady_clock::now() + wait;
  // A waiting slot, or an answer at once.
  const bool waiting = wait.count() > 0 && waiters_.fetch_add(1) < max_waiters_;
  if (wait.count() > 0 && !waiting) deadline = std::chrono::steady_clock::now();
  struct Leave {
    std::atomic<int>* n;
    bool counted;
    ~Leave() {
      if (counted) n->fetch_sub(1);
    }
  } leave{&waiters_, wait.count() > 0};
  for (;;) {
    // Each look costs the routes' JSON; keys and tenants are rebuilt only when they may have
    // changed, and the document only to answer.
    StatusOr<Parts> p = Current();
    if (!p.ok()) return p.status();
    const auto now = std::chrono::steady_clock::now();
    if (p->version != seen || now >= deadline || stopping_ || (client_gone != nullptr && client_gone->cancelled())) {
      return Document(*p);
    }
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
