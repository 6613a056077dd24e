#include "gateway/gateway.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <random>

#include "core/thread_name.h"
#include "auth/auth.h"
#include "gateway/errors.h"
#include "http/sse.h"

namespace aicloud::gateway {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

std::vector<double> OverheadBuckets() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1};
}

bool Is2xx(int status) { return status >= 200 && status < 300; }

// A replica that answers 401 refused the gateway's own credentials (its secret changed, or the
// route has none for it): the caller's key was never sent, so the caller must not see a 401.
// Another replica is tried; when none answers, the caller gets a 502.
Status RefusedCredentials(const std::string& replica_id) {
  return UnavailableError("replica " + replica_id + " refused the gateway's credentials");
}

// What a forwarded request carries upstream: its id, and the replica's secret (the caller's own
// Authorization never leaves the gateway).
http::Headers UpstreamHeaders(const std::string& request_id, const std::string& secret) {
  http::Headers h;
  h.reserve(2);
  h.emplace_back("x-request-id", request_id);
  if (!secret.empty()) h.emplace_back("authorization", "Bearer " + secret);
  return h;
}

// What a kept-alive connection's last Authorization header authenticated (Request::connection_memo).
struct CallerMemo {
  const void* gateway = nullptr;  // whose authenticator: one server may carry two gateways
  std::string authorization;
  uint64_t epoch = 0;  // GatewayDeps::auth_epoch when it was authenticated
  CallerRef who;
};

}  // namespace

StatusOr<CallerRef> Gateway::Authenticate(http::Request& req) {
  const std::string_view authorization = req.HeaderView("authorization");
  std::any* const slot = req.connection_memo.get();
  const bool memo_ok = slot != nullptr && deps_.auth_epoch && !authorization.empty();
  uint64_t epoch = 0;
  CallerMemo* memo = nullptr;
  if (memo_ok) {
    epoch = deps_.auth_epoch();  // read first: a change made during the check below is not missed
    memo = std::any_cast<CallerMemo>(slot);
    // Compared in constant time: a proxy in front may send several clients' requests on one connection.
    if (memo != nullptr && memo->gateway == this && memo->epoch == epoch &&
        auth::ConstantTimeEquals(memo->authorization, authorization)) {
      return memo->who;
    }
  }
  StatusOr<CallerRef> who = deps_.authenticate(authorization);
  if (who.ok() && *who == nullptr) who = InternalError("the authenticator returned no caller");
  if (who.ok() && memo_ok) {
    if (memo == nullptr) memo = &slot->emplace<CallerMemo>();
    memo->gateway = this;
    memo->authorization.assign(authorization);
    memo->epoch = epoch;
    memo->who = *who;
  }
  return who;
}

// Per-request state, from arrival to the usage record.
struct Gateway::Call {
  SteadyClock::time_point t0;
  SteadyClock::duration upstream{};  // time spent waiting on upstreams (for the overhead metric)
  UsageRecord rec;
  Endpoint endpoint = Endpoint::kChat;
  CallerRef who;
  RequestInfo info;
  std::string body;  // what is sent upstream
  std::string key_scope, tenant_scope;  // "key <id>", "tenant <name>": the caller's limit scopes
  std::vector<LimitScope> rate_scopes;   // point into key_scope, tenant_scope and `who`
  int64_t estimate = 0;          // tokens reserved (prompt upper bound + max_tokens * n)
  int64_t prompt_estimate = 0;
  int64_t max_tokens = 0;
  BudgetReservation reservation;
  bool settled = true;           // false while a reservation / tpm charge is outstanding
  std::vector<uint64_t> prefix;
  const ModelSeries* series = nullptr;  // the model's bound metric series, once admitted
  std::shared_ptr<http::CancelSignal> client_gone;  // the request's (null when not read by a server)

  // Names the caller's scopes and points the rate-limit scopes at them and into `who`: (re)build
  // them after `who` is set or the Call moved.
  void PointScopes() {
    if (who->key_limits.HasRate() || who->key_limits.HasBudget()) key_scope.assign("key ").append(who->key_id);
    if (who->tenant_limits.HasRate() || who->tenant_limits.HasBudget()) {
      tenant_scope.assign("tenant ").append(who->tenant);
    }
    rate_scopes.clear();
    rate_scopes.reserve(2);
    if (who->key_limits.HasRate()) rate_scopes.push_back({key_scope, &who->key_limits});
    if (who->tenant_limits.HasRate()) rate_scopes.push_back({tenant_scope, &who->tenant_limits});
  }
};

struct Gateway::ModelSeries {
  Counter::Cell* ok;  // requests_ {model, "200"}
  Histogram::Cell* latency;
  Counter::Cell* prompt_tokens;
  Counter::Cell* completion_tokens;
};

struct Gateway::DeploymentState {
  explicit DeploymentState(std::unique_ptr<fleet::Router> r) : router(std::move(r)) {}
  SharedRouter router;
  std::atomic<int> held{0};
  std::atomic<uint64_t> split{0};  // requests split between canary and stable so far
};

// The result of forwarding to upstreams.
struct Gateway::Attempted {
  Status status;                  // OK: the upstream answered (head.status set)
  http::ClientResponse head;
  bool answered = false;          // a status line arrived (no retry past this point)
  std::string replica_id;
  std::shared_ptr<ReplicaState> replica;
};

// A fast-path request between its upstream attempts (see TryNextReplica).
struct Gateway::AsyncForward {
  std::shared_ptr<Call> call;
  std::shared_ptr<const Route> route;
  http::Responder respond;
  http::EventLoop* loop = nullptr;
  std::string target;
  std::shared_ptr<const std::string> body;  // the call's body, moved here once for every attempt
  std::vector<std::string> tried;  // replica urls, as in Forward
  int attempt = 0;
  Attempted a;
  std::shared_ptr<http::CancelSignal> client_gone;  // the request's; ends the upstream call
};

// Shared by a stream's pump thread (upstream reader) and the server's stream thread (writer).
struct Gateway::Pipe {
  std::mutex mu;
  std::condition_variable cv;
  bool head_done = false;         // GUARDED_BY(mu)
  Attempted result;               // GUARDED_BY(mu): valid once head_done
  std::string buf;                // GUARDED_BY(mu): upstream bytes not yet written to the client
  bool upstream_done = false;     // GUARDED_BY(mu)
  Status upstream_status;         // GUARDED_BY(mu)
  bool consumer_gone = false;     // GUARDED_BY(mu)
};

StatusOr<std::unique_ptr<Gateway>> Gateway::Create(GatewayDeps deps, GatewayOptions options) {
  if (deps.directory == nullptr) return InvalidArgumentError("gateway: a directory is required");
  if (!deps.authenticate) return InvalidArgumentError("gateway: an authenticator is required");
  if (StatusOr<std::unique_ptr<fleet::Router>> r = fleet::MakeRouter(options.policy, options.router); !r.ok()) {
    return r.status();
  }
  if (options.max_attempts < 1) return InvalidArgumentError("gateway: max_attempts must be >= 1");
  if (options.flush_period.count() <= 0) return InvalidArgumentError("gateway: flush_period must be > 0");
  if (options.hold_queue_size < 0) return InvalidArgumentError("gateway: hold_queue_size must be >= 0");
  std::unique_ptr<Gateway> g(new Gateway(std::move(deps), std::move(options)));
  AICLOUD_RETURN_IF_ERROR(g->ledger_.Load());
  g->background_ = std::thread([gw = g.get()] {
    SetThreadName("gw-background");
    gw->Background();
  });
  g->syncer_ = std::thread([gw = g.get()] {
    SetThreadName("gw-sync");
    gw->Syncer();
  });
  return g;
}

