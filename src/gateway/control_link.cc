#include "gateway/control_link.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <utility>

#include "core/thread_name.h"
#include "auth/auth.h"

namespace aicloud::gateway {

using nlohmann::json;

namespace {

// Query values: unreserved characters as they are, everything else %XX.
std::string Escape(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

int64_t SteadyMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t WallSecondsNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One call to the server: its transport error (naming the server) or the Status of its answer,
// else the answer's JSON body.
StatusOr<json> Call(http::Client& client, const std::string& server, std::string_view method, const std::string& target,
                    const std::string& body, const http::Headers& headers, http::CancelSignal* cancel = nullptr,
                    bool* unreachable = nullptr) {
  StatusOr<http::ClientResponse> r = client.Send(method, target, body, headers, cancel);
  if (unreachable != nullptr) *unreachable = !r.ok();
  if (!r.ok()) return Status(r.status().code(), "server " + server + ": " + r.status().message());
  Status st = http::StatusOfResponse(*r);
  if (!st.ok()) return Status(st.code(), "server " + server + ": " + st.message());
  json j = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return UnavailableError("server " + server + ": " + target + " answered a body that is not JSON");
  return j;
}

}  // namespace

StatusOr<Route> RouteFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgumentError("expected an object");
  auto string_field = [&](const char* name, std::string* out) -> Status {
    if (!j.contains(name) || !j[name].is_string() || j[name].get<std::string>().empty()) {
      return InvalidArgumentError(std::string(name) + ": expected a non-empty string");
    }
    *out = j[name].get<std::string>();
    return OkStatus();
  };
  Route r;
  AICLOUD_RETURN_IF_ERROR(string_field("deployment", &r.deployment));
  AICLOUD_RETURN_IF_ERROR(string_field("tenant", &r.tenant));
  AICLOUD_RETURN_IF_ERROR(string_field("model", &r.model));
  r.base_model = r.model;
  if (j.contains("adapters")) {
    if (!j["adapters"].is_array()) return InvalidArgumentError("adapters: expected an array of names");
    for (const json& a : j["adapters"]) {
      if (!a.is_string()) return InvalidArgumentError("adapters: expected an array of names");
      r.adapters.push_back(a.get<std::string>());
    }
  }
  for (const char* f : {"maxAdapters", "canaryWeight"}) {
    if (j.contains(f) && (!j[f].is_number_integer() || j[f].get<int64_t>() < 0 || j[f].get<int64_t>() > 1'000'000)) {
      return InvalidArgumentError(std::string(f) + ": expected an integer >= 0");
    }
  }
  r.max_adapters = j.value("maxAdapters", 0);
  r.canary_weight = std::min(100, j.value("canaryWeight", 0));
  std::shared_ptr<const http::TlsTrust> trust;  // from "replicaCa", for replicas with "tls"
  if (j.contains("replicaCa")) {
    if (!j["replicaCa"].is_string()) return InvalidArgumentError("replicaCa: expected a PEM string");
    StatusOr<std::shared_ptr<const http::TlsTrust>> t = http::TlsTrust::ForCaPem(j["replicaCa"].get<std::string>());
    if (!t.ok()) return InvalidArgumentError("replicaCa: " + std::string(t.status().message()));
    trust = std::move(*t);
  }
  if (j.contains("replicas")) {
    if (!j["replicas"].is_array()) return InvalidArgumentError("replicas: expected an array");
    for (size_t i = 0; i < j["replicas"].size(); ++i) {
      const json& e = j["replicas"][i];
      const std::string at = "replicas[" + std::to_string(i) + "]";
      if (!e.is_object() || !e.contains("id") || !e["id"].is_string() || !e.contains("url") || !e["url"].is_string() ||
          e["url"].get<std::string>().empty()) {
        return InvalidArgumentError(at + ": expected {id, url, ready, canary}");
      }
      for (const char* f : {"ready", "canary", "tls"}) {
        if (e.contains(f) && !e[f].is_boolean()) return InvalidArgumentError(at + "." + f + ": expected true or false");
      }
      if (e.contains("secret") && !e["secret"].is_string()) return InvalidArgumentError(at + ".secret: expected a string");
      const bool tls = e.value("tls", false);
      if (tls && !trust) return InvalidArgumentError(at + ".tls: the route has no replicaCa to verify it with");
      r.replicas.push_back({e["id"].get<std::string>(), e["url"].get<std::string>(), e.value("ready", false),
                            e.value("canary", false), e.value("secret", std::string()), tls ? trust : nullptr});
    }
  }
  return r;
}

Limits LimitsFromServing(const json& s) {
  Limits lim;
  if (!s.is_object()) return lim;
  // Integers, also as the manifest check lets them through: 400.0 or 1e3 (stored as floats).
  auto integer = [&](const char* f) -> int64_t {
    if (!s.contains(f) || !s[f].is_number()) return 0;
    if (s[f].is_number_integer()) return s[f].get<int64_t>();
    const double d = s[f].get<double>();
    return std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15 ? static_cast<int64_t>(d) : 0;
  };
  lim.rpm = integer("rpm");
  lim.tpm = integer("tpm");
  lim.budget_tokens = integer("budgetTokens");
  lim.budget_cost = s.contains("budgetCost") && s["budgetCost"].is_number() ? s["budgetCost"].get<double>() : 0.0;
  lim.budget_period_s = integer("budgetPeriodSeconds");
  return lim;
}

// --- the directory --------------------------------------------------------------------------------

class ControlLink::LinkedDirectory final : public Directory {
 public:
  struct Pending {
    int64_t arrivals = 0;
    bool active = false;
    int held = -1;  // -1: nothing to say
  };

