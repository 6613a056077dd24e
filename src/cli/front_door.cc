#include "cli/front_door.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "core/thread_name.h"
#include "control/gateway_feed.h"
#include "gateway/access.h"
#include "gateway/control_link.h"
#include "gateway/directory.h"
#include "gateway/gateway.h"
#include "gateway/usage.h"
#include "gateway/usage_tally.h"

namespace aicloud::cli {
namespace {

using nlohmann::json;

// The gateway's view of the server's Deployments: refreshed from the controller's routes every
// 100 ms (and at once when asked), published as immutable snapshots. Route::deployment is
// "tenant/name", so two tenants' deployments never share gateway state.
class DeploymentDirectory final : public gateway::Directory {
 public:
  explicit DeploymentDirectory(control::DeploymentController* dc) : dc_(dc) {
    Refresh();
    thread_ = std::thread([this] {
      SetThreadName("fd-directory");
      Loop();
    });
  }
  ~DeploymentDirectory() override { Stop(); }

  void Stop() {
    {
      std::lock_guard<std::mutex> l(loop_mu_);
      stop_ = true;
    }
    loop_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  std::shared_ptr<const gateway::Route> Lookup(std::string_view model) const override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = by_model_.find(std::string(model));
    return it == by_model_.end() ? nullptr : it->second;
  }
  std::vector<std::shared_ptr<const gateway::Route>> List() const override {
    std::lock_guard<std::mutex> l(mu_);
    return list_;
  }
  void WantReplicas(std::string_view deployment, int n) override {
    const size_t slash = deployment.find('/');
    if (slash == std::string_view::npos) return;
    dc_->NoteRequests(std::string(deployment.substr(0, slash)), std::string(deployment.substr(slash + 1)), n);
    loop_cv_.notify_all();  // pick up the new replica as soon as the controller makes it ready
  }
  void NoteActivity(std::string_view deployment) override {
    const size_t slash = deployment.find('/');
    if (slash == std::string_view::npos) return;
    dc_->NoteActivity(std::string(deployment.substr(0, slash)), std::string(deployment.substr(slash + 1)));
  }
  void NoteArrival(std::string_view deployment) override {
    const size_t slash = deployment.find('/');
    if (slash == std::string_view::npos) return;
    dc_->NoteArrival(std::string(deployment.substr(0, slash)), std::string(deployment.substr(slash + 1)));
  }
  uint64_t Version() const override { return notifier_.Version(); }
  uint64_t WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) override {
    return notifier_.WaitForChange(seen, timeout);
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> l(loop_mu_);
    while (!stop_) {
      loop_cv_.wait_for(l, std::chrono::milliseconds(100));
      if (stop_) break;
      l.unlock();
      Refresh();
      l.lock();
    }
  }

  void Refresh() {
    // The same JSON a standalone gateway reads from the server (control/gateway_feed.h), so both
    // front doors see one set of routes.
    std::vector<std::shared_ptr<const gateway::Route>> list;
    std::map<std::string, std::shared_ptr<const gateway::Route>> by_model;
    std::string fingerprint;
    for (const control::ServingRoute& r : dc_->Routes()) {
      const json j = control::ServingRouteJson(r);
      StatusOr<gateway::Route> route = gateway::RouteFromJson(j);
      if (!route.ok()) continue;  // the controller's routes always read back
      fingerprint += j.dump() + "\n";
      auto shared = std::make_shared<const gateway::Route>(std::move(*route));
      // First deployment to claim a name keeps it (model names are one namespace).
      by_model.emplace(shared->model, shared);
      for (const std::string& a : shared->adapters) by_model.emplace(a, shared);
      list.push_back(std::move(shared));
    }
    bool changed = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (fingerprint != fingerprint_) {
        fingerprint_ = std::move(fingerprint);
        list_ = std::move(list);
        by_model_ = std::move(by_model);
        changed = true;
      }
    }
    if (changed) notifier_.Bump();
  }

  control::DeploymentController* dc_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<const gateway::Route>> list_;
  std::map<std::string, std::shared_ptr<const gateway::Route>> by_model_;
  std::string fingerprint_;
  gateway::DirectoryNotifier notifier_;
  std::mutex loop_mu_;
  std::condition_variable loop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Tenants' gateway limits (Tenant spec.serving), read from the store once a second on a thread
// of their own: For() runs on the gateway's I/O thread and never waits for the store. A failed
// read keeps the limits last read (never "no limits" because the store was busy).
class TenantLimits {
 public:
  explicit TenantLimits(store::Store* store) : store_(store) {
    Load();
    thread_ = std::thread([this] {
      SetThreadName("fd-limits");
      Loop();
    });
  }
  ~TenantLimits() { Stop(); }

  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  gateway::Limits For(const std::string& tenant) const {
    std::lock_guard<std::mutex> l(mu_);
    auto it = limits_->find(tenant);
    return it == limits_->end() ? gateway::Limits{} : it->second;
  }
  // Changes whenever a load finds the limits changed. (Read on every request: no lock.)
  uint64_t Version() const { return version_.load(); }

