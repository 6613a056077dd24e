// Client verbs of `aicloud`: login, apply, get, describe, delete, label, rollout, logs, cancel, cordon,
// uncordon, drain, usage, audit, key, whoami. They speak the REST API (docs/api.md) with the credentials
// saved by `aicloud login` (or `aicloud up`) in $AICLOUD_CONFIG, default ~/.aicloud/config.json.
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "control/deployment_controller.h"
#include "control/manifest.h"
#include "http/client.h"

namespace aicloud::cli {
namespace {

using nlohmann::json;

struct ClientFlags {
  std::string server, token, tenant, ca_file;
  bool all_tenants = false;
};

std::string ConfigPath() {
  if (const char* p = std::getenv("AICLOUD_CONFIG")) return p;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.aicloud/config.json";
}

json LoadConfig() {
  std::ifstream in(ConfigPath());
  if (!in) return json::object();
  json j = json::parse(in, nullptr, false);
  return j.is_object() ? j : json::object();
}

struct Conn {
  std::unique_ptr<http::Client> client;
  http::Headers headers;
  std::string tenant;
};

StatusOr<Conn> Connect(const ClientFlags& f) {
  json cfg = LoadConfig();
  std::string server = !f.server.empty() ? f.server
                       : std::getenv("AICLOUD_SERVER") ? std::getenv("AICLOUD_SERVER")
                                                        : cfg.value("server", "");
  std::string token = !f.token.empty() ? f.token
                      : std::getenv("AICLOUD_TOKEN") ? std::getenv("AICLOUD_TOKEN")
                                                      : cfg.value("token", "");
  if (server.empty()) {
    return FailedPreconditionError("no server: run `aicloud login --server URL --token T` or `aicloud up`");
  }
  Conn c;
  http::ClientOptions o;
  o.ca_file = !f.ca_file.empty() ? f.ca_file : cfg.value("caFile", "");
  c.client = std::make_unique<http::Client>(server, o);
  if (!token.empty()) c.headers.push_back({"Authorization", "Bearer " + token});
  c.headers.push_back({"Content-Type", "application/json"});
  c.tenant = !f.tenant.empty() ? f.tenant : cfg.value("tenant", "");
  return c;
}

// Sends and decodes; non-2xx → a Status carrying the server's error message.
StatusOr<json> Call(Conn& c, const std::string& method, const std::string& target,
                    const std::string& body = "", int* status_out = nullptr) {
  StatusOr<http::ClientResponse> r = c.client->Send(method, target, body, c.headers);
  if (!r.ok()) return r.status();
  if (status_out) *status_out = r->status;
  json j = json::parse(r->body, nullptr, false);
  if (r->status >= 200 && r->status < 300) {
    if (j.is_discarded()) return json(r->body);
    return j;
  }
  std::string msg = j.is_object() && j.contains("error") ? j["error"].value("message", r->body) : r->body;
  std::string field = j.is_object() && j.contains("error") ? j["error"].value("field", "") : "";
  StatusCode code = r->status == 404 ? StatusCode::kNotFound
                    : r->status == 409 ? StatusCode::kAlreadyExists
                    : r->status == 401 ? StatusCode::kUnauthenticated
                    : r->status == 403 ? StatusCode::kPermissionDenied
                                       : StatusCode::kInvalidArgument;
  if (r->status == 409 && j.is_object() && j.contains("error") && j["error"].value("code", "") == "aborted") {
    code = StatusCode::kAborted;
  }
  return Status(code, "HTTP " + std::to_string(r->status) + ": " + msg);
}

void AddConnFlags(CLI::App* cmd, ClientFlags* f, bool tenant = true) {
  cmd->add_option("--server", f->server, "server URL (default: from aicloud login)");
  cmd->add_option("--token", f->token, "API key (default: from aicloud login)");
  cmd->add_option("--ca-file", f->ca_file, "CA certificate for an https server");
  if (tenant) {
    cmd->add_option("-t,--tenant", f->tenant, "tenant (default: from aicloud login)");
    cmd->add_flag("-A,--all-tenants", f->all_tenants, "every tenant you may see");
  }
}

int Fail(const Status& st) {
  std::cerr << "error: " << st.message() << "\n";
  return 1;
}

std::string Path(const control::KindInfo& k, const std::string& tenant, const std::string& name = "") {
  std::string p = "/api/v1/";
  if (k.tenant_scoped && !tenant.empty()) p += "tenants/" + tenant + "/";
  p += std::string(k.plural);
  if (!name.empty()) p += "/" + name;
  return p;
}

void EmitYaml(YAML::Emitter& out, const json& j) {
  if (j.is_object()) {
    out << YAML::BeginMap;
    for (const auto& [k, v] : j.items()) {
      out << YAML::Key << k << YAML::Value;
      EmitYaml(out, v);
    }
    out << YAML::EndMap;
  } else if (j.is_array()) {
    out << YAML::BeginSeq;
    for (const json& v : j) EmitYaml(out, v);
    out << YAML::EndSeq;
  } else if (j.is_string()) {
    out << YAML::DoubleQuoted << j.get<std::string>();
  } else if (j.is_null()) {
    out << YAML::Null;
  } else {
    out << j.dump();
  }
}

std::string ToYaml(const json& j) {
  YAML::Emitter out;
  EmitYaml(out, j);
  return std::string(out.c_str()) + "\n";
}

std::string Age(const std::string& created) {
  std::tm tm{};
  if (created.size() < 19 || strptime(created.substr(0, 19).c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) return "?";
  int64_t s = static_cast<int64_t>(std::time(nullptr) - timegm(&tm));
  if (s < 0) s = 0;
  if (s < 120) return std::to_string(s) + "s";
  if (s < 7200) return std::to_string(s / 60) + "m";
  if (s < 172800) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w;
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], r[i].size());
    }
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(w[i] - r[i].size() + 3, ' ');
    }
    std::cout << line << "\n";
  }
}

