// SqliteStore: the embedded, durable Store backend — one SQLite file in WAL mode with
// synchronous=FULL, so a write that returned OK survives a crash or power loss.
//
//   StatusOr<std::unique_ptr<SqliteStore>> store =
//       SqliteStore::Open({.path = data_dir + "/state.db"});
//   if (!store.ok()) return store.status();  // names the path: unreadable, corrupt, too new
//   (*store)->Create(manifest);
//
// Group commit: every write (Create/Update/Delete/Commit) is queued to a single writer thread.
// The writer takes everything queued (up to max_batch transactions), applies each caller's
// transaction inside its own SAVEPOINT (so one caller's conflict does not undo another's), and
// commits the whole batch with one fsync; each caller then gets its own result. While one batch
// is being fsynced the next one queues up, so many concurrent writers share each fsync and
// durability costs little throughput. With group_commit=false each transaction is committed on
// its own (the baseline bench/store_bench.cc compares against).
//
// Reads (Get, List, Changes) run on a pool of reader connections and never wait for the writer
// (WAL readers see the last committed state). Labels live in their own column: List scans the
// (kind, tenant) key range in key order, matches the selector against the labels column in C++
// and parses only matching documents — no index on label values, which is fine for the tens of
// thousands of objects of a kind a control plane holds.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "store/store.h"

namespace aicloud::store::sqlite {

class Db;

struct SqliteStoreOptions {
  std::string path;                       // the database file; created if absent
  bool group_commit = true;               // false: one transaction (and one fsync) per write
  int max_batch = 512;                    // transactions per group commit
  int64_t change_log_capacity = 100'000;  // changes kept for watchers (>= 1)
};

// Thread-safe. Owns its writer thread; the destructor finishes queued writes, then joins.
class SqliteStore final : public Store {
 public:
  // Opens or creates the database and applies pending schema migrations. Errors name the
  // path: UNAVAILABLE (cannot open), DATA_LOSS (not a database / corrupt), FAILED_PRECONDITION
  // (schema newer than this binary).
  static StatusOr<std::unique_ptr<SqliteStore>> Open(SqliteStoreOptions options);
  ~SqliteStore() override;

  StatusOr<json> Get(const ObjectKey& key) override;
  StatusOr<std::vector<json>> Commit(std::vector<WriteOp> ops) override;
  StatusOr<ListResult> List(const ListOptions& options) override;
  StatusOr<ChangesResult> Changes(const std::string& kind, int64_t after, int max) override;
  int64_t Revision() override;
  int64_t WaitForRevision(int64_t after, std::chrono::milliseconds timeout) override;

  // Commits so far and transactions they carried; tests and benchmarks read the batching.
  int64_t commits() const { return commits_.load(); }
  int64_t committed_transactions() const { return committed_txns_.load(); }

 private:
  struct Pending;
  class View;
  class ReaderLease;

  SqliteStore(SqliteStoreOptions options, std::unique_ptr<Db> writer, int64_t revision,
              int64_t compacted);
  void WriterLoop();
  void CommitBatch(std::vector<Pending*>& batch);
  StatusOr<std::unique_ptr<Db>> OpenReader();

  const SqliteStoreOptions options_;

  // Owned by the writer thread alone after construction.
  std::unique_ptr<Db> writer_db_;
  int64_t compacted_;  // changes with rv <= compacted_ are gone from the log

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Pending*> queue_;  // GUARDED_BY(queue_mu_)
  bool stopping_ = false;       // GUARDED_BY(queue_mu_)

  std::mutex revision_mu_;
  std::condition_variable revision_cv_;
  int64_t revision_;  // GUARDED_BY(revision_mu_); last committed revision

  std::mutex readers_mu_;
  std::vector<std::unique_ptr<Db>> idle_readers_;  // GUARDED_BY(readers_mu_)

  std::atomic<int64_t> commits_{0};
  std::atomic<int64_t> committed_txns_{0};
  std::thread writer_;  // last member: starts after everything it uses is constructed
};

}  // namespace aicloud::store::sqlite
