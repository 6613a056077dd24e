// Small RAII wrappers over the sqlite3 C API for the SQLite store: a connection (Db) and a
// prepared statement (Stmt), with errors turned into Status values that name the database path.
//
//   StatusOr<Db> db = Db::Open("/var/lib/aicloud/state.db");
//   StatusOr<Stmt*> get = db->Prepare("SELECT doc FROM objects WHERE kind = ?1");
//   (*get)->BindText(1, "Job");
//   while ((*get)->Step() == SQLITE_ROW) Use((*get)->ColumnText(0));
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace aicloud::store::sqlite {

// A prepared statement, reset and cleared on every Db::Prepare. Owned by its Db.
// Thread-compatible: used by the one thread that holds the Db.
class Stmt {
 public:
  explicit Stmt(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~Stmt();
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  void BindText(int index, std::string_view value);
  void BindInt(int index, int64_t value);
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step();
  std::string ColumnText(int col) const;
  int64_t ColumnInt(int col) const;
  void Reset();

 private:
  sqlite3_stmt* stmt_;
};

// One connection with its cache of prepared statements. Move-only; closes on destruction.
// Thread-compatible: one thread at a time (connections are opened with SQLITE_OPEN_NOMUTEX).
class Db {
 public:
  // Opens (creating if absent) the file. Bad paths fail here; a file that is not a database
  // fails on the first statement, which Open runs (so garbage is reported at open).
  static StatusOr<Db> Open(const std::string& path);

  Db(Db&&) noexcept;
  Db& operator=(Db&&) noexcept;
  ~Db();

  // Runs one or more statements that return no rows.
  Status Exec(std::string_view sql, std::string_view what);
  // The cached statement for `sql`, reset and ready to bind. The pointer stays valid for the
  // life of the Db.
  StatusOr<Stmt*> Prepare(const char* sql);
  // Runs one cached statement that returns no rows (BEGIN, SAVEPOINT, ...): no re-parsing
  // on the writer's hot path.
  Status Run(const char* sql, std::string_view what);
  // Resets every cached statement, so none holds a read snapshot or blocks COMMIT.
  void ResetStatements();
  // A Status for result code `rc` of the last call on this connection, e.g.
  // "sqlite store /data/state.db: read Job: database disk image is malformed".
  Status Error(int rc, std::string_view what) const;

  const std::string& path() const { return path_; }
  sqlite3* raw() { return db_; }

 private:
  Db(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* db_ = nullptr;
  std::string path_;
  std::map<const char*, std::unique_ptr<Stmt>> stmts_;  // keyed by the SQL literal's address
};

}  // namespace aicloud::store::sqlite
