// ParseRegex: the regex subset that vLLM's `guided_regex` and JSON-schema `pattern` accept,
// turned into a Pattern over UTF-8 bytes.
//
//   StatusOr<Pattern> p = ParseRegex(R"(^\d{3}-[A-Z]{2}$)");
//   if (!p.ok()) return p.status();   // "lookahead (?= at offset 4 is not supported"
//
// The whole output must match (the regex is anchored at both ends whether or not it says so).
// Supported:
//   - literal code points (the regex is UTF-8), `.` = any code point but \n;
//   - escapes \d \w \s \D \W \S (ASCII classes: [0-9], [A-Za-z0-9_], [ \t\n\r\f\v]),
//     \n \t \r \f \v, \xHH and \uXXXX (code points, written as UTF-8), and a backslash before
//     any ASCII punctuation (\. \\ \( \$ ...);
//   - classes [a-z] [^...] with escapes and the class escapes above inside; `-` first or last
//     is literal;
//   - groups ( ) and (?: ) (both non-capturing here), alternation |;
//   - quantifiers * + ? {n} {n,} {n,m} {,m}, each optionally lazy (`*?`: the language is the
//     same, so lazy is treated as greedy);
//   - ^ at the very start and $ at the very end (no-ops).
// Refused with INVALID_ARGUMENT naming the construct and its byte offset: backreferences,
// lookahead/lookbehind, named groups, inline flags, \b \B \A \z \p and other unknown escapes,
// ^ and $ elsewhere, possessive or stacked quantifiers, POSIX classes, malformed braces.
// Limits: groups nest at most kMaxRegexDepth deep; repetition counts are at most
// kMaxRegexRepeat; the whole pattern must fit kMaxRegexSize estimated automaton states.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"
#include "engine/structured/pattern.h"

namespace aicloud::engine::structured {

inline constexpr int32_t kMaxRegexDepth = 200;
inline constexpr int32_t kMaxRegexRepeat = 1000;
inline constexpr int64_t kMaxRegexSize = 200'000;

StatusOr<Pattern> ParseRegex(std::string_view regex);

}  // namespace aicloud::engine::structured
