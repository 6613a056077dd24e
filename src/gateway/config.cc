#include "gateway/config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "auth/auth.h"
#include "gateway/budget.h"

namespace aicloud::gateway {
namespace {

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  Status Error(const YAML::Node& n, const std::string& path, const std::string& what) const {
    std::string where = source_;
    if (n.IsDefined() && n.Mark().line >= 0) {
      where += ":" + std::to_string(n.Mark().line + 1) + ":" + std::to_string(n.Mark().column + 1);
    }
    return InvalidArgumentError(where + ": " + path + ": " + what);
  }

  // Rejects fields the schema does not know (a typo should not be silently ignored).
  Status Known(const YAML::Node& map, const std::string& path, std::initializer_list<const char*> fields) const {
    if (!map.IsMap()) return Error(map, path, "want a map");
    for (const auto& kv : map) {
      const std::string k = kv.first.as<std::string>("");
      bool ok = false;
      for (const char* f : fields) ok = ok || k == f;
      if (!ok) {
        std::string list;
        for (const char* f : fields) list += std::string(list.empty() ? "" : ", ") + f;
        return Error(kv.first, path.empty() ? k : path + "." + k, "unknown field (known: " + list + ")");
      }
    }
    return OkStatus();
  }

  Status String(const YAML::Node& map, const char* key, const std::string& path, bool required, std::string* out) const {
    const YAML::Node v = map[key];
    const std::string p = path + "." + key;
    if (!v.IsDefined() || v.IsNull()) {
      if (required) return Error(map, p, "required");
      return OkStatus();
    }
    if (!v.IsScalar() || v.Scalar().empty()) return Error(v, p, "want a non-empty string");
    *out = v.Scalar();
    return OkStatus();
  }

  Status Int(const YAML::Node& map, const char* key, const std::string& path, int64_t* out) const {
    const YAML::Node v = map[key];
    if (!v.IsDefined() || v.IsNull()) return OkStatus();
    int64_t x = 0;
    if (!v.IsScalar() || !YAML::convert<int64_t>::decode(v, x) || x < 0) {
      return Error(v, path + "." + key, "want a non-negative integer");
    }
    *out = x;
    return OkStatus();
  }

  Status Double(const YAML::Node& map, const char* key, const std::string& path, double* out) const {
    const YAML::Node v = map[key];
    if (!v.IsDefined() || v.IsNull()) return OkStatus();
    double x = 0;
    if (!v.IsScalar() || !YAML::convert<double>::decode(v, x) || x < 0) {
      return Error(v, path + "." + key, "want a non-negative number");
    }
    *out = x;
    return OkStatus();
  }

  Status Bool(const YAML::Node& map, const char* key, const std::string& path, bool* out) const {
    const YAML::Node v = map[key];
    if (!v.IsDefined() || v.IsNull()) return OkStatus();
    bool x = false;
    if (!v.IsScalar() || !YAML::convert<bool>::decode(v, x)) return Error(v, path + "." + key, "want true or false");
    *out = x;
    return OkStatus();
  }

  Status Strings(const YAML::Node& map, const char* key, const std::string& path, std::vector<std::string>* out) const {
    const YAML::Node v = map[key];
    if (!v.IsDefined() || v.IsNull()) return OkStatus();
    if (!v.IsSequence()) return Error(v, path + "." + key, "want a list of names");
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].IsScalar() || v[i].Scalar().empty()) {
        return Error(v[i], path + "." + key + "[" + std::to_string(i) + "]", "want a non-empty string");
      }
      out->push_back(v[i].Scalar());
    }
    return OkStatus();
  }

  Status LimitsOf(const YAML::Node& map, const std::string& path, Limits* l) const {
    AICLOUD_RETURN_IF_ERROR(Int(map, "rpm", path, &l->rpm));
    AICLOUD_RETURN_IF_ERROR(Int(map, "tpm", path, &l->tpm));
    const YAML::Node b = map["budget"];
    if (!b.IsDefined() || b.IsNull()) return OkStatus();
    const std::string bp = path + ".budget";
    AICLOUD_RETURN_IF_ERROR(Known(b, bp, {"tokens", "cost", "period"}));
    AICLOUD_RETURN_IF_ERROR(Int(b, "tokens", bp, &l->budget_tokens));
    AICLOUD_RETURN_IF_ERROR(Double(b, "cost", bp, &l->budget_cost));
    std::string period;
    AICLOUD_RETURN_IF_ERROR(String(b, "period", bp, false, &period));
    StatusOr<int64_t> p = ParsePeriod(period);
    if (!p.ok()) return Error(b["period"], bp + ".period", p.status().message());
    l->budget_period_s = *p;
    if (!l->HasBudget()) return Error(b, bp, "give tokens or cost (or leave budget out)");
    return OkStatus();
  }

 private:
  std::string source_;
};

