// One behaviour suite, run against every Store backend (memory and SQLite): same answers, same
// messages. Backend-only behaviour (reopen, migrations, corrupt files, batching) is in
// sqlite/sqlite_store_test.cc.
#include "store/store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "store/store_test_util.h"

namespace aicloud::store {
namespace {

using ::testing::HasSubstr;
using testing::Manifest;

template <typename Backend>
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = backend_.Make();
    ASSERT_NE(store_, nullptr);
  }
  json MustCreate(json m) {
    StatusOr<json> out = store_->Create(std::move(m));
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? *out : json();
  }
  std::vector<std::string> Names(const std::vector<json>& items) {
    std::vector<std::string> out;
    for (const json& o : items) {
      out.push_back(o["metadata"].value("tenant", "") + "/" +
                    o["metadata"]["name"].get<std::string>());
    }
    return out;
  }

  Backend backend_;
  std::unique_ptr<Store> store_;
};

using Backends = ::testing::Types<testing::MemoryBackend, testing::SqliteBackend>;
struct BackendNames {
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};
TYPED_TEST_SUITE(StoreTest, Backends, BackendNames);

TYPED_TEST(StoreTest, CreateStampsMetadataAndGetReturnsIt) {
  json created =
      this->MustCreate(Manifest("Job", "nlp", "train-1", {{"team", "nlp"}}, {{"workers", 2}}));
  const json& meta = created["metadata"];
  EXPECT_EQ(meta["resourceVersion"], "1");
  EXPECT_EQ(ResourceVersionOf(created), 1);
  EXPECT_EQ(meta["uid"].get<std::string>().size(), 36u);
  EXPECT_THAT(meta["createdAt"].get<std::string>(),
              ::testing::MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z"));
  StatusOr<json> got = this->store_->Get({"Job", "nlp", "train-1"});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, created);
  EXPECT_EQ(this->store_->Revision(), 1);
  // A second object gets a different uid and the next revision of the whole store.
  json other = this->MustCreate(Manifest("Node", "", "gpu-1"));
  EXPECT_EQ(ResourceVersionOf(other), 2);
  EXPECT_NE(other["metadata"]["uid"], meta["uid"]);
}

TYPED_TEST(StoreTest, CreateTwiceIsAlreadyExists) {
  this->MustCreate(Manifest("Job", "nlp", "a"));
  StatusOr<json> again = this->store_->Create(Manifest("Job", "nlp", "a"));
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(again.status().message(), "Job nlp/a already exists");
  // The same name in another tenant or kind is another object.
  this->MustCreate(Manifest("Job", "cv", "a"));
  this->MustCreate(Manifest("Deployment", "nlp", "a"));
}

