#include "engine/kernels/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace aicloud::engine::kernels {
namespace {

// Every index of [0, n) is visited exactly once and ranges respect the grain.
void ExpectEachIndexOnce(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int64_t> short_ranges{0};
  pool.ParallelFor(n, [&](int64_t b, int64_t e) {
    ASSERT_LE(0, b);
    ASSERT_LT(b, e);
    ASSERT_LE(e, n);
    if (e - b < grain && e != n) short_ranges.fetch_add(1);
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  }, grain);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i;
  EXPECT_EQ(short_ranges.load(), 0);
}

TEST(ThreadPool, EachIndexOnceForManySizes) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {1, 2, 3, 7, 8, 9, 31, 64, 100, 1000, 4097}) {
      for (int64_t grain : {1, 3, 16}) ExpectEachIndexOnce(pool, n, grain);
    }
  }
}

TEST(ThreadPool, ZeroAndNegativeCallNothing) {
  ThreadPool pool(2);
  int calls = 0;
  pool.ParallelFor(0, [&](int64_t, int64_t) { ++calls; });
  pool.ParallelFor(-5, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPool, OneElementRunsInlineOnCaller) {
  ThreadPool pool(4);
  std::thread::id ran_on;
  pool.ParallelFor(1, [&](int64_t b, int64_t e) {
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 1);
    ran_on = std::this_thread::get_id();
  });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(ThreadPool, BelowOneThreadMeansOne) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.num_threads(), 1);
  ExpectEachIndexOnce(pool, 100, 1);
}

TEST(ThreadPool, UsesWorkerThreads) {
  ThreadPool pool(2);
  // Keep the caller busy on its first range so the worker must take some.
  std::atomic<bool> worker_ran{false};
  const std::thread::id caller = std::this_thread::get_id();
  for (int attempt = 0; attempt < 100 && !worker_ran.load(); ++attempt) {
    pool.ParallelFor(64, [&](int64_t, int64_t) {
      if (std::this_thread::get_id() != caller) {
        worker_ran.store(true);
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
  }
  EXPECT_TRUE(worker_ran.load());
}

TEST(ThreadPool, NestedCallsRunInlineAndCoverEverything) {
  ThreadPool pool(3);
  constexpr int64_t kOuter = 17, kInner = 13;
  std::vector<std::atomic<int>> hits(kOuter * kInner);
  pool.ParallelFor(kOuter, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const std::thread::id outer_thread = std::this_thread::get_id();
      pool.ParallelFor(kInner, [&](int64_t ib, int64_t ie) {
        EXPECT_EQ(std::this_thread::get_id(), outer_thread);
        for (int64_t j = ib; j < ie; ++j) hits[static_cast<size_t>(i * kInner + j)].fetch_add(1);
      });
    }
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, ConcurrentCallersAreSerialisedCorrectly) {
  ThreadPool pool(2);
  constexpr int kCallers = 4, kCalls = 200, kN = 257;
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&] {
      for (int i = 0; i < kCalls; ++i) {
        std::atomic<int64_t> sum{0};
        pool.ParallelFor(kN, [&](int64_t b, int64_t e) {
          for (int64_t j = b; j < e; ++j) sum.fetch_add(j);
        });
        EXPECT_EQ(sum.load(), int64_t{kN} * (kN - 1) / 2);
        total.fetch_add(1);
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), kCallers * kCalls);
}

TEST(ThreadPool, ManyBackToBackCallsAndSleepingWorkersWakeUp) {
  ThreadPool pool(3);
  int64_t expected = 0;
  std::atomic<int64_t> sum{0};
  for (int i = 0; i < 20000; ++i) {
    const int64_t n = 1 + i % 50;
    pool.ParallelFor(n, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
    expected += n;
    // Now and then let the workers fall asleep on the futex.
    if (i % 5000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(sum.load(), expected);
}

// Guided sizes: the first range is about n / (2 * threads), later ones shrink, and every range
// but the last holds at least `grain` indices.
TEST(ThreadPool, RangesShrinkTowardTheEnd) {
  ThreadPool pool(2);
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  pool.ParallelFor(10000, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    ranges.emplace_back(b, e);
  }, 16);
  std::sort(ranges.begin(), ranges.end());
  ASSERT_GE(ranges.size(), 4u);
  EXPECT_EQ(ranges.front().first, 0);
  EXPECT_EQ(ranges.front().second, 2500);
  EXPECT_EQ(ranges.back().second, 10000);
  for (size_t i = 0; i + 1 < ranges.size(); ++i) {
    EXPECT_EQ(ranges[i].second, ranges[i + 1].first);
    EXPECT_GE(ranges[i].second - ranges[i].first, 16);
    EXPECT_GE(ranges[i].second - ranges[i].first, ranges[i + 1].second - ranges[i + 1].first);
  }
}

}  // namespace
}  // namespace aicloud::engine::kernels