  std::shared_ptr<const Route> Lookup(std::string_view model) const override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = by_model_.find(model);
    return it == by_model_.end() ? nullptr : it->second;
  }
  std::vector<std::shared_ptr<const Route>> List() const override {
    std::lock_guard<std::mutex> l(mu_);
    return list_;
  }
  void WantReplicas(std::string_view deployment, int n) override {
    {
      std::lock_guard<std::mutex> l(pending_mu_);
      Pending& p = PendingLocked(deployment);
      p.held = std::max(p.held, n);
      p.active = true;
      urgent_ = true;
    }
    if (on_urgent_) on_urgent_();
  }
  void NoteActivity(std::string_view deployment) override {
    std::lock_guard<std::mutex> l(pending_mu_);
    PendingLocked(deployment).active = true;
  }
  void NoteArrival(std::string_view deployment) override {
    std::lock_guard<std::mutex> l(pending_mu_);
    Pending& p = PendingLocked(deployment);
    ++p.arrivals;
    p.active = true;
  }
  uint64_t Version() const override { return notifier_.Version(); }
  uint64_t WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) override {
    return notifier_.WaitForChange(seen, timeout);
  }

  void Publish(std::vector<std::shared_ptr<const Route>> list) {
    std::map<std::string, std::shared_ptr<const Route>, std::less<>> by_model;
    for (const auto& r : list) {  // the first deployment to claim a name keeps it, as on the server
      by_model.emplace(r->model, r);
      for (const std::string& a : r->adapters) by_model.emplace(a, r);
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      list_ = std::move(list);
      by_model_ = std::move(by_model);
    }
    notifier_.Bump();
  }

  // What is pending, and nothing pending afterwards.
  std::map<std::string, Pending, std::less<>> Take(bool* urgent) {
    std::lock_guard<std::mutex> l(pending_mu_);
    *urgent = urgent_;
    urgent_ = false;
    return std::exchange(pending_, {});
  }
  // Puts back what a failed post carried (merged with what came meanwhile).
  void PutBack(const std::map<std::string, Pending, std::less<>>& back) {
    std::lock_guard<std::mutex> l(pending_mu_);
    for (const auto& [name, b] : back) {
      Pending& p = PendingLocked(name);
      p.arrivals += b.arrivals;
      p.active = p.active || b.active;
      p.held = std::max(p.held, b.held);
    }
  }
  bool Urgent() const {
    std::lock_guard<std::mutex> l(pending_mu_);
    return urgent_;
  }
  void OnUrgent(std::function<void()> f) { on_urgent_ = std::move(f); }

 private:
  Pending& PendingLocked(std::string_view deployment) {
    auto it = pending_.find(deployment);
    if (it == pending_.end()) it = pending_.emplace(std::string(deployment), Pending{}).first;
    return it->second;
  }

  mutable std::mutex mu_;
  std::vector<std::shared_ptr<const Route>> list_;                                 // GUARDED_BY(mu_)
  std::map<std::string, std::shared_ptr<const Route>, std::less<>> by_model_;       // GUARDED_BY(mu_)
  DirectoryNotifier notifier_;
  mutable std::mutex pending_mu_;
  std::map<std::string, Pending, std::less<>> pending_;  // GUARDED_BY(pending_mu_)
  bool urgent_ = false;                                  // GUARDED_BY(pending_mu_)
  std::function<void()> on_urgent_;                      // set before any request
};

