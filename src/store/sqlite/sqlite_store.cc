#include "store/sqlite/sqlite_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <optional>

#include "store/object.h"
#include "store/sqlite/migrations.h"
#include "store/sqlite/sqlite_db.h"

namespace aicloud::store::sqlite {
namespace {

constexpr const char* kGetSql =
    "SELECT doc FROM objects WHERE kind = ?1 AND tenant = ?2 AND name = ?3";
constexpr const char* kPutSql =
    "INSERT OR REPLACE INTO objects (kind, tenant, name, rv, labels, doc) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
constexpr const char* kDeleteSql =
    "DELETE FROM objects WHERE kind = ?1 AND tenant = ?2 AND name = ?3";
constexpr const char* kAppendChangeSql =
    "INSERT INTO changes (rv, kind, type, doc) VALUES (?1, ?2, ?3, ?4)";
constexpr const char* kSetMetaSql = "UPDATE meta SET value = ?2 WHERE key = ?1";
constexpr const char* kGetMetaSql = "SELECT value FROM meta WHERE key = ?1";
constexpr const char* kCompactSql = "DELETE FROM changes WHERE rv <= ?1";
// Key-ordered range scans over the clustered primary key, resuming strictly after a key.
constexpr const char* kListTenantSql =
    "SELECT tenant, name, labels, doc FROM objects WHERE kind = ?1 AND tenant = ?2 AND name > ?3 "
    "ORDER BY name LIMIT ?4";
constexpr const char* kListAllSql =
    "SELECT tenant, name, labels, doc FROM objects WHERE kind = ?1 AND (tenant, name) > (?2, ?3) "
    "ORDER BY tenant, name LIMIT ?4";
constexpr const char* kBeginWriteSql = "BEGIN IMMEDIATE";
constexpr const char* kCommitSql = "COMMIT";
constexpr const char* kSavepointSql = "SAVEPOINT txn";
constexpr const char* kReleaseSql = "RELEASE txn";
constexpr const char* kRollbackToSql = "ROLLBACK TO txn";
constexpr const char* kChangesAllSql =
    "SELECT rv, type, doc FROM changes WHERE rv > ?1 ORDER BY rv LIMIT ?2";
constexpr const char* kChangesKindSql =
    "SELECT rv, type, doc FROM changes WHERE kind = ?3 AND rv > ?1 ORDER BY rv LIMIT ?2";

StatusOr<json> ParseDoc(const Db& db, const std::string& text, const std::string& what) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return Status(StatusCode::kDataLoss, "sqlite store " + db.path() + ": " + what +
                                             ": stored document is not valid JSON");
  }
  return doc;
}

StatusOr<int64_t> ReadMeta(Db& db, const char* key) {
  StatusOr<Stmt*> stmt = db.Prepare(kGetMetaSql);
  if (!stmt.ok()) return stmt.status();
  (*stmt)->BindText(1, key);
  int rc = (*stmt)->Step();
  if (rc != SQLITE_ROW) {
    return rc == SQLITE_DONE ? Status(StatusCode::kDataLoss, "sqlite store " + db.path() +
                                                                 ": meta row '" + key + "' missing")
                             : db.Error(rc, std::string("read meta ") + key);
  }
  int64_t value = (*stmt)->ColumnInt(0);
  (*stmt)->Reset();
  return value;
}

Status WriteMeta(Db& db, const char* key, int64_t value) {
  StatusOr<Stmt*> stmt = db.Prepare(kSetMetaSql);
  if (!stmt.ok()) return stmt.status();
  (*stmt)->BindText(1, key);
  (*stmt)->BindInt(2, value);
  int rc = (*stmt)->Step();
  return rc == SQLITE_DONE ? OkStatus() : db.Error(rc, std::string("write meta ") + key);
}

// A read transaction: every statement inside sees one snapshot (WAL), so a page's rows and the
// revision it reports agree.
class ReadTxn {
 public:
  explicit ReadTxn(Db& db) : db_(db) {}
  Status Begin() { return db_.Exec("BEGIN", "begin read"); }
  ~ReadTxn() {
    db_.ResetStatements();  // an early return may leave a statement mid-scan
    (void)db_.Exec("COMMIT", "end read");
  }

