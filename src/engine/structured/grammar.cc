#include "engine/structured/grammar.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>

namespace aicloud::engine::structured {

// Thompson construction, right to left: Build(node, next) returns the entry state of `node`
// whose every way out leads to `next`. Stops adding states (and sets overflow_) at the limit.
class NfaBuilder {
 public:
  explicit NfaBuilder(ByteAutomaton* a) : a_(a) {}

  bool overflow() const { return overflow_; }

  int32_t NewState() {
    if (static_cast<int64_t>(a_->nfa_.size()) >= a_->limits_.max_nfa_states) {
      overflow_ = true;
      return 0;
    }
    a_->nfa_.emplace_back();
    return static_cast<int32_t>(a_->nfa_.size() - 1);
  }

  int32_t ByteEdge(const std::bitset<256>& set, int32_t next) {
    auto [it, inserted] = set_ids_.emplace(set.to_string(), static_cast<int32_t>(set_ids_.size()));
    if (inserted) {
      std::vector<bool> flags(256);
      for (int b = 0; b < 256; ++b) flags[b] = set.test(b);
      a_->byte_sets_.push_back(std::move(flags));
    }
    const int32_t s = NewState();
    if (overflow_) return 0;
    a_->nfa_[s].set = it->second;
    a_->nfa_[s].next = next;
    return s;
  }

  int32_t Split(int32_t a, int32_t b) {
    const int32_t s = NewState();
    if (overflow_) return 0;
    a_->nfa_[s].eps[0] = a;
    a_->nfa_[s].eps[1] = b;
    return s;
  }

  int32_t Build(const PatternNode& n, int32_t next) {
    if (overflow_) return 0;
    using Kind = PatternNode::Kind;
    switch (n.kind) {
      case Kind::kEmpty:
        return next;
      case Kind::kBytes: {
        int32_t s = next;
        for (size_t i = n.bytes.size(); i-- > 0;) {
          std::bitset<256> one;
          one.set(static_cast<uint8_t>(n.bytes[i]));
          s = ByteEdge(one, s);
        }
        return s;
      }
      case Kind::kByteSet:
        // An empty set is a state with no way out: trimmed later as unable to reach the end.
        return n.set.none() ? NewState() : ByteEdge(n.set, next);
      case Kind::kConcat: {
        int32_t s = next;
        for (size_t i = n.children.size(); i-- > 0;) s = Build(*n.children[i], s);
        return s;
      }
      case Kind::kAlternate: {
        if (n.children.empty()) return NewState();
        int32_t s = Build(*n.children.back(), next);
        for (size_t i = n.children.size() - 1; i-- > 0;) s = Split(Build(*n.children[i], next), s);
        return s;
      }
      case Kind::kRepeat:
        return BuildRepeat(*n.children[0], n.min, n.max, next);
      case Kind::kSubsequence:
        return BuildSubsequence(n, next);
    }
    return next;
  }

 private:
  int32_t BuildRepeat(const PatternNode& child, int32_t min, int32_t max, int32_t next) {
    int32_t s = next;
    if (max < 0) {
      const int32_t loop = Split(-1, next);
      if (overflow_) return 0;
      const int32_t body = Build(child, loop);
      if (overflow_) return 0;
      a_->nfa_[loop].eps[0] = body;
      s = loop;
    } else {
      // x(x(x)?)? rather than x?x?x?: one way to read each count, so smaller DFA state sets.
      for (int32_t k = 0; k < max - min && !overflow_; ++k) s = Split(Build(child, s), next);
    }
    for (int32_t k = 0; k < min && !overflow_; ++k) s = Build(child, s);
    return s;
  }

  // Two tracks: "nothing written yet" (no separator before the next item) and "something
  // written" (a separator before each further item).
  int32_t BuildSubsequence(const PatternNode& n, int32_t next) {
    const size_t count = n.children.size();
    size_t first_required = count;
    for (size_t i = 0; i < count; ++i) {
      if (n.required[i]) {
        first_required = i;
        break;
      }
    }
    std::vector<int32_t> after(count + 1);  // after[i]: items i.. once something was written
    after[count] = next;
    for (size_t i = count; i-- > 0 && !overflow_;) {
      const int32_t with = Build(*n.separator, Build(*n.children[i], after[i + 1]));
      after[i] = n.required[i] ? with : Split(with, after[i + 1]);
    }
    if (overflow_) return 0;
    int32_t s = first_required < count ? Build(*n.children[first_required], after[first_required + 1])
                                       : next;
    for (size_t i = std::min(first_required, count); i-- > 0 && !overflow_;) {
      s = Split(Build(*n.children[i], after[i + 1]), s);
    }
    return s;
  }

