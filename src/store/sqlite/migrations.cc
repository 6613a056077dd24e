#include "store/sqlite/migrations.h"

#include <sqlite3.h>

namespace aicloud::store::sqlite {

const std::vector<Migration>& Migrations() {
  static const std::vector<Migration> kMigrations = {
      {1, "objects and the store revision",
       "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"
       "INSERT INTO meta (key, value) VALUES ('revision', 0);"
       // Clustered on the key so a (kind, tenant) list is one range scan in key order.
       "CREATE TABLE objects ("
       "  kind TEXT NOT NULL, tenant TEXT NOT NULL, name TEXT NOT NULL,"
       "  rv INTEGER NOT NULL, doc TEXT NOT NULL,"
       "  PRIMARY KEY (kind, tenant, name)) WITHOUT ROWID;"},
      {2, "bounded change log for watches",
       "CREATE TABLE changes ("
       "  rv INTEGER PRIMARY KEY, kind TEXT NOT NULL, type INTEGER NOT NULL, doc TEXT NOT NULL);"
       "CREATE INDEX changes_by_kind ON changes (kind, rv);"
       // Writes made before the log existed cannot be replayed: watchers start from here.
       "INSERT INTO meta (key, value) SELECT 'compacted', value FROM meta WHERE key = 'revision';"},
      {3, "labels column so selectors read only the labels",
       "ALTER TABLE objects ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';"
       "UPDATE objects SET labels = COALESCE(json_extract(doc, '$.metadata.labels'), '{}');"},
  };
  return kMigrations;
}

int LatestSchemaVersion() { return Migrations().back().version; }

StatusOr<int> ReadSchemaVersion(Db& db) {
  AICLOUD_RETURN_IF_ERROR(db.Exec(kSchemaVersionTableSql, "create schema_version"));
  StatusOr<Stmt*> stmt = db.Prepare("SELECT max(version) FROM schema_version");
  if (!stmt.ok()) return stmt.status();
  int rc = (*stmt)->Step();
  if (rc != SQLITE_ROW) return db.Error(rc, "read schema_version");
  int version = static_cast<int>((*stmt)->ColumnInt(0));
  (*stmt)->Reset();
  return version;
}

Status Migrate(Db& db, int target) {
  // IMMEDIATE: two processes opening the same file at once migrate one after the other.
  AICLOUD_RETURN_IF_ERROR(db.Exec("BEGIN IMMEDIATE", "begin migration"));
  auto fail = [&db](Status s) {
    (void)db.Exec("ROLLBACK", "rollback migration");
    return s;
  };
  StatusOr<int> current = ReadSchemaVersion(db);
  if (!current.ok()) return fail(current.status());
  if (*current > LatestSchemaVersion()) {
    return fail(FailedPreconditionError(
        "sqlite store " + db.path() + ": schema version " + std::to_string(*current) +
        " is newer than this aicloud supports (" + std::to_string(LatestSchemaVersion()) +
        "); run a newer aicloud or restore a backup"));
  }
  for (const Migration& m : Migrations()) {
    if (m.version <= *current || m.version > target) continue;
    Status s =
        db.Exec(m.sql, "migration " + std::to_string(m.version) + " (" + m.description + ")");
    if (!s.ok()) return fail(s);
    s = db.Exec("DELETE FROM schema_version; INSERT INTO schema_version (version) VALUES (" +
                    std::to_string(m.version) + ")",
                "record schema version");
    if (!s.ok()) return fail(s);
  }
  return db.Exec("COMMIT", "commit migration");
}

}  // namespace aicloud::store::sqlite
