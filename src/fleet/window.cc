#include "fleet/window.h"

#include <algorithm>
#include <limits>

namespace aicloud::fleet {

void SampleWindow::Add(double t_s, double value) {
  samples_.emplace_back(t_s, value);
  while (!samples_.empty() && samples_.front().first <= t_s - span_s_) samples_.pop_front();
}

double SampleWindow::Mean(double now_s, double window_s, double fallback) const {
  double sum = 0;
  int n = 0;
  for (auto it = samples_.rbegin(); it != samples_.rend() && it->first > now_s - window_s; ++it) {
    if (it->first > now_s) continue;
    sum += it->second;
    ++n;
  }
  return n == 0 ? fallback : sum / n;
}

double SampleWindow::Sum(double now_s, double window_s) const {
  double sum = 0;
  for (auto it = samples_.rbegin(); it != samples_.rend() && it->first > now_s - window_s; ++it) {
    if (it->first <= now_s) sum += it->second;
  }
  return sum;
}

double SampleWindow::Max(double now_s, double window_s, double fallback) const {
  double best = -std::numeric_limits<double>::infinity();
  for (auto it = samples_.rbegin(); it != samples_.rend() && it->first > now_s - window_s; ++it) {
    if (it->first > now_s) continue;
    best = std::max(best, it->second);
  }
  return best == -std::numeric_limits<double>::infinity() ? fallback : best;
}

double SampleWindow::Min(double now_s, double window_s, double fallback) const {
  double best = std::numeric_limits<double>::infinity();
  for (auto it = samples_.rbegin(); it != samples_.rend() && it->first > now_s - window_s; ++it) {
    if (it->first > now_s) continue;
    best = std::min(best, it->second);
  }
  return best == std::numeric_limits<double>::infinity() ? fallback : best;
}

}  // namespace aicloud::fleet
