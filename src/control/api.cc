#include "control/api.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ctime>
#include <thread>

#include "core/numeric.h"
#include "control/deployment.h"
#include "control/manifest.h"

namespace aicloud::control {

using nlohmann::json;

struct Api::Call {
  auth::Principal who;
  std::string request_id;
};

namespace {

// The labels that make a Job a Deployment's replica (and so give its attempts the replica's secret
// and certificate) are the deployment controller's: an API caller may neither set nor change
// them. `before` is the stored Job (null on create).
Status ReplicaLabelsKept(const json& before, const json& after) {
  auto label = [](const json& o, const char* key) {
    const json meta = o.is_object() ? o.value("metadata", json::object()) : json::object();
    const json labels = meta.is_object() ? meta.value("labels", json::object()) : json::object();
    return labels.is_object() && labels.contains(key) ? labels[key] : json();
  };
  for (const char* key : {kDeploymentLabel, kRevisionLabel, kPortLabel}) {
    if (label(before, key) != label(after, key)) {
      return InvalidArgumentError(std::string("metadata.labels.") + key +
                                  ": set by the deployment controller on its replicas; a Job cannot set or change it");
    }
  }
  return OkStatus();
}

thread_local Api::Call* current_call = nullptr;

http::Response Error(const Status& st) { return http::ErrorResponse(st, ValidationFieldOf(st)); }

http::Response BadRequest(const std::string& message, const std::string& field = "") {
  return http::Response::Error(400, "invalid_argument", message, field);
}

StatusOr<json> ParseBody(const http::Request& req) {
  if (req.body.empty()) return InvalidArgumentError("request body: empty; expected a JSON object");
  StatusOr<std::vector<Manifest>> docs = ParseManifests(req.body, "request body");
  if (!docs.ok()) return docs.status();
  if (docs->size() != 1) {
    return InvalidArgumentError("request body: expected one object, got " +
                                std::to_string(docs->size()) + " (use aicloud apply for several)");
  }
  return std::move((*docs)[0].object);
}

// Secrets never leave the server: API keys are listed without their hash.
json Redact(json o) {
  if (o.value("kind", "") == "ApiKey" && o.contains("spec")) o["spec"].erase("hash");
  return o;
}

// A stored count: a non-negative integer (or an integral float), else 0.
int64_t CountOf(const json& o, const char* f) {
  if (!o.contains(f) || !o[f].is_number()) return 0;
  if (o[f].is_number_unsigned()) return static_cast<int64_t>(std::min<uint64_t>(o[f].get<uint64_t>(), INT64_MAX));
  if (o[f].is_number_integer()) return std::max<int64_t>(0, o[f].get<int64_t>());
  const double d = o[f].get<double>();
  return std::isfinite(d) && d > 0 ? (d < 9e18 ? static_cast<int64_t>(d) : INT64_MAX) : 0;
}

// A stored amount: a finite non-negative number, else 0.
double AmountOf(const json& o, const char* f) {
  if (!o.contains(f) || !o[f].is_number()) return 0;
  const double d = o[f].get<double>();
  return std::isfinite(d) && d > 0 ? d : 0;
}

StatusOr<int64_t> ParseInt(const std::string& s, const std::string& field) {
  if (s.empty()) return int64_t{0};
  try {
    size_t pos = 0;
    long long v = std::stoll(s, &pos);
    if (pos != s.size()) throw std::invalid_argument(s);
    return static_cast<int64_t>(v);
  } catch (...) {
    return InvalidArgumentError(field + ": \"" + s + "\" is not an integer");
  }
}

// "7d", "12h", "30m", "45s" → seconds.
StatusOr<int64_t> ParseSince(const std::string& s) {
  if (s.empty()) return int64_t{0};
  char unit = s.back();
  int64_t mult = unit == 'd' ? 86400 : unit == 'h' ? 3600 : unit == 'm' ? 60 : unit == 's' ? 1 : 0;
  if (mult == 0) return InvalidArgumentError("since: \"" + s + "\" must look like 7d, 12h, 30m or 45s");
  StatusOr<int64_t> n = ParseInt(s.substr(0, s.size() - 1), "since");
  if (!n.ok() || *n < 0) return InvalidArgumentError("since: \"" + s + "\" must look like 7d, 12h, 30m or 45s");
  return *n * mult;
}

// RFC 3339 "2026-11-22T10:00:00.000Z" → seconds since the epoch (0 when malformed).
int64_t ParseTime(const std::string& s) {
  std::tm tm{};
  if (s.size() < 19 || strptime(s.substr(0, 19).c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) return 0;
  return static_cast<int64_t>(timegm(&tm));
}


}  // namespace

Api::Api(store::Store* store, auth::AuthService* auth, auth::AuditLog* audit, ControlPlane* control,
         Metrics* metrics)
    : store_(store), auth_(auth), audit_(audit), control_(control), metrics_(metrics) {
  if (metrics_ != nullptr) {
    requests_ = metrics_->AddCounter("aicloud_api_requests_total", "API requests by route and status",
                                     {"method", "route", "code"});
    latency_ = metrics_->AddHistogram("aicloud_api_request_seconds", "API latency by route",
                                      {"method", "route"}, Histogram::LatencyBuckets());
  }
  Routes();
}

http::Response Api::Handle(http::Request& req) {
  auto t0 = std::chrono::steady_clock::now();
  Call call;
  call.request_id = req.Header("x-request-id");
  if (call.request_id.empty() || call.request_id.size() > 64) {
    call.request_id = std::to_string(++request_counter_) + "-" + auth::RandomHex(4);
  }
  http::Response resp;
  if (req.path.rfind("/api/", 0) != 0 || Authenticate(req, &call, &resp)) {
    current_call = &call;
    resp = router_.Dispatch(req);
    current_call = nullptr;
  }
  resp.headers.emplace_back("X-Request-Id", call.request_id);
  if (requests_ != nullptr) {
    const std::string route = req.route.empty() ? "unmatched" : req.route;
    requests_->Inc({req.method, route, std::to_string(resp.status)});
    latency_->Observe({req.method, route},
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return resp;
}

const KindInfo* Api::KindOrNotFound(const std::string& plural, http::Response* not_found) {
  const KindInfo* kind = FindKindByPlural(plural);
  if (kind == nullptr) {
    *not_found = http::Response::Error(404, "not_found", "unknown resource \"" + plural + "\"");
  }
  return kind;
}

bool Api::Authenticate(http::Request& req, Call* call, http::Response* denied) {
  StatusOr<auth::Principal> who = auth_->Authenticate(req.Header("authorization"));
  if (who.ok()) {
    call->who = *who;
    return true;
  }
  Audit(*call, req.method, req.path, "", "", false, who.status().message(), 401);
  *denied = http::Response::Error(401, "unauthenticated", who.status().message());
  denied->headers.emplace_back("WWW-Authenticate", "Bearer");
  return false;
}

bool Api::Allow(Call& call, std::string_view verb, std::string_view resource,
                std::string_view tenant, std::string_view name, http::Response* denied) {
  auth::Decision d = auth_->Authorize(call.who, verb, resource, tenant);
  if (d.allowed) return true;
  Audit(call, verb, resource, tenant, name, false, d.reason, 403);
  *denied = http::Response::Error(403, "permission_denied", d.reason);
  return false;
}

void Api::Audit(const Call& call, std::string_view verb, std::string_view resource,
                std::string_view tenant, std::string_view name, bool allowed,
                const std::string& reason, int status) {
  auth::AuditEntry e;
  e.user = call.who.user;
  e.key_id = call.who.key_id;
  e.verb = std::string(verb);
  e.resource = std::string(resource);
  e.tenant = std::string(tenant);
  e.name = std::string(name);
  e.allowed = allowed;
  e.reason = reason;
  e.request_id = call.request_id;
  e.http_status = status;
  (void)audit_->Append(std::move(e));
}

// --- routes -----------------------------------------------------------------------------------

void Api::Routes() {
  router_.Add("GET", "/healthz", [](http::Request&) { return http::Response::Text(200, "ok\n"); });
  router_.Add("GET", "/readyz", [this](http::Request&) {
    return ready_ ? http::Response::Text(200, "ready\n") : http::Response::Text(503, "starting\n");
  });
  router_.Add("GET", "/metrics", [this](http::Request&) {
    return http::Response::Text(200, metrics_ ? metrics_->Render() : "",
                                "text/plain; version=0.0.4; charset=utf-8");
  });
  router_.Add("GET", "/api/v1/whoami", [](http::Request&) {
    const Call& c = *current_call;
    json j = {{"user", c.who.user}, {"keyId", c.who.key_id}};
    if (c.who.key_tenant) j["tenant"] = *c.who.key_tenant;
    if (!c.who.key_roles.empty()) j["roles"] = c.who.key_roles;
    return http::Response::Json(200, j);
  });

  // Generic resources.
  router_.Add("GET", "/api/v1/{plural}", [this](http::Request& r) {
    return List(r, r.params["plural"], "", false);
  });
  router_.Add("POST", "/api/v1/{plural}", [this](http::Request& r) {
    return Create(r, r.params["plural"], "");
  });
  router_.Add("GET", "/api/v1/{plural}/{name}", [this](http::Request& r) {
    return Get(r, r.params["plural"], "", r.params["name"]);
  });
  router_.Add("PUT", "/api/v1/{plural}/{name}", [this](http::Request& r) {
    return Replace(r, r.params["plural"], "", r.params["name"]);
  });
  router_.Add("DELETE", "/api/v1/{plural}/{name}", [this](http::Request& r) {
    return Delete(r, r.params["plural"], "", r.params["name"]);
  });
  router_.Add("GET", "/api/v1/tenants/{tenant}/{plural}", [this](http::Request& r) {
    return List(r, r.params["plural"], r.params["tenant"], true);
  });
  router_.Add("POST", "/api/v1/tenants/{tenant}/{plural}", [this](http::Request& r) {
    return Create(r, r.params["plural"], r.params["tenant"]);
  });
  router_.Add("GET", "/api/v1/tenants/{tenant}/{plural}/{name}", [this](http::Request& r) {
    return Get(r, r.params["plural"], r.params["tenant"], r.params["name"]);
  });
  router_.Add("PUT", "/api/v1/tenants/{tenant}/{plural}/{name}", [this](http::Request& r) {
    return Replace(r, r.params["plural"], r.params["tenant"], r.params["name"]);
  });
  router_.Add("DELETE", "/api/v1/tenants/{tenant}/{plural}/{name}", [this](http::Request& r) {
    return Delete(r, r.params["plural"], r.params["tenant"], r.params["name"]);
  });

  // Jobs.
  router_.Add("POST", "/api/v1/tenants/{tenant}/jobs/{name}/cancel", [this](http::Request& r) {
    Call& c = *current_call;
    const std::string& t = r.params["tenant"];
    const std::string& n = r.params["name"];
    http::Response denied;
    if (!Allow(c, "cancel", "jobs", t, n, &denied)) return denied;
    Status st = control_->CancelJob(t, n);
    Audit(c, "cancel", "jobs", t, n, true, st.ok() ? "" : st.message(), st.ok() ? 200 : http::HttpStatusOf(st));
    if (!st.ok()) return Error(st);
    return http::Response::Json(200, {{"cancelled", n}});
  });
  router_.Add("GET", "/api/v1/tenants/{tenant}/jobs/{name}/logs", [this](http::Request& r) {
    Call& c = *current_call;
    const std::string t = r.params["tenant"];
    const std::string n = r.params["name"];
    http::Response denied;
    if (!Allow(c, "get", "logs", t, n, &denied)) return denied;
    StatusOr<int64_t> worker = ParseInt(r.Query("worker", "0"), "worker");
    StatusOr<int64_t> attempt = ParseInt(r.Query("attempt", "-1"), "attempt");
    StatusOr<int64_t> offset = ParseInt(r.Query("offset", "0"), "offset");
    for (const StatusOr<int64_t>* v : {&worker, &attempt, &offset}) {
      if (!v->ok()) return Error(v->status());
    }
    const bool follow = r.Query("follow") == "true" || r.Query("follow") == "1";
    if (!follow) {
      StatusOr<LogChunk> chunk = control_->ReadLog(t, n, static_cast<int>(*worker),
                                                   static_cast<int>(*attempt), *offset, 8 << 20);
      if (!chunk.ok()) return Error(chunk.status());
      http::Response resp = http::Response::Text(200, chunk->data);
      resp.headers.emplace_back("X-Next-Offset", std::to_string(chunk->next_offset));
      return resp;
    }
    // Check the job exists before streaming.
    StatusOr<LogChunk> first = control_->ReadLog(t, n, static_cast<int>(*worker),
                                                 static_cast<int>(*attempt), *offset, 0);
    if (!first.ok()) return Error(first.status());
    http::Response resp;
    resp.content_type = "text/plain; charset=utf-8";
    ControlPlane* cp = control_;
    int w = static_cast<int>(*worker), a = static_cast<int>(*attempt);
    int64_t off = *offset;
    resp.stream = [cp, t, n, w, a, off](http::StreamWriter& out) mutable {
      int idle = 0;
      while (!out.closed()) {
        StatusOr<LogChunk> chunk = cp->ReadLog(t, n, w, a, off, 1 << 20);
        if (!chunk.ok()) return;
        if (!chunk->data.empty()) {
          if (!out.Write(chunk->data)) return;
          off = chunk->next_offset;
          idle = 0;
          continue;
        }
        if (chunk->done && ++idle > 2) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    };
    return resp;
  });

  // Nodes.
  for (const char* verb : {"cordon", "uncordon", "drain"}) {
    std::string v = verb;
    router_.Add("POST", "/api/v1/nodes/{name}/" + v, [this, v](http::Request& r) {
      Call& c = *current_call;
      const std::string& n = r.params["name"];
      http::Response denied;
      const std::string rbac_verb = v == "uncordon" ? "cordon" : v;
      if (!Allow(c, rbac_verb, "nodes", "", n, &denied)) return denied;
      Status st = v == "drain" ? control_->Drain(n, ControlPlane::CordonBy::kOperator)
                               : control_->Cordon(n, v == "cordon", ControlPlane::CordonBy::kOperator);
      Audit(c, v, "nodes", "", n, true, st.ok() ? "" : st.message(), st.ok() ? 200 : http::HttpStatusOf(st));
      if (!st.ok()) return Error(st);
      return http::Response::Json(200, {{v == "uncordon" ? "uncordoned" : v + "ed", n}});
    });
  }

  // API keys: created through the auth service (the token is shown once), revoked, listed.
  router_.Add("POST", "/api/v1/apikeys", [this](http::Request& r) {
    Call& c = *current_call;
    StatusOr<json> body = r.body.empty() ? StatusOr<json>(json::object()) : ParseBody(r);
    if (!body.ok()) return Error(body.status());
    if (!body->is_object()) return BadRequest("request body: expected an object");
    std::optional<std::string> tenant;
    std::vector<std::string> roles;
    std::optional<std::chrono::system_clock::time_point> expires;
    std::string user = c.who.user;
    try {
      for (const auto& [k, v] : body->items()) {
        if (k == "user") user = v.get<std::string>();
        else if (k == "tenant") tenant = v.get<std::string>();
        else if (k == "roles") roles = v.get<std::vector<std::string>>();
        else if (k == "expiresInSeconds") {
          int64_t s = v.get<int64_t>();
          if (s <= 0) return BadRequest("expiresInSeconds: must be positive", "expiresInSeconds");
          expires = std::chrono::system_clock::now() + std::chrono::seconds(s);
        } else {
          return BadRequest(k + ": unknown field (known: user, tenant, roles, expiresInSeconds)", k);
        }
      }
    } catch (const json::exception& e) {
      return BadRequest(std::string("request body: wrong type: ") + e.what());
    }
    http::Response denied;
    if (!Allow(c, "create", "apikeys", tenant.value_or(""), "", &denied)) return denied;
    if (tenant) {  // a key restricted to a tenant that does not exist could call nothing
      StatusOr<json> t = store_->Get({"Tenant", "", *tenant});
      if (!t.ok() && t.status().code() == StatusCode::kNotFound) {
        return http::Response::Error(404, "not_found", "tenant \"" + *tenant + "\" not found", "tenant");
      }
      if (!t.ok()) return Error(t.status());
    }
    StatusOr<auth::AuthService::CreatedKey> key = auth_->CreateApiKey(c.who, user, tenant, roles, expires);
    Audit(c, "create", "apikeys", tenant.value_or(""), key.ok() ? key->id : "", key.ok(),
          key.ok() ? "" : key.status().message(), key.ok() ? 201 : http::HttpStatusOf(key.status()));
    if (!key.ok()) return Error(key.status());
    return http::Response::Json(201, {{"id", key->id}, {"token", key->token}, {"object", Redact(key->object)}});
  });
  router_.Add("DELETE", "/api/v1/apikeys/{name}", [this](http::Request& r) {
    Call& c = *current_call;
    const std::string& id = r.params["name"];
    StatusOr<json> key = store_->Get({"ApiKey", "", id});
    if (!key.ok()) return Error(key.status());
    const std::string owner = (*key)["spec"].value("user", "");
    const std::string kt = (*key)["spec"].value("tenant", "");
    http::Response denied;
    // Own keys: with delete on apikeys in the key's tenant; others' keys: cluster-wide.
    if (!Allow(c, "delete", "apikeys", owner == c.who.user ? kt : "", id, &denied)) return denied;
    Status st = auth_->RevokeApiKey(id);
    Audit(c, "delete", "apikeys", kt, id, true, st.ok() ? "revoked" : st.message(), st.ok() ? 200 : http::HttpStatusOf(st));
    if (!st.ok()) return Error(st);
    return http::Response::Json(200, {{"revoked", id}});
  });

  router_.Add("GET", "/api/v1/usage", [this](http::Request& r) {
    Call& c = *current_call;
    const std::string tenant = r.Query("tenant");
    http::Response denied;
    if (!Allow(c, "get", "usage", tenant, "", &denied)) return denied;
    StatusOr<int64_t> since = ParseSince(r.Query("since", "7d"));
    if (!since.ok()) return Error(since.status());
    const int64_t cutoff = static_cast<int64_t>(std::time(nullptr)) - *since;
    json by_tenant = json::object();
    std::string token;
    do {
      store::ListOptions o{.kind = "Job", .limit = 1000, .continue_token = token};
      if (!tenant.empty()) o.tenant = tenant;
      StatusOr<store::ListResult> page = store_->List(o);
      if (!page.ok()) return Error(page.status());
      for (const json& j : page->items) {
        const json st = j.value("status", json::object());
        const json u = st.value("usage", json::object());
        std::string when = st.value("finishedAt", j["metadata"].value("createdAt", ""));
        if (*since > 0 && ParseTime(when) < cutoff) continue;
        const std::string t = j["metadata"].value("tenant", "");
        const std::string q = j["spec"].value("queue", t);
        json& row = by_tenant[t];
        if (row.is_null()) row = {{"jobs", 0}, {"gpuSeconds", 0.0}, {"cpuSeconds", 0.0}, {"costUsd", 0.0}, {"queues", json::object()}};
        row["jobs"] = row["jobs"].get<int>() + 1;
        for (const char* f : {"gpuSeconds", "cpuSeconds", "costUsd"}) {
          row[f] = row[f].get<double>() + u.value(f, 0.0);
          json& qr = row["queues"][q];
          if (qr.is_null()) qr = {{"gpuSeconds", 0.0}, {"cpuSeconds", 0.0}, {"costUsd", 0.0}};
          qr[f] = qr[f].get<double>() + u.value(f, 0.0);
        }
      }
      token = page->continue_token;
    } while (!token.empty());
    // Serving: the gateways' ServingUsage objects (gateway/usage_tally.h), one per tenant and UTC
    // day, the days that overlap the window.
    char first_day[16] = "";
    if (*since > 0) {
      const std::time_t t = static_cast<std::time_t>(cutoff);
      std::tm tm{};
      gmtime_r(&t, &tm);
      std::strftime(first_day, sizeof first_day, "%Y-%m-%d", &tm);
    }
    token.clear();
    do {
      store::ListOptions o{.kind = "ServingUsage", .limit = 1000, .continue_token = token};
      if (!tenant.empty()) o.tenant = tenant;
      StatusOr<store::ListResult> page = store_->List(o);
      if (!page.ok()) return Error(page.status());
      for (const json& u : page->items) {
        // Read defensively: an object edited by hand must not fail the whole report.
        const json& meta = u.contains("metadata") && u["metadata"].is_object() ? u["metadata"] : json::object();
        if (meta.value("name", "") < first_day) continue;
        const json* models = nullptr;
        if (u.contains("status") && u["status"].is_object() && u["status"].contains("models") &&
            u["status"]["models"].is_object()) {
          models = &u["status"]["models"];
        }
        if (models == nullptr) continue;
        json& row = by_tenant[meta.value("tenant", "")];
        if (row.is_null()) row = {{"jobs", 0}, {"gpuSeconds", 0.0}, {"cpuSeconds", 0.0}, {"costUsd", 0.0}, {"queues", json::object()}};
        json& serving = row["serving"];
        if (serving.is_null()) serving = {{"models", json::object()}};
        for (const auto& [model, counts] : models->items()) {
          if (!counts.is_object()) continue;
          json& per_model = serving["models"][model];
          if (!per_model.is_object()) per_model = json::object();
          for (json* into : {&serving, &per_model}) {
            for (const char* f : {"requests", "errors", "promptTokens", "completionTokens"}) {
              (*into)[f] = SaturatingAdd(into->value(f, int64_t{0}), CountOf(counts, f));
            }
            for (const char* f : {"cost", "latencySeconds", "heldSeconds"}) {
              (*into)[f] = into->value(f, 0.0) + AmountOf(counts, f);
            }
          }
        }
      }
      token = page->continue_token;
    } while (!token.empty());
    // Serving usage is kept per UTC day: it counts whole days from the one the window starts in.
    json out = {{"since", r.Query("since", "7d")}, {"tenants", by_tenant}};
    if (first_day[0] != '\0') out["servingSince"] = first_day;
    return http::Response::Json(200, out);
  });

  router_.Add("GET", "/api/v1/audit/verify", [this](http::Request&) {
    Call& c = *current_call;
    http::Response denied;
    if (!Allow(c, "verify", "auditrecords", "", "", &denied)) return denied;
    auth::VerifyResult v = audit_->Verify();
    return http::Response::Json(v.ok ? 200 : 409,
                                {{"ok", v.ok}, {"records", v.records}, {"problem", v.problem}});
  });

  // Agent protocol.
  router_.Add("POST", "/api/v1/agent/nodes/{node}/register", [this](http::Request& r) {
    Call& c = *current_call;
    const std::string& n = r.params["node"];
    http::Response denied;
    if (!Allow(c, "create", "agent", "", n, &denied)) return denied;
    StatusOr<json> body = ParseBody(r);
    if (!body.ok()) return Error(body.status());
    json node = {{"apiVersion", "aicloud/v1"}, {"kind", "Node"}, {"metadata", {{"name", n}}},
                 {"spec", body->value("spec", json::object())}};
    Status valid = ValidateObject(node);
    if (!valid.ok()) return Error(valid);
    StatusOr<json> reg = control_->RegisterNode(n, node["spec"]);
    Audit(c, "register", "agent", "", n, true, reg.ok() ? "" : reg.status().message(),
          reg.ok() ? 200 : http::HttpStatusOf(reg.status()));
    if (!reg.ok()) return Error(reg.status());
    return http::Response::Json(200, *reg);
  });
  router_.Add("POST", "/api/v1/agent/nodes/{node}/report", [this](http::Request& r) {
    Call& c = *current_call;
    http::Response denied;
    if (!Allow(c, "update", "agent", "", r.params["node"], &denied)) return denied;
    StatusOr<json> body = ParseBody(r);
    if (!body.ok()) return Error(body.status());
    StatusOr<json> out = control_->AgentReport(r.params["node"], r.Query("epoch"), *body);
    if (!out.ok()) return Error(out.status());
    return http::Response::Json(200, *out);
  });
  router_.Add("GET", "/api/v1/agent/nodes/{node}/assignments", [this](http::Request& r) {
    Call& c = *current_call;
    http::Response denied;
    if (!Allow(c, "get", "agent", "", r.params["node"], &denied)) return denied;
    StatusOr<int64_t> after = ParseInt(r.Query("after", "-1"), "after");
    StatusOr<int64_t> wait = ParseInt(r.Query("waitMs", "0"), "waitMs");
    if (!after.ok()) return Error(after.status());
    if (!wait.ok()) return Error(wait.status());
    StatusOr<json> out = control_->WaitAssignments(
        r.params["node"], r.Query("epoch"), r.Query("instance"), *after,
        std::chrono::milliseconds(std::clamp<int64_t>(*wait, 0, 60000)));
    if (!out.ok()) return Error(out.status());
    return http::Response::Json(200, *out);
  });
  router_.Add("POST", "/api/v1/agent/nodes/{node}/logs", [this](http::Request& r) {
    Call& c = *current_call;
    http::Response denied;
    if (!Allow(c, "update", "agent", "", r.params["node"], &denied)) return denied;
    StatusOr<int64_t> offset = ParseInt(r.Query("offset", "0"), "offset");
    if (!offset.ok()) return Error(offset.status());
    StatusOr<int64_t> size = control_->AppendLog(r.params["node"], r.Query("attempt"), *offset, r.body);
    if (!size.ok()) return Error(size.status());
    return http::Response::Json(200, {{"offset", *size}});
  });

  // Gateway protocol (control/gateway_feed.h): standalone gateways' view of the serving state,
  // their signals, and the objects they share budgets and rate limits through.
  router_.Add("GET", "/api/v1/gateway/config", [this](http::Request& r) {
    Call& c = *current_call;
    http::Response denied;
    if (!Allow(c, "get", "gateway", "", "config", &denied)) return denied;
    if (feed_ == nullptr) return http::Response::Error(404, "not_found", "this server serves no gateways");
    StatusOr<int64_t> wait = ParseInt(r.Query("waitMs", "0"), "waitMs");
    if (!wait.ok()) return Error(wait.status());
    StatusOr<json> doc = feed_->Wait(r.Query("version"), std::chrono::milliseconds(std::clamp<int64_t>(*wait, 0, 60000)),
                                     r.client_gone.get());
    if (!doc.ok()) return Error(doc.status());
    return http::Response::Json(200, *doc);
  });
  router_.Add("POST", "/api/v1/gateway/signals", [this](http::Request& r) {
    Call& c = *current_call;
    http::Response denied;
    if (!Allow(c, "update", "gateway", "", "signals", &denied)) return denied;
    if (feed_ == nullptr) return http::Response::Error(404, "not_found", "this server serves no gateways");
    StatusOr<json> body = ParseBody(r);
    if (!body.ok()) return Error(body.status());
    Status st = feed_->Signal(*body);
    if (!st.ok()) return Error(st);
    return http::Response::Json(200, json::object());
  });
  router_.Add("GET", "/api/v1/gateway/objects/{kind}", [this](http::Request& r) {
    Call& c = *current_call;
    http::Response denied;
    if (!Allow(c, "get", "gateway", "", "objects", &denied)) return denied;
    if (feed_ == nullptr) return http::Response::Error(404, "not_found", "this server serves no gateways");
    StatusOr<int64_t> limit = ParseInt(r.Query("limit", "0"), "limit");
    if (!limit.ok()) return Error(limit.status());
    std::optional<std::string> tenant;
    if (r.query.count("tenant")) tenant = r.Query("tenant");
    StatusOr<json> page = feed_->List(r.params["kind"], tenant, *limit, r.Query("continue"));
    if (!page.ok()) return Error(page.status());
    return http::Response::Json(200, *page);
  });
  router_.Add("GET", "/api/v1/gateway/objects/{kind}/{name}", [this](http::Request& r) {
    Call& c = *current_call;
    http::Response denied;
    if (!Allow(c, "get", "gateway", "", "objects", &denied)) return denied;
    if (feed_ == nullptr) return http::Response::Error(404, "not_found", "this server serves no gateways");
    StatusOr<json> o = feed_->Get(r.params["kind"], r.Query("tenant"), r.params["name"]);
    if (!o.ok()) return Error(o.status());
    return http::Response::Json(200, *o);
  });
  router_.Add("POST", "/api/v1/gateway/objects", [this](http::Request& r) {
    Call& c = *current_call;
    http::Response denied;
    if (!Allow(c, "update", "gateway", "", "objects", &denied)) return denied;
    if (feed_ == nullptr) return http::Response::Error(404, "not_found", "this server serves no gateways");
    StatusOr<json> body = ParseBody(r);
    if (!body.ok()) return Error(body.status());
    StatusOr<json> done = feed_->Commit(*body);
    if (!done.ok()) return Error(done.status());
    return http::Response::Json(200, *done);
  });
}

// --- generic resource handlers ----------------------------------------------------------------

http::Response Api::List(http::Request& req, const std::string& plural, const std::string& tenant,
                         bool tenant_in_path) {
  Call& c = *current_call;
  http::Response denied;
  const KindInfo* kind = KindOrNotFound(plural, &denied);
  if (kind == nullptr) return denied;
  if (tenant_in_path && !kind->tenant_scoped) {
    return http::Response::Error(404, "not_found", plural + " are cluster-scoped: use /api/v1/" + plural);
  }
  const bool watch = req.Query("watch") == "true" || req.Query("watch") == "1";
  const char* verb = watch ? "watch" : "list";
  std::optional<std::vector<std::string>> visible;
  if (kind->tenant_scoped && !tenant_in_path) {
    visible = auth_->VisibleTenants(c.who, verb, plural);
    if (visible && visible->empty()) {
      Audit(c, verb, plural, "", "", false, "no tenant visible", 403);
      return http::Response::Error(403, "permission_denied",
                                   "user " + c.who.user + " may not " + verb + " " + plural + " in any tenant");
    }
  } else if (plural == "tenants") {
    if (!auth_->Authorize(c.who, verb, "tenants", "").allowed) {
      visible = std::vector<std::string>{};
      // Tenant members see their own tenants.
      StatusOr<store::ListResult> all = store_->List({.kind = "Tenant"});
      if (all.ok()) {
        for (const json& t : all->items) {
          std::string name = t["metadata"]["name"];
          if (auth_->Authorize(c.who, "get", "tenants", name).allowed) visible->push_back(name);
        }
      }
    }
  } else if (plural == "apikeys" && !auth_->Authorize(c.who, verb, "apikeys", "").allowed) {
    // Without a cluster-wide grant a caller lists only its own keys, if some tenant binding
    // lets it list keys at all (developer, tenant-admin).
    std::optional<std::vector<std::string>> where = auth_->VisibleTenants(c.who, verb, "apikeys");
    if (where && where->empty() && !Allow(c, verb, plural, tenant, "", &denied)) return denied;
  } else if (!Allow(c, verb, plural, tenant, "", &denied)) {
    return denied;
  }
  if (watch) return Watch(req, c, std::string(kind->kind), tenant_in_path ? tenant : "", visible);

  StatusOr<int64_t> limit = ParseInt(req.Query("limit", "0"), "limit");
  if (!limit.ok()) return Error(limit.status());
  json items = json::array();
  std::string next;
  int64_t rv = 0;
  auto read = [&](std::optional<std::string> t, int64_t lim, const std::string& token) -> Status {
    store::ListOptions o{.kind = std::string(kind->kind), .tenant = t,
                         .label_selector = req.Query("labelSelector"), .limit = lim,
                         .continue_token = token};
    StatusOr<store::ListResult> page = store_->List(o);
    if (!page.ok()) return page.status();
    for (json& it : page->items) {
      if (plural == "apikeys" && !auth_->Authorize(c.who, "list", "apikeys", "").allowed &&
          it["spec"].value("user", "") != c.who.user) {
        continue;  // without a cluster-wide grant a caller lists only its own keys
      }
      if (plural == "tenants" && visible &&
          std::find(visible->begin(), visible->end(), it["metadata"]["name"].get<std::string>()) == visible->end()) {
        continue;
      }
      items.push_back(Redact(std::move(it)));
    }
    next = page->continue_token;
    rv = page->resource_version;
    return OkStatus();
  };
  Status st;
  if (kind->tenant_scoped && !tenant_in_path && visible) {
    for (const std::string& t : *visible) {
      st = read(t, 0, "");
      if (!st.ok()) break;
    }
    next.clear();
  } else {
    std::optional<std::string> t;
    if (tenant_in_path) t = tenant;
    st = read(t, *limit, req.Query("continue"));
  }
  if (!st.ok()) return Error(st);
  json out = {{"apiVersion", "aicloud/v1"}, {"kind", std::string(kind->kind) + "List"},
              {"metadata", {{"resourceVersion", std::to_string(rv)}}}, {"items", items}};
  if (!next.empty()) out["metadata"]["continue"] = next;
  return http::Response::Json(200, out);
}

http::Response Api::Watch(http::Request& req, Call& /*call*/, const std::string& kind,
                          const std::string& tenant,
                          std::optional<std::vector<std::string>> visible) {
  StatusOr<int64_t> from = ParseInt(req.Query("resourceVersion", "0"), "resourceVersion");
  if (!from.ok()) return Error(from.status());
  int64_t after = *from > 0 ? *from : store_->Revision();
  StatusOr<int64_t> timeout = ParseInt(req.Query("timeoutSeconds", "300"), "timeoutSeconds");
  if (!timeout.ok()) return Error(timeout.status());
  http::Response resp;
  resp.content_type = "text/event-stream";
  resp.headers.emplace_back("Cache-Control", "no-cache");
  store::Store* store = store_;
  const int64_t limit_s = std::clamp<int64_t>(*timeout, 1, 3600);
  resp.stream = [store, kind, tenant, visible, after, limit_s](http::StreamWriter& out) mutable {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(limit_s);
    while (!out.closed() && std::chrono::steady_clock::now() < deadline) {
      StatusOr<store::ChangesResult> ch = store->Changes(kind, after, 500);
      if (!ch.ok()) {
        out.SendEvent("ERROR", json({{"error", {{"code", "gone"}, {"message", ch.status().message()}}}}).dump());
        return;
      }
      for (const store::WatchEvent& e : ch->events) {
        const std::string t = e.object["metadata"].value("tenant", "");
        if (!tenant.empty() && t != tenant) continue;
        if (visible && std::find(visible->begin(), visible->end(), t) == visible->end()) continue;
        json o = Redact(e.object);
        if (!out.SendEvent(store::EventTypeName(e.type), json({{"type", store::EventTypeName(e.type)}, {"object", o}}).dump(),
                           std::to_string(e.resource_version))) {
          return;
        }
      }
      after = ch->resource_version;
      if (ch->events.empty()) {
        store->WaitForRevision(after, std::chrono::milliseconds(1000));
        if (!out.Write(": keep-alive\n\n")) return;
      }
    }
  };
  return resp;
}

Status Api::AdmitJob(const json& job, std::string* warning) {
  return control::AdmitJob(store_, control_, job, warning);
}

http::Response Api::Create(http::Request& req, const std::string& plural, const std::string& tenant) {
  Call& c = *current_call;
  http::Response denied;
  const KindInfo* kind = KindOrNotFound(plural, &denied);
  if (kind == nullptr) return denied;
  if (!Allow(c, "create", plural, tenant, "", &denied)) return denied;
  if (!kind->user_writable) {
    return http::Response::Error(405, "method_not_allowed", std::string(kind->kind) + " objects are written by the server only");
  }
  StatusOr<json> body = ParseBody(req);
  if (!body.ok()) return Error(body.status());
  json& o = *body;
  if (!o.is_object()) return BadRequest("request body: expected an object");
  if (!o.contains("kind")) o["kind"] = kind->kind;
  if (!o.contains("apiVersion")) o["apiVersion"] = kApiVersion;
  if (o["kind"] != kind->kind) {
    return BadRequest("kind: \"" + o["kind"].dump() + "\" does not match the URL (" + std::string(kind->kind) + ")", "kind");
  }
  if (o.contains("metadata") && o["metadata"].is_object()) {
    json& meta = o["metadata"];
    if (kind->tenant_scoped) {
      if (meta.contains("tenant") && meta["tenant"] != tenant) {
        return BadRequest("metadata.tenant: \"" + meta["tenant"].dump() + "\" does not match the URL tenant \"" + tenant + "\"", "metadata.tenant");
      }
      if (!tenant.empty()) meta["tenant"] = tenant;
    }
  }
  o.erase("status");  // the server owns status
  Status valid = ValidateObject(o);
  if (!valid.ok()) return Error(valid);
  const std::string name = o["metadata"]["name"];
  std::string warning;
  if (kind->kind == "Deployment") {
    StatusOr<DeploymentSpec> d = ParseDeploymentSpec(o.value("spec", json::object()), name);
    if (!d.ok()) return Error(d.status());
  }
  if (kind->kind == "Job") {
    if (Status owned = ReplicaLabelsKept(json(), o); !owned.ok()) return Error(owned);
    Status admit = AdmitJob(o, &warning);
    if (!admit.ok()) {
      Audit(c, "create", plural, tenant, name, false, admit.message(), http::HttpStatusOf(admit));
      return Error(admit);
    }
  }
  StatusOr<json> made = store_->Create(o);
  Audit(c, "create", plural, tenant, name, true, made.ok() ? warning : made.status().message(),
        made.ok() ? 201 : http::HttpStatusOf(made.status()));
  if (!made.ok()) return Error(made.status());
  if (kind->kind == "Job" || kind->kind == "Tenant") control_->Wake();
  http::Response resp = http::Response::Json(201, Redact(*made));
  if (!warning.empty()) resp.headers.emplace_back("Warning", "299 - \"" + warning + "\"");
  return resp;
}

http::Response Api::Get(http::Request& req, const std::string& plural, const std::string& tenant,
                        const std::string& name) {
  (void)req;
  Call& c = *current_call;
  http::Response denied;
  const KindInfo* kind = KindOrNotFound(plural, &denied);
  if (kind == nullptr) return denied;
  const std::string scope = plural == "tenants" ? name : tenant;
  if (!Allow(c, "get", plural, scope, name, &denied)) return denied;
  StatusOr<json> o = store_->Get({std::string(kind->kind), tenant, name});
  if (!o.ok()) return Error(o.status());
  if (plural == "apikeys" && (*o)["spec"].value("user", "") != c.who.user &&
      !auth_->Authorize(c.who, "get", "apikeys", "").allowed) {
    return http::Response::Error(404, "not_found", "ApiKey " + name + " not found");
  }
  json out = Redact(*o);
  if (plural == "nodes") {
    json rt = control_->NodeRuntime();
    if (rt.contains(name)) out["status"]["runtime"] = rt[name];
  }
  return http::Response::Json(200, out);
}

http::Response Api::Replace(http::Request& req, const std::string& plural, const std::string& tenant,
                            const std::string& name) {
  Call& c = *current_call;
  http::Response denied;
  const KindInfo* kind = KindOrNotFound(plural, &denied);
  if (kind == nullptr) return denied;
  const std::string scope = plural == "tenants" ? name : tenant;
  if (!Allow(c, "update", plural, scope, name, &denied)) return denied;
  if (!kind->user_writable) {
    return http::Response::Error(405, "method_not_allowed", std::string(kind->kind) + " objects are written by the server only");
  }
  StatusOr<json> body = ParseBody(req);
  if (!body.ok()) return Error(body.status());
  json& o = *body;
  if (!o.is_object()) return BadRequest("request body: expected an object");
  if (!o.contains("kind")) o["kind"] = kind->kind;
  if (!o.contains("apiVersion")) o["apiVersion"] = kApiVersion;
  if (o.contains("metadata") && o["metadata"].is_object()) {
    if (kind->tenant_scoped && !tenant.empty()) o["metadata"]["tenant"] = tenant;
    if (o["metadata"].value("name", name) != name) {
      return BadRequest("metadata.name: does not match the URL (" + name + ")", "metadata.name");
    }
  }
  Status valid = ValidateObject(o);
  if (!valid.ok()) return Error(valid);
  if (kind->kind == "Deployment") {
    StatusOr<DeploymentSpec> d = ParseDeploymentSpec(o.value("spec", json::object()), name);
    if (!d.ok()) return Error(d.status());
  }
  StatusOr<json> cur = store_->Get({std::string(kind->kind), tenant, name});
  if (!cur.ok()) return Error(cur.status());
  if (kind->kind == "Job") {
    if (Status owned = ReplicaLabelsKept(*cur, o); !owned.ok()) return Error(owned);
  }
  // The server owns status; Jobs keep their spec (cancel and re-create to change it).
  if (cur->contains("status")) o["status"] = (*cur)["status"];
  else o.erase("status");
  if (kind->kind == "Job" && o.value("spec", json::object()) != cur->value("spec", json::object())) {
    return http::Response::Error(422, "invalid_argument", "spec: a Job's spec cannot change; cancel it and create a new one", "spec");
  }
  int64_t expected = store::ResourceVersionOf(o);
  StatusOr<json> w = store_->Update(o, expected);
  Audit(c, "update", plural, tenant, name, true, w.ok() ? "" : w.status().message(),
        w.ok() ? 200 : http::HttpStatusOf(w.status()));
  if (!w.ok()) return Error(w.status());
  control_->Wake();
  return http::Response::Json(200, Redact(*w));
}

http::Response Api::Delete(http::Request& req, const std::string& plural, const std::string& tenant,
                           const std::string& name) {
  Call& c = *current_call;
  http::Response denied;
  const KindInfo* kind = KindOrNotFound(plural, &denied);
  if (kind == nullptr) return denied;
  const std::string scope = plural == "tenants" ? name : tenant;
  if (!Allow(c, "delete", plural, scope, name, &denied)) return denied;
  if (kind->kind == "AuditRecord") {
    return http::Response::Error(405, "method_not_allowed", "audit records cannot be deleted");
  }
  StatusOr<int64_t> expected = ParseInt(req.Query("resourceVersion", "0"), "resourceVersion");
  if (!expected.ok()) return Error(expected.status());
  StatusOr<json> gone = store_->Delete({std::string(kind->kind), tenant, name}, *expected);
  Audit(c, "delete", plural, tenant, name, true, gone.ok() ? "" : gone.status().message(),
        gone.ok() ? 200 : http::HttpStatusOf(gone.status()));
  if (!gone.ok()) return Error(gone.status());
  control_->Wake();
  return http::Response::Json(200, Redact(*gone));
}

}  // namespace aicloud::control
