// Tests of UsageTally: records summed per tenant, day, model and key into ServingUsage objects;
// several tallies on one store adding up under concurrent writes; sums the store refused kept for
// the next flush; every record handed on to the next sink.
#include "gateway/usage_tally.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <optional>
#include <utility>
#include <thread>

#include "store/memory_store.h"
#include "store/store_test_util.h"

namespace aicloud::gateway {
namespace {

using store::json;

constexpr int64_t kDay1 = 1'796'000'000'000;  // 2026-11-30T00:53:20Z, in ms
constexpr int64_t kDay2 = kDay1 + 86'400'000;

UsageRecord Rec(std::string tenant, std::string model, std::string key, int status, int64_t prompt, int64_t completion,
                int64_t unix_ms = kDay1) {
  UsageRecord r;
  r.tenant = std::move(tenant);
  r.model = std::move(model);
  r.deployment = r.tenant.empty() ? "" : r.tenant + "/" + r.model;
  r.key_id = std::move(key);
  r.status = status;
  r.prompt_tokens = prompt;
  r.completion_tokens = completion;
  r.cost = 0.001 * static_cast<double>(prompt + completion);
  r.latency_s = 0.5;
  r.unix_ms = unix_ms;
  return r;
}

class Collect final : public UsageSink {
 public:
  void Record(UsageRecord r) override {
    std::lock_guard<std::mutex> l(mu);
    got.push_back(std::move(r));
  }
  std::mutex mu;
  std::vector<UsageRecord> got;
};

// Fails every write while `down`; runs `after_get` (once) between a read and what follows it,
// as another gateway's write would come in between.
class FlakyStore final : public store::testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  std::atomic<bool> down{false};
  std::atomic<int> writes{0};
  std::function<void()> after_get;
  // The next commit is applied, but answered with this code (a lost or resent answer).
  std::optional<StatusCode> lie_once;
  std::atomic<std::chrono::milliseconds> commit_delay{std::chrono::milliseconds(0)};
  std::function<void()> on_commit;
  StatusOr<json> Get(const store::ObjectKey& key) override {
    StatusOr<json> r = inner()->Get(key);
    if (after_get) std::exchange(after_get, nullptr)();
    return r;
  }
  StatusOr<std::vector<json>> Commit(std::vector<store::WriteOp> ops) override {
    if (down) return UnavailableError("store down");
    if (on_commit) on_commit();
    std::this_thread::sleep_for(commit_delay.load());
    ++writes;
    StatusOr<std::vector<json>> r = inner()->Commit(std::move(ops));
    if (r.ok() && lie_once) return Status(*std::exchange(lie_once, std::nullopt), "answer lost");
    return r;
  }
};

json Object(store::Store& s, const std::string& tenant, int64_t unix_ms) {
  StatusOr<json> o = s.Get({kServingUsageKind, tenant, UsageTally::DayOf(unix_ms)});
  EXPECT_TRUE(o.ok()) << o.status().ToString();
  return o.ok() ? *o : json();
}

TEST(UsageTally, SumsPerTenantDayModelAndKey) {
  store::MemoryStore mem;
  Collect next;
  UsageTally tally(&mem, {.flush_period = std::chrono::hours(1), .next = &next});
  tally.Record(Rec("acme", "chat", "k1", 200, 10, 5));
  tally.Record(Rec("acme", "chat", "k1", 200, 20, 7));
  tally.Record(Rec("acme", "sql", "k2", 429, 0, 0));           // refused: a request and an error
  tally.Record(Rec("acme", "chat", "k2", 200, 1, 1, kDay2));   // the next day's object
  tally.Record(Rec("lean", "mini", "k3", 200, 3, 4));
  UsageRecord admin = Rec("", "chat", "kadmin", 200, 2, 2);
  admin.deployment = "acme/chat";                              // a key of no tenant: the owner's
  tally.Record(admin);
  UsageRecord unknown = Rec("", "", "", 401, 0, 0);            // no key, no model: the log only
  tally.Record(unknown);
  UsageRecord bad_body = Rec("lean", "", "k3", 400, 0, 0);     // a tenant's request without a model
  bad_body.deployment.clear();
  tally.Record(bad_body);
  ASSERT_TRUE(tally.Flush().ok());
  EXPECT_EQ(tally.pending_objects(), 0u);

  json acme = Object(mem, "acme", kDay1);
  EXPECT_EQ(acme["spec"]["day"], UsageTally::DayOf(kDay1));
  const json& chat = acme["status"]["models"]["chat"];
  EXPECT_EQ(chat["requests"], 3);  // two of k1, the admin's
  EXPECT_EQ(chat["errors"], 0);
  EXPECT_EQ(chat["promptTokens"], 32);
  EXPECT_EQ(chat["completionTokens"], 14);
  EXPECT_NEAR(chat["cost"].get<double>(), 0.046, 1e-9);
  EXPECT_NEAR(chat["latencySeconds"].get<double>(), 1.5, 1e-9);
  EXPECT_EQ(acme["status"]["models"]["sql"]["requests"], 1);
  EXPECT_EQ(acme["status"]["models"]["sql"]["errors"], 1);
  EXPECT_EQ(acme["status"]["keys"]["k1"]["requests"], 2);
  EXPECT_EQ(acme["status"]["keys"]["k1"]["promptTokens"], 30);
  EXPECT_EQ(acme["status"]["keys"]["kadmin"]["requests"], 1);
  EXPECT_FALSE(acme["status"]["keys"]["k1"].contains("latencySeconds"));
  EXPECT_EQ(Object(mem, "acme", kDay2)["status"]["models"]["chat"]["requests"], 1);
  json lean = Object(mem, "lean", kDay1);
  EXPECT_EQ(lean["status"]["models"]["mini"]["completionTokens"], 4);
  EXPECT_EQ(lean["status"]["models"]["(none)"]["errors"], 1);
  StatusOr<store::ListResult> all = mem.List({.kind = kServingUsageKind});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->items.size(), 3u);  // acme twice, lean once; nothing for the unknown caller

