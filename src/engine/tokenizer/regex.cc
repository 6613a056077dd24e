#include "engine/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

namespace aicloud::engine {
namespace {

// Per-thread match state: PCRE2 match data and a JIT stack larger than the 32 KiB default, so
// patterns with lookahead over long whitespace runs do not run out.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);

  MatchScratch() {
    if (context != nullptr && jit_stack != nullptr) {
      pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
};

MatchScratch& Scratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

size_t CodePointLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Oniguruma's classes in Unicode mode (its doc/RE, "Character types"):
// \s is U+0009..U+000D, U+0085 and the Z categories; PCRE2's UCP \s also matches U+180E
// (MONGOLIAN VOWEL SEPARATOR, no longer a space since Unicode 6.3).
// \w is Letter | Mark | Number | Connector_Punctuation; PCRE2 10.42's UCP \w has no marks and
// no connector but '_'.
constexpr std::string_view kOnigurumaSpace = R"(\t\n\x{0B}\f\r\x{85}\p{Z})";
constexpr std::string_view kOnigurumaWord = R"(\p{L}\p{M}\p{N}\p{Pc})";

}  // namespace

std::string OnigurumaCompatiblePattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  size_t i = 0;
  while (i < pattern.size()) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 'Q') {  // \Q...\E is literal text: copy it untouched
        const size_t end = pattern.find("\\E", i + 2);
        const size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
        out.append(pattern.substr(i, stop - i));
        i = stop;
        continue;
      }
      const std::string_view set = (e == 's' || e == 'S')   ? kOnigurumaSpace
                                   : (e == 'w' || e == 'W') ? kOnigurumaWord
                                                            : std::string_view();
      if (!set.empty() && (e == 's' || e == 'w')) {
        out += in_class ? std::string(set) : "[" + std::string(set) + "]";
      } else if (!set.empty() && !in_class) {
        out += "[^" + std::string(set) + "]";
      } else {
        out += c;  // any other escape, \S and \W inside a class included, stays as written
        out += e;
      }
      i += 2;
      continue;
    }
    if (in_class) {
      if (c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
        const size_t end = pattern.find(":]", i + 2);  // a POSIX class such as [:alpha:]
        if (end != std::string_view::npos) {
          out.append(pattern.substr(i, end + 2 - i));
          i = end + 2;
          continue;
        }
      }
      if (c == ']') in_class = false;
      out += c;
      ++i;
      continue;
    }
    out += c;
    ++i;
    if (c == '[') {
      in_class = true;
      if (i < pattern.size() && pattern[i] == '^') out += pattern[i++];
      if (i < pattern.size() && pattern[i] == ']') out += pattern[i++];  // a literal ']'
    }
  }
  return out;
}

StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const std::string compatible = OnigurumaCompatiblePattern(pattern);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compatible.data()), compatible.size(),
                    PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    if (compatible != pattern) {
      return InvalidArgumentError(fmt::format("invalid regex: {} (in the pattern as rewritten "
                                              "for PCRE2, at offset {}: {})",
                                              reinterpret_cast<const char*>(message), offset,
                                              compatible));
    }
    return InvalidArgumentError(fmt::format("invalid regex at offset {}: {}", offset,
                                            reinterpret_cast<const char*>(message)));
  }
  const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::unique_ptr<Regex>(new Regex(code, std::string(pattern), jit));
}

Regex::~Regex() { pcre2_code_free(code_); }

bool Regex::FindAll(std::string_view text, std::vector<Match>* out) const {
  MatchScratch& scratch = Scratch();
  if (scratch.data == nullptr) return false;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t offset = 0;
  while (offset < n) {
    int rc = jit_ ? pcre2_jit_match(code_, subject, n, offset, 0, scratch.data, scratch.context)
                  : pcre2_match(code_, subject, n, offset, PCRE2_NO_UTF_CHECK, scratch.data,
                                scratch.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The interpreter keeps its backtracking state on the heap.
      rc = pcre2_match(code_, subject, n, offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, scratch.data,
                       scratch.context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return true;
    if (rc < 0) return false;  // 0 only means the ovector has no room for groups: still a match
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end <= begin) {
      // An empty match: skip one character, as Oniguruma's and Rust's find_iter do.
      if (begin >= n) return true;
      offset = begin + CodePointLength(static_cast<unsigned char>(text[begin]));
      continue;
    }
    out->push_back({static_cast<uint32_t>(begin), static_cast<uint32_t>(end)});
    offset = end;
  }
  return true;
}

bool Regex::FullMatch(std::string_view text) const {
  MatchScratch& scratch = Scratch();
  if (scratch.data == nullptr) return false;
  const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                             PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_NO_UTF_CHECK, scratch.data,
                             scratch.context);
  return rc >= 0;
}

}  // namespace aicloud::engine
