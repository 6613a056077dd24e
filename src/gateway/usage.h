// Per-request usage records: who called which model on which replica, what it cost, how long it
// took and how it ended. The gateway hands one record per request (answered or refused) to a
// UsageSink: `aicloud gateway` logs them, and on a server a UsageTally (usage_tally.h) also adds
// them up in the tenants' usage.
//
//   class TenantUsage : public UsageSink {
//     void Record(UsageRecord r) override { queue_.Push(std::move(r)); }   // never block long
//   };
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace aicloud::gateway {

struct UsageRecord {
  std::string request_id;  // also sent to the client as x-request-id
  int64_t unix_ms = 0;     // when the request arrived
  std::string key_id, tenant, team;
  std::string model;       // as the client asked
  std::string adapter;     // "" for the base model
  std::string deployment, replica;
  std::string endpoint;    // "chat/completions", "completions", "embeddings"
  bool stream = false;
  int status = 0;          // HTTP status sent to the client
  std::string error;       // why, when the gateway refused or the upstream failed
  int64_t prompt_tokens = 0, completion_tokens = 0;
  bool usage_reported = false;  // tokens came from the upstream's usage (else estimated)
  double cost = 0;
  double latency_s = 0;    // arrival to last byte
  double ttft_s = 0;       // arrival to first upstream byte (streams)
  double held_s = 0;       // waiting for a replica (scale from zero)
  int attempts = 0;        // upstream attempts (retries on connection failure + 1)

  nlohmann::json ToJson() const;
  // Appends what ToJson().dump() writes, without building a JSON document: the log sink formats
  // thousands of these a second. The same bytes, except that a double is written with its
  // shortest digits, where dump()'s Grisu2 now and then writes longer ones that read back the same
  // (0.0030175 against 0.0030175000000000002), and bytes that are not UTF-8 become U+FFFD where
  // dump() would throw.
  void AppendJson(std::string* out) const;
};

// Thread-safe; Record is called on request threads and must not block for long.
class UsageSink {
 public:
  virtual ~UsageSink() = default;
  virtual void Record(UsageRecord record) = 0;
};

class NullUsageSink final : public UsageSink {
 public:
  void Record(UsageRecord) override {}
};

// Writes one JSON line per record to a FILE (stderr by default) from a background thread that
// wakes every 100 ms, so the request path only appends to a queue (no thread wake-up per
// request). The writer runs at a lower CPU priority (nice +10) so that a batch being formatted
// never makes a request thread on the same core wait. When more than `max_queue` records wait,
// new ones are dropped and counted (dropped()), never blocking requests.
class LogUsageSink final : public UsageSink {
 public:
  explicit LogUsageSink(std::FILE* out = stderr, size_t max_queue = 100000);
  ~LogUsageSink() override;  // writes what is queued, then stops
  void Record(UsageRecord record) override;
  uint64_t dropped() const;

 private:
  void Run();

  std::FILE* const out_;
  const size_t max_queue_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<UsageRecord> queue_;  // GUARDED_BY(mu_)
  bool stop_ = false;              // GUARDED_BY(mu_)
  uint64_t dropped_ = 0;           // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace aicloud::gateway