// --- the keys -------------------------------------------------------------------------------------

struct ControlLink::KeyTable {
  struct Key {
    std::string hash;    // sha256 hex of the secret
    CallerRef caller;
    int64_t expires_s = 0;  // Unix seconds; 0 = never
  };
  std::unordered_map<std::string, Key> by_id;
  std::vector<int64_t> expiries;  // sorted, of the keys that expire
  uint64_t serial = 0;            // changes with every new table
};

// --- the store ------------------------------------------------------------------------------------

class ControlLink::RemoteStore final : public store::Store {
 public:
  RemoteStore(const ControlLinkOptions& o) : options_(o) {
    client_options_ = o.client;
    client_options_.timeout = o.call_timeout;
    headers_ = {{"Authorization", "Bearer " + o.token}, {"Content-Type", "application/json"}};
  }

  StatusOr<json> Get(const store::ObjectKey& key) override {
    return Send("GET", "/api/v1/gateway/objects/" + Escape(key.kind) + "/" + Escape(key.name) + "?tenant=" + Escape(key.tenant), "");
  }

  StatusOr<std::vector<json>> Commit(std::vector<store::WriteOp> ops) override {
    json list = json::array();
    for (store::WriteOp& op : ops) {
      json o;
      switch (op.type) {
        case store::WriteOp::Type::kCreate: o = {{"op", "create"}, {"object", std::move(op.object)}}; break;
        case store::WriteOp::Type::kUpdate: o = {{"op", "update"}, {"object", std::move(op.object)}}; break;
        case store::WriteOp::Type::kDelete:
          o = {{"op", "delete"}, {"key", {{"kind", op.key.kind}, {"tenant", op.key.tenant}, {"name", op.key.name}}}};
          break;
      }
      o["expectedResourceVersion"] = op.expected_resource_version;
      list.push_back(std::move(o));
    }
    StatusOr<json> r = Send("POST", "/api/v1/gateway/objects", json{{"ops", std::move(list)}}.dump());
    if (!r.ok()) return r.status();
    if (!r->contains("objects") || !(*r)["objects"].is_array() || (*r)["objects"].size() != ops.size()) {
      return UnavailableError("server " + options_.server_url + ": a commit answered without its objects");
    }
    return (*r)["objects"].get<std::vector<json>>();
  }

  StatusOr<store::ListResult> List(const store::ListOptions& o) override {
    if (!o.label_selector.empty()) return UnimplementedError("gateway objects: label selectors are not served");
    std::string target = "/api/v1/gateway/objects/" + Escape(o.kind) + "?limit=" + std::to_string(o.limit) +
                         "&continue=" + Escape(o.continue_token);
    if (o.tenant) target += "&tenant=" + Escape(*o.tenant);
    StatusOr<json> r = Send("GET", target, "");
    if (!r.ok()) return r.status();
    store::ListResult out;
    try {
      out.items = r->at("items").get<std::vector<json>>();
      out.continue_token = r->value("continue", "");
      out.resource_version = std::stoll(r->value("resourceVersion", "0"));
    } catch (const std::exception& e) {
      return UnavailableError("server " + options_.server_url + ": a list answered a malformed page: " + e.what());
    }
    return out;
  }

