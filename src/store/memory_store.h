// MemoryStore: the Store interface held in process memory, for tests and for `aicloud up`
// without a data dir. Same behaviour and messages as SqliteStore (one shared test suite runs
// against both); nothing survives the process.
//
//   MemoryStore store({.change_log_capacity = 1000});
//   StatusOr<json> job = store.Create(manifest);
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

#include "store/store.h"

namespace aicloud::store {

struct MemoryStoreOptions {
  // Changes kept for watchers; older ones are dropped and a watcher behind them gets
  // OUT_OF_RANGE. Must be >= 1.
  int64_t change_log_capacity = 10'000;
};

// Thread-safe: one mutex serializes every operation (reads copy the documents out).
class MemoryStore final : public Store {
 public:
  explicit MemoryStore(MemoryStoreOptions options = {});

  StatusOr<json> Get(const ObjectKey& key) override;
  StatusOr<std::vector<json>> Commit(std::vector<WriteOp> ops) override;
  StatusOr<ListResult> List(const ListOptions& options) override;
  StatusOr<ChangesResult> Changes(const std::string& kind, int64_t after, int max) override;
  int64_t Revision() override;
  int64_t WaitForRevision(int64_t after, std::chrono::milliseconds timeout) override;

 private:
  class View;

  const MemoryStoreOptions options_;
  std::mutex mu_;
  std::condition_variable revision_advanced_;
  std::map<ObjectKey, json> objects_;  // GUARDED_BY(mu_)
  std::deque<WatchEvent> changes_;     // GUARDED_BY(mu_); consecutive revisions, oldest first
  int64_t revision_ = 0;               // GUARDED_BY(mu_)
};

}  // namespace aicloud::store
