#include "engine/structured/token_grammar.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

namespace aicloud::engine::structured {

StatusOr<std::shared_ptr<TokenGrammar>> TokenGrammar::Create(
    std::shared_ptr<ByteAutomaton> a, std::shared_ptr<const TokenVocabulary> v,
    int64_t cache_bytes) {
  if (!a || !v) return InvalidArgumentError("TokenGrammar needs an automaton and a vocabulary");
  Status s = a->status();
  if (!s.ok()) return FailedPreconditionError("the automaton has failed: " + s.message());
  return std::shared_ptr<TokenGrammar>(new TokenGrammar(std::move(a), std::move(v), cache_bytes));
}

TokenGrammar::TokenGrammar(std::shared_ptr<ByteAutomaton> a,
                           std::shared_ptr<const TokenVocabulary> v, int64_t cache_bytes)
    : automaton_(std::move(a)), vocab_(std::move(v)), cache_limit_(cache_bytes) {
  stack_.resize(static_cast<size_t>(vocab_->max_depth()) + 1);
  std::lock_guard<std::mutex> lock(mu_);
  std::lock_guard<std::mutex> alock(automaton_->mu_);
  const int32_t bound = BoundLocked(automaton_->start());
  min_tokens_ = bound >= ByteAutomaton::kUnreachable ? ByteAutomaton::kUnreachable : bound + 1;
}

int32_t TokenGrammar::CompletionBound(int32_t state) {
  std::lock_guard<std::mutex> lock(mu_);
  std::lock_guard<std::mutex> alock(automaton_->mu_);
  return BoundLocked(state);
}

int32_t TokenGrammar::GreedyTokens(std::string_view text) const {
  const TokenVocabulary& v = *vocab_;
  const uint8_t* byte = v.node_byte();
  const int32_t* end = v.node_end();
  const int32_t* token_begin = v.token_begin();
  const int32_t n = v.trie_nodes();
  int32_t count = 0;
  for (size_t p = 0; p < text.size(); ++count) {
    // Down the trie along text[p..]: the children of node i are [i + 1, end[i]), siblings
    // linked by end[]; the root's are [1, n).
    size_t longest = 0;
    int32_t lo = 1, hi = n;
    for (size_t q = p; q < text.size();) {
      int32_t child = -1;
      for (int32_t i = lo; i < hi; i = end[i]) {
        if (byte[i] == static_cast<uint8_t>(text[q])) {
          child = i;
          break;
        }
      }
      if (child < 0) break;
      ++q;
      if (token_begin[child] < token_begin[child + 1]) longest = q - p;
      lo = child + 1;
      hi = end[child];
    }
    if (longest == 0) return -1;
    p += longest;
  }
  return count;
}

int32_t TokenGrammar::BoundLocked(int32_t state) {
  if (state < 0) return ByteAutomaton::kUnreachable;
  if (static_cast<size_t>(state) < bounds_.size() && bounds_[state] >= 0) return bounds_[state];
  ByteAutomaton& a = *automaton_;
  int32_t left = a.MinBytesLocked(state);
  if (left >= ByteAutomaton::kUnreachable) return ByteAutomaton::kUnreachable;
  const int32_t bytes = left;
  // The canonical shortest completion: at each step the smallest byte that brings the end one
  // byte closer.
  std::string completion;
  for (int32_t s = state; left > 0;) {
    int32_t next = ByteAutomaton::kDead;
    for (int b = 0; b < 256 && next == ByteAutomaton::kDead; ++b) {
      const int32_t t = a.StepLocked(s, static_cast<uint8_t>(b));
      if (t >= 0 && a.MinBytesLocked(t) == left - 1) {
        completion.push_back(static_cast<char>(b));
        next = t;
      }
    }
    if (next == ByteAutomaton::kDead) return bytes;  // the automaton failed closed meanwhile
    s = next;
    --left;
  }
  int32_t bound = vocab_->has_all_bytes() ? GreedyTokens(completion) : -1;
  if (bound < 0) bound = bytes;
  if (static_cast<size_t>(state) >= bounds_.size()) bounds_.resize(static_cast<size_t>(state) + 1, -1);
  bounds_[state] = bound;
  return bound;
}

int64_t TokenGrammar::cached_states() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_states_;
}

int64_t TokenGrammar::cache_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_bytes_;
}

template <typename Fn>
void TokenGrammar::WalkLocked(int32_t state, Fn&& fn) {
  ByteAutomaton& a = *automaton_;
  const TokenVocabulary& v = *vocab_;
  const uint8_t* byte = v.node_byte();
  const uint16_t* depth = v.node_depth();
  const int32_t* end = v.node_end();
  const int32_t* token_begin = v.token_begin();
  const int32_t* ids = v.ids();
  int32_t* stack = stack_.data();
  stack[0] = state;
  const int32_t n = v.trie_nodes();
  for (int32_t i = 1; i < n;) {
    const int32_t d = depth[i];
    const int32_t s = a.StepLocked(stack[d - 1], byte[i]);
    if (s < 0) {
      i = end[i];
      continue;
    }
    stack[d] = s;
    for (int32_t k = token_begin[i]; k < token_begin[i + 1]; ++k) fn(ids[k], s);
    ++i;
  }
}