  // Every record went on to the next sink, the uncounted one too.
  {
    std::lock_guard<std::mutex> l(next.mu);
    EXPECT_EQ(next.got.size(), 8u);
  }
  // A second flush adds to what is stored.
  tally.Record(Rec("acme", "chat", "k1", 500, 1, 0));
  ASSERT_TRUE(tally.Flush().ok());
  json again = Object(mem, "acme", kDay1)["status"]["models"]["chat"];
  EXPECT_EQ(again["requests"], 4);
  EXPECT_EQ(again["errors"], 1);
  EXPECT_EQ(again["promptTokens"], 33);
}

TEST(UsageTally, AWriteBetweenAReadAndItsUpdateIsNotLost) {
  store::MemoryStore mem;
  FlakyStore hooked(&mem);
  UsageTally a(&hooked, {.flush_period = std::chrono::hours(1)}), b(&mem, {.flush_period = std::chrono::hours(1)});
  a.Record(Rec("acme", "chat", "k1", 200, 10, 5));
  b.Record(Rec("acme", "chat", "k1", 200, 1, 1));
  ASSERT_TRUE(b.Flush().ok());  // the object exists
  b.Record(Rec("acme", "chat", "k2", 200, 100, 100));
  hooked.after_get = [&] { ASSERT_TRUE(b.Flush().ok()); };  // b writes after a read the object
  ASSERT_TRUE(a.Flush().ok());
  json chat = Object(mem, "acme", kDay1)["status"]["models"]["chat"];
  EXPECT_EQ(chat["requests"], 3);
  EXPECT_EQ(chat["promptTokens"], 111);
}

TEST(UsageTally, SeveralGatewaysOnOneStoreAddUp) {
  store::MemoryStore mem;
  constexpr int kTallies = 4, kRecords = 500;
  std::vector<std::unique_ptr<UsageTally>> tallies;
  for (int i = 0; i < kTallies; ++i) {
    tallies.push_back(std::make_unique<UsageTally>(&mem, UsageTallyOptions{.flush_period = std::chrono::milliseconds(1)}));
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < kTallies; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; n < kRecords; ++n) {
        tallies[i]->Record(Rec("acme", "chat", "k" + std::to_string(n % 3), 200, 2, 1));
        if (n % 25 == 0) (void)tallies[i]->Flush();  // the four write the one object at once
      }
    });
  }
  for (std::thread& t : threads) t.join();
  tallies.clear();  // each flushes what is left
  json o = Object(mem, "acme", kDay1);
  EXPECT_EQ(o["status"]["models"]["chat"]["requests"], kTallies * kRecords);
  EXPECT_EQ(o["status"]["models"]["chat"]["promptTokens"], 2 * kTallies * kRecords);
  int64_t by_key = 0;
  for (const auto& [k, c] : o["status"]["keys"].items()) by_key += c["requests"].get<int64_t>();
  EXPECT_EQ(by_key, kTallies * kRecords);
}

