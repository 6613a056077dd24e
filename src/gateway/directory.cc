#include "gateway/directory.h"

#include <algorithm>
#include <thread>

namespace aicloud::gateway {

bool Route::HasAdapter(std::string_view name) const {
  return std::find(adapters.begin(), adapters.end(), name) != adapters.end();
}

int Route::ReadyCount() const {
  return static_cast<int>(std::count_if(replicas.begin(), replicas.end(), [](const ReplicaInfo& r) { return r.ready; }));
}

uint64_t Directory::WaitForChange(uint64_t /*seen*/, std::chrono::milliseconds timeout) {
  std::this_thread::sleep_for(std::min(timeout, std::chrono::milliseconds(50)));
  return Version();
}

uint64_t DirectoryNotifier::Version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

void DirectoryNotifier::Bump() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++version_;
  }
  cv_.notify_all();
}

uint64_t DirectoryNotifier::WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return version_ != seen; });
  return version_;
}

StaticDirectory::StaticDirectory(std::vector<Route> routes) {
  for (Route& r : routes) {
    Status s = Upsert(std::move(r));
    (void)s;  // the file loader validated names; a duplicate keeps the first
  }
}

std::shared_ptr<const Route> StaticDirectory::Lookup(std::string_view model) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_model_.find(model);
  return it == by_model_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<const Route>> StaticDirectory::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<const Route>> out;
  for (const auto& [name, r] : by_deployment_) out.push_back(r);
  return out;
}

void StaticDirectory::WantReplicas(std::string_view deployment, int n) {
  std::function<void(const std::string&, int)> hook;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int& w = wanted_[std::string(deployment)];
    w = std::max(w, n);
    hook = on_want_;
  }
  if (hook) hook(std::string(deployment), n);
}

void StaticDirectory::OnWant(std::function<void(const std::string&, int)> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  on_want_ = std::move(hook);
}

int StaticDirectory::Wanted(std::string_view deployment) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = wanted_.find(deployment);
  return it == wanted_.end() ? 0 : it->second;
}

void StaticDirectory::RebuildIndexLocked() {
  by_model_.clear();
  for (const auto& [name, r] : by_deployment_) {
    by_model_.emplace(r->model, r);
    for (const std::string& a : r->adapters) by_model_.emplace(a, r);
  }
}

Status StaticDirectory::Upsert(Route route) {
  if (route.deployment.empty()) return InvalidArgumentError("deployment: required");
  if (route.model.empty()) route.model = route.base_model.empty() ? route.deployment : route.base_model;
  if (route.base_model.empty()) route.base_model = route.model;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto clash = [&](const std::string& name) -> Status {
      auto it = by_model_.find(name);
      if (it != by_model_.end() && it->second->deployment != route.deployment) {
        return InvalidArgumentError("model \"" + name + "\" is already served by deployment \"" +
                                    it->second->deployment + "\"");
      }
      return OkStatus();
    };
    AICLOUD_RETURN_IF_ERROR(clash(route.model));
    for (const std::string& a : route.adapters) AICLOUD_RETURN_IF_ERROR(clash(a));
    std::string key = route.deployment;
    by_deployment_[key] = std::make_shared<const Route>(std::move(route));
    RebuildIndexLocked();
  }
  notifier_.Bump();
  return OkStatus();
}

Status StaticDirectory::Remove(std::string_view deployment) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_deployment_.find(deployment);
    if (it == by_deployment_.end()) return NotFoundError("deployment \"" + std::string(deployment) + "\" not found");
    by_deployment_.erase(it);
    RebuildIndexLocked();
  }
  notifier_.Bump();
  return OkStatus();
}

Status StaticDirectory::SetReplicas(std::string_view deployment, std::vector<ReplicaInfo> replicas) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_deployment_.find(deployment);
    if (it == by_deployment_.end()) return NotFoundError("deployment \"" + std::string(deployment) + "\" not found");
    auto next = std::make_shared<Route>(*it->second);
    next->replicas = std::move(replicas);
    it->second = std::move(next);
    RebuildIndexLocked();
  }
  notifier_.Bump();
  return OkStatus();
}

Status StaticDirectory::SetReady(std::string_view deployment, std::string_view replica_id, bool ready) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_deployment_.find(deployment);
    if (it == by_deployment_.end()) return NotFoundError("deployment \"" + std::string(deployment) + "\" not found");
    auto next = std::make_shared<Route>(*it->second);
    auto rep = std::find_if(next->replicas.begin(), next->replicas.end(),
                            [&](const ReplicaInfo& r) { return r.id == replica_id; });
    if (rep == next->replicas.end()) {
      return NotFoundError("deployment \"" + std::string(deployment) + "\" has no replica \"" +
                           std::string(replica_id) + "\"");
    }
    rep->ready = ready;
    it->second = std::move(next);
    RebuildIndexLocked();
  }
  notifier_.Bump();
  return OkStatus();
}

}  // namespace aicloud::gateway