  StatusOr<store::ChangesResult> Changes(const std::string&, int64_t, int) override {
    return UnimplementedError("gateway objects: changes are not served");
  }
  int64_t Revision() override { return 0; }
  int64_t WaitForRevision(int64_t, std::chrono::milliseconds timeout) override {
    std::this_thread::sleep_for(std::min(timeout, std::chrono::milliseconds(1000)));
    return 0;
  }

  StatusOr<json> Send(std::string_view method, const std::string& target, const std::string& body) {
    // After a call that could not reach the server, calls fail at once for `retry`: requests that
    // need a budget grant get their 503 now instead of queueing behind timeouts.
    const int64_t now_us = SteadyMicros();
    if (const int64_t until = down_until_us_.load(); now_us < until) {
      std::lock_guard<std::mutex> l(mu_);
      return UnavailableError(down_reason_ + " (not tried again for another " + std::to_string((until - now_us) / 1000) +
                              " ms)");
    }
    std::unique_ptr<http::Client> c;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!idle_.empty()) {
        c = std::move(idle_.back());
        idle_.pop_back();
      }
    }
    if (!c) c = std::make_unique<http::Client>(options_.server_url, client_options_);
    bool unreachable = false;
    StatusOr<json> r = Call(*c, options_.server_url, method, target, body, headers_, nullptr, &unreachable);
    std::lock_guard<std::mutex> l(mu_);
    if (unreachable) {  // refused, reset, or no answer within call_timeout (also a connect that timed out)
      down_reason_ = r.status().message();
      down_until_us_ = SteadyMicros() + std::chrono::duration_cast<std::chrono::microseconds>(options_.retry).count();
    }
    if (idle_.size() < 8) idle_.push_back(std::move(c));
    return r;
  }

 private:
  const ControlLinkOptions& options_;
  http::ClientOptions client_options_;
  http::Headers headers_;
  std::mutex mu_;
  std::vector<std::unique_ptr<http::Client>> idle_;  // GUARDED_BY(mu_)
  std::atomic<int64_t> down_until_us_{0};            // steady micros
  std::string down_reason_;                          // GUARDED_BY(mu_)
};

// --- the link -------------------------------------------------------------------------------------

ControlLink::ControlLink(ControlLinkOptions options)
    : options_(std::move(options)),
      directory_(std::make_unique<LinkedDirectory>()),
      store_(std::make_unique<RemoteStore>(options_)),
      keys_(std::make_shared<KeyTable>()) {
  http::ClientOptions co = options_.client;
  co.timeout = options_.poll_wait + options_.call_timeout;
  feed_client_ = std::make_unique<http::Client>(options_.server_url, co);
  directory_->OnUrgent([this] {
    { std::lock_guard<std::mutex> l(mu_); }  // the signal thread is waiting, or sees urgent_ first
    cv_.notify_all();
  });
}

StatusOr<std::unique_ptr<ControlLink>> ControlLink::Connect(ControlLinkOptions options) {
  if (options.server_url.empty()) return InvalidArgumentError("no server URL");
  if (options.token.empty()) return InvalidArgumentError("no API key for the server (a key with the gateway role)");
  std::unique_ptr<ControlLink> link(new ControlLink(std::move(options)));
  // The first read is not a long poll: it is bounded by call_timeout, like every other call.
  http::ClientOptions co = link->options_.client;
  co.timeout = link->options_.call_timeout;
  http::Client first_client(link->options_.server_url, co);
  StatusOr<json> first = link->Poll(first_client, "", std::chrono::milliseconds(0));
  if (!first.ok()) return first.status();
  AICLOUD_RETURN_IF_ERROR(link->Apply(*first));
  link->last_ok_us_ = SteadyMicros();
  if (const Stats st = link->stats(); st.skipped > 0) {
    link->Log("aicloud gateway: serving state " + st.version + ": left out " + std::to_string(st.skipped) +
              " malformed entries, the first: " + st.skipped_first);
  }
  link->feed_ = std::thread([l = link.get()] {
    SetThreadName("link-feed");
    l->FeedLoop();
  });
  link->signals_ = std::thread([l = link.get()] {
    SetThreadName("link-signals");
    l->SignalLoop();
  });
  return link;
}

ControlLink::~ControlLink() { Stop(); }