std::vector<std::string> Row(const json& o, const std::string& kind, bool wide) {
  const json m = o.value("metadata", json::object());
  const json s = o.value("spec", json::object());
  const json st = o.value("status", json::object());
  std::string name = m.value("name", ""), tenant = m.value("tenant", ""), age = Age(m.value("createdAt", ""));
  if (kind == "Job") {
    std::string nodes;
    for (const json& w : st.value("workers", json::array())) nodes += (nodes.empty() ? "" : ",") + w.value("node", "");
    std::vector<std::string> r = {name, tenant, st.value("phase", "Pending"),
                                  std::to_string(st.value("attempt", 0)), std::to_string(s.value("workers", 1)),
                                  nodes.empty() ? "-" : nodes, age};
    if (wide) r.push_back(st.value("message", ""));
    return r;
  }
  if (kind == "Node") {
    json gpus = s.value("gpus", json::array());
    std::string model = gpus.empty() ? "-" : gpus[0].value("model", "?");
    std::string phase = st.value("phase", "Unknown");
    if (s.value("unschedulable", false)) phase += ",SchedulingDisabled";
    return {name, phase, std::to_string(gpus.size()), model, std::to_string(s.value("cpuMillis", 0) / 1000), age};
  }
  if (kind == "Tenant") return {name, s.value("sleeping", false) ? "true" : "false", age};
  if (kind == "Deployment") {
    const json c = st.value("canary", json());
    std::string canary = "-";
    if (c.is_object()) canary = c.value("revision", "") + " " + std::to_string(c.value("weight", 0)) + "%";
    // The last minute against the SLO (status.observed), when the replicas served anything.
    const json seen = st.value("observed", json());
    std::string ttft = "-", within = "-";
    if (seen.is_object() && seen.contains("ttftP99Ms") && seen["ttftP99Ms"].is_number()) {
      ttft = std::to_string(std::llround(seen["ttftP99Ms"].get<double>())) + "ms";
    }
    if (seen.is_object() && seen.contains("ttftWithinSlo") && seen["ttftWithinSlo"].is_number()) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "%.1f%%", seen["ttftWithinSlo"].get<double>() * 100);
      within = buf;
    }
    return {name, tenant, std::to_string(st.value("readyReplicas", 0)) + "/" + std::to_string(st.value("desiredReplicas", 0)),
            st.value("revision", "-"), canary, ttft, within, age};
  }
  if (kind == "Event") {
    return {age, tenant, s.value("type", ""), s.value("reason", ""),
            s.value("involvedObject", json::object()).value("name", ""), s.value("message", "")};
  }
  if (kind == "AuditRecord") {
    return {std::to_string(s.value("seq", 0)), s.value("time", ""), s.value("user", ""), s.value("verb", ""),
            s.value("resource", ""), s.value("tenant", ""), s.value("name", ""), s.value("decision", ""),
            std::to_string(s.value("httpStatus", 0))};
  }
  return {name, tenant, age};
}

std::vector<std::string> Header(const std::string& kind, bool wide) {
  if (kind == "Job") {
    std::vector<std::string> h = {"NAME", "TENANT", "PHASE", "ATTEMPT", "WORKERS", "NODES", "AGE"};
    if (wide) h.push_back("MESSAGE");
    return h;
  }
  if (kind == "Node") return {"NAME", "STATUS", "GPUS", "MODEL", "CPUS", "AGE"};
  if (kind == "Tenant") return {"NAME", "SLEEPING", "AGE"};
  if (kind == "Deployment") return {"NAME", "TENANT", "READY", "REVISION", "CANARY", "TTFT-P99", "TTFT-IN-SLO", "AGE"};
  if (kind == "Event") return {"AGE", "TENANT", "TYPE", "REASON", "OBJECT", "MESSAGE"};
  if (kind == "AuditRecord") return {"SEQ", "TIME", "USER", "VERB", "RESOURCE", "TENANT", "NAME", "DECISION", "STATUS"};
  return {"NAME", "TENANT", "AGE"};
}

