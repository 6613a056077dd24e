// What only the SQLite backend does: survive reopen, migrate old files, refuse newer or
// damaged ones with the path in the message, and batch concurrent commits.
#include "store/sqlite/sqlite_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <fstream>
#include <thread>

#include "store/sqlite/migrations.h"
#include "store/store_test_util.h"

namespace aicloud::store::sqlite {
namespace {

using store::testing::Manifest;
using store::testing::TempDir;
using ::testing::HasSubstr;

// Runs SQL on the file directly, as an operator or an older aicloud would.
void RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "") << " in: " << sql;
  sqlite3_free(err);
  sqlite3_close(db);
}

std::unique_ptr<SqliteStore> MustOpen(SqliteStoreOptions options) {
  StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(std::move(options));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

TEST(SqliteStoreTest, StatePersistsAcrossReopen) {
  TempDir dir;
  std::string path = dir.File("state.db");
  json kept;
  {
    auto store = MustOpen({.path = path});
    ASSERT_NE(store, nullptr);
    kept = *store->Create(Manifest("Job", "nlp", "kept", {{"team", "nlp"}}));
    json gone = *store->Create(Manifest("Job", "nlp", "gone"));
    ASSERT_TRUE(store->Delete({"Job", "nlp", "gone"}, ResourceVersionOf(gone)).ok());
  }
  auto store = MustOpen({.path = path});
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Revision(), 3);
  EXPECT_EQ(*store->Get({"Job", "nlp", "kept"}), kept);
  EXPECT_EQ(store->Get({"Job", "nlp", "gone"}).status().code(), StatusCode::kNotFound);
  StatusOr<ChangesResult> log = store->Changes("Job", 0, 10);
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(log->events.size(), 3u);  // the change log is durable too
  // Revisions continue where they stopped, never reused.
  EXPECT_EQ(ResourceVersionOf(*store->Create(Manifest("Job", "nlp", "next"))), 4);
  EXPECT_EQ(store->List({.kind = "Job", .label_selector = "team=nlp"})->items.size(), 1u);
}

// The store file holds the cluster's secrets: readable by its owner only, also when it was
// made readable by others before, and so are the WAL files SQLite makes next to it.
TEST(SqliteStoreTest, TheFileIsPrivateToItsOwner) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  auto mode = [](const std::string& p) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  };
  {
    auto store = MustOpen({.path = path});
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Create(Manifest("Job", "nlp", "a")).ok());
    EXPECT_EQ(mode(path), 0600u);
    EXPECT_EQ(mode(path + "-wal"), 0600u);
  }
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  auto store = MustOpen({.path = path});
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(mode(path), 0600u);
  EXPECT_TRUE(store->Get({"Job", "nlp", "a"}).ok());
}

TEST(SqliteStoreTest, MigratesAVersionOneFile) {
  TempDir dir;
  std::string path = dir.File("old.db");
  // A file as the first release wrote it: no change log, no labels column.
  json doc = Manifest("Job", "nlp", "old", {{"team", "nlp"}});
  doc["metadata"]["uid"] = "11111111-1111-4111-8111-111111111111";
  doc["metadata"]["createdAt"] = "2024-01-01T00:00:00Z";
  doc["metadata"]["resourceVersion"] = "7";
  RawExec(path, std::string(kSchemaVersionTableSql) + ";" + Migrations()[0].sql +
                    "INSERT INTO schema_version VALUES (1);"
                    "UPDATE meta SET value = 7 WHERE key = 'revision';"
                    "INSERT INTO objects VALUES ('Job', 'nlp', 'old', 7, '" +
                    doc.dump() + "');");

  auto store = MustOpen({.path = path});
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Revision(), 7);
  EXPECT_EQ(*store->Get({"Job", "nlp", "old"}), doc);
  // The labels column was backfilled from the documents, so selectors see old objects.
  EXPECT_EQ(store->List({.kind = "Job", .label_selector = "team=nlp"})->items.size(), 1u);
  // Changes made before the log existed cannot be replayed; watching from now on works.
  EXPECT_EQ(store->Changes("Job", 0, 10).status().code(), StatusCode::kOutOfRange);
  json old = *store->Get({"Job", "nlp", "old"});
  ASSERT_TRUE(store->Update(old, 7).ok());
  StatusOr<ChangesResult> log = store->Changes("Job", 7, 10);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  ASSERT_EQ(log->events.size(), 1u);
  EXPECT_EQ(log->events[0].resource_version, 8);
  store.reset();

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT version FROM schema_version", -1, &stmt, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(stmt, 0), LatestSchemaVersion());
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

