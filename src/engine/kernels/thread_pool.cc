#include "engine/kernels/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace aicloud::engine::kernels {
namespace {

// Set while this thread runs a ParallelFor body, so nested calls run inline.
thread_local bool tls_in_parallel_region = false;

// Spin iterations (each one PAUSE, ~20-60 ns) before a worker sleeps on the futex.
constexpr int kSpinBeforeSleep = 1 << 12;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(call_mu_);
    stop_.store(true);
    ++generation_;
    state_.store(uint64_t{generation_} << 32);
    state_.notify_all();
  }
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Run(int64_t n, int64_t grain, RangeFn fn, const void* ctx) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (num_threads_ == 1 || n <= grain || tls_in_parallel_region) {
    const bool outer = tls_in_parallel_region;
    tls_in_parallel_region = true;
    fn(ctx, 0, n);
    tls_in_parallel_region = outer;
    return;
  }
  std::lock_guard<std::mutex> lock(call_mu_);
  fn_ = fn;
  ctx_ = ctx;
  n_ = n;
  grain_ = grain;
  next_.store(0, std::memory_order_relaxed);
  // Publishes the job (the previous one is closed and empty, so the count is 0). seq_cst pairs
  // with the workers' sleepers_ increment: either we see a sleeper and wake it, or the
  // sleeper's futex compare sees the new state.
  ++generation_;
  state_.store((uint64_t{generation_} << 32) | kOpen);
  if (sleepers_.load() > 0) state_.notify_all();

  tls_in_parallel_region = true;
  RunChunks();
  tls_in_parallel_region = false;

  // Every range is claimed: close the job so no more workers join, then wait for those inside.
  uint64_t s = state_.fetch_and(~kOpen, std::memory_order_acq_rel) & ~kOpen;
  for (int spins = 0; (s & kCountMask) != 0; ++spins) {
    if (spins < kSpinBeforeSleep) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
    s = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::RunChunks() {
  const int64_t n = n_;
  const int64_t grain = grain_;
  const int64_t divisor = 2 * static_cast<int64_t>(num_threads_);
  int64_t begin = next_.load(std::memory_order_relaxed);
  while (begin < n) {
    const int64_t size = std::max(grain, (n - begin) / divisor);
    // On failure `begin` is reloaded with the current claim point.
    if (!next_.compare_exchange_weak(begin, begin + size, std::memory_order_relaxed)) continue;
    fn_(ctx_, begin, std::min(n, begin + size));
    begin = next_.load(std::memory_order_relaxed);
  }
}

void ThreadPool::WorkerLoop() {
  tls_in_parallel_region = true;
  uint32_t seen = 0;
  for (;;) {
    uint64_t s = state_.load(std::memory_order_acquire);
    for (int spins = 0; static_cast<uint32_t>(s >> 32) == seen; ++spins) {
      if (spins < kSpinBeforeSleep) {
        CpuRelax();
      } else {
        sleepers_.fetch_add(1);
        state_.wait(s);
        sleepers_.fetch_sub(1);
        spins = 0;
      }
      s = state_.load(std::memory_order_acquire);
    }
    seen = static_cast<uint32_t>(s >> 32);
    // Join the job if it is still open; its fields may only be read after joining.
    bool joined = false;
    while ((s & kOpen) != 0 && static_cast<uint32_t>(s >> 32) == seen) {
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) {
        joined = true;
        break;
      }
    }
    if (!joined) {
      // Closed before we got here (the caller did the work), or a stop request.
      if (stop_.load()) return;
      continue;
    }
    RunChunks();
    state_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace aicloud::engine::kernels