 private:
  Db& db_;
};

}  // namespace

struct SqliteStore::Pending {
  std::vector<WriteOp> ops;
  std::promise<StatusOr<std::vector<json>>> done;
};

// Borrows an idle reader connection and gives it back on destruction.
class SqliteStore::ReaderLease {
 public:
  explicit ReaderLease(SqliteStore& store) : store_(store) {}
  ~ReaderLease() {
    if (db_) {
      std::lock_guard<std::mutex> lock(store_.readers_mu_);
      store_.idle_readers_.push_back(std::move(db_));
    }
  }
  Status Acquire() {
    {
      std::lock_guard<std::mutex> lock(store_.readers_mu_);
      if (!store_.idle_readers_.empty()) {
        db_ = std::move(store_.idle_readers_.back());
        store_.idle_readers_.pop_back();
        return OkStatus();
      }
    }
    StatusOr<std::unique_ptr<Db>> db = store_.OpenReader();
    if (!db.ok()) return db.status();
    db_ = std::move(*db);
    return OkStatus();
  }
  Db& db() { return *db_; }

 private:
  SqliteStore& store_;
  std::unique_ptr<Db> db_;
};

// The writer's view inside the batch transaction: reads see earlier writes of the same
// transaction because they run on the same connection.
class SqliteStore::View final : public internal::TxnView {
 public:
  explicit View(Db& db) : db_(db) {}

  StatusOr<std::optional<json>> Read(const ObjectKey& key) override {
    StatusOr<Stmt*> stmt = db_.Prepare(kGetSql);
    if (!stmt.ok()) return stmt.status();
    (*stmt)->BindText(1, key.kind);
    (*stmt)->BindText(2, key.tenant);
    (*stmt)->BindText(3, key.name);
    int rc = (*stmt)->Step();
    if (rc == SQLITE_DONE) return std::optional<json>();
    if (rc != SQLITE_ROW) return db_.Error(rc, "read " + key.ToString());
    std::string text = (*stmt)->ColumnText(0);
    (*stmt)->Reset();
    StatusOr<json> doc = ParseDoc(db_, text, key.ToString());
    if (!doc.ok()) return doc.status();
    return std::optional<json>(std::move(*doc));
  }

  Status Write(const ObjectKey& key, EventType type, const json& object,
               int64_t revision) override {
    std::string doc = object.dump();
    StatusOr<Stmt*> stmt = db_.Prepare(type == EventType::kDeleted ? kDeleteSql : kPutSql);
    if (!stmt.ok()) return stmt.status();
    (*stmt)->BindText(1, key.kind);
    (*stmt)->BindText(2, key.tenant);
    (*stmt)->BindText(3, key.name);
    if (type != EventType::kDeleted) {
      (*stmt)->BindInt(4, revision);
      (*stmt)->BindText(5, object["metadata"].value("labels", json::object()).dump());
      (*stmt)->BindText(6, doc);
    }
    int rc = (*stmt)->Step();
    if (rc != SQLITE_DONE) return db_.Error(rc, "write " + key.ToString());
    StatusOr<Stmt*> change = db_.Prepare(kAppendChangeSql);
    if (!change.ok()) return change.status();
    (*change)->BindInt(1, revision);
    (*change)->BindText(2, key.kind);
    (*change)->BindInt(3, static_cast<int64_t>(type));
    (*change)->BindText(4, doc);
    rc = (*change)->Step();
    return rc == SQLITE_DONE ? OkStatus() : db_.Error(rc, "append change for " + key.ToString());
  }

 private:
  Db& db_;
};

StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(SqliteStoreOptions options) {
  if (options.path.empty()) return InvalidArgumentError("sqlite store: path must not be empty");
  if (options.change_log_capacity < 1 || options.max_batch < 1) {
    return InvalidArgumentError("sqlite store: change_log_capacity and max_batch must be >= 1");
  }
  // The store holds every secret of the cluster (key digests, the replica secrets' key): readable
  // by its owner only, also where it lives in a directory other users pass through (`aicloud up`,
  // whose agents' sandboxed work dirs are inside the data dir). SQLite gives the -wal and -shm
  // files the database file's mode.
  if (const int fd = ::open(options.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600); fd >= 0) {
    if (::fchmod(fd, 0600) != 0) {
      const int err = errno;
      ::close(fd);
      return InternalError("sqlite store: cannot make " + options.path + " private (mode 0600): " + std::strerror(err));
    }
    ::close(fd);
    for (const char* side : {"-wal", "-shm"}) ::chmod((options.path + side).c_str(), 0600);  // from before
  }
  StatusOr<Db> db = Db::Open(options.path);
  if (!db.ok()) return db.status();
  // WAL: readers never block the writer and a commit appends to one file. FULL: each commit
  // fsyncs the WAL, so an acknowledged write survives power loss (NORMAL would not).
  AICLOUD_RETURN_IF_ERROR(db->Exec("PRAGMA journal_mode = WAL", "enable WAL"));
  AICLOUD_RETURN_IF_ERROR(db->Exec("PRAGMA synchronous = FULL", "set synchronous"));
  AICLOUD_RETURN_IF_ERROR(Migrate(*db, LatestSchemaVersion()));
  StatusOr<int64_t> revision = ReadMeta(*db, "revision");
  if (!revision.ok()) return revision.status();
  StatusOr<int64_t> compacted = ReadMeta(*db, "compacted");
  if (!compacted.ok()) return compacted.status();
  auto writer = std::make_unique<Db>(std::move(*db));
  return std::unique_ptr<SqliteStore>(
      new SqliteStore(std::move(options), std::move(writer), *revision, *compacted));
}

SqliteStore::SqliteStore(SqliteStoreOptions options, std::unique_ptr<Db> writer, int64_t revision,
                         int64_t compacted)
    : options_(std::move(options)),
      writer_db_(std::move(writer)),
      compacted_(compacted),
      revision_(revision),
      writer_([this] { WriterLoop(); }) {}

SqliteStore::~SqliteStore() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_one();
  writer_.join();
}

StatusOr<std::unique_ptr<Db>> SqliteStore::OpenReader() {
  StatusOr<Db> db = Db::Open(options_.path);
  if (!db.ok()) return db.status();
  AICLOUD_RETURN_IF_ERROR(db->Exec("PRAGMA query_only = ON", "set query_only"));
  return std::make_unique<Db>(std::move(*db));
}

StatusOr<std::vector<json>> SqliteStore::Commit(std::vector<WriteOp> ops) {
  Pending pending{std::move(ops), {}};
  std::future<StatusOr<std::vector<json>>> result = pending.done.get_future();
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (stopping_) return UnavailableError("sqlite store " + options_.path + ": closing");
    queue_.push_back(&pending);
  }
  queue_cv_.notify_one();
  return result.get();
}

void SqliteStore::WriterLoop() {
  const size_t max_batch = options_.group_commit ? static_cast<size_t>(options_.max_batch) : 1;
  std::vector<Pending*> batch;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every queued write is done
      // Everything that queued while the previous batch was fsyncing commits together.
      while (!queue_.empty() && batch.size() < max_batch) {
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
    }
    CommitBatch(batch);
    batch.clear();
  }
}

