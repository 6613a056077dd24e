#include "gateway/usage_tally.h"

#include <sys/resource.h>
#include <unistd.h>

#include <ctime>

#include "gateway/stored_fields.h"

namespace aicloud::gateway {

using store::json;

namespace {

constexpr int kWriteAttempts = 8;

void AddTo(json* o, const UsageTally::Counts& c, bool latency) {
  auto add_int = [&](const char* f, int64_t v) { (*o)[f] = stored::IntField(*o, f) + v; };
  auto add_num = [&](const char* f, double v) { (*o)[f] = stored::NumField(*o, f) + v; };
  add_int("requests", c.requests);
  add_int("errors", c.errors);
  add_int("promptTokens", c.prompt_tokens);
  add_int("completionTokens", c.completion_tokens);
  add_num("cost", c.cost);
  if (latency) {
    add_num("latencySeconds", c.latency_s);
    add_num("heldSeconds", c.held_s);
  }
}

// Adds every entry of `sums` into the member `field` of `status` (an object of objects).
void AddAll(json* status, const char* field, const std::map<std::string, UsageTally::Counts>& sums, bool latency) {
  json& m = (*status)[field];
  if (!m.is_object()) m = json::object();
  for (const auto& [name, c] : sums) {
    json& one = m[name];
    if (!one.is_object()) one = json::object();
    AddTo(&one, c, latency);
  }
}

}  // namespace

void UsageTally::Counts::Add(const Counts& o) {
  requests += o.requests;
  errors += o.errors;
  prompt_tokens += o.prompt_tokens;
  completion_tokens += o.completion_tokens;
  cost += o.cost;
  latency_s += o.latency_s;
  held_s += o.held_s;
}

UsageTally::UsageTally(store::Store* store, UsageTallyOptions options)
    : store_(store), options_(options), thread_([this] { Run(); }) {}

UsageTally::~UsageTally() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string UsageTally::DayOf(int64_t unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

void UsageTally::Record(UsageRecord record) {
  std::lock_guard<std::mutex> l(mu_);
  if (queue_.size() >= options_.max_queue) {
    ++dropped_;
    return;
  }
  queue_.push_back(std::move(record));
  // No notify: the thread wakes every period, so a request costs no thread wake-up.
}

uint64_t UsageTally::dropped() const {
  std::lock_guard<std::mutex> l(mu_);
  return dropped_;
}

size_t UsageTally::pending_objects() const {
  std::lock_guard<std::mutex> l(flush_mu_);
  return pending_.size();
}

void UsageTally::ExportMetrics(Metrics* metrics) {
  metrics->AddGaugeFn("aicloud_gateway_usage_pending_objects",
                      "tenant-day usage sums not yet written to the store (the store refused or was not reached)", {},
                      [this] { return std::vector<std::pair<LabelValues, double>>{{{}, static_cast<double>(pending_objects())}}; });
  metrics->AddGaugeFn("aicloud_gateway_usage_dropped", "usage records dropped because the tally's queue was full", {},
                      [this] { return std::vector<std::pair<LabelValues, double>>{{{}, static_cast<double>(dropped())}}; });
}

void UsageTally::Sum(const UsageRecord& r) {
  std::string tenant = r.tenant;
  if (tenant.empty()) tenant = r.deployment.substr(0, r.deployment.find('/'));
  if (tenant.empty()) return;
  Counts c;
  c.requests = 1;
  c.errors = r.status >= 400 ? 1 : 0;
  c.prompt_tokens = std::max<int64_t>(0, r.prompt_tokens);
  c.completion_tokens = std::max<int64_t>(0, r.completion_tokens);
  c.cost = r.cost > 0 ? r.cost : 0;
  c.latency_s = r.latency_s > 0 ? r.latency_s : 0;
  c.held_s = r.held_s > 0 ? r.held_s : 0;
  Sums& s = pending_[{tenant, DayOf(r.unix_ms)}];
  s.models[r.model.empty() ? "(none)" : r.model].Add(c);
  if (!r.key_id.empty()) s.keys[r.key_id].Add(c);
}

void UsageTally::DrainLocked() {
  std::vector<UsageRecord> batch;
  {
    std::lock_guard<std::mutex> l(mu_);
    batch.swap(queue_);
  }
  for (const UsageRecord& r : batch) Sum(r);
  if (options_.next != nullptr) {
    for (UsageRecord& r : batch) options_.next->Record(std::move(r));
  }
}

Status UsageTally::Flush() {
  std::lock_guard<std::mutex> l(flush_mu_);
  DrainLocked();
  Status first;
  for (auto it = pending_.begin(); it != pending_.end();) {
    Status st = Write(it->first.first, it->first.second, it->second);
    if (st.ok()) {
      it = pending_.erase(it);
    } else {
      if (first.ok()) first = st;
      ++it;
    }
  }
  return first;
}

Status UsageTally::Write(const std::string& tenant, const std::string& day, const Sums& sums) {
  const store::ObjectKey key{kServingUsageKind, tenant, day};
  Status last;
  for (int attempt = 0; attempt < kWriteAttempts; ++attempt) {
    StatusOr<json> cur = store_->Get(key);
    if (!cur.ok() && cur.status().code() != StatusCode::kNotFound) return cur.status();
    json o = cur.ok() ? *cur
                      : json{{"apiVersion", "aicloud/v1"},
                             {"kind", kServingUsageKind},
                             {"metadata", {{"tenant", tenant}, {"name", day}}},
                             {"spec", {{"day", day}}},
                             {"status", json::object()}};
    json& status = o["status"];
    if (!status.is_object()) status = json::object();
    AddAll(&status, "models", sums.models, true);
    AddAll(&status, "keys", sums.keys, false);
    StatusOr<json> w = cur.ok() ? store_->Update(o, store::ResourceVersionOf(*cur)) : store_->Create(o);
    if (w.ok()) return OkStatus();
    last = w.status();
    // Another gateway wrote it between the read and the write: read again.
    if (last.code() != StatusCode::kAborted && last.code() != StatusCode::kAlreadyExists) return last;
  }
  return last;
}

void UsageTally::Run() {
  // Background work: requests sharing the core come first.
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
  const auto tick = std::min<std::chrono::milliseconds>(options_.flush_period, std::chrono::milliseconds(100));
  auto next_write = std::chrono::steady_clock::now() + options_.flush_period;
  for (;;) {
    bool stop;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, tick, [&] { return stop_; });
      stop = stop_;
    }
    if (stop || std::chrono::steady_clock::now() >= next_write) {
      (void)Flush();  // what failed stays pending for the next period
      next_write = std::chrono::steady_clock::now() + options_.flush_period;
    } else {
      std::lock_guard<std::mutex> l(flush_mu_);
      DrainLocked();  // the log sees the records within 100 ms
    }
    if (stop) return;
  }
}

}  // namespace aicloud::gateway