  ByteAutomaton* a_;
  std::map<std::string, int32_t> set_ids_;
  bool overflow_ = false;
};

StatusOr<std::shared_ptr<ByteAutomaton>> ByteAutomaton::Compile(const Pattern& pattern,
                                                               const AutomatonLimits& limits) {
  if (pattern->depth > limits.max_pattern_depth) {
    return InvalidArgumentError("the pattern is nested " + std::to_string(pattern->depth) +
                                " levels deep; the limit is " +
                                std::to_string(limits.max_pattern_depth));
  }
  if (pattern->size > 2 * int64_t{limits.max_nfa_states}) {
    return InvalidArgumentError("the pattern needs about " + std::to_string(pattern->size) +
                                " automaton states; the limit is " +
                                std::to_string(limits.max_nfa_states));
  }
  std::shared_ptr<ByteAutomaton> a(new ByteAutomaton(limits));
  NfaBuilder builder(a.get());
  a->match_ = builder.NewState();
  a->nfa_start_ = builder.Build(*pattern, a->match_);
  if (builder.overflow()) {
    return InvalidArgumentError("the pattern needs more than " +
                                std::to_string(limits.max_nfa_states) +
                                " automaton states (the limit)");
  }
  AICLOUD_RETURN_IF_ERROR(a->Finish());
  return a;
}

Status ByteAutomaton::Finish() {
  const int32_t n = static_cast<int32_t>(nfa_.size());
  // Byte classes: bytes that every byte set treats alike share a class.
  std::vector<uint32_t> key(256, 0);
  for (const auto& set : byte_sets_) {
    std::map<std::pair<uint32_t, bool>, uint32_t> renumber;
    for (int b = 0; b < 256; ++b) {
      auto [it, _] = renumber.emplace(std::make_pair(key[b], bool(set[b])),
                                      static_cast<uint32_t>(renumber.size()));
      key[b] = it->second;
    }
  }
  std::map<uint32_t, uint8_t> class_ids;
  for (int b = 0; b < 256; ++b) {
    auto [it, inserted] = class_ids.emplace(key[b], static_cast<uint8_t>(class_ids.size()));
    if (inserted) class_rep_.push_back(static_cast<uint8_t>(b));
    class_of_[b] = it->second;
  }
  num_classes_ = static_cast<int32_t>(class_rep_.size());

  // Fewest bytes from each state to the match state: 0-1 BFS over reversed edges.
  std::vector<int32_t> rev_begin(n + 1, 0);
  auto for_edges = [&](auto&& fn) {
    for (int32_t s = 0; s < n; ++s) {
      if (nfa_[s].set >= 0) fn(s, nfa_[s].next, 1);
      for (int32_t e : nfa_[s].eps) {
        if (e >= 0) fn(s, e, 0);
      }
    }
  };
  for_edges([&](int32_t, int32_t to, int32_t) { ++rev_begin[to + 1]; });
  for (int32_t i = 0; i < n; ++i) rev_begin[i + 1] += rev_begin[i];
  std::vector<std::pair<int32_t, int32_t>> rev(rev_begin[n]);
  std::vector<int32_t> fill(rev_begin.begin(), rev_begin.end() - 1);
  for_edges([&](int32_t from, int32_t to, int32_t w) { rev[fill[to]++] = {from, w}; });
  nfa_min_bytes_.assign(n, kUnreachable);
  std::deque<int32_t> queue;
  nfa_min_bytes_[match_] = 0;
  queue.push_back(match_);
  while (!queue.empty()) {
    const int32_t s = queue.front();
    queue.pop_front();
    for (int32_t i = rev_begin[s]; i < rev_begin[s + 1]; ++i) {
      const auto [from, w] = rev[i];
      const int32_t d = nfa_min_bytes_[s] + w;
      if (d < nfa_min_bytes_[from]) {
        nfa_min_bytes_[from] = d;
        if (w == 0) queue.push_front(from); else queue.push_back(from);
      }
    }
  }
  if (nfa_min_bytes_[nfa_start_] >= kUnreachable) {
    return InvalidArgumentError("the pattern matches no string");
  }

  mark_.assign(n, 0);
  scratch_seeds_.assign(1, nfa_start_);
  Closure(&scratch_seeds_, &scratch_set_);
  const int32_t start = Intern(scratch_set_);
  if (start != 0) return InternalError("the start state is not state 0");
  return OkStatus();
}

void ByteAutomaton::Closure(std::vector<int32_t>* seeds, std::vector<int32_t>* out) {
  out->clear();
  if (++generation_ == 0) {
    std::fill(mark_.begin(), mark_.end(), 0);
    generation_ = 1;
  }
  std::vector<int32_t>& stack = *seeds;
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    if (mark_[s] == generation_ || nfa_min_bytes_[s] >= kUnreachable) continue;
    mark_[s] = generation_;
    const NfaState& st = nfa_[s];
    if (st.set >= 0 || s == match_) out->push_back(s);
    for (int32_t e : st.eps) {
      if (e >= 0) stack.push_back(e);
    }
  }
  std::sort(out->begin(), out->end());
}

