// TokenGrammar and GrammarMatcher: a ByteAutomaton bound to a model's vocabulary, giving the
// tokens a constrained sequence may generate next.
//
//   // Once per constraint text (the engine keeps an LRU of these), on any thread:
//   StatusOr<Pattern> p = JsonSchemaPattern(schema);
//   StatusOr<std::shared_ptr<ByteAutomaton>> a = ByteAutomaton::Compile(*p);
//   StatusOr<std::shared_ptr<TokenGrammar>> g = TokenGrammar::Create(*a, vocab);
//   if ((*g)->MinTokens() > max_tokens) ...           // cannot finish: refuse the request
//   // Per sequence, per step:
//   GrammarMatcher m(*g);
//   const TokenMask& mask = m.Mask(max_tokens - generated);
//   if (mask.count == 0) ...                          // m.status() says why; never unconstrained
//   mask.Apply(logits_row);
//   int32_t t = Sample(logits_row);
//   m.Advance(t);                                     // false if t breaks the grammar
//   if (m.IsFinished()) ...                           // an EOS was accepted
//
// Masks. The allowed set of an automaton state is found once, by a depth-first walk of the
// vocabulary trie that steps the automaton byte by byte and skips a subtree as soon as the
// automaton refuses its first byte; it is cached per state, so later visits cost a lookup.
// Masks depend only on the grammar and the matcher's state, never on other sequences.
//
// Room to close. Each automaton state has a completion bound: the number of tokens in the
// greedy longest-match tokenisation of its canonical shortest completion (the shortest byte
// string to an accepting state, taking the smallest byte at each step). Mask(remaining) allows
// a text token t only if bound(state after t) + 1 <= remaining - 1 (the completion, then the
// EOS); EOS ids are allowed iff the state is accepting. The bound never fails its promise:
// along a canonical completion the states' canonical completions are its suffixes, so the
// greedy first token of a state's completion leads to a state whose bound is one less, and it
// stays allowed. So a sequence that starts with remaining >= MinTokens() and follows the masks
// ends with a complete, matching output before its budget runs out. (When some byte is not a
// token of the vocabulary, has_all_bytes() false, the bound is the completion's byte count.)
// The cached mask keeps the largest bound of its tokens, so the check costs one comparison
// until the end is near; then the state's tokens, sorted by bound once, are cut.
//
// Tokens that straddle grammar pieces (`{"`, `":`) or end inside a multi-byte character are
// fine: the automaton works on bytes.
//
// Failure is closed: if the automaton outgrows its limits (grammar.h), every later Mask is
// empty and status() says why; nothing is ever let through unconstrained.
//
// Thread-safety: TokenGrammar is thread-safe (internal mutex around the mask cache; the
// automaton has its own) and shared by shared_ptr among all sequences using it.
// GrammarMatcher is a small value owned by one sequence: not thread-safe, copyable.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/structured/grammar.h"
#include "engine/structured/token_mask.h"
#include "engine/structured/token_vocabulary.h"

namespace aicloud::engine::structured {

class GrammarMatcher;

class TokenGrammar {
 public:
  // Cached masks are dropped (all at once) past this many bytes; matchers keep the ones they
  // hold alive, and dropped states are walked again on their next visit.
  static constexpr int64_t kDefaultCacheBytes = int64_t{256} << 20;

  // FAILED_PRECONDITION when the automaton has already failed.
  static StatusOr<std::shared_ptr<TokenGrammar>> Create(
      std::shared_ptr<ByteAutomaton> a, std::shared_ptr<const TokenVocabulary> v,
      int64_t cache_bytes = kDefaultCacheBytes);

  // Fewest tokens any complete output needs, the final EOS included (bytes-to-accept + 1).
  int32_t MinTokens() const { return min_tokens_; }
  // The completion bound of an automaton state (see "Room to close"): tokens enough to finish
  // from it, EOS not counted. Thread-safe.
  int32_t CompletionBound(int32_t state);
  const TokenVocabulary& vocabulary() const { return *vocab_; }
  ByteAutomaton& automaton() const { return *automaton_; }
  // The automaton's status: RESOURCE_EXHAUSTED once it outgrew its limits.
  Status status() const { return automaton_->status(); }

  // States with a cached mask, and their bytes.
  int64_t cached_states() const;
  int64_t cache_bytes() const;

