// ThreadPool: a fixed set of threads for data-parallel kernels.
//
// A decode step of a small model calls ParallelFor a few hundred times per token, each call
// doing only tens of microseconds of work, so the per-call cost is what matters: no allocation,
// no std::function, no locks on the fast path. Workers spin briefly (about 100 us) on a
// generation counter after each job before sleeping on a futex, so back-to-back calls find them
// awake and isolated calls do not keep a core busy. The caller never waits for a worker that
// has not started: a worker joins a job only while it is open, and the caller closes it once
// every range is claimed, then waits only for workers inside it. On a loaded machine, where a
// worker may not get a core for milliseconds, the caller simply does the work itself.
//
//   ThreadPool pool(2);  // the caller plus one worker thread
//   pool.ParallelFor(rows, [&](int64_t begin, int64_t end) {
//     for (int64_t r = begin; r < end; ++r) y[r] = Dot(w + r * k, x, k);
//   });
//
// Thread safety: ParallelFor may be called from any thread; calls from different threads are
// serialised. A ParallelFor issued from inside a ParallelFor body (of any pool) runs inline on
// the calling thread, so nested parallel code is correct, just not parallel at the inner level.
// Ownership: the pool owns its threads and joins them in the destructor.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace aicloud::engine::kernels {

class ThreadPool {
 public:
  // `num_threads` counts the calling thread: ThreadPool(1) starts no thread and runs every
  // ParallelFor inline. Values below 1 mean 1.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) on disjoint ranges that together cover [0, n) exactly once, and returns
  // when all calls have returned. Ranges hold at least `grain` indices (the last one may hold
  // fewer). They are claimed dynamically with guided sizes, remaining / (2 * threads): large
  // at first (few claims), small at the end, so the threads finish together even when one
  // was delayed or the indices cost different amounts. n <= grain runs inline as one range.
  // REQUIRES: fn does not throw.
  template <typename Fn>
  void ParallelFor(int64_t n, Fn&& fn, int64_t grain = 1) {
    using F = std::remove_reference_t<Fn>;
    Run(n, grain,
        [](const void* ctx, int64_t begin, int64_t end) {
          (*static_cast<F*>(const_cast<void*>(ctx)))(begin, end);
        },
        static_cast<const void*>(std::addressof(fn)));
  }

 private:
  using RangeFn = void (*)(const void* ctx, int64_t begin, int64_t end);

  void Run(int64_t n, int64_t grain, RangeFn fn, const void* ctx);
  void RunChunks();
  void WorkerLoop();

  // state_ packs the current job: generation (high 32 bits), whether it still admits workers
  // (kOpen) and how many workers are inside it (low bits).
  static constexpr uint64_t kOpen = uint64_t{1} << 31;
  static constexpr uint64_t kCountMask = kOpen - 1;

  const int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serialises callers from different threads

  // The current job; written by the caller before the state_ store that publishes it, read by
  // workers only after joining it.
  RangeFn fn_ = nullptr;
  const void* ctx_ = nullptr;
  int64_t n_ = 0;
  int64_t grain_ = 1;
  std::atomic<bool> stop_{false};
  uint32_t generation_ = 0;  // caller side copy of state_'s generation

  alignas(64) std::atomic<uint64_t> state_{0};
  alignas(64) std::atomic<int64_t> next_{0};  // next unclaimed index of the current job
  alignas(64) std::atomic<int> sleepers_{0};  // workers blocked in state_.wait
};

}  // namespace aicloud::engine::kernels