void ControlLink::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  poll_cancel_.Cancel();  // ends the feed thread's long poll
  if (signals_.joinable()) signals_.join();
  if (feed_.joinable()) feed_.join();
}

Directory* ControlLink::directory() { return directory_.get(); }
store::Store* ControlLink::store() { return store_.get(); }

Status ControlLink::Untrusted() const {
  if (refused_.load(std::memory_order_relaxed)) {
    return UnavailableError("the server refuses this gateway's key; no API key can be checked");
  }
  if (options_.max_stale.count() > 0) {
    const int64_t now_us = SteadyMicros();
    const int64_t polling = polling_since_us_.load(std::memory_order_relaxed);
    const int64_t poll_bound_us =
        std::chrono::duration_cast<std::chrono::microseconds>(options_.poll_wait + options_.call_timeout).count();
    // The last good answer, or the long poll out since, while it may still answer.
    const int64_t fresh_us =
        polling > 0 && now_us - polling < poll_bound_us ? now_us : last_ok_us_.load(std::memory_order_relaxed);
    const int64_t age_us = now_us - fresh_us;
    if (age_us > std::chrono::duration_cast<std::chrono::microseconds>(options_.max_stale).count()) {
      return UnavailableError("the gateway has not reached the server for " + std::to_string(age_us / 1'000'000) +
                              " s (more than max_stale): API keys cannot be checked");
    }
  }
  return OkStatus();
}

Authenticator ControlLink::authenticator() {
  return [this](std::string_view authorization) -> StatusOr<CallerRef> {
    // Keys are checked against the server's state only while that is trustworthy (503 otherwise).
    if (Status st = Untrusted(); !st.ok()) return st;
    if (authorization.empty()) return UnauthenticatedError("missing API key: send it as 'Authorization: Bearer <key>'");
    std::string_view id, secret;
    if (!auth::SplitToken(authorization, &id, &secret)) return UnauthenticatedError("malformed token");
    const std::string hash = auth::Sha256Hex(secret);
    if (hash.empty()) return InternalError("cannot hash the API key (SHA-256 unavailable)");
    std::shared_ptr<const KeyTable> keys;
    {
      std::lock_guard<std::mutex> l(keys_mu_);
      keys = keys_;
    }
    auto it = keys->by_id.find(std::string(id));
    if (it == keys->by_id.end() || !auth::ConstantTimeEquals(hash, it->second.hash)) {
      return UnauthenticatedError("unknown key");
    }
    if (it->second.expires_s != 0 && it->second.expires_s <= WallSecondsNow()) return UnauthenticatedError("key expired");
    return it->second.caller;
  };
}

std::function<uint64_t()> ControlLink::auth_epoch() {
  // A new table, or one more of its keys' expiries passed. While the state is not to be trusted
  // (Untrusted), a new number every time: a kept-alive connection must not reuse its caller.
  return [this]() -> uint64_t {
    if (!Untrusted().ok()) return untrusted_epoch_.fetch_add(1) | (uint64_t{1} << 63);
    std::shared_ptr<const KeyTable> keys;
    {
      std::lock_guard<std::mutex> l(keys_mu_);
      keys = keys_;
    }
    const auto passed = std::upper_bound(keys->expiries.begin(), keys->expiries.end(), WallSecondsNow()) -
                        keys->expiries.begin();
    return (keys->serial << 24) + static_cast<uint64_t>(passed);
  };
}

