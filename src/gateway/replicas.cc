#include "gateway/replicas.h"

#include <algorithm>
#include <cstdlib>
#include <unordered_set>

namespace aicloud::gateway {

EngineMetrics ParseEngineMetrics(std::string_view text) {
  EngineMetrics m;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line.front() == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string_view::npos) continue;
    std::string_view name = line.substr(0, name_end);
    const size_t sp = line.rfind(' ');
    if (sp == std::string_view::npos || sp + 1 >= line.size()) continue;
    const std::string value_text(line.substr(sp + 1));
    char* stop = nullptr;
    const double v = std::strtod(value_text.c_str(), &stop);
    if (stop == value_text.c_str()) continue;
    if (name == "vllm:num_requests_waiting") {
      m.waiting += static_cast<int>(v);
      m.any = true;
    } else if (name == "vllm:num_requests_running") {
      m.running += static_cast<int>(v);
      m.any = true;
    } else if (name == "vllm:kv_cache_usage_perc" || name == "vllm:gpu_cache_usage_perc") {
      m.kv_usage = std::max(m.kv_usage, v);
      m.any = true;
    }
  }
  return m;
}

ReplicaState::ReplicaState(std::string url, std::shared_ptr<const http::TlsTrust> tls,
                           std::chrono::milliseconds timeout, size_t max_idle)
    : url_(std::move(url)), tls_(std::move(tls)), timeout_(timeout), max_idle_(max_idle) {}

std::unique_ptr<http::Client> ReplicaState::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      std::unique_ptr<http::Client> c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  if (tls_) {
    return std::make_unique<http::Client>("https://" + url_,
                                          http::ClientOptions{.ca_pem = tls_->ca_pem(), .timeout = timeout_});
  }
  return std::make_unique<http::Client>("http://" + url_, http::ClientOptions{.timeout = timeout_});
}

void ReplicaState::Release(std::unique_ptr<http::Client> client) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < max_idle_) idle_.push_back(std::move(client));
}

void ReplicaState::SetMetrics(const EngineMetrics& m) {
  std::lock_guard<std::mutex> lock(mu_);
  metrics_ = m;
}

EngineMetrics ReplicaState::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_;
}

std::shared_ptr<ReplicaState> ReplicaTable::Get(const std::string& url, const std::shared_ptr<const http::TlsTrust>& tls) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<ReplicaState>& s = by_url_[url];
  if (!s || s->tls() != tls) s = std::make_shared<ReplicaState>(url, tls, timeout_, max_idle_);
  return s;
}

void ReplicaTable::Retain(const std::vector<std::string>& keep) {
  std::unordered_set<std::string> k(keep.begin(), keep.end());
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(by_url_, [&](const auto& kv) { return !k.contains(kv.first); });
}

std::vector<std::shared_ptr<ReplicaState>> ReplicaTable::All() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<ReplicaState>> out;
  for (const auto& [url, s] : by_url_) out.push_back(s);
  return out;
}

StatusOr<size_t> SharedRouter::Pick(const fleet::RouteRequest& request, const std::vector<fleet::ReplicaView>& views) {
  const size_t n = views.size();
  if (n == 0) return UnavailableError("no ready replica");
  std::lock_guard<std::mutex> lock(mu_);
  if (!rotate_) return router_->Pick(request, views);
  const size_t shift = turn_++ % n;
  rotated_.clear();
  for (size_t k = 0; k < n; ++k) rotated_.push_back(views[(shift + k) % n]);
  StatusOr<size_t> i = router_->Pick(request, rotated_);
  if (!i.ok()) return i;
  return (*i + shift) % n;
}

}  // namespace aicloud::gateway