TYPED_TEST(StoreTest, GetMissingIsNotFound) {
  StatusOr<json> job = this->store_->Get({"Job", "nlp", "missing"});
  EXPECT_EQ(job.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(job.status().message(), "Job nlp/missing not found");
  EXPECT_EQ(this->store_->Get({"Node", "", "n1"}).status().message(), "Node n1 not found");
}

TYPED_TEST(StoreTest, RejectsMalformedObjectsNamingTheField) {
  struct Case {
    json object;
    const char* message;
  };
  std::vector<Case> cases = {
      {json::array(), "object must be a JSON object"},
      {{{"metadata", {{"name", "a"}}}}, "kind: must be a non-empty string"},
      {{{"kind", "job"}, {"metadata", {{"name", "a"}}}},
       "kind: \"job\" must start with an uppercase letter (at most 63 characters)"},
      {{{"kind", "Job"}}, "metadata: must be an object"},
      {{{"kind", "Job"}, {"metadata", {{"name", 7}}}}, "metadata.name: must be a string"},
      {{{"kind", "Job"}, {"metadata", {{"name", ""}}}}, "metadata.name: \"\" must not be empty"},
      {{{"kind", "Job"}, {"metadata", {{"name", "Bad_Name"}}}},
       "metadata.name: \"Bad_Name\" has invalid character 'B' (allowed: a-z 0-9 - .)"},
      {{{"kind", "Job"}, {"metadata", {{"name", "a"}, {"tenant", "a.b"}}}},
       "metadata.tenant: \"a.b\" has invalid character '.' (allowed: a-z 0-9 -)"},
      {{{"kind", "Job"}, {"metadata", {{"name", "a"}, {"labels", {{"team", 3}}}}}},
       "metadata.labels.team: value must be a string"},
      {{{"kind", "Job"}, {"metadata", {{"name", "a"}, {"labels", {{"team", "a b"}}}}}},
       "metadata.labels.team: value has invalid character ' ' (allowed: A-Z a-z 0-9 - _ .)"},
  };
  for (const Case& c : cases) {
    StatusOr<json> out = this->store_->Create(c.object);
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << c.object.dump();
    EXPECT_EQ(out.status().message(), c.message) << c.object.dump();
  }
  EXPECT_EQ(this->store_->Revision(), 0);
}

TYPED_TEST(StoreTest, UpdateChecksResourceVersion) {
  json job = this->MustCreate(Manifest("Job", "nlp", "a", {}, {{"workers", 1}}));
  job["spec"]["workers"] = 2;
  StatusOr<json> v2 = this->store_->Update(job, 1);
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_EQ(ResourceVersionOf(*v2), 2);

  // A writer still holding version 1 loses, with both versions named.
  job["spec"]["workers"] = 3;
  StatusOr<json> stale = this->store_->Update(job, 1);
  EXPECT_EQ(stale.status().code(), StatusCode::kAborted);
  EXPECT_EQ(stale.status().message(), "Job nlp/a: resourceVersion conflict: expected 1, current 2");
  EXPECT_EQ((*this->store_->Get({"Job", "nlp", "a"}))["spec"]["workers"], 2);

  // 0 is unconditional. uid and createdAt are the store's: a caller cannot change them.
  job["metadata"]["uid"] = "forged";
  job["metadata"]["createdAt"] = "1970-01-01T00:00:00Z";
  StatusOr<json> v3 = this->store_->Update(job, 0);
  ASSERT_TRUE(v3.ok());
  EXPECT_EQ(ResourceVersionOf(*v3), 3);
  EXPECT_EQ((*v3)["spec"]["workers"], 3);
  EXPECT_EQ((*v3)["metadata"]["uid"], (*v2)["metadata"]["uid"]);
  EXPECT_EQ((*v3)["metadata"]["createdAt"], (*v2)["metadata"]["createdAt"]);

  StatusOr<json> missing = this->store_->Update(Manifest("Job", "nlp", "b"), 0);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "Job nlp/b not found");
}

