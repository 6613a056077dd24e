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
//            keys:   {"3f9a...": {requests, errors, promptTokens, completionTokens, cost}},
//            writers: {"<tally id>": <last batch written>}}
//
// A record counts for the caller's tenant, or, for a key of no tenant (an administrator's), for
// the tenant that owns the deployment it called, under the model it named ("(none)" for a body
// without one). So refusals count once the key is known (a 401 for an unknown key, or a 503
// because keys could not be checked, counts nowhere but the log). errors = answers of status 400
// and up, and streams that failed after their 200; latencySeconds and heldSeconds are sums over
// the requests that were not errors (mean latency = latencySeconds / (requests - errors)).
//
// Record only queues (the request path pays a lock and a move; a deque, so a long queue never
// reallocates under the lock). A thread hands the records on to `next` and sums them every
// 100 ms, and every `flush_period` another writes the sums (so a slow store never holds up the
// log): each tenant-day's sums become a batch with a
// number, added to its object by compare-and-swap and recorded in `writers` in the same update.
// A batch whose write failed is retried as it is, and one the object already holds (the write
// landed but its answer was lost, or was resent) is not added again, so gateways sharing one
// store (the server's front door and any number of `aicloud gateway --server`) add up exactly.
// A batch the store refuses for good (INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE) is
// dropped and logged; any other failure keeps it for the next period, and a store out of reach
// ends the period's writing at the first batch. Stop (or the destructor) writes what is left,
// trying three times about a second apart, and logs what it could not write and why.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
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
  // This tally's name in `writers`; "" = random. Must differ from every earlier process's: batch
  // numbers start again at 1, and a reused name's batches would count as already written.
  std::string id;
  std::function<void(const std::string&)> log;  // batches dropped or lost (default: stderr)
};

// The stored kind.
inline constexpr const char* kServingUsageKind = "ServingUsage";

// Thread-safe.
class UsageTally final : public UsageSink {
 public:
  UsageTally(store::Store* store, UsageTallyOptions options = {});
  ~UsageTally() override;  // Stop()

  void Record(UsageRecord record) override;

  // Sums what is queued, hands it on, and writes every pending batch to the store (what the
  // thread does each period; tests call it). The first store error; batches it could not write
  // stay pending.
  Status Flush();
  // Writes what is left (three tries, a second apart; what still fails is logged) and stops the
  // thread. Records that come later are dropped. Idempotent.
  void Stop();

  uint64_t dropped() const;
  size_t pending_objects() const;  // tenant-day batches not yet in the store

  // aicloud_gateway_usage_pending_objects and aicloud_gateway_usage_dropped, read at each scrape.
  // The tally must outlive `metrics`' renders.
  void ExportMetrics(Metrics* metrics);

  // The UTC day of a Unix time in milliseconds: "2026-11-29".
  static std::string DayOf(int64_t unix_ms);

  struct Counts {
    int64_t requests = 0, errors = 0, prompt_tokens = 0, completion_tokens = 0;
    double cost = 0, latency_s = 0, held_s = 0;
    void Add(const Counts& o);  // saturating
  };

 private:
  struct Sums {
    std::map<std::string, Counts> models, keys;
    bool empty() const { return models.empty() && keys.empty(); }
  };
  // A tenant-day's sums: `sending` is the numbered batch being written (retried as it is until
  // it lands), `open` what came since.
  struct Pending {
    Sums sending;
    uint64_t batch = 0;  // 0: nothing being sent
    Sums open;
  };
  using Key = std::pair<std::string, std::string>;  // (tenant, day)

  void Run();        // sums and hands on every 100 ms; asks for a write every flush_period
  void WriterRun();  // writes when asked (store calls never hold up the handing on)
  // Sums the queued records into pending_ and hands them to next.
  void Drain();
  // Writes every pending batch.
  Status WriteBatches();
  void Sum(const UsageRecord& r);
  // Adds batch `batch` of (tenant, day) to its object unless the object already holds it.
  Status Write(const Key& key, const Sums& sums, uint64_t batch);
  void Log(const std::string& line) const;

  store::Store* const store_;
  UsageTallyOptions options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<UsageRecord> queue_;  // GUARDED_BY(mu_)
  uint64_t dropped_ = 0;           // GUARDED_BY(mu_)
  bool stop_ = false;              // GUARDED_BY(mu_)
  bool write_due_ = false;         // GUARDED_BY(mu_)

  std::mutex drain_mu_;                // one Drain at a time
  std::mutex sums_mu_;                 // guards pending_ (held briefly, never during store I/O)
  std::map<Key, Pending> pending_;     // GUARDED_BY(sums_mu_)
  uint64_t next_batch_ = 1;            // GUARDED_BY(sums_mu_)
  std::atomic<size_t> pending_count_{0};
  std::mutex write_mu_;                // one writer of batches at a time
  std::mutex stop_mu_;                 // serializes Stop
  std::thread thread_;
  std::thread writer_;
};

}  // namespace aicloud::gateway