Gateway::Gateway(GatewayDeps deps, GatewayOptions options)
    : deps_(std::move(deps)),
      options_(std::move(options)),
      own_clock_(deps_.clock == nullptr ? std::make_unique<RealClock>() : nullptr),
      clock_(deps_.clock != nullptr ? deps_.clock : own_clock_.get()),
      wall_anchor_(std::chrono::system_clock::now()),
      clock_anchor_(clock_->NowMicros()),
      limiter_(clock_),
      ledger_(deps_.store, [this] { return WallSeconds(); }),
      replicas_(options_.upstream_timeout, options_.max_idle_connections),
      upstream_({.timeout = options_.upstream_timeout, .max_idle_per_upstream = options_.max_idle_connections}) {
  if (deps_.store != nullptr) {
    rates_ = std::make_unique<RateShare>(deps_.store, &limiter_, [this] { return WallSeconds(); },
                                         RateShareOptions{.id = ledger_.id(), .lease_s = RateLeaseSeconds(options_),
                                                          .window_s = kIdleScopeUs / 1'000'000});
  }
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "gw-%08x-", rd());
  id_prefix_ = buf;
  requests_ = metrics_.AddCounter("aicloud_gateway_requests_total", "Requests answered, by model and HTTP status.",
                                  {"model", "code"});
  rejected_ = metrics_.AddCounter("aicloud_gateway_rejected_total",
                                  "Requests the gateway refused itself, by reason.", {"reason"});
  tokens_ = metrics_.AddCounter("aicloud_gateway_tokens_total", "Tokens (from upstream usage, else estimated).",
                                {"model", "type"});
  cost_ = metrics_.AddCounter("aicloud_gateway_cost_total", "Cost charged to budgets, by tenant.", {"tenant"});
  retries_ = metrics_.AddCounter("aicloud_gateway_upstream_retries_total",
                                 "Attempts retried on another replica after a connection failure.", {"deployment"});
  client_gone_ = metrics_.AddCounter("aicloud_gateway_client_gone_total",
                                     "Unary calls whose client went away before the answer; their upstream call "
                                     "was closed.",
                                     {"deployment"});
  handled_ = metrics_.AddCounter("aicloud_gateway_handled_total",
                                 "Requests by where the gateway ran them: fast = on the server's I/O thread with an "
                                 "asynchronous upstream call (or refused there), worker = on a worker thread.",
                                 {"path"});
  latency_ = metrics_.AddHistogram("aicloud_gateway_request_duration_seconds", "Arrival to last byte.", {"model"},
                                   Histogram::LatencyBuckets());
  overhead_ = metrics_.AddHistogram("aicloud_gateway_overhead_seconds",
                                    "Time in the gateway itself (request handling minus upstream time).", {},
                                    OverheadBuckets());
  handled_fast_ = handled_->Bind({"fast"});
  handled_worker_ = handled_->Bind({"worker"});
  overhead_all_ = overhead_->Bind({});
  metrics_.AddGaugeFn("aicloud_gateway_held_requests", "Requests held while a deployment has no ready replica.",
                      {"deployment"}, [this] {
                        std::vector<std::pair<LabelValues, double>> rows;
                        std::lock_guard<std::mutex> lock(states_mu_);
                        for (const auto& [name, s] : states_) rows.push_back({{name}, static_cast<double>(s->held.load())});
                        return rows;
                      });
  metrics_.AddGaugeFn("aicloud_gateway_tracked_scopes",
                      "Keys and tenants this gateway holds rate-limit buckets or budget entries for (idle ones are "
                      "dropped after 10 minutes).",
                      {"kind"}, [this] {
                        return std::vector<std::pair<LabelValues, double>>{
                            {{"rate"}, static_cast<double>(limiter_.Scopes())}, {{"budget"}, static_cast<double>(ledger_.Scopes())}};
                      });
  metrics_.AddGaugeFn("aicloud_gateway_upstream_in_flight", "Requests in flight per replica.", {"replica"}, [this] {
    std::vector<std::pair<LabelValues, double>> rows;
    for (const auto& r : replicas_.All()) rows.push_back({{r->url()}, static_cast<double>(r->in_flight.load())});
    return rows;
  });
}

Gateway::~Gateway() { Stop(); }

int64_t Gateway::RateLeaseSeconds(const GatewayOptions& o) {
  // Several exchange periods, so one slow exchange does not make the others forget this gateway.
  const int64_t period_s = (o.flush_period.count() + 999) / 1000;
  return std::max<int64_t>(10, 3 * period_s);
}

int64_t Gateway::WallSeconds() const {
  const auto wall = wall_anchor_ + std::chrono::microseconds(clock_->NowMicros() - clock_anchor_);
  return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::seconds>(wall.time_since_epoch()).count());
}

namespace {
constexpr int kStopFlushAttempts = 3;
}  // namespace

