#include "gateway/usage_tally.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <limits>
#include <tuple>
#include <utility>

#include "core/thread_name.h"
#include "auth/auth.h"
#include "core/numeric.h"
#include "gateway/stored_fields.h"

namespace aicloud::gateway {

using store::json;

namespace {

constexpr int kWriteAttempts = 8;
constexpr int kStopTries = 3;

void AddTo(json* o, const UsageTally::Counts& c, bool latency) {
  auto add_int = [&](const char* f, int64_t v) { (*o)[f] = SaturatingAdd(stored::IntField(*o, f), v); };
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

// A refusal the store will repeat however often the batch is sent.
bool Permanent(StatusCode c) {
  return c == StatusCode::kInvalidArgument || c == StatusCode::kFailedPrecondition || c == StatusCode::kOutOfRange;
}

}  // namespace

void UsageTally::Counts::Add(const Counts& o) {
  requests = SaturatingAdd(requests, o.requests);
  errors = SaturatingAdd(errors, o.errors);
  prompt_tokens = SaturatingAdd(prompt_tokens, o.prompt_tokens);
  completion_tokens = SaturatingAdd(completion_tokens, o.completion_tokens);
  cost += o.cost;
  latency_s += o.latency_s;
  held_s += o.held_s;
}

UsageTally::UsageTally(store::Store* store, UsageTallyOptions options) : store_(store), options_(std::move(options)) {
  if (options_.id.empty()) options_.id = "tally-" + auth::RandomHex(6);
  thread_ = std::thread([this] {
    SetThreadName("usage-tally");
    Run();
  });
  writer_ = std::thread([this] {
    SetThreadName("usage-store");
    WriterRun();
  });
}

UsageTally::~UsageTally() { Stop(); }

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
  if (queue_.size() >= options_.max_queue || stop_) {
    ++dropped_;
    return;
  }
  queue_.push_back(std::move(record));
  // No notify: the thread wakes every 100 ms, so a request costs no thread wake-up.
}

uint64_t UsageTally::dropped() const {
  std::lock_guard<std::mutex> l(mu_);
  return dropped_;
}

size_t UsageTally::pending_objects() const { return pending_count_.load(); }

void UsageTally::ExportMetrics(Metrics* metrics) {
  metrics->AddGaugeFn("aicloud_gateway_usage_pending_objects",
                      "tenant-day usage sums not yet written to the store (the store refused or was not reached)", {},
                      [this] { return std::vector<std::pair<LabelValues, double>>{{{}, static_cast<double>(pending_objects())}}; });
  metrics->AddGaugeFn("aicloud_gateway_usage_dropped", "usage records dropped because the tally's queue was full", {},
                      [this] { return std::vector<std::pair<LabelValues, double>>{{{}, static_cast<double>(dropped())}}; });
}

void UsageTally::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

void UsageTally::Sum(const UsageRecord& r) {
  std::string tenant = r.tenant;
  if (tenant.empty()) tenant = r.deployment.substr(0, r.deployment.find('/'));
  if (tenant.empty()) return;
  Counts c;
  c.requests = 1;
  c.errors = r.status >= 400 || !r.error.empty() ? 1 : 0;  // a stream that failed after its 200 too
  c.prompt_tokens = std::max<int64_t>(0, r.prompt_tokens);
  c.completion_tokens = std::max<int64_t>(0, r.completion_tokens);
  c.cost = r.cost > 0 ? r.cost : 0;
  if (c.errors == 0) {
    c.latency_s = r.latency_s > 0 ? r.latency_s : 0;
    c.held_s = r.held_s > 0 ? r.held_s : 0;
  }
  Sums& s = pending_[{tenant, DayOf(r.unix_ms)}].open;
  s.models[r.model.empty() ? "(none)" : r.model].Add(c);
  if (!r.key_id.empty()) s.keys[r.key_id].Add(c);
}

void UsageTally::Drain() {
  // One drain at a time, from the swap to the hand-on: a Flush finds every record recorded before
  // it summed (and handed on, in order).
  std::lock_guard<std::mutex> d(drain_mu_);
  std::deque<UsageRecord> batch;
  {
    std::lock_guard<std::mutex> l(mu_);
    batch.swap(queue_);
  }
  if (batch.empty()) return;
  {
    std::lock_guard<std::mutex> l(sums_mu_);
    for (const UsageRecord& r : batch) Sum(r);
    pending_count_ = pending_.size();
  }
  if (options_.next != nullptr) {
    for (UsageRecord& r : batch) options_.next->Record(std::move(r));
  }
}

Status UsageTally::Flush() {
  Drain();
  return WriteBatches();
}

Status UsageTally::WriteBatches() {
  std::lock_guard<std::mutex> w(write_mu_);
  // Number what came since the last batches; a batch still unwritten goes again as it is.
  std::vector<std::tuple<Key, Sums, uint64_t>> todo;
  {
    std::lock_guard<std::mutex> l(sums_mu_);
    for (auto& [key, p] : pending_) {
      if (p.batch == 0 && !p.open.empty()) {
        p.sending = std::exchange(p.open, Sums{});
        p.batch = next_batch_++;
      }
      if (p.batch != 0) todo.emplace_back(key, p.sending, p.batch);
    }
  }
  Status first;
  for (const auto& [key, sums, batch] : todo) {  // no lock held: records keep being summed
    Status st = Write(key, sums, batch);
    // The store out of reach: the other batches would only wait out the same timeout.
    if (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded) {
      if (first.ok()) first = st;
      break;
    }
    const bool done = st.ok() || Permanent(st.code());
    if (!st.ok() && done) {
      Log("usage: dropped the sums of tenant " + key.first + " on " + key.second + " (the store refuses them: " +
          st.message() + ")");
    }
    if (!st.ok() && first.ok()) first = st;
    if (!done) continue;
    std::lock_guard<std::mutex> l(sums_mu_);
    auto it = pending_.find(key);
    if (it == pending_.end()) continue;
    it->second.sending = Sums{};
    it->second.batch = 0;
    if (it->second.open.empty()) pending_.erase(it);
  }
  std::lock_guard<std::mutex> l(sums_mu_);
  pending_count_ = pending_.size();
  return first;
}

Status UsageTally::Write(const Key& key, const Sums& sums, uint64_t batch) {
  const store::ObjectKey object{kServingUsageKind, key.first, key.second};
  Status last;
  for (int attempt = 0; attempt < kWriteAttempts; ++attempt) {
    StatusOr<json> cur = store_->Get(object);
    if (!cur.ok() && cur.status().code() != StatusCode::kNotFound) return cur.status();
    json o = cur.ok() ? *cur
                      : json{{"apiVersion", "aicloud/v1"},
                             {"kind", kServingUsageKind},
                             {"metadata", {{"tenant", key.first}, {"name", key.second}}},
                             {"spec", {{"day", key.second}}},
                             {"status", json::object()}};
    json& status = o["status"];
    if (!status.is_object()) status = json::object();
    json& writers = status["writers"];
    if (!writers.is_object()) writers = json::object();
    // Already added: an earlier try landed although its answer said otherwise (lost, or resent).
    if (stored::SignedIntField(writers, options_.id.c_str(), -1) >= static_cast<int64_t>(batch)) return OkStatus();
    AddAll(&status, "models", sums.models, true);
    AddAll(&status, "keys", sums.keys, false);
    writers[options_.id] = batch;
    StatusOr<json> w = cur.ok() ? store_->Update(o, store::ResourceVersionOf(*cur)) : store_->Create(o);
    if (w.ok()) return OkStatus();
    last = w.status();
    // Another gateway wrote it between the read and the write (or this one's resent write did):
    // read again.
    if (last.code() != StatusCode::kAborted && last.code() != StatusCode::kAlreadyExists) return last;
  }
  return last;
}

void UsageTally::Stop() {
  std::lock_guard<std::mutex> s(stop_mu_);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (writer_.joinable()) writer_.join();
  Status last;
  for (int i = 0; i < kStopTries; ++i) {
    last = Flush();
    if (last.ok() || pending_count_ == 0) return;
    if (i + 1 < kStopTries) std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  }
  std::lock_guard<std::mutex> l(sums_mu_);
  for (const auto& [key, p] : pending_) {
    int64_t requests = 0;
    for (const Sums* sums : {&p.sending, &p.open}) {
      for (const auto& [model, c] : sums->models) requests += c.requests;
    }
    Log("usage: stopping without writing " + std::to_string(requests) + " requests of tenant " + key.first + " on " +
        key.second + " (" + last.message() + ")");
  }
}

void UsageTally::Run() {
  // Background work: requests sharing the core come first.
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
  const auto tick = std::min<std::chrono::milliseconds>(options_.flush_period, std::chrono::milliseconds(100));
  auto next_write = std::chrono::steady_clock::now() + options_.flush_period;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      if (cv_.wait_for(l, tick, [&] { return stop_; })) return;  // Stop writes what is left
    }
    Drain();  // the log sees the records within 100 ms, however slow the store is
    if (std::chrono::steady_clock::now() >= next_write) {
      {
        std::lock_guard<std::mutex> l(mu_);
        write_due_ = true;
      }
      cv_.notify_all();
      next_write = std::chrono::steady_clock::now() + options_.flush_period;
    }
  }
}

void UsageTally::WriterRun() {
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || write_due_; });
      if (stop_) return;
      write_due_ = false;
    }
    (void)WriteBatches();  // what failed stays pending for the next period
  }
}

}  // namespace aicloud::gateway
