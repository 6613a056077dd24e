// Pattern: an immutable regular language over bytes, the common form that regexes, JSON
// schemas and choice lists are turned into before ByteAutomaton (grammar.h) compiles them.
//
//   Pattern digit = ByteRange('0', '9');
//   Pattern number = Concat({Repeat(Literal("-"), 0, 1), Repeat(digit, 1, -1)});  // -?[0-9]+
//   Pattern word = CodepointClass({{U'a', U'z'}, {U'\u00e0', U'\u00ff'}}, false);  // UTF-8 bytes
//   Pattern yes_no = Alternate({Literal("yes"), Literal("no")});
//
// Everything is bytes: a code point class becomes the UTF-8 byte sequences of its members
// (valid UTF-8 only: no surrogates, nothing above U+10FFFF), so an automaton built from it
// accepts text one byte at a time and a token that ends inside a character is fine.
//
// Each node records an estimate of the automaton states it compiles to (`size`, saturating) and
// its nesting depth, so builders of big patterns (JSON schemas, `{n,m}` repeats) can refuse
// them before compiling anything.
//
// Thread-safety: nodes are immutable once built and shared by shared_ptr; any number of threads
// may read them. The builders are pure functions.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace aicloud::engine::structured {

struct PatternNode;
using Pattern = std::shared_ptr<const PatternNode>;

struct PatternNode {
  enum class Kind {
    kEmpty,     // the empty string
    kBytes,     // exactly `bytes`
    kByteSet,   // one byte from `set` (an empty set matches nothing)
    kConcat,    // children in order
    kAlternate, // one of children (none: matches nothing)
    kRepeat,    // children[0] between min and max times (max -1: unbounded)
    kSubsequence,  // see Subsequence() below
  };
  Kind kind = Kind::kEmpty;
  std::string bytes;
  std::bitset<256> set;
  std::vector<Pattern> children;
  std::vector<bool> required;  // kSubsequence: one flag per child
  Pattern separator;           // kSubsequence
  int32_t min = 0;
  int32_t max = 0;
  // Estimated automaton states (saturates at kSizeSaturation) and nesting depth (a leaf is 1).
  int64_t size = 1;
  int32_t depth = 1;
};

inline constexpr int64_t kSizeSaturation = int64_t{1} << 40;

Pattern Empty();
// The empty language (no string at all, not even "").
Pattern Nothing();
Pattern Literal(std::string_view bytes);
Pattern ByteRange(uint8_t lo, uint8_t hi);
Pattern ByteSet(const std::bitset<256>& set);
// Code points in the inclusive `ranges` (or, negated, every code point outside them), as UTF-8.
// Surrogates U+D800..U+DFFF are never members; ranges past U+10FFFF are clipped.
Pattern CodepointClass(std::vector<std::pair<char32_t, char32_t>> ranges, bool negated);
// Nested concats are flattened and empties dropped; one part is returned as it is.
Pattern Concat(std::vector<Pattern> parts);
// One option is returned as it is; no options is Nothing().
Pattern Alternate(std::vector<Pattern> options);
// REQUIRES: 0 <= min, and max == -1 or min <= max.
Pattern Repeat(Pattern p, int32_t min, int32_t max);
Pattern Optional(Pattern p);

// The items in order, each present or (unless required) left out, with `separator` between
// every two present ones: how JSON object members with optional properties are written
// ({"a":1,"c":3} with b left out). Compiles to about twice the items' size, where the same
// language as a plain regex needs a copy per possible first item.
Pattern Subsequence(std::vector<Pattern> items, std::vector<bool> required, Pattern separator);

// The code point ranges of `ranges` after sorting, merging, optional complement over
// [0, U+10FFFF] and removal of surrogates. Exposed for the regex parser and tests.
std::vector<std::pair<char32_t, char32_t>> NormalizeCodepointRanges(
    std::vector<std::pair<char32_t, char32_t>> ranges, bool negated);

}  // namespace aicloud::engine::structured