TEST(SqliteStoreTest, RefusesASchemaNewerThanItKnows) {
  TempDir dir;
  std::string path = dir.File("new.db");
  { ASSERT_NE(MustOpen({.path = path}), nullptr); }
  RawExec(path, "UPDATE schema_version SET version = 99");
  StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open({.path = path});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.status().message(),
            "sqlite store " + path + ": schema version 99 is newer than this aicloud supports (" +
                std::to_string(LatestSchemaVersion()) +
                "); run a newer aicloud or restore a backup");
}

TEST(SqliteStoreTest, GarbageFileIsAnErrorNamingThePath) {
  TempDir dir;
  std::string path = dir.File("garbage.db");
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 512; ++i) out << "this is not a database file\n";
  }
  StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open({.path = path});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(store.status().message(), HasSubstr("sqlite store " + path + ": "));
  EXPECT_THAT(store.status().message(), HasSubstr("file is not a database"));
}

TEST(SqliteStoreTest, UnopenablePathIsAnErrorNamingThePath) {
  StatusOr<std::unique_ptr<SqliteStore>> store =
      SqliteStore::Open({.path = "/nonexistent-aicloud-dir/state.db"});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(store.status().message(),
              HasSubstr("sqlite store /nonexistent-aicloud-dir/state.db: open: "));
  EXPECT_EQ(SqliteStore::Open({.path = ""}).status().code(), StatusCode::kInvalidArgument);
}

TEST(SqliteStoreTest, DamagedDocumentIsDataLossNotACrash) {
  TempDir dir;
  std::string path = dir.File("state.db");
  auto store = MustOpen({.path = path});
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Create(Manifest("Job", "nlp", "a")).ok());
  RawExec(path, "UPDATE objects SET doc = '{not json' WHERE name = 'a'");
  StatusOr<json> got = store->Get({"Job", "nlp", "a"});
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(got.status().message(),
            "sqlite store " + path + ": Job nlp/a: stored document is not valid JSON");
  EXPECT_EQ(store->List({.kind = "Job"}).status().code(), StatusCode::kDataLoss);
  // Writes to the damaged object fail cleanly; the rest of the store keeps working.
  EXPECT_EQ(store->Update(Manifest("Job", "nlp", "a"), 0).status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(store->Create(Manifest("Job", "nlp", "b")).ok());
}

void ConcurrentCreates(SqliteStore& store, int threads, int each) {
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&store, t, each] {
      for (int i = 0; i < each; ++i) {
        std::string name = "t" + std::to_string(t) + "-" + std::to_string(i);
        EXPECT_TRUE(store.Create(Manifest("Job", "nlp", name)).ok());
      }
    });
  }
  for (auto& w : workers) w.join();
}

TEST(SqliteStoreTest, GroupCommitSharesCommitsBetweenWriters) {
  TempDir dir;
  auto grouped = MustOpen({.path = dir.File("grouped.db")});
  ASSERT_NE(grouped, nullptr);
  ConcurrentCreates(*grouped, 16, 20);
  EXPECT_EQ(grouped->committed_transactions(), 320);
  EXPECT_LT(grouped->commits(), 320);  // 16 writers waiting on fsync share commits
  EXPECT_EQ(grouped->List({.kind = "Job"})->items.size(), 320u);

  auto single = MustOpen({.path = dir.File("single.db"), .group_commit = false});
  ASSERT_NE(single, nullptr);
  ConcurrentCreates(*single, 4, 20);
  EXPECT_EQ(single->commits(), 80);  // the baseline: one commit per write
  EXPECT_EQ(single->committed_transactions(), 80);
}

TEST(SqliteStoreTest, OneCallersConflictDoesNotFailItsBatch) {
  TempDir dir;
  auto store = MustOpen({.path = dir.File("state.db")});
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Create(Manifest("Job", "nlp", "taken")).ok());
  std::vector<std::thread> workers;
  std::atomic<int> ok{0}, exists{0};
  for (int t = 0; t < 8; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        // Half the writes collide; the other half must land whatever batch they share.
        bool collide = (t + i) % 2 == 0;
        std::string name = collide ? "taken" : "w" + std::to_string(t) + "-" + std::to_string(i);
        StatusOr<json> out = store->Create(Manifest("Job", "nlp", name));
        if (out.ok()) ++ok;
        if (out.status().code() == StatusCode::kAlreadyExists) ++exists;
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(ok.load(), 40);
  EXPECT_EQ(exists.load(), 40);
  EXPECT_EQ(store->Revision(), 41);
}

}  // namespace
}  // namespace aicloud::store::sqlite
