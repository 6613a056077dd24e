// MaxTree: a segment tree over node ids that holds each node's total score (or none, for an
// infeasible node) and answers "which node scores best" in O(1) after O(log n) updates. The
// scheduler keeps one per request shape so a cycle over thousands of nodes only re-scores the
// nodes that changed since that shape was last scheduled.
//
//   MaxTree t;
//   t.Reset(5000);
//   t.Set(17, 93);
//   if (!t.empty()) node = t.First();   // lowest id among the best
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace aicloud::sched {

// Thread-compatible.
class MaxTree {
 public:
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::min();

  // n leaves, all kNone.
  void Reset(size_t n);
  size_t size() const { return n_; }
  // REQUIRES: i < size().
  void Set(size_t i, int64_t value);
  // Bulk load: SetLeaf any leaves, then Build() once — O(n) instead of O(n log n).
  void SetLeaf(size_t i, int64_t value) {
    val_[leaves_ + i] = value;
    cnt_[leaves_ + i] = value == kNone ? 0 : 1;
  }
  void Build();
  int64_t Get(size_t i) const { return val_[leaves_ + i]; }

  bool empty() const { return cnt_[1] == 0; }
  int64_t max() const { return val_[1]; }
  // How many leaves hold max().
  int64_t ties() const { return cnt_[1]; }
  // Lowest index holding max(). REQUIRES: !empty().
  size_t First() const;
  // The k-th (0-based, by index) leaf holding max(). REQUIRES: k < ties().
  size_t Nth(int64_t k) const;

 private:
  void Pull(size_t i);

  size_t n_ = 0;
  size_t leaves_ = 1;
  std::vector<int64_t> val_;
  std::vector<int64_t> cnt_;
};

}  // namespace aicloud::sched
