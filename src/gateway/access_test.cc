#include "gateway/access.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <thread>
#include <vector>

namespace aicloud::gateway {
namespace {

TEST(EpochOfTwoTest, ChangesWhenEitherInputChangesAndOnlyThen) {
  EpochOfTwo e;
  const uint64_t first = e.Of(1, 1);
  EXPECT_EQ(e.Of(1, 1), first);
  const uint64_t second = e.Of(2, 1);
  EXPECT_NE(second, first);
  const uint64_t third = e.Of(2, 7);
  EXPECT_NE(third, second);
  EXPECT_NE(third, first);
  EXPECT_EQ(e.Of(2, 7), third);
  EXPECT_NE(e.Of(1, 1), first) << "inputs seen before still make a new epoch";
}

// Writers move the inputs through (i, i) for i = 1, 2, ...; readers asking with the inputs they
// last saw must never get an epoch that another reader got for different inputs.
TEST(EpochOfTwoTest, ConcurrentReadersNeverShareAnEpochAcrossInputs) {
  EpochOfTwo e;
  std::atomic<uint64_t> inputs{1};
  std::atomic<bool> stop{false};
  constexpr int kReaders = 4;
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> seen(kReaders);  // (epoch, input)
  std::array<std::atomic<size_t>, kReaders> reads{};
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&, r] {
      while (!stop.load()) {
        const uint64_t in = inputs.load();
        seen[static_cast<size_t>(r)].emplace_back(e.Of(in, in), in);
        reads[static_cast<size_t>(r)].fetch_add(1);
      }
    });
  }
  // Inputs change until the readers have asked 20,000 times (or 10 s pass on a crawling
  // machine), the writer yielding between changes so that readers and changes interleave.
  std::atomic<size_t> asked{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (uint64_t i = 2; asked.load() < 20'000 && std::chrono::steady_clock::now() < deadline; ++i) {
    inputs.store(i);
    std::this_thread::yield();
    size_t n = 0;
    for (const auto& c : reads) n += c.load();
    asked.store(n);
  }
  stop.store(true);
  for (std::thread& t : readers) t.join();
  std::map<uint64_t, uint64_t> input_of;  // epoch -> the one input it stands for
  size_t checked = 0;
  for (const auto& list : seen) {
    for (const auto& [epoch, in] : list) {
      auto [it, fresh] = input_of.emplace(epoch, in);
      ASSERT_EQ(it->second, in) << "epoch " << epoch << " given for inputs " << it->second << " and " << in;
      ++checked;
    }
  }
  EXPECT_GE(checked, 20'000u);
}

}  // namespace
}  // namespace aicloud::gateway
