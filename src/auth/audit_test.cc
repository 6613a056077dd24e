#include "auth/audit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <regex>
#include <thread>

#include "auth/auth.h"
#include "store/memory_store.h"
#include "store/sqlite/sqlite_store.h"
#include "store/store_test_util.h"

namespace aicloud::auth {
namespace {

using json = nlohmann::json;
using store::testing::TempDir;

AuditEntry Entry(int i) {
  return {.user = "user" + std::to_string(i % 7),
          .key_id = "0123456789ab",
          .verb = i % 3 == 0 ? "create" : "get",
          .resource = "jobs",
          .tenant = i % 2 == 0 ? "a" : "b",
          .name = "job-" + std::to_string(i),
          .allowed = i % 5 != 0,
          .reason = "reason " + std::to_string(i),
          .policy_revision = i,
          .request_id = "req-" + std::to_string(i),
          .http_status = i % 5 != 0 ? 200 : 403};
}

// Appends n entries from `threads` threads; returns how many failed.
int AppendConcurrently(AuditLog& log, int threads, int n) {
  std::atomic<int> next{0}, failed{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n;) {
        if (Status st = log.Append(Entry(i)); !st.ok()) {
          ADD_FAILURE() << st.ToString();
          ++failed;
        }
      }
    });
  }
  for (std::thread& t : ts) t.join();
  return failed.load();
}

std::unique_ptr<store::Store> OpenSqlite(const TempDir& dir) {
  auto s = store::sqlite::SqliteStore::Open({.path = dir.File("state.db")});
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

json Record(store::Store& s, int64_t seq) {
  StatusOr<json> r = s.Get({kAuditRecordKind, "", AuditRecordName(seq)});
  EXPECT_TRUE(r.ok()) << seq;
  return r.ok() ? *r : json();
}

TEST(AuditTest, RecordShapeAndHash) {
  store::MemoryStore s;
  FakeClock clock;
  AuditLog log(&s, &clock);
  EXPECT_TRUE(log.Verify().ok);  // empty log
  ASSERT_TRUE(log.Append(Entry(5)).ok());
  ASSERT_TRUE(log.Append(Entry(6)).ok());
  EXPECT_EQ(AuditRecordName(17), "000000000017");
  json r1 = Record(s, 1)["spec"], r2 = Record(s, 2)["spec"];
  EXPECT_EQ(r1["seq"], 1);
  EXPECT_EQ(r1["decision"], "deny");
  EXPECT_EQ(r1["httpStatus"], 403);
  EXPECT_EQ(r1["user"], "user5");
  EXPECT_EQ(r1["keyId"], "0123456789ab");
  EXPECT_EQ(r1["requestId"], "req-5");
  EXPECT_EQ(r1["policyRevision"], 5);
  EXPECT_EQ(r2["decision"], "allow");
  EXPECT_TRUE(std::regex_match(r1["time"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")))
      << r1["time"];
  EXPECT_EQ(r1["prevHash"], std::string(64, '0'));
  EXPECT_EQ(r2["prevHash"], r1["hash"]);
  // Recompute independently: sha256(prevHash + dump of the spec without hash).
  json copy = r2;
  copy.erase("hash");
  EXPECT_EQ(r2["hash"], Sha256Hex(r2["prevHash"].get<std::string>() + copy.dump()));
  StatusOr<json> head = s.Get({kAuditHeadKind, "", "head"});
  ASSERT_TRUE(head.ok());
  EXPECT_EQ((*head)["spec"]["seq"], 2);
  EXPECT_EQ((*head)["spec"]["hash"], r2["hash"]);
  VerifyResult v = log.Verify();
  EXPECT_TRUE(v.ok) << v.problem;
  EXPECT_EQ(v.records, 2);
}

TEST(AuditTest, InvalidUtf8IsStoredSanitized) {
  store::MemoryStore s;
  FakeClock clock;
  AuditLog log(&s, &clock);
  AuditEntry e = Entry(1);
  e.name = "bad\xff\xfename";
  ASSERT_TRUE(log.Append(e).ok());
  EXPECT_TRUE(log.Verify().ok);
  EXPECT_NE(Record(s, 1)["spec"]["name"].get<std::string>().find("name"), std::string::npos);
}

class SqliteAuditTest : public ::testing::Test {
 protected:
  void SetUp() override {
    s = OpenSqlite(dir);
    ASSERT_NE(s, nullptr);
    AuditLog log(s.get(), &clock);
    ASSERT_EQ(AppendConcurrently(log, 8, 1000), 0);
    VerifyResult v = log.Verify();
    ASSERT_TRUE(v.ok) << v.problem;
    ASSERT_EQ(v.records, 1000);
  }
  VerifyResult VerifyNow() {
    AuditLog log(s.get(), &clock);
    return log.Verify();
  }

  TempDir dir;
  FakeClock clock;
  std::unique_ptr<store::Store> s;
};

TEST_F(SqliteAuditTest, ConcurrentAppendsFormOneContiguousChain) {
  StatusOr<store::ListResult> all = s->List({.kind = kAuditRecordKind});
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->items.size(), 1000u);
  std::set<std::string> request_ids;
  std::string prev(64, '0');
  for (size_t i = 0; i < all->items.size(); ++i) {
    const json& spec = all->items[i]["spec"];
    EXPECT_EQ(spec["seq"], static_cast<int64_t>(i + 1));
    EXPECT_EQ(spec["prevHash"], prev);
    prev = spec["hash"];
    request_ids.insert(spec["requestId"].get<std::string>());
  }
  EXPECT_EQ(request_ids.size(), 1000u);  // every entry exactly once
  EXPECT_LT(static_cast<store::sqlite::SqliteStore*>(s.get())->commits(), 1000 + 10);
}

TEST_F(SqliteAuditTest, EditedRecordIsNamed) {
  json r = Record(*s, 500);
  r["spec"]["user"] = "mallory";
  ASSERT_TRUE(s->Update(r, 0).ok());
  VerifyResult v = VerifyNow();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.problem, "record 500: hash mismatch (edited)");
}

TEST_F(SqliteAuditTest, EditWithRecomputedHashBreaksTheNextLink) {
  json r = Record(*s, 500);
  r["spec"]["user"] = "mallory";
  json copy = r["spec"];
  copy.erase("hash");
  r["spec"]["hash"] = Sha256Hex(copy["prevHash"].get<std::string>() + copy.dump());
  ASSERT_TRUE(s->Update(r, 0).ok());
  VerifyResult v = VerifyNow();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.problem, "record 501: prevHash does not match record 500 (chain broken)");
}

TEST_F(SqliteAuditTest, DeletedMiddleRecord) {
  ASSERT_TRUE(s->Delete({kAuditRecordKind, "", AuditRecordName(500)}, 0).ok());
  VerifyResult v = VerifyNow();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.problem, "record 500 missing (chain broken between 499 and 501)");
  ASSERT_TRUE(s->Delete({kAuditRecordKind, "", AuditRecordName(1)}, 0).ok());
  EXPECT_EQ(VerifyNow().problem, "record 1 missing (chain broken before 2)");
}