void Gateway::Stop() {
  if (stopped_.exchange(true)) return;
  {
    std::unique_lock<std::mutex> lock(bg_mu_);
    stopping_ = true;
    bg_cv_.notify_all();
    bg_cv_.wait(lock, [&] { return pumps_ == 0; });
  }
  if (background_.joinable()) background_.join();
  if (syncer_.joinable()) syncer_.join();
  // The last settlements and the grants' release: tried again a little later (past a remote
  // store's fail-fast second) before they are given up, since they die with the process.
  for (int attempt = 1;; ++attempt) {
    Status s = ledger_.Flush(/*release=*/true);
    if (s.ok()) break;
    if (attempt == kStopFlushAttempts) {
      std::fprintf(stderr, "gateway: budget flush failed %d times, the last settlements are lost: %s\n", attempt,
                   s.message().c_str());
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  }
  if (rates_ != nullptr) {
    if (Status s = rates_->Release(); !s.ok()) std::fprintf(stderr, "gateway: rate share release failed: %s\n", s.message().c_str());
  }
}

Gateway::DeploymentState& Gateway::State(const std::string& deployment) {
  std::lock_guard<std::mutex> lock(states_mu_);
  auto it = states_.find(deployment);
  if (it == states_.end()) {
    auto r = fleet::MakeRouter(options_.policy, options_.router);  // validated in Create
    it = states_.emplace(deployment, std::make_unique<DeploymentState>(std::move(*r))).first;
  }
  return *it->second;
}

int Gateway::Held(std::string_view deployment) {
  std::lock_guard<std::mutex> lock(states_mu_);
  auto it = states_.find(deployment);
  return it == states_.end() ? 0 : it->second->held.load();
}

void Gateway::AddRoutes(http::Router* router) {
  router->Add("GET", "/v1/models", [this](http::Request& r) { return ListModels(r); });
  router->AddAsync("POST", "/v1/chat/completions",
                   [this](http::Request& r, http::Responder respond) { HandleAsync(Endpoint::kChat, r, std::move(respond)); });
  router->AddAsync("POST", "/v1/completions", [this](http::Request& r, http::Responder respond) {
    HandleAsync(Endpoint::kCompletions, r, std::move(respond));
  });
  router->AddAsync("POST", "/v1/embeddings", [this](http::Request& r, http::Responder respond) {
    HandleAsync(Endpoint::kEmbeddings, r, std::move(respond));
  });
}

http::Response Gateway::MetricsResponse() const {
  return http::Response::Text(200, metrics_.Render(), "text/plain; version=0.0.4");
}

http::Response Gateway::ListModels(http::Request& req) {
  StatusOr<CallerRef> who = Authenticate(req);
  if (!who.ok()) {
    // As for calls (Admit): a key that is not valid is a 401, any failure to check it a 503.
    if (who.status().code() == StatusCode::kUnauthenticated) {
      rejected_->Inc({"unauthenticated"});
      return OpenAiError(401, "invalid_api_key", who.status().message());
    }
    rejected_->Inc({"auth_unavailable"});
    return OpenAiError(503, "auth_unavailable", "cannot check the API key: " + who.status().message());
  }
  json data = json::array();
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
  for (const std::shared_ptr<const Route>& r : deps_.directory->List()) {
    if (MayUse(**who, *r, "")) {
      data.push_back({{"id", r->model}, {"object", "model"}, {"created", created}, {"owned_by", r->tenant},
                      {"root", r->base_model}, {"parent", nullptr}});
    }
    for (const std::string& a : r->adapters) {
      if (MayUse(**who, *r, a)) {
        data.push_back({{"id", a}, {"object", "model"}, {"created", created}, {"owned_by", r->tenant},
                        {"root", a}, {"parent", r->model}});
      }
    }
  }
  return http::Response::Json(200, {{"object", "list"}, {"data", std::move(data)}});
}

http::Response Gateway::Finish(Call& call, http::Response r) {
  Stamp(call, r);
  Account(call, static_cast<bool>(r.stream));
  return r;
}

void Gateway::Stamp(Call& call, http::Response& r) {
  call.rec.status = r.status;
  call.rec.latency_s = Seconds(SteadyClock::now() - call.t0);
  r.headers.emplace_back("x-request-id", call.rec.request_id);
}

const Gateway::ModelSeries* Gateway::ModelSeriesOf(const std::string& model) {
  // Names come from routes (unknown ones are cleared before labels), so the map stays small.
  std::lock_guard<std::mutex> lock(model_series_mu_);
  std::unique_ptr<ModelSeries>& s = model_series_[model];
  if (!s) {
    s = std::make_unique<ModelSeries>(ModelSeries{.ok = requests_->Bind({model, "200"}),
                                                  .latency = latency_->Bind({model}),
                                                  .prompt_tokens = tokens_->Bind({model, "prompt"}),
                                                  .completion_tokens = tokens_->Bind({model, "completion"})});
  }
  return s.get();
}

void Gateway::Account(Call& call, bool stream) {
  if (call.series != nullptr && call.rec.status == 200) {
    call.series->ok->Inc();
    call.series->latency->Observe(call.rec.latency_s);
  } else {
    const std::string& model = call.rec.model.empty() ? std::string("unknown") : call.rec.model;
    requests_->Inc({model, std::to_string(call.rec.status)});
    latency_->Observe({model}, call.rec.latency_s);
  }
  if (!stream) {
    overhead_all_->Observe(std::max(0.0, call.rec.latency_s - Seconds(call.upstream)));
    // The record's last use: a unary call is over once accounted (a stream records in Done).
    if (deps_.usage != nullptr) deps_.usage->Record(std::move(call.rec));
  }
}

http::Response Gateway::Refuse(Call& call, std::string_view reason, http::Response r) {
  rejected_->Inc({reason});
  if (call.rec.error.empty()) {
    // The message of the OpenAI error body.
    json j = json::parse(r.body, nullptr, false);
    if (j.is_object() && j.contains("error")) call.rec.error = j["error"].value("message", std::string(reason));
  }
  return Finish(call, std::move(r));
}

http::Response Gateway::Handle(Endpoint endpoint, http::Request& req) {
  Call call;
  std::shared_ptr<const Route> route;
  if (std::optional<http::Response> refused = Admit(endpoint, req, call, &route, /*may_block=*/true)) {
    return std::move(*refused);
  }
  return Proceed(call, std::move(route));
}

void Gateway::HandleAsync(Endpoint endpoint, http::Request& req, http::Responder respond) {
  http::EventLoop* loop = respond.loop();
  if (loop == nullptr) {  // a blocking caller (Router::Dispatch on a worker): nothing to save
    handled_worker_->Inc();
    return respond(Handle(endpoint, req));
  }
  if (!options_.fast_path || req.body.size() > options_.inline_body_bytes) {
    handled_worker_->Inc();
    return respond.RunBlocking([this, endpoint, r = std::move(req)]() mutable { return Handle(endpoint, r); });
  }
  auto call = std::make_shared<Call>();
  std::shared_ptr<const Route> route;
  if (std::optional<http::Response> refused = Admit(endpoint, req, *call, &route, /*may_block=*/false)) {
    handled_fast_->Inc();
    return respond(std::move(*refused));
  }
  if (!route) {  // the budget needs the store first: a worker admits it again
    handled_worker_->Inc();
    return respond.RunBlocking([this, endpoint, r = std::move(req)]() mutable { return Handle(endpoint, r); });
  }
  if (call->info.stream || route->ReadyCount() == 0) {
    // Streams and holds for a replica wait on threads: a worker takes the rest of the request.
    handled_worker_->Inc();
    return respond.RunBlocking([this, call, route] { return Proceed(*call, route); });
  }
  handled_fast_->Inc();
  auto f = std::make_shared<AsyncForward>(AsyncForward{.call = std::move(call), .route = std::move(route),
                                                       .respond = std::move(respond), .loop = loop,
                                                       .client_gone = req.client_gone});
  f->target = std::string("/v1/") + EndpointName(f->call->endpoint);
  f->body = std::make_shared<const std::string>(std::move(f->call->body));  // not copied per attempt
  TryNextReplica(std::move(f));
}

std::optional<http::Response> Gateway::Admit(Endpoint endpoint, http::Request& req, Call& call,
                                             std::shared_ptr<const Route>* admitted, bool may_block) {
  call.t0 = SteadyClock::now();
  call.endpoint = endpoint;
  call.rec.request_id = id_prefix_ + std::to_string(next_id_.fetch_add(1, std::memory_order_relaxed));
  call.rec.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  call.rec.endpoint = EndpointName(endpoint);
  call.client_gone = req.client_gone;

  // 1. Who is calling.
  StatusOr<CallerRef> who = Authenticate(req);
  if (!who.ok()) {
    const bool unauth = who.status().code() == StatusCode::kUnauthenticated;
    return Refuse(call, unauth ? "unauthenticated" : "auth_unavailable",
                  unauth ? OpenAiError(401, "invalid_api_key", who.status().message())
                         : OpenAiError(503, "auth_unavailable", "cannot check the API key: " + who.status().message()));
  }
  call.who = std::move(*who);
  call.rec.key_id = call.who->key_id;
  call.rec.tenant = call.who->tenant;
  call.rec.team = call.who->team;

  // 2. What is asked.
  if (req.body.starts_with("\xEF\xBB\xBF")) req.body.erase(0, 3);  // a byte order mark: read past, not sent on
  StatusOr<RequestInfo> info = ParseRequestInfo(req.body, endpoint);
  if (!info.ok()) {
    const Status st = info.status();
    const std::string& m = st.message();
    if (m.starts_with("body:")) return Refuse(call, "bad_request", OpenAiError(400, "invalid_json", m));
    return Refuse(call, "bad_request", OpenAiError(400, "invalid_request", m, m.substr(0, m.find(':'))));
  }
  call.info = std::move(*info);
  call.rec.model = call.info.model;
  call.rec.stream = call.info.stream;

  // 3. Which deployment serves it, and may this key use it.
  std::shared_ptr<const Route> route = deps_.directory->Lookup(call.info.model);
  if (!route) {
    call.rec.model.clear();  // keep unknown names out of metric labels
    return Refuse(call, "model_not_found",
                  OpenAiError(404, "model_not_found", "The model `" + call.info.model + "` does not exist.", "model"));
  }
  const std::string adapter = call.info.model != route->model && route->HasAdapter(call.info.model) ? call.info.model : "";
  call.rec.adapter = adapter;
  call.rec.deployment = route->deployment;
  if (!MayUse(*call.who, *route, adapter)) {
    return Refuse(call, "forbidden",
                  OpenAiError(403, "model_not_allowed",
                              "key " + call.who->key_id + " (tenant " + call.who->tenant + ") may not use model `" +
                                  call.info.model + "`",
                              "model"));
  }

  // 4. The body to send: the engine's model name for an alias, usage asked for in streams,
  // and max_tokens when a budget depends on it.
  const bool budgeted = call.who->key_limits.HasBudget() || call.who->tenant_limits.HasBudget();
  const bool inject_max = budgeted && !call.info.max_tokens && endpoint != Endpoint::kEmbeddings;
  const bool alias = adapter.empty() && call.info.model != route->base_model;
  const bool want_usage = call.info.stream && !call.info.include_usage;
  BodyEdits edits;
  if (alias) edits.model = route->base_model;
  edits.include_usage = want_usage;
  if (inject_max) edits.max_tokens = options_.default_max_tokens;
  if (edits.any()) {
    StatusOr<std::string> rewritten = RewriteBody(req.body, edits);
    if (!rewritten.ok()) return Refuse(call, "bad_request", OpenAiError(400, "invalid_json", rewritten.status().message()));
    call.body = std::move(*rewritten);
  }

  // 5. Rate limits: 1 request and the token estimate, from key and tenant at once.
  call.max_tokens = call.info.max_tokens.value_or(endpoint == Endpoint::kEmbeddings ? 0 : options_.default_max_tokens);
  call.prompt_estimate = call.info.PromptTokensUpperBound();
  call.estimate = call.prompt_estimate + call.info.CompletionTokensBound(call.max_tokens);
  call.PointScopes();
  if (!call.rate_scopes.empty()) {
    RateVerdict v = limiter_.Admit(call.rate_scopes, call.estimate);
    if (!v.ok) return Refuse(call, "rate_limit", OpenAiError(429, "rate_limit_exceeded", v.message, {}, v.retry_after_s));
  }

  // 6. Budgets: reserve the worst case on key and tenant at once.
  if (budgeted) {
    const double cost = (static_cast<double>(call.prompt_estimate) * route->prompt_price_per_m +
                         static_cast<double>(call.info.CompletionTokensBound(call.max_tokens)) * route->completion_price_per_m) / 1e6;
    BudgetScope scopes[2];
    size_t n_scopes = 0;
    if (call.who->key_limits.HasBudget()) scopes[n_scopes++] = {call.key_scope, call.who->tenant, &call.who->key_limits};
    if (call.who->tenant_limits.HasBudget()) {
      scopes[n_scopes++] = {call.tenant_scope, call.who->tenant, &call.who->tenant_limits};
    }
    int retry_after = 0;
    StatusOr<BudgetReservation> r =
        ledger_.Reserve(std::span<const BudgetScope>(scopes, n_scopes), call.estimate, cost, &retry_after, may_block);
    if (!r.ok() && r.status().code() == StatusCode::kUnavailable && !may_block) {
      limiter_.Release(call.rate_scopes, call.estimate);  // admitted again on the worker
      *admitted = nullptr;
      return std::nullopt;
    }
    if (!r.ok() && r.status().code() == StatusCode::kUnavailable) {
      limiter_.Release(call.rate_scopes, call.estimate);  // our failure: it does not count
      return Refuse(call, "budget_unavailable",
                    OpenAiError(503, "budget_unavailable", "cannot check the budget: " + r.status().message(), {}, 1));
    }
    if (!r.ok()) {
      limiter_.Adjust(call.rate_scopes, call.estimate);  // the request never ran
      return Refuse(call, "budget", OpenAiError(429, "insufficient_quota", r.status().message(), {}, retry_after));
    }
    call.reservation = std::move(*r);
  }
  call.settled = false;
  call.series = ModelSeriesOf(call.rec.model);  // admitted: the model's series exist from here
  if (call.body.empty()) call.body = std::move(req.body);  // not before: a request admitted again on a worker reads it again

  // Admitted: an arrival, and the deployment is in use (scale to zero counts idleness from the
  // last of these; refused requests do not keep it up).
  deps_.directory->NoteArrival(route->deployment);

  if (options_.policy == "prefix" || options_.policy == "score") {
    call.prefix = PrefixHashes(call.info.prompt_text, options_.prefix_block_bytes, options_.router.max_prefix_blocks);
  }
  *admitted = std::move(route);
  return std::nullopt;
}

http::Response Gateway::Proceed(Call& call, std::shared_ptr<const Route> route) {
  // 7. A ready replica, or wait for one (scale from zero).
  http::Response refusal;
  std::shared_ptr<const Route> ready = WaitForReplica(call, route, &refusal);
  if (!ready) {
    Settle(call, *route, false, std::nullopt, 0);
    return Finish(call, std::move(refusal));
  }
  route = std::move(ready);

  // 8. Forward.
  return call.info.stream ? Streaming(call, *route) : Unary(call, *route);
}

std::shared_ptr<const Route> Gateway::WaitForReplica(Call& call, std::shared_ptr<const Route> route,
                                                     http::Response* refusal) {
  if (route->ReadyCount() > 0) return route;
  DeploymentState& d = State(route->deployment);
  const std::string deployment = route->deployment;
  if (d.held.fetch_add(1) >= options_.hold_queue_size) {
    d.held.fetch_sub(1);
    rejected_->Inc({"hold_queue_full"});
    call.rec.error = "hold queue full";
    *refusal = OpenAiError(429, "hold_queue_full",
                           "deployment " + deployment + " has no ready replica yet and " +
                               std::to_string(options_.hold_queue_size) +
                               " requests are already waiting for one (the hold queue is full); retry shortly",
                           {}, 1);
    return nullptr;
  }
  const auto start = SteadyClock::now();
  const auto deadline = start + options_.hold_timeout;
  uint64_t version = deps_.directory->Version();
  deps_.directory->WantReplicas(deployment, 1);
  std::shared_ptr<const Route> out;
  for (;;) {
    std::shared_ptr<const Route> now = deps_.directory->Lookup(call.info.model);
    if (!now) {
      *refusal = OpenAiError(404, "model_not_found", "The model `" + call.info.model + "` does not exist.", "model");
      break;
    }
    if (now->ReadyCount() > 0) {
      out = std::move(now);
      break;
    }
    if (call.client_gone && call.client_gone->cancelled()) {
      // Nobody would read the answer: stop holding, so the slot goes to a client still waiting.
      client_gone_->Inc({deployment});
      call.rec.error = "client disconnected while held";
      *refusal = OpenAiError(499, "client_closed_request",
                             "the client closed the connection while the request waited for a replica");
      break;
    }
    const auto t = SteadyClock::now();
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(bg_mu_);
      stopping = stopping_;
    }
    if (t >= deadline || stopping) {
      rejected_->Inc({"hold_timeout"});
      call.rec.error = "no ready replica";
      const auto secs = std::chrono::duration_cast<std::chrono::seconds>(options_.hold_timeout).count();
      *refusal = OpenAiError(503, "no_ready_replica",
                             "no replica of deployment " + deployment + " became ready within " +
                                 std::to_string(std::max<int64_t>(1, secs)) + " s (it is scaling up from zero); retry later",
                             {}, 5);
      break;
    }
    // Wake on a directory change; re-check at least every 200 ms for directories that poll.
    version = deps_.directory->WaitForChange(
        version, std::min(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - t), std::chrono::milliseconds(200)));
  }
  d.held.fetch_sub(1);
  call.rec.held_s = Seconds(SteadyClock::now() - start);
  return out;
}

