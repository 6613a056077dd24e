#include "store/sqlite/sqlite_db.h"

#include <sqlite3.h>

namespace aicloud::store::sqlite {
namespace {

// Codes by what the caller can do about them: a damaged file needs an operator (DATA_LOSS), a
// full disk is RESOURCE_EXHAUSTED, a locked or unreachable file may work later (UNAVAILABLE).
StatusCode CodeFor(int rc) {
  switch (rc & 0xFF) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return StatusCode::kDataLoss;
    case SQLITE_FULL: return StatusCode::kResourceExhausted;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM: return StatusCode::kUnavailable;
    default: return StatusCode::kInternal;
  }
}

Status MakeError(int rc, const std::string& path, std::string_view what, const char* detail) {
  return Status(CodeFor(rc), "sqlite store " + path + ": " + std::string(what) + ": " +
                                 (detail ? detail : sqlite3_errstr(rc)));
}

}  // namespace

Stmt::~Stmt() { sqlite3_finalize(stmt_); }

void Stmt::BindText(int index, std::string_view value) {
  sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT);
}
void Stmt::BindInt(int index, int64_t value) { sqlite3_bind_int64(stmt_, index, value); }
int Stmt::Step() { return sqlite3_step(stmt_); }
std::string Stmt::ColumnText(int col) const {
  const unsigned char* text = sqlite3_column_text(stmt_, col);
  int n = sqlite3_column_bytes(stmt_, col);
  return text ? std::string(reinterpret_cast<const char*>(text), static_cast<size_t>(n))
              : std::string();
}
int64_t Stmt::ColumnInt(int col) const { return sqlite3_column_int64(stmt_, col); }
void Stmt::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

StatusOr<Db> Db::Open(const std::string& path) {
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status s = MakeError(rc, path, "open", raw ? sqlite3_errmsg(raw) : nullptr);
    sqlite3_close(raw);
    return s;
  }
  sqlite3_extended_result_codes(raw, 1);
  Db db(raw, path);
  // Concurrent connections (the writer and readers) wait for each other's locks instead of
  // failing at once; WAL makes such waits rare (readers never block the writer).
  sqlite3_busy_timeout(raw, 10'000);
  // Reading the schema forces SQLite to read the header, so a file that is not a database
  // fails here, at open, with the path in the message.
  AICLOUD_RETURN_IF_ERROR(db.Exec("SELECT count(*) FROM sqlite_master", "read schema"));
  return db;
}

Db::Db(Db&& other) noexcept
    : db_(other.db_), path_(std::move(other.path_)), stmts_(std::move(other.stmts_)) {
  other.db_ = nullptr;
}

Db& Db::operator=(Db&& other) noexcept {
  if (this != &other) {
    stmts_.clear();
    sqlite3_close(db_);
    db_ = other.db_;
    path_ = std::move(other.path_);
    stmts_ = std::move(other.stmts_);
    other.db_ = nullptr;
  }
  return *this;
}

Db::~Db() {
  stmts_.clear();  // statements must be finalized before the connection closes
  if (db_) sqlite3_close(db_);
}

Status Db::Exec(std::string_view sql, std::string_view what) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, std::string(sql).c_str(), nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return OkStatus();
  Status s = MakeError(rc, path_, what, err);
  sqlite3_free(err);
  return s;
}

StatusOr<Stmt*> Db::Prepare(const char* sql) {
  auto it = stmts_.find(sql);
  if (it != stmts_.end()) {
    it->second->Reset();
    return it->second.get();
  }
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
  if (rc != SQLITE_OK) return Error(rc, std::string("prepare \"") + sql + "\"");
  Stmt* stmt = (stmts_[sql] = std::make_unique<Stmt>(raw)).get();
  return stmt;
}

Status Db::Run(const char* sql, std::string_view what) {
  StatusOr<Stmt*> stmt = Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  int rc = (*stmt)->Step();
  (*stmt)->Reset();
  return rc == SQLITE_DONE || rc == SQLITE_ROW ? OkStatus() : Error(rc, what);
}

void Db::ResetStatements() {
  for (auto& [sql, stmt] : stmts_) stmt->Reset();
}

Status Db::Error(int rc, std::string_view what) const {
  return MakeError(rc, path_, what, db_ ? sqlite3_errmsg(db_) : nullptr);
}

}  // namespace aicloud::store::sqlite
