#include "core/clock.h"

#include <gtest/gtest.h>

#include <memory>
#include <regex>
#include <thread>

namespace aicloud {
namespace {

TEST(FakeClockTest, StandsStillUntilMoved) {
  FakeClock clock(5);
  EXPECT_EQ(clock.NowMicros(), 5);
  EXPECT_EQ(clock.NowMicros(), 5);
  clock.Advance(90 * kMicrosPerSecond);
  EXPECT_EQ(clock.NowMicros(), 5 + 90 * kMicrosPerSecond);
  clock.SetMicros(7);
  EXPECT_EQ(clock.NowMicros(), 7);
}

TEST(FakeClockTest, DefaultsToZero) { EXPECT_EQ(FakeClock().NowMicros(), 0); }

TEST(FakeClockTest, UsableThroughTheInterface) {
  std::unique_ptr<Clock> clock = std::make_unique<FakeClock>(42);
  EXPECT_EQ(clock->NowMicros(), 42);
}

TEST(FakeClockTest, AdvancesSeenFromAnotherThread) {
  FakeClock clock;
  std::thread t([&clock] {
    for (int i = 0; i < 1000; ++i) clock.Advance(1);
  });
  for (int i = 0; i < 1000; ++i) clock.Advance(1);
  t.join();
  EXPECT_EQ(clock.NowMicros(), 2000);
}

TEST(RealClockTest, NeverGoesBackwards) {
  RealClock clock;
  int64_t last = clock.NowMicros();
  for (int i = 0; i < 1000; ++i) {
    int64_t now = clock.NowMicros();
    EXPECT_GE(now, last);
    last = now;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_GE(clock.NowMicros() - last, 1000);
}

TEST(NowRfc3339, IsUtcToTheSecond) {
  const std::string t = NowRfc3339();
  EXPECT_TRUE(std::regex_match(t, std::regex(R"(20\d\d-[01]\d-[0-3]\dT[0-2]\d:[0-5]\d:[0-6]\dZ)"))) << t;
}

}  // namespace
}  // namespace aicloud