std::shared_ptr<ReplicaState> Gateway::PickReplica(Call& call, const Route& route, const std::vector<std::string>& tried,
                                                   std::string* replica_id, const std::string** secret) {
  const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now().time_since_epoch()).count();
  std::vector<fleet::ReplicaView> views, ejected_views;
  std::vector<std::shared_ptr<ReplicaState>> states, ejected_states;
  std::vector<const std::string*> secrets, ejected_secrets;
  // A canary: the first attempt goes to one side, request n to the canary when n * weight
  // mod 100 < weight (exactly `weight` of every 100 requests); a side with no ready replica
  // (or a retry) uses all.
  int side = -1;  // -1 any, 0 stable, 1 canary
  if (tried.empty()) {
    bool sides[2] = {false, false};
    for (const ReplicaInfo& r : route.replicas) sides[r.canary ? 1 : 0] |= r.ready;
    if (sides[0] && sides[1]) {
      const uint64_t n = State(route.deployment).split.fetch_add(1, std::memory_order_relaxed);
      const uint64_t w = static_cast<uint64_t>(std::clamp(route.canary_weight, 0, 100));
      side = (n * w) % 100 < w ? 1 : 0;
    }
  }
  for (const ReplicaInfo& r : route.replicas) {
    if (!r.ready || std::find(tried.begin(), tried.end(), r.url) != tried.end()) continue;
    if (side >= 0 && r.canary != (side == 1)) continue;
    std::shared_ptr<ReplicaState> s = replicas_.Get(r.url, r.tls);
    const EngineMetrics m = s->metrics();
    const int in_flight = s->in_flight.load(std::memory_order_relaxed);
    fleet::ReplicaView v;
    v.id = r.id;
    v.ready = true;
    v.running = m.running;
    v.queue_depth = m.waiting + std::max(0, in_flight - m.running - m.waiting);
    v.kv_usage = m.kv_usage;
    v.max_adapters = route.max_adapters;
    const bool ejected = s->ejected_until_us.load(std::memory_order_relaxed) > now_us;
    (ejected ? ejected_views : views).push_back(std::move(v));
    (ejected ? ejected_states : states).push_back(std::move(s));
    (ejected ? ejected_secrets : secrets).push_back(&r.secret);
  }
  if (views.empty()) {  // only recently failed replicas left: try them rather than nothing
    views = std::move(ejected_views);
    states = std::move(ejected_states);
    secrets = std::move(ejected_secrets);
  }
  if (views.empty()) return nullptr;
  fleet::RouteRequest rr;
  rr.model = route.model;
  rr.adapter = call.rec.adapter;
  rr.prefix_hashes = call.prefix;
  StatusOr<size_t> i = State(route.deployment).router.Pick(rr, views);
  if (!i.ok()) return nullptr;
  *replica_id = views[*i].id;
  *secret = secrets[*i];
  return states[*i];
}

