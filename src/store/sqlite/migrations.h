// The SQLite store's schema, as an ordered list of migrations. The database records the last
// one applied in `schema_version`; opening applies the missing ones in one transaction, and
// refuses a database whose version is newer than this binary knows (it was written by a newer
// aicloud, and an older binary could misread or damage it).
//
//   Status s = Migrate(db, /*target=*/LatestSchemaVersion());
//
// Rule: never edit a released migration; append a new one.
#pragma once

#include <vector>

#include "store/sqlite/sqlite_db.h"

namespace aicloud::store::sqlite {

struct Migration {
  int version;              // 1, 2, 3, ... in order
  const char* description;  // one line, for logs
  const char* sql;          // run inside the migrating transaction
};

inline constexpr const char* kSchemaVersionTableSql =
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)";

const std::vector<Migration>& Migrations();
int LatestSchemaVersion();

// Brings `db` to schema `target` (REQUIRES: 1 <= target <= LatestSchemaVersion()).
// FAILED_PRECONDITION naming both versions and the path when the file's schema is newer.
Status Migrate(Db& db, int target);

// The version recorded in the file; 0 for a new, empty database.
StatusOr<int> ReadSchemaVersion(Db& db);

}  // namespace aicloud::store::sqlite
