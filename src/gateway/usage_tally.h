// UsageTally: the gateway's per-request usage records summed into each tenant's serving usage,
// kept in the store, where GET /api/v1/usage (and `aicloud usage`) reads it next to the jobs'
// GPU-hours.
//
//   LogUsageSink log;                                   // every record as a JSON line, as before
//   UsageTally tally(store, {.next = &log});            // sums, then hands each record on
//   Gateway::Create({..., .usage = &tally, ...}, {});
//
// One ServingUsage object per tenant and UTC day (tenant = the tenant, name = "2026-11-29"):
//
//   spec:   {day: "2026-11-29"}
//   status: {models: {"chat": {requests, errors, promptTokens, completionTokens, cost,
//                              latencySeconds, heldSeconds}},
//            keys:   {"3f9a...": {requests, errors, promptTokens, completionTokens, cost}}}
//
// A record counts for the caller's tenant, or, for a key of no tenant (an administrator's), for
// the tenant that owns the deployment it called; a record with neither (a request refused before
// its key or model was known) is not counted anywhere but the log. errors = answers of status
// 400 and up (refusals included); latency and held seconds are sums (divide by requests).
//
// Record only queues (the request path pays a lock and a move); a thread sums the queue and hands
// the records on to `next` every 100 ms, and every `flush_period` adds the sums to the objects
// with compare-and-swap updates, so gateways sharing one store (the server's front door and any
// number of `aicloud gateway --server`) add up instead of overwriting each other. Sums the store refused stay for the next flush; a
// crash loses at most one period's. The store's totals lag the answers by up to one period.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/metrics.h"
#include "core/status.h"
#include "gateway/usage.h"
#include "store/store.h"

namespace aicloud::gateway {

struct UsageTallyOptions {
  std::chrono::milliseconds flush_period{5000};
  size_t max_queue = 100000;   // records waiting to be summed; more are dropped (and counted)
  UsageSink* next = nullptr;   // gets every record after it was summed (may be null)
};

// The stored kind.
inline constexpr const char* kServingUsageKind = "ServingUsage";

// Thread-safe.
class UsageTally final : public UsageSink {
 public:
  UsageTally(store::Store* store, UsageTallyOptions options = {});
  ~UsageTally() override;  // sums and writes what is queued, then stops

  void Record(UsageRecord record) override;

  // Sums what is queued, hands it on, and writes every pending sum to the store (what the thread
  // does each period; tests call it). The first store error; the sums it could not write stay
  // pending.
  Status Flush();

  uint64_t dropped() const;
  size_t pending_objects() const;  // (tenant, day) sums not yet in the store

  // aicloud_gateway_usage_pending_objects and aicloud_gateway_usage_dropped, read at each scrape.
  // The tally must outlive `metrics`' renders.
  void ExportMetrics(Metrics* metrics);

  // The UTC day of a Unix time in milliseconds: "2026-11-29".
  static std::string DayOf(int64_t unix_ms);

  struct Counts {
    int64_t requests = 0, errors = 0, prompt_tokens = 0, completion_tokens = 0;
    double cost = 0, latency_s = 0, held_s = 0;
    void Add(const Counts& o);
  };

 private:
  struct Sums {
    std::map<std::string, Counts> models, keys;
  };
  void Run();
  // Sums the queued records into pending_ and hands them to next. REQUIRES: flush_mu_ held.
  void DrainLocked();
  void Sum(const UsageRecord& r);
  // Adds `sums` to the object of (tenant, day) with compare-and-swap retries.
  Status Write(const std::string& tenant, const std::string& day, const Sums& sums);

  store::Store* const store_;
  const UsageTallyOptions options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<UsageRecord> queue_;  // GUARDED_BY(mu_)
  uint64_t dropped_ = 0;            // GUARDED_BY(mu_)
  bool stop_ = false;               // GUARDED_BY(mu_)

  mutable std::mutex flush_mu_;  // one flush at a time; guards pending_
  std::map<std::pair<std::string, std::string>, Sums> pending_;  // (tenant, day)
  std::thread thread_;
};

}  // namespace aicloud::gateway