void SqliteStore::CommitBatch(std::vector<Pending*>& batch) {
  Db& db = *writer_db_;
  int64_t start_revision;
  {
    std::lock_guard<std::mutex> lock(revision_mu_);
    start_revision = revision_;
  }
  std::vector<std::optional<StatusOr<std::vector<json>>>> results(batch.size());
  auto fail_all = [&](const Status& s) {
    for (Pending* p : batch) p->done.set_value(s);
  };

  Status begin = db.Run(kBeginWriteSql, "begin write");
  if (!begin.ok()) return fail_all(begin);
  int64_t rv = start_revision;
  size_t applied = 0;
  View view(db);
  for (size_t i = 0; i < batch.size(); ++i) {
    // Each caller's transaction in its own savepoint: a conflict rolls back only that caller.
    Status s = db.Run(kSavepointSql, "savepoint");
    if (!s.ok()) {
      (void)db.Exec("ROLLBACK", "rollback");
      return fail_all(s);
    }
    int64_t before = rv;
    StatusOr<std::vector<json>> out = internal::ApplyOps(batch[i]->ops, &rv, view);
    if (out.ok()) {
      ++applied;
    } else {
      rv = before;
      s = db.Run(kRollbackToSql, "rollback savepoint");
    }
    if (s.ok()) s = db.Run(kReleaseSql, "release savepoint");
    if (!s.ok()) {
      (void)db.Exec("ROLLBACK", "rollback");
      return fail_all(s);
    }
    results[i] = std::move(out);
  }

  Status s = OkStatus();
  int64_t compacted = compacted_;
  if (rv != start_revision) {
    s = WriteMeta(db, "revision", rv);
    // Keep the newest change_log_capacity changes; a watcher behind them must re-list.
    if (s.ok() && rv - options_.change_log_capacity > compacted_) {
      compacted = rv - options_.change_log_capacity;
      StatusOr<Stmt*> stmt = db.Prepare(kCompactSql);
      if (!stmt.ok()) {
        s = stmt.status();
      } else {
        (*stmt)->BindInt(1, compacted);
        int rc = (*stmt)->Step();
        s = rc == SQLITE_DONE ? WriteMeta(db, "compacted", compacted) : db.Error(rc, "compact");
      }
    }
  }
  db.ResetStatements();
  if (s.ok()) s = db.Run(kCommitSql, "commit");
  if (!s.ok()) {
    (void)db.Exec("ROLLBACK", "rollback");
    // Nothing of this batch is durable: every caller whose transaction applied gets the
    // commit's error; the others keep their own (conflict, not found, ...) answer.
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i]->done.set_value(results[i]->ok() ? StatusOr<std::vector<json>>(s)
                                                : std::move(*results[i]));
    }
    return;
  }
  compacted_ = compacted;
  commits_.fetch_add(1);
  committed_txns_.fetch_add(static_cast<int64_t>(applied));
  {
    // Publish the revision before answering, so a caller that reads Revision() after its
    // write returns sees at least its own write.
    std::lock_guard<std::mutex> lock(revision_mu_);
    revision_ = rv;
  }
  revision_cv_.notify_all();
  for (size_t i = 0; i < batch.size(); ++i) batch[i]->done.set_value(std::move(*results[i]));
}

StatusOr<json> SqliteStore::Get(const ObjectKey& key) {
  ReaderLease lease(*this);
  AICLOUD_RETURN_IF_ERROR(lease.Acquire());
  Db& db = lease.db();
  StatusOr<Stmt*> stmt = db.Prepare(kGetSql);
  if (!stmt.ok()) return stmt.status();
  (*stmt)->BindText(1, key.kind);
  (*stmt)->BindText(2, key.tenant);
  (*stmt)->BindText(3, key.name);
  int rc = (*stmt)->Step();
  if (rc == SQLITE_DONE) return NotFoundError(key.ToString() + " not found");
  if (rc != SQLITE_ROW) return db.Error(rc, "read " + key.ToString());
  std::string text = (*stmt)->ColumnText(0);
  (*stmt)->Reset();
  return ParseDoc(db, text, key.ToString());
}