  TokenGrammar(const TokenGrammar&) = delete;
  TokenGrammar& operator=(const TokenGrammar&) = delete;

 private:
  friend class GrammarMatcher;

  // What is cached per automaton state.
  struct StateMasks {
    TokenMask mask;         // text tokens that keep the automaton alive, plus EOS if accepting
    bool accepting = false;
    int32_t max_after = -1;  // max MinBytesToAccept after an allowed text token (-1: none)
    // Filled on first need (near the end of a budget): allowed text tokens by ascending
    // MinBytesToAccept after them.
    bool ordered = false;
    std::vector<int32_t> ordered_ids;
    std::vector<int32_t> ordered_after;
    int64_t bytes = 0;
  };

  TokenGrammar(std::shared_ptr<ByteAutomaton> a, std::shared_ptr<const TokenVocabulary> v,
               int64_t cache_bytes);

  // The cached entry for `state`, walking the trie on a miss; null when the automaton failed.
  // REQUIRES: mu_ held.
  std::shared_ptr<StateMasks> EntryLocked(int32_t state);
  // Fills entry->ordered_*. REQUIRES: mu_ held.
  bool OrderLocked(int32_t state, StateMasks* entry);
  // The completion bound of `state` (see "Room to close"), cached per state.
  // REQUIRES: mu_ and automaton_->mu_ held.
  int32_t BoundLocked(int32_t state);
  // Tokens in the greedy longest-match tokenisation of `text`; -1 when a byte starts no token.
  int32_t GreedyTokens(std::string_view text) const;
  // Calls fn(token, state_after) for each text token the automaton accepts from `state`.
  // REQUIRES: mu_ and the automaton's mutex held.
  template <typename Fn>
  void WalkLocked(int32_t state, Fn&& fn);

  const std::shared_ptr<ByteAutomaton> automaton_;
  const std::shared_ptr<const TokenVocabulary> vocab_;
  const int64_t cache_limit_;
  int32_t min_tokens_ = 0;

  mutable std::mutex mu_;
  std::vector<std::shared_ptr<StateMasks>> cache_;  // by state id. GUARDED_BY(mu_)
  std::vector<int32_t> bounds_;                     // by state id, -1 unknown. GUARDED_BY(mu_)
  int64_t cached_states_ = 0;                       // GUARDED_BY(mu_)
  int64_t cache_bytes_ = 0;                         // GUARDED_BY(mu_)
  std::vector<int32_t> stack_;                      // walk scratch. GUARDED_BY(mu_)
};

class GrammarMatcher {
 public:
  // REQUIRES: g is not null.
  explicit GrammarMatcher(std::shared_ptr<TokenGrammar> g);

  // The tokens allowed next when at most `remaining` more tokens may be generated, this one
  // included (see "Room to close" above). Count 0 when the sequence has finished, the budget
  // is below what the rest needs, or the automaton failed (then status() is not OK).
  // The reference stays valid until the next call on this matcher.
  // REQUIRES: remaining >= 1.
  const TokenMask& Mask(int32_t remaining);
  // Advances by one generated token: true if the grammar accepts it (text that keeps the
  // automaton alive, or EOS in an accepting state); otherwise false and nothing changes.
  bool Advance(int32_t token);
  // Whether the text so far is a complete match (before the EOS: EOS would be accepted now).
  bool IsAccepting() const;
  // Whether an EOS was accepted (nothing more is allowed).
  bool IsFinished() const { return finished_; }
  // The automaton state (equal states give equal masks); ByteAutomaton::kDead never occurs
  // while the masks are followed.
  int32_t state() const { return state_; }
  Status status() const { return grammar_->status(); }
  const TokenGrammar& grammar() const { return *grammar_; }
  // Tokens enough to complete the output from here, EOS not counted (TokenGrammar::CompletionBound).
  int32_t CompletionBound() const { return grammar_->CompletionBound(state_); }

 private:
  std::shared_ptr<TokenGrammar> grammar_;
  int32_t state_ = 0;
  bool finished_ = false;
  std::shared_ptr<const TokenGrammar::StateMasks> held_;  // keeps a returned cached mask alive
  TokenMask own_;                                          // filtered or empty masks
};

}  // namespace aicloud::engine::structured