std::shared_ptr<TokenGrammar::StateMasks> TokenGrammar::EntryLocked(int32_t state) {
  if (static_cast<size_t>(state) < cache_.size() && cache_[state]) return cache_[state];
  auto entry = std::make_shared<StateMasks>();
  const int32_t vocab_size = vocab_->size();
  entry->mask.Reset(vocab_size);
  {
    std::lock_guard<std::mutex> lock(automaton_->mu_);
    if (!automaton_->status_.ok()) return nullptr;
    ByteAutomaton& a = *automaton_;
    int32_t max_after = -1;
    TokenMask& mask = entry->mask;
    WalkLocked(state, [&](int32_t token, int32_t after) {
      mask.Set(token);
      max_after = std::max(max_after, BoundLocked(after));
    });
    if (!automaton_->status_.ok()) return nullptr;  // the walk was cut short: no mask
    entry->max_after = max_after;
    entry->accepting = a.AcceptingLocked(state);
  }
  if (entry->accepting) {
    for (int32_t eos : vocab_->eos_ids()) entry->mask.Set(eos);
  }
  entry->mask.FinishSparseList(vocab_size);
  entry->bytes = entry->mask.MemoryBytes() + static_cast<int64_t>(sizeof(StateMasks));
  if (cache_bytes_ + entry->bytes > cache_limit_) {
    cache_.clear();
    cached_states_ = 0;
    cache_bytes_ = 0;
  }
  if (static_cast<size_t>(state) >= cache_.size()) cache_.resize(state + 1);
  cache_[state] = entry;
  ++cached_states_;
  cache_bytes_ += entry->bytes;
  return entry;
}

bool TokenGrammar::OrderLocked(int32_t state, StateMasks* entry) {
  std::vector<std::pair<int32_t, int32_t>> pairs;  // (after, token)
  pairs.reserve(entry->mask.count);
  {
    std::lock_guard<std::mutex> lock(automaton_->mu_);
    if (!automaton_->status_.ok()) return false;
    WalkLocked(state, [&](int32_t token, int32_t after) {
      pairs.emplace_back(BoundLocked(after), token);
    });
    if (!automaton_->status_.ok()) return false;
  }
  std::sort(pairs.begin(), pairs.end());
  entry->ordered_ids.resize(pairs.size());
  entry->ordered_after.resize(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    entry->ordered_after[i] = pairs[i].first;
    entry->ordered_ids[i] = pairs[i].second;
  }
  entry->ordered = true;
  const int64_t extra = static_cast<int64_t>(pairs.size() * 2 * sizeof(int32_t));
  entry->bytes += extra;
  cache_bytes_ += extra;
  return true;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<TokenGrammar> g)
    : grammar_(std::move(g)), state_(grammar_->automaton().start()) {}

const TokenMask& GrammarMatcher::Mask(int32_t remaining) {
  const int32_t vocab_size = grammar_->vocabulary().size();
  auto empty = [&]() -> const TokenMask& {
    held_.reset();
    own_.Reset(vocab_size);
    return own_;
  };
  if (finished_ || state_ < 0 || remaining < 1) return empty();
  TokenGrammar& g = *grammar_;
  std::lock_guard<std::mutex> lock(g.mu_);
  std::shared_ptr<TokenGrammar::StateMasks> entry = g.EntryLocked(state_);
  if (!entry) return empty();
  if (entry->max_after <= remaining - 2) {
    held_ = entry;
    return entry->mask;
  }
  // Near the end: keep the text tokens after which the rest still fits.
  if (!entry->ordered && !g.OrderLocked(state_, entry.get())) return empty();
  held_.reset();
  const auto cut = std::upper_bound(entry->ordered_after.begin(), entry->ordered_after.end(),
                                    remaining - 2);
  const size_t keep = static_cast<size_t>(cut - entry->ordered_after.begin());
  const size_t total = entry->ordered_ids.size();
  if (keep * 2 >= total) {
    // Most tokens stay: copy the cached mask (EOS included) and clear the rest.
    own_.bits = entry->mask.bits;
    own_.count = entry->mask.count;
    for (size_t i = keep; i < total; ++i) own_.Clear(entry->ordered_ids[i]);
  } else {
    own_.Reset(vocab_size);
    for (size_t i = 0; i < keep; ++i) own_.Set(entry->ordered_ids[i]);
    if (entry->accepting) {
      for (int32_t eos : g.vocabulary().eos_ids()) own_.Set(eos);
    }
  }
  own_.FinishSparseList(vocab_size);
  return own_;
}

bool GrammarMatcher::Advance(int32_t token) {
  if (finished_ || state_ < 0) return false;
  const TokenVocabulary& v = grammar_->vocabulary();
  if (token < 0 || token >= v.size()) return false;
  ByteAutomaton& a = grammar_->automaton();
  if (v.IsEos(token)) {
    if (!a.IsAccepting(state_)) return false;
    finished_ = true;
    return true;
  }
  const std::string_view bytes = v.TokenBytes(token);
  if (bytes.empty()) return false;
  const int32_t next = a.Walk(state_, bytes);
  if (next == ByteAutomaton::kDead) return false;
  state_ = next;
  return true;
}

bool GrammarMatcher::IsAccepting() const {
  return state_ >= 0 && grammar_->automaton().IsAccepting(state_);
}

}  // namespace aicloud::engine::structured