StatusOr<ListResult> SqliteStore::List(const ListOptions& options) {
  StatusOr<LabelSelector> selector = internal::CheckListOptions(options);
  if (!selector.ok()) return selector.status();
  StatusOr<std::optional<internal::ContinueToken>> token = internal::DecodeContinueToken(options);
  if (!token.ok()) return token.status();
  LabelSelector prefilter = *selector;
  internal::PageBuilder page(options, std::move(*selector));

  ReaderLease lease(*this);
  AICLOUD_RETURN_IF_ERROR(lease.Acquire());
  Db& db = lease.db();
  ReadTxn txn(db);
  AICLOUD_RETURN_IF_ERROR(txn.Begin());
  StatusOr<int64_t> revision = ReadMeta(db, "revision");
  if (!revision.ok()) return revision.status();

  std::string after_tenant = *token ? (*token)->after_tenant : "";
  std::string after_name = *token ? (*token)->after_name : "";
  const int64_t chunk = options.limit > 0 ? std::min<int64_t>(options.limit + 1, 1000) : 1000;
  while (true) {
    StatusOr<Stmt*> stmt = db.Prepare(options.tenant ? kListTenantSql : kListAllSql);
    if (!stmt.ok()) return stmt.status();
    (*stmt)->BindText(1, options.kind);
    (*stmt)->BindText(2, options.tenant ? *options.tenant : after_tenant);
    (*stmt)->BindText(3, after_name);
    (*stmt)->BindInt(4, chunk);
    int64_t rows = 0;
    bool full = false;
    int rc = SQLITE_DONE;
    while (!full && (rc = (*stmt)->Step()) == SQLITE_ROW) {
      ++rows;
      after_tenant = (*stmt)->ColumnText(0);
      after_name = (*stmt)->ColumnText(1);
      // Match on the small labels column first; parse the document only for matches.
      json labels = json::parse((*stmt)->ColumnText(2), nullptr, /*allow_exceptions=*/false);
      if (!prefilter.Matches(labels)) continue;
      StatusOr<json> doc = ParseDoc(db, (*stmt)->ColumnText(3),
                                    ObjectKey{options.kind, after_tenant, after_name}.ToString());
      if (!doc.ok()) return doc.status();
      full = !page.Offer(std::move(*doc));
    }
    if (!full && rc != SQLITE_DONE) return db.Error(rc, "list " + options.kind);
    (*stmt)->Reset();
    if (full || rows < chunk) break;
  }
  return page.Finish(*revision);
}

StatusOr<ChangesResult> SqliteStore::Changes(const std::string& kind, int64_t after, int max) {
  if (max <= 0) return InvalidArgumentError("changes: max must be > 0");
  if (after < 0) return InvalidArgumentError("changes: resource version must be >= 0");
  ReaderLease lease(*this);
  AICLOUD_RETURN_IF_ERROR(lease.Acquire());
  Db& db = lease.db();
  ReadTxn txn(db);
  AICLOUD_RETURN_IF_ERROR(txn.Begin());
  StatusOr<int64_t> revision = ReadMeta(db, "revision");
  if (!revision.ok()) return revision.status();
  StatusOr<int64_t> compacted = ReadMeta(db, "compacted");
  if (!compacted.ok()) return compacted.status();

  ChangesResult out;
  out.resource_version = std::max(after, *revision);
  if (after >= *revision) return out;
  if (after < *compacted) return internal::TooOldError(after, *compacted + 1);
  StatusOr<Stmt*> stmt = db.Prepare(kind.empty() ? kChangesAllSql : kChangesKindSql);
  if (!stmt.ok()) return stmt.status();
  (*stmt)->BindInt(1, after);
  (*stmt)->BindInt(2, max);
  if (!kind.empty()) (*stmt)->BindText(3, kind);
  int rc = SQLITE_DONE;
  while ((rc = (*stmt)->Step()) == SQLITE_ROW) {
    WatchEvent e;
    e.resource_version = (*stmt)->ColumnInt(0);
    e.type = static_cast<EventType>((*stmt)->ColumnInt(1));
    StatusOr<json> doc =
        ParseDoc(db, (*stmt)->ColumnText(2), "change " + std::to_string(e.resource_version));
    if (!doc.ok()) return doc.status();
    e.object = std::move(*doc);
    out.events.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE) return db.Error(rc, "read changes");
  (*stmt)->Reset();
  if (static_cast<int>(out.events.size()) == max) {
    out.resource_version = out.events.back().resource_version;
  }
  return out;
}

int64_t SqliteStore::Revision() {
  std::lock_guard<std::mutex> lock(revision_mu_);
  return revision_;
}

int64_t SqliteStore::WaitForRevision(int64_t after, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(revision_mu_);
  revision_cv_.wait_for(lock, timeout, [&] { return revision_ > after; });
  return revision_;
}

}  // namespace aicloud::store::sqlite