int32_t ByteAutomaton::Intern(const std::vector<int32_t>& set) {
  if (set.empty()) return kDead;
  std::string key(reinterpret_cast<const char*>(set.data()), set.size() * sizeof(int32_t));
  auto it = ids_.find(key);
  if (it != ids_.end()) return it->second;
  const int32_t id = static_cast<int32_t>(accepting_.size());
  if (id >= limits_.max_dfa_states ||
      static_cast<int64_t>(set_pool_.size() + set.size()) > limits_.max_dfa_set_entries) {
    status_ = ResourceExhaustedError(
        "the grammar's automaton outgrew its limit of " + std::to_string(limits_.max_dfa_states) +
        " states or " + std::to_string(limits_.max_dfa_set_entries) + " set entries");
    return kDead;
  }
  ids_.emplace(std::move(key), id);
  if (set_begin_.empty()) set_begin_.push_back(0);
  set_pool_.insert(set_pool_.end(), set.begin(), set.end());
  set_begin_.push_back(static_cast<int64_t>(set_pool_.size()));
  bool accepting = false;
  int32_t min_bytes = kUnreachable;
  for (int32_t s : set) {
    accepting = accepting || s == match_;
    min_bytes = std::min(min_bytes, nfa_min_bytes_[s]);
  }
  accepting_.push_back(accepting ? 1 : 0);
  min_bytes_.push_back(min_bytes);
  trans_.resize(trans_.size() + num_classes_, kUnknown);
  return id;
}

int32_t ByteAutomaton::ComputeStep(int32_t state, uint8_t byte) {
  if (!status_.ok()) return kDead;
  scratch_seeds_.clear();
  for (int64_t i = set_begin_[state]; i < set_begin_[state + 1]; ++i) {
    const NfaState& st = nfa_[set_pool_[i]];
    if (st.set >= 0 && byte_sets_[st.set][byte]) scratch_seeds_.push_back(st.next);
  }
  Closure(&scratch_seeds_, &scratch_set_);
  const int32_t t = Intern(scratch_set_);
  if (!status_.ok()) return kDead;  // never cache a transition made after an overflow
  trans_[static_cast<size_t>(state) * num_classes_ + class_of_[byte]] = t;
  return t;
}

int32_t ByteAutomaton::Step(int32_t state, uint8_t byte) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state < 0 || !status_.ok()) return kDead;
  return StepLocked(state, byte);
}

int32_t ByteAutomaton::Walk(int32_t state, std::string_view bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!status_.ok()) return kDead;
  for (char c : bytes) {
    if (state < 0) return kDead;
    state = StepLocked(state, static_cast<uint8_t>(c));
  }
  return state;
}

bool ByteAutomaton::Matches(std::string_view bytes) {
  const int32_t s = Walk(start(), bytes);
  return s != kDead && IsAccepting(s);
}

bool ByteAutomaton::IsAccepting(int32_t state) {
  std::lock_guard<std::mutex> lock(mu_);
  return state >= 0 && accepting_[state] != 0;
}

int32_t ByteAutomaton::MinBytesToAccept(int32_t state) {
  std::lock_guard<std::mutex> lock(mu_);
  return state >= 0 ? min_bytes_[state] : kUnreachable;
}

Status ByteAutomaton::status() {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

int32_t ByteAutomaton::dfa_states() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int32_t>(accepting_.size());
}

}  // namespace aicloud::engine::structured