TEST(UsageTally, SumsTheStoreRefusedWaitForTheNextFlush) {
  store::MemoryStore mem;
  FlakyStore flaky(&mem);
  UsageTally tally(&flaky, {.flush_period = std::chrono::hours(1)});
  flaky.down = true;
  tally.Record(Rec("acme", "chat", "k1", 200, 10, 5));
  Status st = tally.Flush();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(tally.pending_objects(), 1u);
  tally.Record(Rec("acme", "chat", "k1", 200, 1, 1));
  EXPECT_FALSE(tally.Flush().ok());
  flaky.down = false;
  // The refused batch goes again as it was; what came meanwhile is the next batch.
  ASSERT_TRUE(tally.Flush().ok());
  EXPECT_EQ(Object(mem, "acme", kDay1)["status"]["models"]["chat"]["requests"], 1);
  EXPECT_EQ(tally.pending_objects(), 1u);
  ASSERT_TRUE(tally.Flush().ok());
  EXPECT_EQ(tally.pending_objects(), 0u);
  json chat = Object(mem, "acme", kDay1)["status"]["models"]["chat"];
  EXPECT_EQ(chat["requests"], 2);
  EXPECT_EQ(chat["promptTokens"], 11);
  EXPECT_EQ(flaky.writes.load(), 2);
}

TEST(UsageTally, AWriteThatLandedButWasReportedFailedIsNotAddedTwice) {
  for (StatusCode answer : {StatusCode::kDeadlineExceeded, StatusCode::kUnavailable, StatusCode::kAborted}) {
    store::MemoryStore mem;
    FlakyStore flaky(&mem);
    UsageTally tally(&flaky, {.flush_period = std::chrono::hours(1)});
    tally.Record(Rec("acme", "chat", "k1", 200, 10, 5));
    tally.Record(Rec("acme", "chat", "k1", 200, 1, 1));
    flaky.lie_once = answer;  // the commit lands, its answer says it did not
    (void)tally.Flush();
    ASSERT_TRUE(tally.Flush().ok());
    EXPECT_EQ(tally.pending_objects(), 0u);
    json chat = Object(mem, "acme", kDay1)["status"]["models"]["chat"];
    EXPECT_EQ(chat["requests"], 2) << StatusCodeName(answer);
    EXPECT_EQ(chat["promptTokens"], 11) << StatusCodeName(answer);
    // And a later batch still adds.
    tally.Record(Rec("acme", "chat", "k1", 200, 100, 0));
    ASSERT_TRUE(tally.Flush().ok());
    EXPECT_EQ(Object(mem, "acme", kDay1)["status"]["models"]["chat"]["promptTokens"], 111);
  }
}

TEST(UsageTally, ABatchTheStoreRefusesForGoodIsDroppedAndLogged) {
  store::MemoryStore mem;
  std::vector<std::string> logged;
  UsageTally tally(&mem, {.flush_period = std::chrono::hours(1), .log = [&](const std::string& l) { logged.push_back(l); }});
  tally.Record(Rec("Not_A.Tenant", "chat", "k1", 200, 10, 5));  // not a valid tenant name
  tally.Record(Rec("acme", "chat", "k1", 200, 1, 1));
  EXPECT_EQ(tally.Flush().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tally.pending_objects(), 0u);  // not retried forever
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged[0].find("dropped the sums of tenant Not_A.Tenant"), std::string::npos) << logged[0];
  EXPECT_EQ(Object(mem, "acme", kDay1)["status"]["models"]["chat"]["requests"], 1);
}