StatusOr<std::string> ReadInput(const std::string& file) {
  std::stringstream ss;
  if (file == "-") {
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return NotFoundError(file + ": cannot open");
  ss << in.rdbuf();
  return ss.str();
}

int Apply(const ClientFlags& f, const std::vector<std::string>& files) {
  StatusOr<Conn> c = Connect(f);
  if (!c.ok()) return Fail(c.status());
  int failures = 0;
  for (const std::string& file : files) {
    StatusOr<std::string> text = ReadInput(file);
    if (!text.ok()) return Fail(text.status());
    StatusOr<std::vector<control::Manifest>> docs = control::ParseManifests(*text, file);
    if (!docs.ok()) return Fail(docs.status());
    for (control::Manifest& d : *docs) {
      json& o = d.object;
      const std::string where = file + ":" + std::to_string(d.line);
      const control::KindInfo* k = control::FindKind(o.value("kind", ""));
      if (k == nullptr) {
        std::cerr << where << ": kind: unknown kind " << o.value("kind", json("")).dump() << "\n";
        ++failures;
        continue;
      }
      json& meta = o["metadata"];
      if (!meta.is_object()) meta = json::object();
      if (k->tenant_scoped && k->kind != "RoleBinding" && !meta.contains("tenant") && !c->tenant.empty()) {
        meta["tenant"] = c->tenant;
      }
      const std::string tenant = meta.value("tenant", "");
      const std::string name = meta.value("name", "");
      std::string lower(k->kind);
      for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      const std::string label = lower + "/" + name;
      StatusOr<json> made = Call(*c, "POST", Path(*k, tenant), o.dump());
      if (made.ok()) {
        std::cout << label << " created\n";
        continue;
      }
      if (made.status().code() != StatusCode::kAlreadyExists) {
        std::cerr << where << ": " << label << ": " << made.status().message() << "\n";
        ++failures;
        continue;
      }
      StatusOr<json> cur = Call(*c, "GET", Path(*k, tenant, name));
      if (!cur.ok()) {
        std::cerr << where << ": " << label << ": " << cur.status().message() << "\n";
        ++failures;
        continue;
      }
      json want = o;
      want["metadata"]["resourceVersion"] = (*cur)["metadata"]["resourceVersion"];
      if (want.value("spec", json::object()) == cur->value("spec", json::object()) &&
          want["metadata"].value("labels", json::object()) == (*cur)["metadata"].value("labels", json::object())) {
        std::cout << label << " unchanged\n";
        continue;
      }
      StatusOr<json> upd = Call(*c, "PUT", Path(*k, tenant, name), want.dump());
      if (!upd.ok()) {
        std::cerr << where << ": " << label << ": " << upd.status().message() << "\n";
        ++failures;
        continue;
      }
      std::cout << label << " configured\n";
    }
  }
  return failures == 0 ? 0 : 1;
}

int Get(const ClientFlags& f, const std::string& what, const std::string& name, const std::string& output,
        const std::string& selector) {
  StatusOr<Conn> c = Connect(f);
  if (!c.ok()) return Fail(c.status());
  const control::KindInfo* k = control::FindKindLoose(what);
  if (k == nullptr) return Fail(InvalidArgumentError("unknown resource type \"" + what + "\""));
  const std::string tenant = f.all_tenants ? "" : c->tenant;
  std::string target = Path(*k, tenant, name);
  if (name.empty() && !selector.empty()) target += "?labelSelector=" + selector;
  StatusOr<json> r = Call(*c, "GET", target);
  if (!r.ok()) return Fail(r.status());
  if (output == "json") {
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  if (output == "yaml") {
    std::cout << ToYaml(*r);
    return 0;
  }
  std::vector<json> items = name.empty() ? r->value("items", json::array()).get<std::vector<json>>()
                                         : std::vector<json>{*r};
  if (items.empty()) {
    std::cout << "No " << k->plural << " found" << (tenant.empty() ? "" : " in tenant " + tenant) << ".\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {Header(std::string(k->kind), output == "wide")};
  for (const json& o : items) rows.push_back(Row(o, std::string(k->kind), output == "wide"));
  PrintTable(rows);
  return 0;
}

int Describe(const ClientFlags& f, const std::string& what, const std::string& name) {
  StatusOr<Conn> c = Connect(f);
  if (!c.ok()) return Fail(c.status());
  const control::KindInfo* k = control::FindKindLoose(what);
  if (k == nullptr) return Fail(InvalidArgumentError("unknown resource type \"" + what + "\""));
  StatusOr<json> r = Call(*c, "GET", Path(*k, c->tenant, name));
  if (!r.ok()) return Fail(r.status());
  // A Deployment's learned profile is hundreds of numbers: summarized below instead (`aicloud get
  // deployment NAME -o yaml` shows them).
  std::string forecast;
  if (k->kind == "Deployment" && r->contains("status") && (*r)["status"].is_object() &&
      (*r)["status"].contains("forecast")) {
    json& fc = (*r)["status"]["forecast"];
    forecast = control::DescribeForecast(fc);
    for (const char* key : {"profile", "peaks", "burstDays"}) {
      if (fc.is_object()) fc.erase(key);
    }
  }
  std::cout << ToYaml(*r) << forecast;
  if (k->tenant_scoped && !c->tenant.empty()) {
    StatusOr<json> ev = Call(*c, "GET", "/api/v1/tenants/" + c->tenant + "/events");
    if (ev.ok()) {
      std::vector<std::vector<std::string>> rows = {{"AGE", "TYPE", "REASON", "MESSAGE"}};
      for (const json& e : ev->value("items", json::array())) {
        const json s = e.value("spec", json::object());
        if (s.value("involvedObject", json::object()).value("name", "") != name) continue;
        rows.push_back({Age(e["metadata"].value("createdAt", "")), s.value("type", ""), s.value("reason", ""),
                        s.value("message", "")});
      }
      std::cout << "Events:\n";
      if (rows.size() == 1) std::cout << "  <none>\n";
      else PrintTable(rows);
    }
  }
  return 0;
}

int Simple(const ClientFlags& f, const std::string& method, const std::string& target,
           const std::string& ok_message, const std::string& body = "") {
  StatusOr<Conn> c = Connect(f);
  if (!c.ok()) return Fail(c.status());
  StatusOr<json> r = Call(*c, method, target, body);
  if (!r.ok()) return Fail(r.status());
  std::cout << ok_message << "\n";
  return 0;
}

// `aicloud label KIND NAME KEY=VALUE... KEY-...`: reads the object, changes its labels, writes it
// back at the version read (a concurrent write makes it read and try again).
int Label(const ClientFlags& f, const std::string& what, const std::string& name,
          const std::vector<std::string>& changes, bool overwrite) {
  const control::KindInfo* k = control::FindKindLoose(what);
  if (k == nullptr) return Fail(InvalidArgumentError("unknown resource type \"" + what + "\""));
  std::map<std::string, std::optional<std::string>> want;  // nullopt: remove
  for (const std::string& c : changes) {
    const size_t eq = c.find('=');
    std::string key;
    std::optional<std::string> value;
    if (eq == std::string::npos && c.size() > 1 && c.back() == '-') {
      key = c.substr(0, c.size() - 1);
    } else if (eq != std::string::npos && eq > 0) {
      key = c.substr(0, eq);
      value = c.substr(eq + 1);
    } else {
      return Fail(InvalidArgumentError("label \"" + c + "\": expected KEY=VALUE to set or KEY- to remove"));
    }
    auto [it, fresh] = want.emplace(key, value);
    if (!fresh && it->second != value) {
      return Fail(InvalidArgumentError("label " + key + " is given twice with different changes"));
    }
  }
  if (want.empty()) return Fail(InvalidArgumentError("no labels given: KEY=VALUE to set, KEY- to remove"));
  StatusOr<Conn> c = Connect(f);
  if (!c.ok()) return Fail(c.status());
  const std::string path = Path(*k, c->tenant, name);
  for (int tries = 0;; ++tries) {
    StatusOr<json> cur = Call(*c, "GET", path);
    if (!cur.ok()) return Fail(cur.status());
    json o = *cur;
    json& labels = o["metadata"]["labels"];
    if (!labels.is_object()) labels = json::object();
    bool changed = false;
    for (const auto& [key, value] : want) {
      if (!value) {
        changed |= labels.erase(key) > 0;
        continue;
      }
      if (labels.contains(key) && labels[key] != *value && !overwrite) {
        return Fail(InvalidArgumentError("label " + key + " is already \"" + labels[key].get<std::string>() +
                                         "\" on " + std::string(k->kind) + " " + name + "; --overwrite replaces it"));
      }
      changed |= !labels.contains(key) || labels[key] != *value;
      labels[key] = *value;
    }
    if (!changed) {
      std::cout << k->plural << "/" << name << " not labelled (no change)\n";
      return 0;
    }
    if (labels.empty()) o["metadata"].erase("labels");
    StatusOr<json> w = Call(*c, "PUT", path, o.dump());
    if (w.ok()) {
      std::cout << k->plural << "/" << name << " labelled\n";
      return 0;
    }
    if (w.status().code() != StatusCode::kAborted || tries >= 4) return Fail(w.status());
  }
}

int Logs(const ClientFlags& f, const std::string& job, int worker, bool follow) {
  StatusOr<Conn> c = Connect(f);
  if (!c.ok()) return Fail(c.status());
  if (c->tenant.empty()) return Fail(InvalidArgumentError("no tenant: pass -t TENANT"));
  std::string target = "/api/v1/tenants/" + c->tenant + "/jobs/" + job + "/logs?worker=" + std::to_string(worker);
  if (!follow) {
    StatusOr<http::ClientResponse> r = c->client->Send("GET", target, "", c->headers);
    if (!r.ok()) return Fail(r.status());
    if (r->status != 200) {
      json j = json::parse(r->body, nullptr, false);
      return Fail(InvalidArgumentError(j.is_object() && j.contains("error") ? j["error"].value("message", r->body) : r->body));
    }
    std::cout << r->body;
    return 0;
  }
  http::ClientResponse head;
  Status st = c->client->Stream("GET", target + "&follow=true", "", c->headers,
                                [](std::string_view chunk) {
                                  std::cout.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
                                  std::cout.flush();
                                  return true;
                                },
                                &head);
  if (!st.ok()) return Fail(st);
  if (head.status != 200) return Fail(InvalidArgumentError("HTTP " + std::to_string(head.status)));
  return 0;
}

// `rollout history|undo`: a Deployment's revisions live in its status.history (the controller
// records each template with the spec that made it); undo writes one back as the spec.
StatusOr<json> GetDeployment(Conn& c, const std::string& name) {
  if (c.tenant.empty()) return InvalidArgumentError("no tenant: pass -t TENANT");
  return Call(c, "GET", "/api/v1/tenants/" + c.tenant + "/deployments/" + name);
}

int RolloutHistory(const ClientFlags& f, const std::string& name) {
  StatusOr<Conn> c = Connect(f);
  if (!c.ok()) return Fail(c.status());
  StatusOr<json> d = GetDeployment(*c, name);
  if (!d.ok()) return Fail(d.status());
  const json st = d->value("status", json::object());
  const json history = st.value("history", json::array());
  if (history.empty()) {
    std::cout << "deployment/" << name << " has no recorded revisions yet (the controller writes them).\n";
    return 0;
  }
  const std::string current = st.value("revision", ""), stable = st.value("stableRevision", "");
  std::vector<std::vector<std::string>> rows = {{"REVISION", "CREATED", "MODEL", "STATE"}};
  for (const json& h : history) {
    const std::string rev = h.value("revision", "");
    std::string state = rev == current && rev == stable ? "current"
                        : rev == current                 ? "rolling out"
                        : rev == stable                  ? "stable"
                                                         : "";
    if (rev == current && st.contains("canary")) state = "canary " + std::to_string(st["canary"].value("weight", 0)) + "%";
    rows.push_back({rev, h.value("createdAt", ""), h.value("spec", json::object()).value("model", ""), state.empty() ? "-" : state});
  }
  PrintTable(rows);
  return 0;
}

Status RolloutUndoOnce(Conn& conn, const std::string& name, const std::string& to_revision, int* rc);

int RolloutUndo(const ClientFlags& f, const std::string& name, const std::string& to_revision) {
  StatusOr<Conn> c = Connect(f);
  if (!c.ok()) return Fail(c.status());
  // The controller writes status every few seconds, so the PUT can lose the race for the
  // resource version: read again and retry.
  for (int attempt = 0;; ++attempt) {
    int rc = 0;
    Status st = RolloutUndoOnce(*c, name, to_revision, &rc);
    if (st.code() == StatusCode::kAborted && attempt < 5) continue;
    return st.ok() ? rc : Fail(st);
  }
}

Status RolloutUndoOnce(Conn& conn, const std::string& name, const std::string& to_revision, int* rc) {
  Conn* c = &conn;
  StatusOr<json> d = GetDeployment(*c, name);
  if (!d.ok()) return d.status();
  const json st = d->value("status", json::object());
  const json history = st.value("history", json::array());
  const std::string current = st.value("revision", ""), stable = st.value("stableRevision", "");
  std::string target = to_revision;
  if (target.empty()) {
    if (!stable.empty() && stable != current) {
      target = stable;  // a canary or rolling update in progress: back to what ran before it
    } else {
      for (size_t i = 1; i < history.size(); ++i) {
        if (history[i].value("revision", "") == current) target = history[i - 1].value("revision", "");
      }
    }
    if (target.empty()) return FailedPreconditionError("deployment/" + name + " has no earlier revision to roll back to");
  }
  const json* entry = nullptr;
  std::string known;
  for (const json& h : history) {
    known += (known.empty() ? "" : ", ") + h.value("revision", "");
    if (h.value("revision", "") == target) entry = &h;
  }
  if (entry == nullptr) {
    return NotFoundError("revision " + target + " is not in deployment/" + name + "'s history (" +
                         (known.empty() ? "none recorded" : known) + ")");
  }
  if (target == current) return FailedPreconditionError("deployment/" + name + " already runs revision " + target);
  // The revision's template; how the deployment scales and rolls out stays as it is now.
  json spec = entry->value("spec", json::object());
  const json now = d->value("spec", json::object());
  for (const char* k : {"replicas", "slo", "scaleToZeroSeconds", "autoscaler", "strategy"}) {
    if (now.contains(k)) spec[k] = now[k];
    else spec.erase(k);
  }
  json updated = *d;
  updated["spec"] = spec;
  updated.erase("status");
  StatusOr<json> w = Call(*c, "PUT", "/api/v1/tenants/" + c->tenant + "/deployments/" + name, updated.dump());
  if (!w.ok()) return w.status();
  std::cout << "deployment/" << name << " rolled back to revision " << target << " (was " << current << ")\n";
  *rc = 0;
  return OkStatus();
}

}  // namespace

void AddClient(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<ClientFlags>();

  auto* login = app.add_subcommand("login", "Save the server URL and an API key for later commands");
  AddConnFlags(login, flags.get());
  login->callback([flags, exit_code] {
    if (flags->server.empty() || flags->token.empty()) {
      *exit_code = Fail(InvalidArgumentError("login needs --server URL and --token TOKEN"));
      return;
    }
    StatusOr<Conn> c = Connect(*flags);
    if (!c.ok()) {
      *exit_code = Fail(c.status());
      return;
    }
    StatusOr<json> who = Call(*c, "GET", "/api/v1/whoami");
    if (!who.ok()) {
      *exit_code = Fail(who.status());
      return;
    }
    json cfg = {{"server", flags->server}, {"token", flags->token}};
    if (!flags->tenant.empty()) cfg["tenant"] = flags->tenant;
    if (!flags->ca_file.empty()) cfg["caFile"] = flags->ca_file;
    Status st = SaveClientConfig(cfg);
    if (!st.ok()) {
      *exit_code = Fail(st);
      return;
    }
    std::cout << "logged in to " << flags->server << " as " << (*who)["user"].get<std::string>() << "\n";
  });

  auto files = std::make_shared<std::vector<std::string>>();
  auto* apply = app.add_subcommand("apply", "Create or update the resources in manifest files");
  apply->add_option("-f,--filename", *files, "YAML or JSON manifest (several documents; - for stdin)")->required();
  AddConnFlags(apply, flags.get());
  apply->callback([flags, files, exit_code] { *exit_code = Apply(*flags, *files); });

  auto what = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>("table");
  auto selector = std::make_shared<std::string>();
  auto* get = app.add_subcommand("get", "List resources (jobs, nodes, tenants, events, ...) or show one");
  get->add_option("kind", *what, "resource type")->required();
  get->add_option("name", *name, "one resource");
  get->add_option("-o,--output", *output, "table | wide | yaml | json")
      ->check(CLI::IsMember({"table", "wide", "yaml", "json"}));
  get->add_option("-l,--selector", *selector, "label selector, e.g. team=nlp");
  AddConnFlags(get, flags.get());
  get->callback([=] { *exit_code = Get(*flags, *what, *name, *output, *selector); });

  auto* describe = app.add_subcommand("describe", "Show one resource in full, with its events");
  describe->add_option("kind", *what, "resource type")->required();
  describe->add_option("name", *name, "resource name")->required();
  AddConnFlags(describe, flags.get());
  describe->callback([=] { *exit_code = Describe(*flags, *what, *name); });

  auto* del = app.add_subcommand("delete", "Delete a resource");
  del->add_option("kind", *what, "resource type")->required();
  del->add_option("name", *name, "resource name")->required();
  AddConnFlags(del, flags.get());
  del->callback([=] {
    const control::KindInfo* k = control::FindKindLoose(*what);
    if (k == nullptr) {
      *exit_code = Fail(InvalidArgumentError("unknown resource type \"" + *what + "\""));
      return;
    }
    StatusOr<Conn> c = Connect(*flags);
    std::string tenant = c.ok() ? c->tenant : "";
    *exit_code = Simple(*flags, "DELETE", Path(*k, tenant, *name), std::string(k->plural) + "/" + *name + " deleted");
  });

  auto* rollout = app.add_subcommand("rollout", "Revisions of a Deployment: history, undo");
  rollout->require_subcommand(1);
  auto* rhist = rollout->add_subcommand("history", "List a Deployment's recorded revisions");
  rhist->add_option("deployment", *name, "deployment name")->required();
  AddConnFlags(rhist, flags.get());
  rhist->callback([=] { *exit_code = RolloutHistory(*flags, *name); });
  auto to_revision = std::make_shared<std::string>();
  auto* undo = rollout->add_subcommand(
      "undo", "Roll a Deployment back: to the stable revision during a canary or rollout, else to the previous one");
  undo->add_option("deployment", *name, "deployment name")->required();
  undo->add_option("--to-revision", *to_revision, "a revision from `rollout history`");
  AddConnFlags(undo, flags.get());
  undo->callback([=] { *exit_code = RolloutUndo(*flags, *name, *to_revision); });

  auto worker = std::make_shared<int>(0);
  auto follow = std::make_shared<bool>(false);
  auto* logs = app.add_subcommand("logs", "Print a job worker's output");
  logs->add_option("job", *name, "job name")->required();
  logs->add_option("-w,--worker", *worker, "worker index (default 0)");
  logs->add_flag("-f,--follow", *follow, "keep streaming until the job ends");
  AddConnFlags(logs, flags.get());
  logs->callback([=] { *exit_code = Logs(*flags, *name, *worker, *follow); });

  auto* cancel = app.add_subcommand("cancel", "Cancel a job (its processes get SIGTERM, then SIGKILL)");
  cancel->add_option("job", *name, "job name")->required();
  AddConnFlags(cancel, flags.get());
  cancel->callback([=] {
    StatusOr<Conn> c = Connect(*flags);
    std::string tenant = c.ok() ? c->tenant : "";
    *exit_code = Simple(*flags, "POST", "/api/v1/tenants/" + tenant + "/jobs/" + *name + "/cancel", "job/" + *name + " cancelled");
  });

  for (const char* verb : {"cordon", "uncordon", "drain"}) {
    std::string v = verb;
    auto* cmd = app.add_subcommand(v, v == "drain" ? "Cordon a node and move its jobs elsewhere"
                                    : v == "cordon" ? "Mark a node unschedulable"
                                                    : "Mark a node schedulable again");
    cmd->add_option("node", *name, "node name")->required();
    AddConnFlags(cmd, flags.get(), false);
    cmd->callback([=] {
      *exit_code = Simple(*flags, "POST", "/api/v1/nodes/" + *name + "/" + v,
                          "node/" + *name + (v == "drain" ? " drained" : v == "cordon" ? " cordoned" : " uncordoned"));
    });
  }

  auto label_changes = std::make_shared<std::vector<std::string>>();
  auto overwrite = std::make_shared<bool>(false);
  auto* label = app.add_subcommand(
      "label", "Set (KEY=VALUE) or remove (KEY-) labels of an object, e.g. `aicloud label node gpu-7 aicloud/do-not-disrupt=true`");
  label->add_option("kind", *what, "resource type (nodes, jobs, deployments, ...)")->required();
  label->add_option("name", *name, "object name")->required();
  label->add_option("labels", *label_changes, "KEY=VALUE to set, KEY- to remove")->required();
  label->add_flag("--overwrite", *overwrite, "replace a label that already has another value");
  AddConnFlags(label, flags.get());
  label->callback([=] { *exit_code = Label(*flags, *what, *name, *label_changes, *overwrite); });

  auto since = std::make_shared<std::string>("7d");
  auto* usage = app.add_subcommand(
      "usage", "GPU-seconds, CPU-seconds and cost per tenant and queue; requests and tokens served per model");
  usage->add_option("--since", *since, "window: 7d, 24h, 30m (default 7d)");
  AddConnFlags(usage, flags.get());
  usage->callback([=] {
    StatusOr<Conn> c = Connect(*flags);
    if (!c.ok()) {
      *exit_code = Fail(c.status());
      return;
    }
    std::string target = "/api/v1/usage?since=" + *since;
    if (!flags->all_tenants && !c->tenant.empty()) target += "&tenant=" + c->tenant;
    StatusOr<json> r = Call(*c, "GET", target);
    if (!r.ok()) {
      *exit_code = Fail(r.status());
      return;
    }
    std::vector<std::vector<std::string>> rows = {{"TENANT", "QUEUE", "JOBS", "GPU-HOURS", "CPU-HOURS", "COST-USD"}};
    auto fmt = [](double v) {
      char b[32];
      std::snprintf(b, sizeof b, "%.3f", v);
      return std::string(b);
    };
    for (const auto& [t, row] : (*r)["tenants"].items()) {
      rows.push_back({t, "*", std::to_string(row.value("jobs", 0)), fmt(row.value("gpuSeconds", 0.0) / 3600),
                      fmt(row.value("cpuSeconds", 0.0) / 3600), fmt(row.value("costUsd", 0.0))});
      for (const auto& [q, qr] : row["queues"].items()) {
        rows.push_back({t, q, "", fmt(qr.value("gpuSeconds", 0.0) / 3600), fmt(qr.value("cpuSeconds", 0.0) / 3600),
                        fmt(qr.value("costUsd", 0.0))});
      }
    }
    PrintTable(rows);
    // Serving through the gateways: per tenant and model (ServingUsage objects).
    std::vector<std::vector<std::string>> serving = {
        {"TENANT", "MODEL", "REQUESTS", "ERRORS", "PROMPT-TOKENS", "COMPLETION-TOKENS", "COST", "MEAN-LATENCY"}};
    auto latency = [&](const json& counts) {  // over the answers that were not errors
      const int64_t n = counts.value("requests", int64_t{0}) - counts.value("errors", int64_t{0});
      return n > 0 ? fmt(counts.value("latencySeconds", 0.0) / static_cast<double>(n)) + "s" : std::string("-");
    };
    for (const auto& [t, row] : (*r)["tenants"].items()) {
      if (!row.contains("serving")) continue;
      const json models = row["serving"].value("models", json::object());
      for (const auto& [m, n] : models.items()) {
        serving.push_back({t, m, std::to_string(n.value("requests", int64_t{0})), std::to_string(n.value("errors", int64_t{0})),
                           std::to_string(n.value("promptTokens", int64_t{0})),
                           std::to_string(n.value("completionTokens", int64_t{0})), fmt(n.value("cost", 0.0)), latency(n)});
      }
    }
    if (serving.size() > 1) {
      // Serving usage is kept per UTC day: whole days from the one the window starts in.
      std::cout << "\nserved through the gateways" << ((*r).contains("servingSince")
                                                        ? " since " + (*r)["servingSince"].get<std::string>() + " (UTC)"
                                                        : std::string()) << ":\n";
      PrintTable(serving);
    }
  });

  auto* audit = app.add_subcommand("audit", "Read and verify the hash-chained audit log");
  audit->require_subcommand(1);
  auto* alist = audit->add_subcommand("list", "List audit records");
  AddConnFlags(alist, flags.get(), false);
  alist->callback([=] { *exit_code = Get(*flags, "auditrecords", "", "table", ""); });
  auto* verify = audit->add_subcommand("verify", "Check the chain: fails if a record was edited or deleted");
  AddConnFlags(verify, flags.get(), false);
  verify->callback([=] {
    StatusOr<Conn> c = Connect(*flags);
    if (!c.ok()) {
      *exit_code = Fail(c.status());
      return;
    }
    StatusOr<http::ClientResponse> r = c->client->Send("GET", "/api/v1/audit/verify", "", c->headers);
    if (!r.ok()) {
      *exit_code = Fail(r.status());
      return;
    }
    json j = json::parse(r->body, nullptr, false);
    if (r->status == 200 && j.is_object() && j.value("ok", false)) {
      std::cout << "audit log OK: " << j.value("records", 0) << " records, chain intact\n";
      *exit_code = 0;
    } else {
      std::cerr << "audit log FAILED verification: "
                << (j.is_object() ? j.value("problem", j.dump()) : r->body) << "\n";
      *exit_code = 2;
    }
  });

  auto key_user = std::make_shared<std::string>();
  auto key_roles = std::make_shared<std::vector<std::string>>();
  auto key_expires = std::make_shared<int64_t>(0);
  auto* key = app.add_subcommand("key", "API keys");
  key->require_subcommand(1);
  auto* kc = key->add_subcommand("create", "Create an API key (the token is printed once)");
  kc->add_option("--user", *key_user, "owner (default: you)");
  kc->add_option("--roles", *key_roles, "narrow the key to these roles")->delimiter(',');
  kc->add_option("--expires-in", *key_expires, "seconds until it expires");
  AddConnFlags(kc, flags.get());
  kc->callback([=] {
    StatusOr<Conn> c = Connect(*flags);
    if (!c.ok()) {
      *exit_code = Fail(c.status());
      return;
    }
    json body = json::object();
    if (!key_user->empty()) body["user"] = *key_user;
    if (!flags->tenant.empty()) body["tenant"] = flags->tenant;
    if (!key_roles->empty()) body["roles"] = *key_roles;
    if (*key_expires > 0) body["expiresInSeconds"] = *key_expires;
    StatusOr<json> r = Call(*c, "POST", "/api/v1/apikeys", body.dump());
    if (!r.ok()) {
      *exit_code = Fail(r.status());
      return;
    }
    std::cout << (*r)["token"].get<std::string>() << "\n";
    std::cerr << "key " << (*r)["id"].get<std::string>() << " created; the token above is shown only once\n";
  });
  auto* kr = key->add_subcommand("revoke", "Revoke an API key");
  kr->add_option("id", *name, "key id")->required();
  AddConnFlags(kr, flags.get(), false);
  kr->callback([=] { *exit_code = Simple(*flags, "DELETE", "/api/v1/apikeys/" + *name, "key " + *name + " revoked"); });

  auto* whoami = app.add_subcommand("whoami", "Show who the saved key belongs to");
  AddConnFlags(whoami, flags.get(), false);
  whoami->callback([=] {
    StatusOr<Conn> c = Connect(*flags);
    if (!c.ok()) {
      *exit_code = Fail(c.status());
      return;
    }
    StatusOr<json> r = Call(*c, "GET", "/api/v1/whoami");
    if (!r.ok()) {
      *exit_code = Fail(r.status());
      return;
    }
    std::cout << r->dump() << "\n";
  });
}

Status SaveClientConfig(const nlohmann::json& config) {
  const std::string path = ConfigPath();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::ofstream out(path, std::ios::trunc);
  if (!out) return InternalError("cannot write " + path);
  out << config.dump(2) << "\n";
  out.close();
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::replace, ec);
  return OkStatus();
}

}  // namespace aicloud::cli