TEST_F(SqliteAuditTest, DeletedLastRecord) {
  ASSERT_TRUE(s->Delete({kAuditRecordKind, "", AuditRecordName(1000)}, 0).ok());
  VerifyResult v = VerifyNow();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.problem, "head says 1000 records, found 999");
}

TEST_F(SqliteAuditTest, DeletedHead) {
  ASSERT_TRUE(s->Delete({kAuditHeadKind, "", "head"}, 0).ok());
  EXPECT_EQ(VerifyNow().problem, "head missing (found 1000 records)");
}

TEST_F(SqliteAuditTest, ReopenedStoreContinuesTheChain) {
  s.reset();  // close the database
  s = OpenSqlite(dir);
  ASSERT_NE(s, nullptr);
  {
    AuditLog log(s.get(), &clock);
    ASSERT_TRUE(log.Append(Entry(1)).ok());
    ASSERT_EQ(AppendConcurrently(log, 4, 50), 0);
    VerifyResult v = log.Verify();
    EXPECT_TRUE(v.ok) << v.problem;
    EXPECT_EQ(v.records, 1051);
  }
  EXPECT_EQ(Record(*s, 1001)["spec"]["prevHash"], Record(*s, 1000)["spec"]["hash"]);
  s.reset();
  s = OpenSqlite(dir);
  VerifyResult v = VerifyNow();
  EXPECT_TRUE(v.ok) << v.problem;
  EXPECT_EQ(v.records, 1051);
}

// A Store whose Commit fails while `fail` is set (everything else delegates).
class FlakyStore final : public store::Store {
 public:
  StatusOr<json> Get(const store::ObjectKey& key) override { return inner.Get(key); }
  StatusOr<std::vector<json>> Commit(std::vector<store::WriteOp> ops) override {
    if (fail) return UnavailableError("disk on fire");
    return inner.Commit(std::move(ops));
  }
  StatusOr<store::ListResult> List(const store::ListOptions& o) override { return inner.List(o); }
  StatusOr<store::ChangesResult> Changes(const std::string& kind, int64_t after,
                                         int max) override {
    return inner.Changes(kind, after, max);
  }
  int64_t Revision() override { return inner.Revision(); }
  int64_t WaitForRevision(int64_t after, std::chrono::milliseconds timeout) override {
    return inner.WaitForRevision(after, timeout);
  }
  store::MemoryStore inner;
  std::atomic<bool> fail{false};
};

TEST(AuditTest, CommitFailureReachesCallersAndTheChainRecovers) {
  FlakyStore s;
  FakeClock clock;
  AuditLog log(&s, &clock);
  ASSERT_TRUE(log.Append(Entry(1)).ok());
  s.fail = true;
  Status st = log.Append(Entry(2));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), ::testing::HasSubstr("disk on fire"));
  s.fail = false;
  ASSERT_TRUE(log.Append(Entry(3)).ok());
  VerifyResult v = log.Verify();
  EXPECT_TRUE(v.ok) << v.problem;
  EXPECT_EQ(v.records, 2);
  EXPECT_EQ(Record(s.inner, 2)["spec"]["requestId"], "req-3");
}

TEST(AuditTest, TwoWritersOnOneStoreDoNotForkTheChain) {
  store::MemoryStore s;
  FakeClock clock;
  // E.g. two server replicas on one database. The head's resourceVersion check turns a race into
  // a conflict that the loser retries on top of the winner's records.
  AuditLog a(&s, &clock), b(&s, &clock);
  std::thread ta([&] { EXPECT_EQ(AppendConcurrently(a, 2, 200), 0); });
  std::thread tb([&] { EXPECT_EQ(AppendConcurrently(b, 2, 200), 0); });
  ta.join();
  tb.join();
  VerifyResult v = a.Verify();
  EXPECT_TRUE(v.ok) << v.problem;
  EXPECT_EQ(v.records, 400);
}

TEST(AuditTest, VerifyIgnoresRecordsAppendedAfterTheHeadWasRead) {
  store::MemoryStore s;
  FakeClock clock;
  AuditLog log(&s, &clock);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop; ++i) ASSERT_TRUE(log.Append(Entry(i)).ok());
  });
  for (int i = 0; i < 20; ++i) {
    VerifyResult v = log.Verify();
    EXPECT_TRUE(v.ok) << v.problem;
  }
  stop = true;
  writer.join();
}

}  // namespace
}  // namespace aicloud::auth