// Tries replicas until one answers (a status line arrives) or attempts run out. Retries only
// when no byte of an answer arrived and the failure was a connection failure (refused, reset,
// closed): never after the upstream started answering, never on a timeout, never once the
// client left (its CancelSignal closes the upstream connection at once).
Gateway::Attempted Gateway::Forward(Call& call, const Route& route, const std::function<bool(std::string_view)>& on_chunk,
                                    const std::function<void(const http::ClientResponse&, const std::string& replica_id)>& on_head) {
  Attempted a;
  std::vector<std::string> tried;
  const std::string target = std::string("/v1/") + EndpointName(call.endpoint);
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    std::string replica_id;
    const std::string* secret = nullptr;
    std::shared_ptr<ReplicaState> r = PickReplica(call, route, tried, &replica_id, &secret);
    if (!r) {
      if (a.status.ok()) a.status = UnavailableError("no ready replica of deployment " + route.deployment);
      break;
    }
    if (attempt > 0) retries_->Inc({route.deployment});
    call.rec.attempts = attempt + 1;
    tried.push_back(r->url());
    const http::Headers headers = UpstreamHeaders(call.rec.request_id, *secret);
    std::unique_ptr<http::Client> client = r->Acquire();
    r->in_flight.fetch_add(1, std::memory_order_relaxed);
    http::ClientResponse head;
    bool head_seen = false;
    const auto t = SteadyClock::now();
    Status st = client->Stream("POST", target, call.body, headers,
                               [&](std::string_view bytes) {
                                 if (head.status == 401) return false;  // see below: not passed on
                                 if (!head_seen) {
                                   head_seen = true;
                                   if (on_head) on_head(head, replica_id);
                                 }
                                 return on_chunk(bytes);
                               },
                               &head, call.client_gone.get());
    call.upstream += SteadyClock::now() - t;
    r->in_flight.fetch_sub(1, std::memory_order_relaxed);
    a.replica_id = replica_id;
    a.replica = r;
    if (head.status == 401) {  // the replica refused the gateway's credentials, not the caller's
      a.status = RefusedCredentials(replica_id);
      Eject(*r);
      continue;
    }
    // Answered (maybe cut short later: then st is not OK), unless the client left before the
    // first body byte: then nothing was passed on and the call ends as the client's leaving.
    if (head.status != 0 && !(st.code() == StatusCode::kCancelled && !head_seen)) {
      if (!head_seen && on_head) on_head(head, replica_id);
      a.answered = true;
      a.head = std::move(head);
      a.status = st;
      if (st.ok()) r->Release(std::move(client));
      return a;
    }
    a.status = st;
    // A timeout (the upstream may be working on it) or the client's leaving: no other replica.
    if (st.code() != StatusCode::kUnavailable) break;
    Eject(*r);
  }
  return a;
}

