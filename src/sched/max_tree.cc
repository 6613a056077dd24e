#include "sched/max_tree.h"

namespace aicloud::sched {

void MaxTree::Reset(size_t n) {
  n_ = n;
  leaves_ = 1;
  while (leaves_ < n) leaves_ <<= 1;
  val_.assign(2 * leaves_, kNone);
  cnt_.assign(2 * leaves_, 0);
}

void MaxTree::Build() {
  for (size_t p = leaves_ - 1; p >= 1; --p) Pull(p);
}

void MaxTree::Pull(size_t i) {
  const size_t l = 2 * i, r = 2 * i + 1;
  if (val_[l] > val_[r]) {
    val_[i] = val_[l];
    cnt_[i] = cnt_[l];
  } else if (val_[r] > val_[l]) {
    val_[i] = val_[r];
    cnt_[i] = cnt_[r];
  } else {
    val_[i] = val_[l];
    cnt_[i] = cnt_[l] + cnt_[r];
  }
}

void MaxTree::Set(size_t i, int64_t value) {
  size_t p = leaves_ + i;
  if (val_[p] == value) return;
  val_[p] = value;
  cnt_[p] = value == kNone ? 0 : 1;
  for (p >>= 1; p >= 1; p >>= 1) {
    const int64_t old_val = val_[p], old_cnt = cnt_[p];
    Pull(p);
    // Ancestors only see this node's (max, count): unchanged here means unchanged above.
    if (val_[p] == old_val && cnt_[p] == old_cnt) break;
  }
}

size_t MaxTree::First() const {
  size_t p = 1;
  while (p < leaves_) {
    const size_t l = 2 * p;
    p = (val_[l] == val_[p] && cnt_[l] > 0) ? l : l + 1;
  }
  return p - leaves_;
}

size_t MaxTree::Nth(int64_t k) const {
  size_t p = 1;
  const int64_t target = val_[1];
  while (p < leaves_) {
    const size_t l = 2 * p;
    if (val_[l] == target && cnt_[l] > 0) {
      if (k < cnt_[l]) {
        p = l;
        continue;
      }
      k -= cnt_[l];
    }
    p = l + 1;
  }
  return p - leaves_;
}

}  // namespace aicloud::sched