Status ControlLink::Apply(const json& doc) {
  auto bad = [](const std::string& what) { return InvalidArgumentError("serving state from the server: " + what); };
  if (!doc.is_object()) return bad("expected an object");
  if (!doc.contains("version") || !doc["version"].is_string()) return bad("version: expected a string");
  if (!doc.contains("routes") || !doc["routes"].is_array()) return bad("routes: expected an array");
  if (!doc.contains("keys") || !doc["keys"].is_array()) return bad("keys: expected an array");
  if (!doc.contains("tenants") || !doc["tenants"].is_object()) return bad("tenants: expected an object");

  // A malformed route or key is left out (and reported); the rest is applied, so that one bad
  // entry cannot hold back a revocation.
  std::vector<std::string> skipped;
  std::vector<std::shared_ptr<const Route>> routes;
  for (size_t i = 0; i < doc["routes"].size(); ++i) {
    StatusOr<Route> r = RouteFromJson(doc["routes"][i]);
    if (!r.ok()) {
      skipped.push_back("routes[" + std::to_string(i) + "]." + r.status().message());
      continue;
    }
    routes.push_back(std::make_shared<const Route>(std::move(*r)));
  }
  std::map<std::string, Limits> tenants;
  for (const auto& [name, serving] : doc["tenants"].items()) tenants[name] = LimitsFromServing(serving);

  auto table = std::make_shared<KeyTable>();
  for (size_t i = 0; i < doc["keys"].size(); ++i) {
    const json& k = doc["keys"][i];
    const std::string at = "keys[" + std::to_string(i) + "]";
    std::string problem;
    if (!k.is_object() || !k.contains("id") || !k["id"].is_string() || !k.contains("hash") || !k["hash"].is_string()) {
      problem = at + ": expected {id, hash, tenant, expiresAt, allModels}";
    } else if (k.contains("tenant") && !k["tenant"].is_string()) {
      problem = at + ".tenant: expected a string";
    } else if (k.contains("expiresAt") && !k["expiresAt"].is_number_integer()) {
      problem = at + ".expiresAt: expected Unix seconds";
    } else if (k.contains("allModels") && !k["allModels"].is_boolean()) {
      problem = at + ".allModels: expected true or false";
    }
    if (!problem.empty()) {
      skipped.push_back(problem);
      continue;
    }
    auto caller = std::make_shared<Caller>();
    caller->key_id = k["id"].get<std::string>();
    if (k.contains("tenant")) {
      caller->tenant = k["tenant"].get<std::string>();
      if (auto t = tenants.find(caller->tenant); t != tenants.end()) caller->tenant_limits = t->second;
    } else if (k.value("allModels", false)) {
      caller->models = {"*"};
    }
    KeyTable::Key key{k["hash"].get<std::string>(), std::move(caller), k.value("expiresAt", int64_t{0})};
    if (key.expires_s != 0) table->expiries.push_back(key.expires_s);
    table->by_id[k["id"].get<std::string>()] = std::move(key);
  }
  std::sort(table->expiries.begin(), table->expiries.end());
  const size_t table_size = table->by_id.size();

  {
    std::lock_guard<std::mutex> l(keys_mu_);
    table->serial = keys_->serial + 1;
    keys_ = std::move(table);
  }
  const size_t route_count = routes.size();
  directory_->Publish(std::move(routes));
  std::lock_guard<std::mutex> l(mu_);
  stats_.version = doc["version"].get<std::string>();
  stats_.routes = route_count;
  stats_.keys = table_size;
  stats_.tenants = tenants.size();
  stats_.skipped = skipped.size();
  stats_.skipped_first = skipped.empty() ? "" : skipped.front();
  ++stats_.applied;
  return OkStatus();
}

void ControlLink::ExportMetrics(Metrics* metrics) {
  metrics->AddGaugeFn("aicloud_gateway_link_connected", "1 while the last poll of the server's serving state succeeded",
                      {}, [this] { return std::vector<std::pair<LabelValues, double>>{{{}, stats().connected ? 1.0 : 0.0}}; });
  metrics->AddGaugeFn("aicloud_gateway_link_states_applied", "serving states read from the server and applied", {},
                      [this] { return std::vector<std::pair<LabelValues, double>>{{{}, static_cast<double>(stats().applied)}}; });
  metrics->AddGaugeFn("aicloud_gateway_link_signal_posts", "signal posts to the server (arrivals, activity, held requests)",
                      {"result"}, [this] {
                        const Stats s = stats();
                        return std::vector<std::pair<LabelValues, double>>{
                            {{"ok"}, static_cast<double>(s.signals_sent)}, {{"failed"}, static_cast<double>(s.signals_failed)}};
                      });
}

ControlLink::Stats ControlLink::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