// The fast path's Forward: the same attempts, each an AsyncClient call on the request's loop;
// every step after the first runs in the previous call's completion.
void Gateway::TryNextReplica(std::shared_ptr<AsyncForward> f) {
  Call& call = *f->call;
  const Route& route = *f->route;
  Attempted& a = f->a;
  if (f->client_gone && f->client_gone->cancelled()) return f->respond(ClientGone(call, route, std::string()));
  if (f->attempt >= options_.max_attempts) return f->respond(UnaryAnswer(call, route, std::move(a), std::string()));
  std::string replica_id;
  const std::string* secret = nullptr;
  std::shared_ptr<ReplicaState> r = PickReplica(call, route, f->tried, &replica_id, &secret);
  if (!r) {
    if (a.status.ok()) a.status = UnavailableError("no ready replica of deployment " + route.deployment);
    return f->respond(UnaryAnswer(call, route, std::move(a), std::string()));
  }
  if (f->attempt > 0) retries_->Inc({route.deployment});
  call.rec.attempts = f->attempt + 1;
  f->tried.push_back(r->url());
  r->in_flight.fetch_add(1, std::memory_order_relaxed);
  const auto t = SteadyClock::now();
  upstream_.Send(*f->loop, r->url(), "POST", f->target, f->body, UpstreamHeaders(call.rec.request_id, *secret),
                 [this, f, r, replica_id, t](http::AsyncResult res) mutable {
                   Call& c = *f->call;
                   c.upstream += SteadyClock::now() - t;
                   r->in_flight.fetch_sub(1, std::memory_order_relaxed);
                   Attempted& att = f->a;
                   att.replica_id = replica_id;
                   att.replica = r;
                   att.status = std::move(res.status);
                   if (att.status.code() == StatusCode::kCancelled) return f->respond(ClientGone(c, *f->route, replica_id));
                   if (res.answered() && res.response.status == 401) {  // as in Forward
                     att.status = RefusedCredentials(replica_id);
                     Eject(*r);
                     ++f->attempt;
                     return TryNextReplica(std::move(f));
                   }
                   if (res.answered()) {  // maybe cut short later: then status is not OK
                     att.answered = true;
                     std::string body = std::move(res.response.body);
                     att.head = std::move(res.response);
                     return RespondUnary(*f, std::move(att), std::move(body));
                   }
                   if (att.status.code() != StatusCode::kUnavailable) {  // a timeout: no retry
                     return f->respond(UnaryAnswer(c, *f->route, std::move(att), std::string()));
                   }
                   Eject(*r);
                   ++f->attempt;
                   TryNextReplica(std::move(f));
                 },
                 f->client_gone, r->tls());
}

// A unary call whose client went away while a replica worked on it: the replica's call was
// closed (the engine stops generating), the prompt is charged (the replica read it; what it
// generated before it noticed is not known here) and the rest of the reservation released, and
// the record says so with nginx's 499. Nobody reads the answer.
http::Response Gateway::ClientGone(Call& call, const Route& route, const std::string& replica_id) {
  call.rec.replica = replica_id;
  call.rec.error = "client disconnected";
  Settle(call, route, false, TokenUsage{.prompt_tokens = call.prompt_estimate, .completion_tokens = 0}, 0);
  call.rec.usage_reported = false;  // an estimate, not the upstream's usage
  client_gone_->Inc({route.deployment});
  return Finish(call, OpenAiError(499, "client_closed_request", "the client closed the connection before the answer"));
}

void Gateway::Eject(ReplicaState& r) {
  const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now().time_since_epoch()).count();
  r.ejected_until_us.store(now_us + std::chrono::duration_cast<std::chrono::microseconds>(options_.eject_for).count());
}

http::Response Gateway::Unary(Call& call, const Route& route) {
  std::string body;
  Attempted a = Forward(call, route, [&](std::string_view b) {
    body.append(b);
    return true;
  }, nullptr);
  return UnaryAnswer(call, route, std::move(a), std::move(body));
}

http::Response Gateway::UnaryAnswer(Call& call, const Route& route, Attempted a, std::string body) {
  if (a.status.code() == StatusCode::kCancelled) return ClientGone(call, route, a.replica_id);
  call.rec.replica = a.replica_id;
  if (!a.answered) {
    Settle(call, route, false, std::nullopt, 0);
    const bool timeout = a.status.code() == StatusCode::kDeadlineExceeded;
    call.rec.error = a.status.message();
    return Refuse(call, timeout ? "upstream_timeout" : "upstream_unavailable",
                  OpenAiError(timeout ? 504 : 502, timeout ? "upstream_timeout" : "upstream_unavailable",
                              "deployment " + route.deployment + ": " + a.status.message()));
  }
  std::optional<TokenUsage> usage;
  if (a.status.ok() && Is2xx(a.head.status)) usage = UsageOfAnswer(a.head.headers, body);
  if (!a.status.ok()) call.rec.error = a.status.message();
  Settle(call, route, a.status.ok() && Is2xx(a.head.status), usage, 0);
  if (a.status.ok()) return Finish(call, ForwardedAnswer(a, std::move(body)));
  http::Response r = OpenAiError(502, "upstream_failed", "replica " + a.replica_id + ": " + a.status.message());
  r.headers.emplace_back("x-aicloud-replica", a.replica_id);
  return Finish(call, std::move(r));
}

http::Response Gateway::ForwardedAnswer(const Attempted& a, std::string body) {
  http::Response r;
  r.status = a.head.status;
  r.headers.reserve(2);  // this and Stamp's
  auto ct = a.head.headers.find("content-type");
  r.content_type = ct != a.head.headers.end() ? ct->second : "application/json";
  r.body = std::move(body);
  r.headers.emplace_back("x-aicloud-replica", a.replica_id);
  return r;
}

void Gateway::RespondUnary(AsyncForward& f, Attempted a, std::string body) {
  Call& call = *f.call;
  const Route& route = *f.route;
  if (!a.answered || !a.status.ok()) return f.respond(UnaryAnswer(call, route, std::move(a), std::move(body)));
  call.rec.replica = a.replica_id;
  const bool ok = Is2xx(a.head.status);
  std::optional<TokenUsage> usage;
  if (ok) usage = UsageOfAnswer(a.head.headers, body);  // read before the body goes to the client
  // Settled before the answer goes: a client that reads its budget after the answer sees it.
  Settle(call, route, ok, usage, 0);
  http::Response r = ForwardedAnswer(a, std::move(body));
  Stamp(call, r);
  f.respond(std::move(r));
  Account(call, /*stream=*/false);
}

