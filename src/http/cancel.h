// CancelSignal: a one-shot, thread-safe "stop" that work can poll or subscribe to. The server
// raises one when the client of a request that is still being answered goes away (its
// connection closed or reset), so a handler can stop work nobody will read; an AsyncClient call,
// or a blocking Client call, given one ends as soon as it is raised.
//
//   if (req.client_gone) req.client_gone->OnCancel([call] { call->Abandon(); });
//   while (!done) { if (req.client_gone && req.client_gone->cancelled()) return Abort(); ... }
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <vector>

namespace aicloud::http {

class CancelSignal {
 public:
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // Runs `fn` once when the signal is raised, on the raising thread; at once, on this thread,
  // when it already was. `fn` must not block.
  void OnCancel(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!cancelled_.load(std::memory_order_relaxed)) {
        callbacks_.push_back(std::move(fn));
        return;
      }
    }
    fn();
  }

  // Raises the signal: runs the callbacks registered so far (outside the lock). Idempotent.
  void Cancel() {
    std::vector<std::function<void()>> run;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancelled_.exchange(true, std::memory_order_acq_rel)) return;
      run.swap(callbacks_);
    }
    for (auto& fn : run) fn();
  }

  // Drops the callbacks not run yet and lowers the signal, for reuse by the next request on the
  // same connection.
  void Reset() {
    std::vector<std::function<void()>> drop;
    std::lock_guard<std::mutex> lock(mu_);
    drop.swap(callbacks_);
    cancelled_.store(false, std::memory_order_release);
  }

 private:
  std::mutex mu_;
  std::atomic<bool> cancelled_{false};
  std::vector<std::function<void()>> callbacks_;  // GUARDED_BY(mu_)
};

}  // namespace aicloud::http