TYPED_TEST(StoreTest, DeleteChecksResourceVersionAndReturnsLastState) {
  json job = this->MustCreate(Manifest("Job", "nlp", "a"));
  StatusOr<json> conflict = this->store_->Delete({"Job", "nlp", "a"}, 7);
  EXPECT_EQ(conflict.status().code(), StatusCode::kAborted);
  EXPECT_EQ(conflict.status().message(),
            "Job nlp/a: resourceVersion conflict: expected 7, current 1");
  StatusOr<json> gone = this->store_->Delete({"Job", "nlp", "a"}, 1);
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  EXPECT_EQ(*gone, job);
  EXPECT_EQ(this->store_->Get({"Job", "nlp", "a"}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(this->store_->Delete({"Job", "nlp", "a"}, 0).status().message(), "Job nlp/a not found");
  EXPECT_EQ(this->store_->Revision(), 2);  // the delete took a revision too
  // The name is free again; the new object is a new object.
  json again = this->MustCreate(Manifest("Job", "nlp", "a"));
  EXPECT_NE(again["metadata"]["uid"], job["metadata"]["uid"]);
}

TYPED_TEST(StoreTest, ListPagesInKeyOrderAcrossTenants) {
  for (const char* tenant : {"cv", "nlp", "rl"}) {
    for (int i = 0; i < 8; ++i)
      this->MustCreate(Manifest("Job", tenant, "job-" + std::to_string(i)));
  }
  this->MustCreate(Manifest("Deployment", "nlp", "other-kind"));

  std::vector<std::string> all;
  ListOptions opts{.kind = "Job", .limit = 5};
  int pages = 0;
  do {
    StatusOr<ListResult> page = this->store_->List(opts);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    EXPECT_LE(page->items.size(), 5u);
    EXPECT_EQ(page->resource_version, 25);
    for (const std::string& n : this->Names(page->items)) all.push_back(n);
    opts.continue_token = page->continue_token;
    ++pages;
  } while (!opts.continue_token.empty());
  EXPECT_EQ(pages, 5);  // 24 items: 5+5+5+5+4, and no empty trailing page
  ASSERT_EQ(all.size(), 24u);
  EXPECT_EQ(all.front(), "cv/job-0");
  EXPECT_EQ(all[8], "nlp/job-0");
  EXPECT_EQ(all.back(), "rl/job-7");
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));

  StatusOr<ListResult> nlp = this->store_->List({.kind = "Job", .tenant = "nlp"});
  ASSERT_TRUE(nlp.ok());
  EXPECT_EQ(nlp->items.size(), 8u);
  EXPECT_EQ(nlp->continue_token, "");
  StatusOr<ListResult> exact = this->store_->List({.kind = "Job", .tenant = "nlp", .limit = 8});
  EXPECT_EQ(exact->items.size(), 8u);
  EXPECT_EQ(exact->continue_token, "");  // the look-ahead saw nothing more
  StatusOr<ListResult> none = this->store_->List({.kind = "Job", .tenant = "nobody"});
  EXPECT_TRUE(none->items.empty());
}