 private:
  void Load() {
    StatusOr<store::ListResult> all = store_->List({.kind = "Tenant"});
    if (!all.ok()) return;
    auto next = std::make_shared<std::map<std::string, gateway::Limits>>();
    for (const json& t : all->items) {
      const gateway::Limits lim =
          gateway::LimitsFromServing(t.value("spec", json::object()).value("serving", json::object()));
      (*next)[t["metadata"].value("name", std::string())] = lim;
    }
    std::lock_guard<std::mutex> l(mu_);
    if (*next == *limits_) return;
    limits_ = std::move(next);
    version_.fetch_add(1);
  }

  void Loop() {
    for (;;) {
      {
        std::unique_lock<std::mutex> l(mu_);
        if (cv_.wait_for(l, std::chrono::seconds(1), [&] { return stop_; })) return;
      }
      Load();
    }
  }

  store::Store* const store_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // GUARDED_BY(mu_)
  std::shared_ptr<const std::map<std::string, gateway::Limits>> limits_ =
      std::make_shared<std::map<std::string, gateway::Limits>>();  // GUARDED_BY(mu_)
  std::atomic<uint64_t> version_{0};  // changed under mu_, after limits_
  std::thread thread_;
};

}  // namespace

struct FrontDoor::Impl {
  std::unique_ptr<DeploymentDirectory> directory;
  std::unique_ptr<TenantLimits> limits;
  gateway::LogUsageSink usage;
  // Sums the records into the tenants' ServingUsage objects, then hands them to `usage`.
  std::unique_ptr<gateway::UsageTally> tally;
  std::unique_ptr<gateway::Gateway> gateway;
};

FrontDoor::FrontDoor() : impl_(std::make_unique<Impl>()) {}
FrontDoor::~FrontDoor() { Stop(); }

std::function<std::string()> FrontDoor::Metrics() {
  Impl* impl = impl_.get();
  return [impl]() -> std::string { return impl->gateway ? impl->gateway->metrics().Render() : std::string(); };
}

void FrontDoor::Stop() {
  if (impl_->gateway) impl_->gateway->Stop();
  if (impl_->tally) impl_->tally->Stop();  // the last sums go to the store, which the server still holds
  if (impl_->directory) impl_->directory->Stop();
  if (impl_->limits) impl_->limits->Stop();
}

std::function<StatusOr<http::AsyncHandler>(control::ApiServer&)> FrontDoor::Factory() {
  Impl* impl = impl_.get();
  return [impl](control::ApiServer& s) -> StatusOr<http::AsyncHandler> {
    impl->directory = std::make_unique<DeploymentDirectory>(s.deployments());
    impl->limits = std::make_unique<TenantLimits>(s.store());
    impl->tally = std::make_unique<gateway::UsageTally>(s.store(), gateway::UsageTallyOptions{.next = &impl->usage});
    auth::AuthService* auth = s.auth();
    TenantLimits* limits = impl->limits.get();
    // API keys of the server: a key restricted to a tenant calls that tenant's models (under the
    // tenant's limits); an unrestricted key that may read deployments everywhere calls any.
    gateway::Authenticator authenticate = [auth, limits](std::string_view authorization) -> StatusOr<gateway::CallerRef> {
      StatusOr<auth::Principal> who = auth->Authenticate(authorization);
      if (!who.ok()) return who.status();
      auto c = std::make_shared<gateway::Caller>();
      c->key_id = who->key_id;
      if (who->key_tenant) {
        c->tenant = *who->key_tenant;
        c->tenant_limits = limits->For(c->tenant);
      } else if (auth->Authorize(*who, "get", "deployments", "").allowed) {
        c->models = {"*"};
      }
      return gateway::CallerRef(std::move(c));
    };
    // What a key authenticates to changes with the RBAC snapshot, a key's expiry and the
    // tenants' limits: a kept-alive connection reuses its caller while none of them changed.
    auto epochs = std::make_shared<gateway::EpochOfTwo>();
    auto auth_epoch = [auth, limits, epochs] { return epochs->Of(auth->Epoch(), limits->Version()); };
    StatusOr<std::unique_ptr<gateway::Gateway>> g = gateway::Gateway::Create(
        {.directory = impl->directory.get(), .authenticate = authenticate, .auth_epoch = auth_epoch, .usage = impl->tally.get(),
         .store = s.store(), .clock = nullptr},
        {});
    if (!g.ok()) return g.status();
    impl->gateway = std::move(*g);
    impl->tally->ExportMetrics(&impl->gateway->metrics());  // scraped only while HTTP serves
    auto router = std::make_shared<http::Router>();
    impl->gateway->AddRoutes(router.get());
    return http::AsyncHandler([router](http::Request& r, http::Responder respond) { router->Dispatch(r, std::move(respond)); });
  };
}

}  // namespace aicloud::cli