StatusOr<json> ControlLink::Poll(http::Client& client, const std::string& version, std::chrono::milliseconds wait) {
  return Call(client, options_.server_url, "GET",
              "/api/v1/gateway/config?version=" + Escape(version) + "&waitMs=" + std::to_string(wait.count()), "",
              {{"Authorization", "Bearer " + options_.token}}, &poll_cancel_);
}

void ControlLink::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

void ControlLink::FeedLoop() {
  for (;;) {
    std::string version;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
      poll_cancel_.Reset();  // one signal per call; Stop raises it after setting stopping_
      version = stats_.version;
    }
    const auto asked = std::chrono::steady_clock::now();
    // While a long poll that follows a good one is out, the state is as fresh as the server's:
    // the server would have answered any change.
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stats_.connected) polling_since_us_ = SteadyMicros();
    }
    StatusOr<json> doc = Poll(*feed_client_, version, options_.poll_wait);
    // An unchanged state (the wait ran out) is not applied again: keys' callers and held
    // requests would be woken for nothing.
    const bool changed = doc.ok() && !(doc->is_object() && doc->value("version", json()) == json(version));
    Status st = !doc.ok() ? doc.status() : changed ? Apply(*doc) : OkStatus();
    // The poll counts as contact until the good answer is recorded: no moment between them looks stale.
    if (st.ok()) last_ok_us_ = SteadyMicros();
    polling_since_us_ = 0;
    bool was_connected;
    Stats now;
    {
      std::lock_guard<std::mutex> l(mu_);
      was_connected = stats_.connected;
      stats_.connected = st.ok();
      if (!st.ok()) ++stats_.poll_failures;
      now = stats_;
    }
    if (st.ok()) {
      refused_ = false;
      if (!was_connected) Log("aicloud gateway: the server " + options_.server_url + " is back; serving state " + now.version);
      if (changed && now.skipped > 0) {
        Log("aicloud gateway: serving state " + now.version + ": left out " + std::to_string(now.skipped) +
            " malformed entries, the first: " + now.skipped_first);
      }
      // A server that answers at once without a change (one not long-polling, or stopping) is
      // asked again after a pause, not in a loop.
      if (changed || std::chrono::steady_clock::now() - asked >= options_.poll_wait / 2) continue;
    } else {
      // The server refusing this gateway's own key (revoked, or its role taken away) stops every
      // key check: what the gateway holds may no longer be its to serve.
      // It stays so until a poll succeeds: losing the server afterwards does not undo it.
      const bool refused = st.code() == StatusCode::kUnauthenticated || st.code() == StatusCode::kPermissionDenied;
      if (refused && !refused_) Log("aicloud gateway: " + st.message() + "; refusing every request until it accepts the key");
      if (refused) refused_ = true;
      if (was_connected && !refused) Log("aicloud gateway: " + st.message() + "; serving the last state, retrying");
    }
    std::unique_lock<std::mutex> l(mu_);
    if (cv_.wait_for(l, options_.retry, [&] { return stopping_; })) return;
  }
}

bool ControlLink::SendSignals() {
  bool urgent = false;
  std::map<std::string, LinkedDirectory::Pending, std::less<>> pending = directory_->Take(&urgent);
  if (pending.empty()) return true;
  json list = json::array();
  for (const auto& [name, p] : pending) {
    json d = {{"name", name}, {"arrivals", p.arrivals}, {"active", p.active}};
    if (p.held >= 0) d["held"] = p.held;
    list.push_back(std::move(d));
  }
  StatusOr<json> r = store_->Send("POST", "/api/v1/gateway/signals", json{{"deployments", std::move(list)}}.dump());
  if (!r.ok()) directory_->PutBack(pending);
  std::lock_guard<std::mutex> l(mu_);
  ++(r.ok() ? stats_.signals_sent : stats_.signals_failed);
  return r.ok();
}

void ControlLink::SignalLoop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, options_.signal_period, [&] { return stopping_ || directory_->Urgent(); });
      if (stopping_) break;
    }
    if (!SendSignals()) {
      std::unique_lock<std::mutex> l(mu_);
      if (cv_.wait_for(l, options_.retry, [&] { return stopping_; })) break;
    }
  }
  (void)SendSignals();  // the last arrivals and activity before stopping
}

}  // namespace aicloud::gateway