TYPED_TEST(StoreTest, ListRejectsBadOptions) {
  this->MustCreate(Manifest("Job", "nlp", "a"));
  this->MustCreate(Manifest("Job", "nlp", "b"));
  StatusOr<ListResult> first = this->store_->List({.kind = "Job", .limit = 1});
  ASSERT_FALSE(first->continue_token.empty());

  StatusOr<ListResult> other_kind =
      this->store_->List({.kind = "Node", .limit = 1, .continue_token = first->continue_token});
  EXPECT_EQ(other_kind.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(other_kind.status().message(),
            "continue token: issued for another kind, tenant or "
            "label selector than this list");
  StatusOr<ListResult> garbage = this->store_->List({.kind = "Job", .continue_token = "zz"});
  EXPECT_EQ(garbage.status().message(),
            "continue token: malformed (pass the token of the "
            "previous page unchanged)");
  EXPECT_EQ(this->store_->List({.kind = "Job", .limit = -1}).status().message(),
            "list: limit must be >= 0, got -1");
  EXPECT_EQ(this->store_->List({.kind = ""}).status().code(), StatusCode::kInvalidArgument);
  StatusOr<ListResult> bad_selector = this->store_->List({.kind = "Job", .label_selector = "a=,"});
  EXPECT_EQ(bad_selector.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_selector.status().message(), HasSubstr("label selector \"a=,\""));
}

TYPED_TEST(StoreTest, ListFiltersByLabelSelector) {
  this->MustCreate(Manifest("Job", "nlp", "a", {{"team", "nlp"}, {"tier", "prod"}}));
  this->MustCreate(Manifest("Job", "nlp", "b", {{"team", "nlp"}, {"spot", "true"}}));
  this->MustCreate(Manifest("Job", "nlp", "c", {{"team", "cv"}}));
  this->MustCreate(Manifest("Job", "nlp", "d"));
  for (int i = 0; i < 30; ++i) {
    this->MustCreate(Manifest("Job", "nlp", "z-" + std::to_string(100 + i), {{"team", "nlp"}}));
  }
  auto names = [this](const std::string& selector, int64_t limit = 0) {
    std::vector<std::string> out;
    ListOptions opts{.kind = "Job", .label_selector = selector, .limit = limit};
    do {
      StatusOr<ListResult> page = this->store_->List(opts);
      EXPECT_TRUE(page.ok()) << page.status().ToString();
      if (!page.ok()) break;
      for (const json& o : page->items) out.push_back(o["metadata"]["name"]);
      opts.continue_token = page->continue_token;
    } while (!opts.continue_token.empty());
    return out;
  };
  EXPECT_EQ(names("team=cv"), std::vector<std::string>{"c"});
  EXPECT_EQ(names("team=nlp,!spot").size(), 31u);
  EXPECT_EQ(names("team=nlp,!spot", 4).size(), 31u);  // pages fill across non-matching rows
  EXPECT_EQ(names("!team"), std::vector<std::string>{"d"});
  EXPECT_EQ(names("team!=nlp"), (std::vector<std::string>{"c", "d"}));
  EXPECT_EQ(names("spot"), std::vector<std::string>{"b"});
  EXPECT_EQ(names("tier in (prod,dev)"), std::vector<std::string>{"a"});
  // Labels changed by an update are what the selector sees.
  json c = *this->store_->Get({"Job", "nlp", "c"});
  c["metadata"]["labels"]["team"] = "nlp";
  c["metadata"]["labels"]["spot"] = "true";
  ASSERT_TRUE(this->store_->Update(c, 0).ok());
  EXPECT_EQ(names("spot"), (std::vector<std::string>{"b", "c"}));
  EXPECT_TRUE(names("team=cv").empty());
}

TYPED_TEST(StoreTest, PagingIsStableUnderConcurrentWrites) {
  constexpr int kStable = 120;
  for (int i = 0; i < kStable; ++i) {
    char name[16];
    std::snprintf(name, sizeof(name), "s-%03d", i);
    this->MustCreate(Manifest("Job", i % 2 ? "a" : "b", name));
  }
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    // Objects appear and vanish all around the stable ones, and the stable ones are rewritten.
    for (int i = 0; !stop.load(); ++i) {
      std::string name = "c-" + std::to_string(i % 50);
      std::string tenant = i % 3 ? "a" : "b";
      if (!this->store_->Create(Manifest("Job", tenant, name)).ok()) {
        (void)this->store_->Delete({"Job", tenant, name}, 0);
      }
      char stable[16];
      std::snprintf(stable, sizeof(stable), "s-%03d", i % kStable);
      StatusOr<json> s = this->store_->Get({"Job", (i % kStable) % 2 ? "a" : "b", stable});
      if (s.ok()) (void)this->store_->Update(*s, 0);
    }
  });
  std::multiset<std::string> seen;
  ListOptions opts{.kind = "Job", .limit = 7};
  do {
    StatusOr<ListResult> page = this->store_->List(opts);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    for (const json& o : page->items)
      seen.insert(o["metadata"]["tenant"].get<std::string>() + "/" +
                  o["metadata"]["name"].get<std::string>());
    opts.continue_token = page->continue_token;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } while (!opts.continue_token.empty());
  stop = true;
  churn.join();
  int stable_seen = 0;
  for (const std::string& key : std::set<std::string>(seen.begin(), seen.end())) {
    EXPECT_EQ(seen.count(key), 1u) << key << " listed twice";
    if (key.find("/s-") != std::string::npos) ++stable_seen;
  }
  EXPECT_EQ(stable_seen, kStable);  // none lost
}

