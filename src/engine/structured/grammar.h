// ByteAutomaton: a Pattern (pattern.h) compiled to a byte-level automaton, for checking and
// steering generated text one byte at a time.
//
//   StatusOr<std::shared_ptr<ByteAutomaton>> a = ByteAutomaton::Compile(pattern);
//   if (!a.ok()) return a.status();                 // too big, too deep, or matches nothing
//   int32_t s = (*a)->start();
//   s = (*a)->Walk(s, "{\"name\":");                // ByteAutomaton::kDead once off the language
//   bool done = s != ByteAutomaton::kDead && (*a)->IsAccepting(s);
//   int32_t left = (*a)->MinBytesToAccept(s);        // fewest bytes that complete the text
//
// How: a Thompson NFA is built once; its states that cannot reach the end are dropped, and for
// each the fewest bytes to the end is found by a backward breadth-first search. DFA states are
// sets of NFA states made on demand (subset construction the first time a (state, byte class)
// pair is stepped), then a flat table lookup. A DFA state's MinBytesToAccept is the least over
// its NFA states. Every DFA state this returns can still reach an accepting state.
//
// Limits (AutomatonLimits): NFA size and pattern depth are checked by Compile
// (INVALID_ARGUMENT naming the limit). The DFA is bounded too: when stepping would create more
// states than max_dfa_states (or hold more NFA-state entries than max_dfa_set_entries), the
// automaton fails closed: from then on every step returns kDead and status() is
// RESOURCE_EXHAUSTED; it never lets text through unchecked.
//
// Thread-safety: thread-safe. The lazily built DFA is guarded by an internal mutex, so one
// automaton may be shared by many TokenGrammars and matchers.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/structured/pattern.h"

namespace aicloud::engine::structured {

struct AutomatonLimits {
  int32_t max_nfa_states = 200'000;
  int32_t max_dfa_states = 100'000;
  int64_t max_dfa_set_entries = int64_t{1} << 24;
  int32_t max_pattern_depth = 2'000;
};

class TokenGrammar;

class ByteAutomaton {
 public:
  static constexpr int32_t kDead = -1;
  static constexpr int32_t kUnreachable = 1 << 30;  // MinBytesToAccept of kDead

  // INVALID_ARGUMENT when the pattern is deeper than max_pattern_depth, needs more than
  // max_nfa_states, or matches no string at all.
  static StatusOr<std::shared_ptr<ByteAutomaton>> Compile(const Pattern& pattern,
                                                          const AutomatonLimits& limits = {});

  int32_t start() const { return 0; }
  // The state after `byte`, or kDead. REQUIRES: state is a state this automaton returned.
  int32_t Step(int32_t state, uint8_t byte);
  // Steps through `bytes`; kDead as soon as one is refused (or state is kDead).
  int32_t Walk(int32_t state, std::string_view bytes);
  // Whether the whole of `bytes` is in the language.
  bool Matches(std::string_view bytes);
  bool IsAccepting(int32_t state);
  // Fewest bytes that take `state` to an accepting state; kUnreachable for kDead.
  int32_t MinBytesToAccept(int32_t state);

  // OK, or RESOURCE_EXHAUSTED once the DFA outgrew its limits (see above).
  Status status();
  int32_t nfa_states() const { return static_cast<int32_t>(nfa_.size()); }
  int32_t dfa_states();

  ByteAutomaton(const ByteAutomaton&) = delete;
  ByteAutomaton& operator=(const ByteAutomaton&) = delete;

 private:
  friend class TokenGrammar;
  friend class NfaBuilder;

  struct NfaState {
    int32_t set = -1;   // index into byte_sets_, or -1: no byte edge
    int32_t next = -1;  // target of the byte edge
    int32_t eps[2] = {-1, -1};
  };

  explicit ByteAutomaton(const AutomatonLimits& limits) : limits_(limits) {}
  Status Finish();  // byte classes, min-bytes, start DFA state

  // The sorted kernel states (byte edge or the match state, end reachable) reachable from
  // `seeds` by epsilon edges.
  void Closure(std::vector<int32_t>* seeds, std::vector<int32_t>* out);
  // The DFA state for a kernel set (kDead for the empty set), adding it if new.
  int32_t Intern(const std::vector<int32_t>& set);
  int32_t ComputeStep(int32_t state, uint8_t byte);

  // REQUIRES: mu_ held.
  int32_t StepLocked(int32_t state, uint8_t byte) {
    const int32_t t = trans_[static_cast<size_t>(state) * num_classes_ + class_of_[byte]];
    return t != kUnknown ? t : ComputeStep(state, byte);
  }
  bool AcceptingLocked(int32_t state) const { return accepting_[state] != 0; }
  int32_t MinBytesLocked(int32_t state) const { return min_bytes_[state]; }

  static constexpr int32_t kUnknown = -2;

  const AutomatonLimits limits_;
  // NFA, immutable after Compile.
  std::vector<NfaState> nfa_;
  std::vector<std::vector<bool>> byte_sets_;  // 256 flags each
  int32_t nfa_start_ = 0;
  int32_t match_ = 0;
  std::vector<int32_t> nfa_min_bytes_;  // kUnreachable where the end cannot be reached
  uint8_t class_of_[256] = {};
  int32_t num_classes_ = 0;
  std::vector<uint8_t> class_rep_;  // a byte of each class

  std::mutex mu_;
  // DFA, grown on demand. GUARDED_BY(mu_).
  std::vector<int32_t> trans_;        // state * num_classes_ + class -> state, kDead, kUnknown
  std::vector<int64_t> set_begin_;    // state -> offset in set_pool_ (one past the end too)
  std::vector<int32_t> set_pool_;
  std::vector<uint8_t> accepting_;
  std::vector<int32_t> min_bytes_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<uint32_t> mark_;  // per NFA state: visit generation, for closures
  uint32_t generation_ = 0;
  Status status_;
  std::vector<int32_t> scratch_seeds_;
  std::vector<int32_t> scratch_set_;
};

}  // namespace aicloud::engine::structured