bool ValidHostPort(const std::string& s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) return false;
  for (size_t i = colon + 1; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return s.size() - colon - 1 <= 5 && std::stoi(s.substr(colon + 1)) <= 65535 && s.find('/') == std::string::npos;
}

}  // namespace

StatusOr<UpstreamsConfig> ParseUpstreams(std::string_view text, std::string_view source) {
  Reader rd{std::string(source)};
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string(source) + ":" + std::to_string(e.mark.line + 1) + ":" +
                                std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  if (!root.IsMap()) return InvalidArgumentError(std::string(source) + ": want a map with models, tenants and keys");
  AICLOUD_RETURN_IF_ERROR(rd.Known(root, "", {"models", "tenants", "keys"}));
  UpstreamsConfig cfg;

  const YAML::Node models = root["models"];
  if (!models.IsDefined() || !models.IsSequence() || models.size() == 0) {
    return rd.Error(models.IsDefined() ? models : root, "models", "required, a non-empty list");
  }
  std::map<std::string, std::string> served;  // model or adapter name -> deployment
  std::set<std::string> deployments;
  for (size_t i = 0; i < models.size(); ++i) {
    const YAML::Node m = models[i];
    const std::string p = "models[" + std::to_string(i) + "]";
    AICLOUD_RETURN_IF_ERROR(rd.Known(m, p, {"model", "tenant", "deployment", "base_model", "adapters", "max_adapters",
                                            "price", "replicas", "canary_weight"}));
    Route r;
    AICLOUD_RETURN_IF_ERROR(rd.String(m, "model", p, true, &r.model));
    AICLOUD_RETURN_IF_ERROR(rd.String(m, "tenant", p, true, &r.tenant));
    AICLOUD_RETURN_IF_ERROR(rd.String(m, "deployment", p, false, &r.deployment));
    AICLOUD_RETURN_IF_ERROR(rd.String(m, "base_model", p, false, &r.base_model));
    if (r.deployment.empty()) r.deployment = r.model;
    if (r.base_model.empty()) r.base_model = r.model;
    if (!deployments.insert(r.deployment).second) {
      return rd.Error(m, p + ".deployment", "\"" + r.deployment + "\" is listed twice");
    }
    AICLOUD_RETURN_IF_ERROR(rd.Strings(m, "adapters", p, &r.adapters));
    int64_t slots = 0;
    AICLOUD_RETURN_IF_ERROR(rd.Int(m, "max_adapters", p, &slots));
    r.max_adapters = static_cast<int>(slots);
    int64_t weight = 0;
    AICLOUD_RETURN_IF_ERROR(rd.Int(m, "canary_weight", p, &weight));
    if (weight < 0 || weight > 100) return rd.Error(m["canary_weight"], p + ".canary_weight", "want a percentage 0-100");
    r.canary_weight = static_cast<int>(weight);
    std::vector<std::string> names = r.adapters;
    names.push_back(r.model);
    for (const std::string& n : names) {
      auto [it, fresh] = served.emplace(n, r.deployment);
      if (!fresh) return rd.Error(m, p, "model name \"" + n + "\" is already served by " + it->second);
    }
    if (const YAML::Node price = m["price"]; price.IsDefined() && !price.IsNull()) {
      AICLOUD_RETURN_IF_ERROR(rd.Known(price, p + ".price", {"prompt", "completion"}));
      AICLOUD_RETURN_IF_ERROR(rd.Double(price, "prompt", p + ".price", &r.prompt_price_per_m));
      AICLOUD_RETURN_IF_ERROR(rd.Double(price, "completion", p + ".price", &r.completion_price_per_m));
    }
    const YAML::Node reps = m["replicas"];
    if (reps.IsDefined() && !reps.IsNull()) {
      if (!reps.IsSequence()) return rd.Error(reps, p + ".replicas", "want a list of {url, id?, ready?, canary?}");
      std::set<std::string> ids;
      for (size_t j = 0; j < reps.size(); ++j) {
        const std::string rp = p + ".replicas[" + std::to_string(j) + "]";
        ReplicaInfo rep;
        rep.ready = true;
        if (reps[j].IsScalar()) {
          rep.url = reps[j].Scalar();
        } else {
          AICLOUD_RETURN_IF_ERROR(rd.Known(reps[j], rp, {"url", "id", "ready", "canary", "secret_env"}));
          AICLOUD_RETURN_IF_ERROR(rd.String(reps[j], "url", rp, true, &rep.url));
          std::string secret_env;
          AICLOUD_RETURN_IF_ERROR(rd.String(reps[j], "secret_env", rp, false, &secret_env));
          if (!secret_env.empty()) {
            const char* secret = std::getenv(secret_env.c_str());
            if (secret == nullptr || *secret == '\0') {
              return rd.Error(reps[j]["secret_env"], rp + ".secret_env", "environment variable " + secret_env + " is not set");
            }
            rep.secret = secret;
          }
          AICLOUD_RETURN_IF_ERROR(rd.String(reps[j], "id", rp, false, &rep.id));
          AICLOUD_RETURN_IF_ERROR(rd.Bool(reps[j], "ready", rp, &rep.ready));
          AICLOUD_RETURN_IF_ERROR(rd.Bool(reps[j], "canary", rp, &rep.canary));
        }
        if (rep.url.starts_with("http://")) rep.url = rep.url.substr(7);
        if (!ValidHostPort(rep.url)) return rd.Error(reps[j], rp + ".url", "\"" + rep.url + "\": want host:port");
        if (rep.id.empty()) rep.id = rep.url;
        if (!ids.insert(rep.id).second) return rd.Error(reps[j], rp + ".id", "\"" + rep.id + "\" is listed twice");
        r.replicas.push_back(std::move(rep));
      }
    }
    cfg.routes.push_back(std::move(r));
  }

  std::map<std::string, Limits> tenants;
  if (const YAML::Node t = root["tenants"]; t.IsDefined() && !t.IsNull()) {
    if (!t.IsMap()) return rd.Error(t, "tenants", "want a map of tenant name -> limits");
    for (const auto& kv : t) {
      const std::string name = kv.first.as<std::string>("");
      const std::string p = "tenants." + name;
      AICLOUD_RETURN_IF_ERROR(rd.Known(kv.second, p, {"rpm", "tpm", "budget"}));
      AICLOUD_RETURN_IF_ERROR(rd.LimitsOf(kv.second, p, &tenants[name]));
    }
  }

  if (const YAML::Node keys = root["keys"]; keys.IsDefined() && !keys.IsNull()) {
    if (!keys.IsSequence()) return rd.Error(keys, "keys", "want a list");
    std::set<std::string> tokens, ids;
    for (size_t i = 0; i < keys.size(); ++i) {
      const YAML::Node k = keys[i];
      const std::string p = "keys[" + std::to_string(i) + "]";
      AICLOUD_RETURN_IF_ERROR(rd.Known(k, p, {"key", "id", "tenant", "team", "models", "rpm", "tpm", "budget"}));
      std::string token;
      Caller c;
      AICLOUD_RETURN_IF_ERROR(rd.String(k, "key", p, true, &token));
      AICLOUD_RETURN_IF_ERROR(rd.String(k, "id", p, false, &c.key_id));
      AICLOUD_RETURN_IF_ERROR(rd.String(k, "tenant", p, true, &c.tenant));
      AICLOUD_RETURN_IF_ERROR(rd.String(k, "team", p, false, &c.team));
      AICLOUD_RETURN_IF_ERROR(rd.Strings(k, "models", p, &c.models));
      AICLOUD_RETURN_IF_ERROR(rd.LimitsOf(k, p, &c.key_limits));
      if (c.key_id.empty()) c.key_id = auth::Sha256Hex(token).substr(0, 12);
      if (!tokens.insert(token).second) return rd.Error(k["key"], p + ".key", "the same key is listed twice");
      if (!ids.insert(c.key_id).second) return rd.Error(k, p + ".id", "\"" + c.key_id + "\" is listed twice");
      if (auto it = tenants.find(c.tenant); it != tenants.end()) c.tenant_limits = it->second;
      cfg.keys.emplace_back(std::move(token), std::move(c));
    }
  }
  return cfg;
}

StatusOr<UpstreamsConfig> LoadUpstreams(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgumentError("--upstreams " + path + ": cannot read the file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseUpstreams(ss.str(), path);
}

}  // namespace aicloud::gateway