TYPED_TEST(StoreTest, ChangesAreOrderedAndFilteredByKind) {
  json a = this->MustCreate(Manifest("Job", "nlp", "a"));  // rv 1
  this->MustCreate(Manifest("Node", "", "gpu-1"));         // rv 2
  a["spec"]["workers"] = 4;
  ASSERT_TRUE(this->store_->Update(a, 1).ok());                    // rv 3
  ASSERT_TRUE(this->store_->Delete({"Job", "nlp", "a"}, 3).ok());  // rv 4

  StatusOr<ChangesResult> jobs = this->store_->Changes("Job", 0, 100);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->events.size(), 3u);
  EXPECT_EQ(jobs->events[0].type, EventType::kAdded);
  EXPECT_EQ(jobs->events[1].type, EventType::kModified);
  EXPECT_EQ(jobs->events[2].type, EventType::kDeleted);
  EXPECT_EQ(jobs->events[0].resource_version, 1);
  EXPECT_EQ(jobs->events[1].resource_version, 3);
  EXPECT_EQ(jobs->events[2].resource_version, 4);
  EXPECT_EQ(jobs->events[1].object["spec"]["workers"], 4);
  EXPECT_EQ(ResourceVersionOf(jobs->events[2].object), 3);  // the last state before deletion
  EXPECT_EQ(jobs->resource_version, 4);
  EXPECT_STREQ(EventTypeName(jobs->events[2].type), "DELETED");

  // max pages through the log; resource_version says where to resume.
  StatusOr<ChangesResult> first = this->store_->Changes("", 0, 2);
  ASSERT_EQ(first->events.size(), 2u);
  EXPECT_EQ(first->resource_version, 2);
  StatusOr<ChangesResult> rest = this->store_->Changes("", first->resource_version, 2);
  ASSERT_EQ(rest->events.size(), 2u);
  EXPECT_EQ(rest->events[0].resource_version, 3);
  // Nothing new: no events, and the bookmark stays.
  StatusOr<ChangesResult> idle = this->store_->Changes("Job", 4, 10);
  EXPECT_TRUE(idle->events.empty());
  EXPECT_EQ(idle->resource_version, 4);
  // A quiet kind still advances its bookmark past other kinds' writes.
  StatusOr<ChangesResult> racks = this->store_->Changes("Rack", 0, 10);
  EXPECT_TRUE(racks->events.empty());
  EXPECT_EQ(racks->resource_version, 4);
  EXPECT_EQ(this->store_->Changes("Job", 0, 0).status().code(), StatusCode::kInvalidArgument);
}

TYPED_TEST(StoreTest, ListThenWatchMissesNothing) {
  for (int i = 0; i < 5; ++i) this->MustCreate(Manifest("Job", "nlp", "pre-" + std::to_string(i)));
  StatusOr<ListResult> list = this->store_->List({.kind = "Job"});
  ASSERT_EQ(list->items.size(), 5u);
  for (int i = 0; i < 3; ++i) this->MustCreate(Manifest("Job", "nlp", "post-" + std::to_string(i)));
  StatusOr<ChangesResult> ch = this->store_->Changes("Job", list->resource_version, 100);
  ASSERT_EQ(ch->events.size(), 3u);
  EXPECT_EQ(ch->events[0].object["metadata"]["name"], "post-0");
}