void Gateway::Settle(Call& call, const Route& route, bool answered, std::optional<TokenUsage> usage, int64_t chunks) {
  if (call.settled) return;
  call.settled = true;
  deps_.directory->NoteActivity(route.deployment);
  int64_t prompt = 0, completion = 0;
  if (usage) {
    prompt = usage->prompt_tokens;
    completion = usage->completion_tokens;
    call.rec.usage_reported = true;
  } else if (answered) {
    // No usage from the upstream: charge the upper bound (streams: chunks seen, ~1 token each).
    prompt = call.prompt_estimate;
    completion = call.info.stream ? std::min(chunks, call.info.CompletionTokensBound(call.max_tokens))
                                  : call.info.CompletionTokensBound(call.max_tokens);
  }
  const double cost = (static_cast<double>(prompt) * route.prompt_price_per_m +
                       static_cast<double>(completion) * route.completion_price_per_m) / 1e6;
  ledger_.Settle(call.reservation, prompt + completion, cost);
  if (!call.rate_scopes.empty()) limiter_.Adjust(call.rate_scopes, call.estimate - (prompt + completion));
  call.rec.prompt_tokens = prompt;
  call.rec.completion_tokens = completion;
  call.rec.cost = cost;
  if (prompt + completion > 0 && call.series != nullptr) {
    call.series->prompt_tokens->Inc(static_cast<double>(prompt));
    call.series->completion_tokens->Inc(static_cast<double>(completion));
  } else if (prompt + completion > 0) {
    tokens_->Inc({call.rec.model, "prompt"}, static_cast<double>(prompt));
    tokens_->Inc({call.rec.model, "completion"}, static_cast<double>(completion));
  }
  if (cost > 0) cost_->Inc({call.who->tenant}, cost);
}

http::Response Gateway::Streaming(Call& call, const Route& route) {
  auto pipe = std::make_shared<Pipe>();
  auto shared_call = std::make_shared<Call>(std::move(call));
  shared_call->PointScopes();  // the limits now live in *shared_call
  auto shared_route = std::make_shared<const Route>(route);
  {
    std::lock_guard<std::mutex> lock(bg_mu_);
    ++pumps_;
  }
  // The pump: reads the upstream into the pipe, waiting while the client is behind.
  std::thread([this, pipe, shared_call, shared_route] {
    const size_t limit = options_.stream_buffer_bytes;
    Attempted a = Forward(
        *shared_call, *shared_route,
        [&](std::string_view bytes) {
          std::unique_lock<std::mutex> lock(pipe->mu);
          pipe->cv.wait(lock, [&] { return pipe->buf.size() < limit || pipe->consumer_gone; });
          if (pipe->consumer_gone) return false;  // the client left: drop the upstream connection
          pipe->buf.append(bytes);
          pipe->cv.notify_all();
          return true;
        },
        [&](const http::ClientResponse& head, const std::string& replica_id) {
          std::lock_guard<std::mutex> lock(pipe->mu);
          pipe->result.head = head;
          pipe->result.replica_id = replica_id;  // the record names it even if the stream is cut
          pipe->result.answered = true;
          pipe->head_done = true;
          pipe->cv.notify_all();
        });
    {
      std::lock_guard<std::mutex> lock(pipe->mu);
      const http::ClientResponse head = pipe->head_done ? pipe->result.head : a.head;
      pipe->result = std::move(a);
      pipe->result.head = head;
      pipe->head_done = true;
      pipe->upstream_done = true;
      pipe->upstream_status = pipe->result.status;
      pipe->cv.notify_all();
    }
    std::lock_guard<std::mutex> lock(bg_mu_);
    --pumps_;
    bg_cv_.notify_all();
  }).detach();

  Call& c = *shared_call;
  std::unique_lock<std::mutex> lock(pipe->mu);
  pipe->cv.wait(lock, [&] { return pipe->head_done; });
  c.rec.replica = pipe->result.replica_id;
  if (!pipe->result.answered) {
    pipe->cv.wait(lock, [&] { return pipe->upstream_done; });
    Status st = pipe->result.status;
    c.rec.replica = pipe->result.replica_id;
    lock.unlock();
    if (st.code() == StatusCode::kCancelled) return ClientGone(c, route, c.rec.replica);
    Settle(c, route, false, std::nullopt, 0);
    const bool timeout = st.code() == StatusCode::kDeadlineExceeded;
    c.rec.error = st.message();
    return Refuse(c, timeout ? "upstream_timeout" : "upstream_unavailable",
                  OpenAiError(timeout ? 504 : 502, timeout ? "upstream_timeout" : "upstream_unavailable",
                              "deployment " + route.deployment + ": " + st.message()));
  }
  const int status = pipe->result.head.status;
  if (!Is2xx(status)) {  // an error answer: small, pass it through whole
    pipe->cv.wait(lock, [&] { return pipe->upstream_done; });
    http::Response r;
    r.status = status;
    auto ct = pipe->result.head.headers.find("content-type");
    r.content_type = ct != pipe->result.head.headers.end() ? ct->second : "application/json";
    r.body = std::move(pipe->buf);
    c.rec.replica = pipe->result.replica_id;
    lock.unlock();
    Settle(c, route, false, std::nullopt, 0);
    r.headers.emplace_back("x-aicloud-replica", c.rec.replica);
    return Finish(c, std::move(r));
  }
  lock.unlock();

  http::Response r;
  r.status = status;
  r.content_type = "text/event-stream";
  r.headers.emplace_back("Cache-Control", "no-cache");
  // The writer side runs on the server's stream thread. `Done` settles and records exactly once,
  // also when the stream function never runs (server stopping): it is the guard's destructor.
  struct Done {
    Done(Gateway* g, std::shared_ptr<Pipe> p, std::shared_ptr<Call> c, std::shared_ptr<const Route> r)
        : gw(g), pipe(std::move(p)), call(std::move(c)), route(std::move(r)) {}
    Done(const Done&) = delete;
    Done& operator=(const Done&) = delete;
    Gateway* gw;
    std::shared_ptr<Pipe> pipe;
    std::shared_ptr<Call> call;
    std::shared_ptr<const Route> route;
    std::optional<TokenUsage> usage;
    int64_t chunks = 0;
    bool client_gone = false;
    ~Done() {
      bool answered;
      {
        std::lock_guard<std::mutex> lock(pipe->mu);
        pipe->consumer_gone = true;  // unblocks the pump if it waits for room
        pipe->cv.notify_all();
        // CANCELLED: the client left and its signal ended the upstream call, as a client that
        // leaves between events ends it through the pump; either way the stream was answered.
        const bool cancelled = pipe->upstream_status.code() == StatusCode::kCancelled;
        if (cancelled) client_gone = true;
        answered = pipe->upstream_status.ok() || cancelled;
        if (!answered && call->rec.error.empty()) call->rec.error = pipe->upstream_status.message();
      }
      if (client_gone && call->rec.error.empty()) call->rec.error = "client disconnected";
      gw->Settle(*call, *route, answered || chunks > 0, usage, chunks);
      call->rec.status = 200;
      call->rec.latency_s = Seconds(SteadyClock::now() - call->t0);
      if (gw->deps_.usage != nullptr) gw->deps_.usage->Record(call->rec);
    }
  };
  auto done = std::make_shared<Done>(this, pipe, shared_call, shared_route);
  r.stream = [done, pipe, client_usage = c.info.include_usage](http::StreamWriter& w) {
    http::SseParser parser;
    std::string take, out;
    bool first = true;
    for (;;) {
      bool finished;
      {
        std::unique_lock<std::mutex> guard(pipe->mu);
        pipe->cv.wait_for(guard, std::chrono::milliseconds(100),
                          [&] { return !pipe->buf.empty() || pipe->upstream_done; });
        if (w.closed()) {
          done->client_gone = true;
          return;
        }
        take.clear();
        take.swap(pipe->buf);
        finished = pipe->upstream_done && take.empty();
        pipe->cv.notify_all();  // room for the pump
      }
      if (finished) return;
      if (take.empty()) continue;
      if (first) {
        done->call->rec.ttft_s = Seconds(SteadyClock::now() - done->call->t0);
        first = false;
      }
      out.clear();
      for (http::SseEvent& e : parser.Feed(take)) {
        if (e.data != "[DONE]" && e.data.find("\"usage\"") != std::string::npos) {
          json j = json::parse(e.data, nullptr, false);
          if (std::optional<TokenUsage> u = UsageOf(j)) {
            done->usage = u;
            // The usage chunk the gateway asked for on the client's behalf is not passed on.
            if (!client_usage && j.contains("choices") && j["choices"].empty()) continue;
          }
        }
        if (e.data != "[DONE]") ++done->chunks;
        out += http::FormatSseEvent(e.event, e.data, e.id);
      }
      if (!out.empty() && !w.Write(out)) {
        done->client_gone = true;
        return;
      }
    }
  };
  c.rec.status = status;
  return Finish(c, std::move(r));
}

