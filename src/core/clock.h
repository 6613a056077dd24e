// Clock: the one source of "now" for code that both the server and the simulator run, so the
// same scheduling loop can follow wall time in production and jump from event to event in a
// trace replay (LevelDB's Env::NowMicros, behind an interface with a fake for tests).
//
//   RealClock real;                      // server: monotonic wall time
//   FakeClock fake;                      // simulator and tests: time moves only when told
//   fake.Advance(90 * kMicrosPerSecond);
//   int64_t waited = fake.NowMicros() - enqueued_at;
//
// Times are microseconds in int64_t: 2^63 us is about 292,000 years, enough for any trace.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace aicloud {

inline constexpr int64_t kMicrosPerSecond = 1'000'000;

// The wall-clock time now as RFC 3339 UTC with seconds ("2026-11-22T13:50:54Z"), the form of
// createdAt, lastHeartbeat and similar fields. Thread-safe.
std::string NowRfc3339();

// Thread-safe: NowMicros may be called from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  // Microseconds since an arbitrary, fixed origin. Never decreases for RealClock; for FakeClock
  // it is whatever the owner last set.
  virtual int64_t NowMicros() const = 0;
};

// std::chrono::steady_clock: monotonic, unaffected by wall-clock adjustments. The origin is
// unspecified (often boot time), so only differences are meaningful.
class RealClock final : public Clock {
 public:
  int64_t NowMicros() const override;
};

// A clock that stands still until it is set or advanced. Thread-safe (atomic), so a test may
// advance it while another thread reads it.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_micros = 0) : now_(start_micros) {}
  int64_t NowMicros() const override { return now_.load(std::memory_order_relaxed); }
  void SetMicros(int64_t micros) { now_.store(micros, std::memory_order_relaxed); }
  // REQUIRES: micros >= 0 (time does not run backwards through Advance; use SetMicros).
  void Advance(int64_t micros) { now_.fetch_add(micros, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace aicloud