TYPED_TEST(StoreTest, WatcherTooFarBehindGetsOutOfRange) {
  this->store_ = this->backend_.Make(/*change_log_capacity=*/5);
  for (int i = 0; i < 10; ++i) this->MustCreate(Manifest("Job", "nlp", "j-" + std::to_string(i)));
  StatusOr<ChangesResult> behind = this->store_->Changes("Job", 2, 100);
  EXPECT_EQ(behind.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(behind.status().message(),
            "too old resource version: 2 (oldest retained change is 6); 410 Gone: re-list and "
            "watch from the list's resourceVersion");
  StatusOr<ChangesResult> edge = this->store_->Changes("Job", 5, 100);  // exactly the oldest kept
  ASSERT_TRUE(edge.ok()) << edge.status().ToString();
  EXPECT_EQ(edge->events.size(), 5u);
  EXPECT_EQ(edge->events.front().resource_version, 6);
}

TYPED_TEST(StoreTest, TransactionIsAllOrNothing) {
  this->MustCreate(Manifest("Job", "nlp", "existing"));
  std::vector<WriteOp> ops;
  ops.push_back(WriteOp::Create(Manifest("Job", "nlp", "x")));
  ops.push_back(WriteOp::Create(Manifest("Job", "nlp", "y")));
  ops.push_back(WriteOp::Update(Manifest("Job", "nlp", "z"), 0));
  StatusOr<std::vector<json>> failed = this->store_->Commit(ops);
  EXPECT_EQ(failed.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(failed.status().message(), "op 3 of 3: Job nlp/z not found");
  EXPECT_EQ(this->store_->Get({"Job", "nlp", "x"}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(this->store_->Revision(), 1);
  EXPECT_EQ(this->store_->Changes("", 1, 10)->events.size(), 0u);

  // Later ops see earlier ones: create then update then delete another, in one commit.
  std::vector<WriteOp> good;
  good.push_back(WriteOp::Create(Manifest("Job", "nlp", "x", {}, {{"step", 1}})));
  good.push_back(WriteOp::Update(Manifest("Job", "nlp", "x", {}, {{"step", 2}}), 2));
  good.push_back(WriteOp::Delete({"Job", "nlp", "existing"}, 1));
  StatusOr<std::vector<json>> out = this->store_->Commit(good);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(ResourceVersionOf((*out)[0]), 2);
  EXPECT_EQ(ResourceVersionOf((*out)[1]), 3);
  EXPECT_EQ((*this->store_->Get({"Job", "nlp", "x"}))["spec"]["step"], 2);
  EXPECT_EQ(this->store_->Get({"Job", "nlp", "existing"}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(this->store_->Revision(), 4);
  EXPECT_EQ(this->store_->Commit({}).status().message(), "transaction has no operations");
}

TYPED_TEST(StoreTest, ConcurrentIncrementsWithRetryLoseNothing) {
  this->MustCreate(Manifest("Counter", "", "hits", {}, {{"n", 0}}));
  constexpr int kThreads = 4, kEach = 40;
  std::atomic<int> conflicts{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        while (true) {  // the optimistic read-modify-write loop every controller runs
          json c = *this->store_->Get({"Counter", "", "hits"});
          c["spec"]["n"] = c["spec"]["n"].template get<int>() + 1;
          StatusOr<json> out = this->store_->Update(c, ResourceVersionOf(c));
          if (out.ok()) break;
          ASSERT_EQ(out.status().code(), StatusCode::kAborted) << out.status().ToString();
          ++conflicts;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ((*this->store_->Get({"Counter", "", "hits"}))["spec"]["n"], kThreads * kEach);
  EXPECT_EQ(this->store_->Revision(), 1 + kThreads * kEach);
}

TYPED_TEST(StoreTest, ConcurrentCreatesAllLand) {
  constexpr int kThreads = 8, kEach = 40;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        std::string name = "t" + std::to_string(t) + "-" + std::to_string(i);
        EXPECT_TRUE(this->store_->Create(Manifest("Job", "nlp", name)).ok());
        // Everyone also races for one shared name: exactly one wins.
        (void)this->store_->Create(Manifest("Job", "nlp", "shared-" + std::to_string(i)));
      }
    });
  }
  for (auto& t : threads) t.join();
  StatusOr<ListResult> all = this->store_->List({.kind = "Job"});
  EXPECT_EQ(all->items.size(), static_cast<size_t>(kThreads * kEach + kEach));
  EXPECT_EQ(this->store_->Revision(), kThreads * kEach + kEach);
  // Every revision was taken exactly once, in commit order.
  StatusOr<ChangesResult> log = this->store_->Changes("Job", 0, 100'000);
  ASSERT_EQ(log->events.size(), static_cast<size_t>(kThreads * kEach + kEach));
  for (size_t i = 0; i < log->events.size(); ++i) {
    EXPECT_EQ(log->events[i].resource_version, static_cast<int64_t>(i + 1));
  }
}

TYPED_TEST(StoreTest, WaitForRevisionWakesOnWrite) {
  EXPECT_EQ(this->store_->WaitForRevision(0, std::chrono::milliseconds(10)), 0);
  std::thread writer([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    this->MustCreate(Manifest("Job", "nlp", "a"));
  });
  EXPECT_EQ(this->store_->WaitForRevision(0, std::chrono::seconds(10)), 1);
  writer.join();
}

}  // namespace
}  // namespace aicloud::store
