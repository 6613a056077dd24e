// SampleWindow: timestamped samples kept for a sliding window, with the mean and maximum over
// any suffix of it. The autoscalers use it for Knative's stable/panic averages and for HPA's
// "highest recommendation in the stabilization window". Not thread-safe.
#pragma once

#include <deque>
#include <utility>

namespace aicloud::fleet {

class SampleWindow {
 public:
  // Keeps samples no older than `span_s` behind the newest one.
  explicit SampleWindow(double span_s = 60) : span_s_(span_s) {}

  // REQUIRES: t_s >= the last added time.
  void Add(double t_s, double value);
  bool empty() const { return samples_.empty(); }
  // Mean / max / min of the samples with now_s - window_s < time <= now_s; `fallback` when
  // there are none.
  double Mean(double now_s, double window_s, double fallback = 0) const;
  double Max(double now_s, double window_s, double fallback = 0) const;
  double Min(double now_s, double window_s, double fallback = 0) const;
  double Sum(double now_s, double window_s) const;
  // Time of the oldest sample kept (0 when empty).
  double OldestTime() const { return samples_.empty() ? 0 : samples_.front().first; }
  void Clear() { samples_.clear(); }

 private:
  double span_s_;
  std::deque<std::pair<double, double>> samples_;
};

}  // namespace aicloud::fleet