void Gateway::Background() {
  using std::chrono::milliseconds;
  if (options_.scrape_period.count() <= 0) return;
  // Per replica url: the trust its client was made with (null: plain http) and the client.
  std::map<std::string, std::pair<std::shared_ptr<const http::TlsTrust>, std::unique_ptr<http::Client>>> scrapers;
  for (;;) {
    const auto next_scrape = SteadyClock::now() + options_.scrape_period;
    std::vector<std::string> urls;
    std::vector<std::string> secrets;
    std::vector<std::shared_ptr<const http::TlsTrust>> trusts;
    for (const std::shared_ptr<const Route>& r : deps_.directory->List()) {
      for (const ReplicaInfo& rep : r->replicas) {
        // Only replicas the controller found ready (their engine proved it holds the secret it
        // would be sent): a port not yet (or no longer) the replica's gets nothing.
        if (!rep.ready) continue;
        urls.push_back(rep.url);
        secrets.push_back(rep.secret);
        trusts.push_back(rep.tls);
      }
    }
    for (size_t i = 0; i < urls.size(); ++i) {
      const std::string& url = urls[i];
      auto& [trust, c] = scrapers[url];
      if (!c || trust != trusts[i]) {
        const milliseconds timeout = std::min(milliseconds(1000), options_.scrape_period * 2);
        trust = trusts[i];
        c = trust ? std::make_unique<http::Client>("https://" + url, http::ClientOptions{.ca_pem = trust->ca_pem(),
                                                                                         .timeout = timeout})
                  : std::make_unique<http::Client>("http://" + url, http::ClientOptions{.timeout = timeout});
      }
      http::Headers auth;
      if (!secrets[i].empty()) auth.emplace_back("Authorization", "Bearer " + secrets[i]);
      StatusOr<http::ClientResponse> m = c->Send("GET", "/metrics", "", auth);
      std::shared_ptr<ReplicaState> s = replicas_.Get(url, trusts[i]);
      if (m.ok() && m->status == 200) s->SetMetrics(ParseEngineMetrics(m->body));
      else s->SetMetrics({});
    }
    std::erase_if(scrapers, [&](const auto& kv) { return std::find(urls.begin(), urls.end(), kv.first) == urls.end(); });
    replicas_.Retain(urls);
    std::unique_lock<std::mutex> lock(bg_mu_);
    bg_cv_.wait_until(lock, next_scrape, [&] { return stopping_; });
    if (stopping_) return;
  }
}

// The store exchanges, on their own thread so that slow scrapes cannot hold the leases back.
void Gateway::Syncer() {
  int64_t next_prune_us = clock_->NowMicros() + kPrunePeriodUs;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(bg_mu_);
      bg_cv_.wait_for(lock, options_.flush_period, [&] { return stopping_; });
      if (stopping_) return;
    }
    try {  // this thread must outlive anything a stored object holds
      if (Status s = ledger_.Flush(); !s.ok()) std::fprintf(stderr, "gateway: budget flush failed: %s\n", s.message().c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gateway: budget flush failed: %s\n", e.what());
    }
    try {
      if (rates_ != nullptr) {
        if (Status s = rates_->Sync(); !s.ok()) std::fprintf(stderr, "gateway: rate share failed: %s\n", s.message().c_str());
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gateway: rate share failed: %s\n", e.what());
    }
    if (clock_->NowMicros() >= next_prune_us) {
      next_prune_us = clock_->NowMicros() + kPrunePeriodUs;
      PruneIdleScopes();
    }
  }
}

void Gateway::PruneIdleScopes() {
  std::vector<std::string> dropped = limiter_.Prune(kIdleScopeUs);
  if (rates_ != nullptr) rates_->Forget(dropped);
  ledger_.Prune(kIdleScopeUs / 1'000'000);
}

StatusOr<std::unique_ptr<GatewayServer>> GatewayServer::Start(Gateway* gateway, http::ServerOptions options,
                                                              int min_workers) {
  auto s = std::unique_ptr<GatewayServer>(new GatewayServer());
  s->router_ = std::make_unique<http::Router>();
  gateway->AddRoutes(s->router_.get());
  s->router_->Add("GET", "/metrics", [gateway](http::Request&) { return gateway->MetricsResponse(); });
  s->router_->Add("GET", "/health", [](http::Request&) { return http::Response::Json(200, json::object()); });
  options.worker_threads = std::max(options.worker_threads, min_workers);
  options.thread_name = "gw";
  http::Router* router = s->router_.get();
  StatusOr<std::unique_ptr<http::Server>> server = http::Server::Start(
      std::move(options), [router](http::Request& r, http::Responder respond) { router->Dispatch(r, std::move(respond)); });
  if (!server.ok()) return server.status();
  s->server_ = std::move(*server);
  return s;
}

}  // namespace aicloud::gateway
