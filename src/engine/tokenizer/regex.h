// Regex: a PCRE2 pattern compiled for the pre-tokenizer's splits.
//
//   StatusOr<std::unique_ptr<Regex>> re = Regex::Compile(R"(\p{N}{1,3}| ?\p{L}+)");
//   std::vector<Regex::Match> m;
//   (*re)->FindAll("abc 1234", &m);   // {0,3} {4,7} {7,8}: "abc", "123", "4"
//
// Patterns come from tokenizer.json files, which write them for Oniguruma (what Hugging Face's
// tokenizers uses). They need Unicode properties (\p{L}, \p{N}), scoped flags ((?i:...)) and
// lookahead (\s+(?!\S)), which std::regex lacks; PCRE2 in UTF + UCP mode reads them the same way.
// Where the two differ on what a pattern means, Oniguruma's reading is made explicit before
// compiling: \s, \S, \w and \W become Oniguruma's sets (see OnigurumaCompatiblePattern).
// The pattern is JIT-compiled when the platform supports it.
//
// Thread-safe: a compiled Regex is immutable; per-thread match state lives in thread_local
// scratch inside regex.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

struct pcre2_real_code_8;

namespace aicloud::engine {

class Regex {
 public:
  struct Match {
    uint32_t begin;
    uint32_t end;
  };

  // INVALID_ARGUMENT naming the offset and PCRE2's reason when the pattern does not compile.
  static StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the non-overlapping, non-empty matches in text, left to right, with offsets relative
  // to text. Returns false when PCRE2 gave up part-way (a resource limit); the matches found so
  // far are kept and the caller treats the rest of the text as unmatched.
  // REQUIRES: text is valid UTF-8 (not checked again here) and shorter than 4 GiB.
  bool FindAll(std::string_view text, std::vector<Match>* out) const;

  // True when the whole of text matches (an anchored full match).
  bool FullMatch(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

 private:
  Regex(pcre2_real_code_8* code, std::string pattern, bool jit)
      : code_(code), pattern_(std::move(pattern)), jit_(jit) {}

  pcre2_real_code_8* code_;
  std::string pattern_;
  bool jit_;
};

// `pattern` with \s spelled out as Oniguruma's Unicode whitespace (U+0009..U+000D, U+0085,
// \p{Z}; PCRE2's own \s also matches U+180E) and \w as Oniguruma's word characters
// (\p{L}\p{M}\p{N}\p{Pc}; PCRE2's has no marks), and \S, \W as their complements. \S and \W
// inside a character class are left as written (no file in use has one); \b keeps PCRE2's
// meaning.
std::string OnigurumaCompatiblePattern(std::string_view pattern);

}  // namespace aicloud::engine