TEST(UsageTally, RecordsReachTheNextSinkWhileTheStoreIsSlow) {
  store::MemoryStore mem;
  FlakyStore slow(&mem);
  Collect next;
  std::atomic<bool> in_commit{false};  // before the tally: its last write still calls on_commit
  UsageTally tally(&slow, {.flush_period = std::chrono::milliseconds(50), .next = &next});
  slow.commit_delay = std::chrono::milliseconds(1500);
  slow.on_commit = [&] { in_commit = true; };
  tally.Record(Rec("acme", "chat", "k1", 200, 1, 1));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (!in_commit && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(in_commit);
  // A write is in progress for 1.5 s: records still reach the log within the 100 ms tick, and
  // the gauge answers at once.
  for (int i = 0; i < 20; ++i) tally.Record(Rec("acme", "chat", "k2", 200, 1, 1));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(tally.pending_objects(), 1u);  // acme's day: a batch being written, the new sums open
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
  bool all = false;
  for (int i = 0; i < 100 && !all; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard<std::mutex> l(next.mu);
    all = next.got.size() == 21;
  }
  EXPECT_TRUE(all) << "the log waited for the store";
  slow.commit_delay = std::chrono::milliseconds(0);
  tally.Stop();
  EXPECT_EQ(Object(mem, "acme", kDay1)["status"]["models"]["chat"]["requests"], 21);
}

TEST(UsageTally, StopWritesWhatIsLeftAndLogsWhatItCannot) {
  store::MemoryStore mem;
  FlakyStore flaky(&mem);
  std::vector<std::string> logged;
  {
    UsageTally tally(&flaky, {.flush_period = std::chrono::hours(1), .log = [&](const std::string& l) { logged.push_back(l); }});
    tally.Record(Rec("acme", "chat", "k1", 200, 1, 1));
    tally.Stop();
    tally.Record(Rec("acme", "chat", "k1", 200, 1, 1));  // after Stop: dropped
    EXPECT_EQ(tally.dropped(), 1u);
  }
  EXPECT_EQ(Object(mem, "acme", kDay1)["status"]["models"]["chat"]["requests"], 1);
  EXPECT_TRUE(logged.empty());
  flaky.down = true;
  {
    UsageTally tally(&flaky, {.flush_period = std::chrono::hours(1), .log = [&](const std::string& l) { logged.push_back(l); }});
    tally.Record(Rec("lean", "mini", "k3", 200, 1, 1));
    tally.Record(Rec("lean", "mini", "k3", 200, 1, 1));
  }  // three tries a second apart, then the loss is logged, with why
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged[0].find("without writing 2 requests of tenant lean"), std::string::npos) << logged[0];
  EXPECT_NE(logged[0].find("store down"), std::string::npos) << logged[0];
  // The store comes back between the tries: the third one writes.
  logged.clear();
  {
    UsageTally tally(&flaky, {.flush_period = std::chrono::hours(1), .log = [&](const std::string& l) { logged.push_back(l); }});
    tally.Record(Rec("lean", "mini", "k3", 200, 1, 1));
    std::thread back([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      flaky.down = false;
    });
    tally.Stop();
    back.join();
  }
  EXPECT_TRUE(logged.empty()) << logged[0];
  EXPECT_EQ(Object(mem, "lean", kDay1)["status"]["models"]["mini"]["requests"], 1);
}

TEST(UsageTally, AnObjectEditedByHandIsAddedToNotThrownOn) {
  store::MemoryStore mem;
  const std::string day = UsageTally::DayOf(kDay1);
  ASSERT_TRUE(mem.Create({{"apiVersion", "aicloud/v1"},
                          {"kind", kServingUsageKind},
                          {"metadata", {{"tenant", "acme"}, {"name", day}}},
                          {"spec", {{"day", day}}},
                          {"status", {{"models", {{"chat", {{"requests", "many"}, {"promptTokens", -5}}}, {"old", 3}}}}}})
                  .ok());
  UsageTally tally(&mem, {.flush_period = std::chrono::hours(1)});
  tally.Record(Rec("acme", "chat", "k1", 200, 10, 5));
  ASSERT_TRUE(tally.Flush().ok());
  json chat = Object(mem, "acme", kDay1)["status"]["models"]["chat"];
  EXPECT_EQ(chat["requests"], 1);       // a string counted as 0
  EXPECT_EQ(chat["promptTokens"], 10);  // a negative count as 0
}

TEST(UsageTally, DayOfIsTheUtcDate) {
  EXPECT_EQ(UsageTally::DayOf(0), "1970-01-01");
  EXPECT_EQ(UsageTally::DayOf(1'796'083'199'999), "2026-11-30");
  EXPECT_EQ(UsageTally::DayOf(1'796'083'200'000), "2026-12-01");
}

}  // namespace
}  // namespace aicloud::gateway
