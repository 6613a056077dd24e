#include "engine/structured/regex.h"

#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/utf8.h"

namespace aicloud::engine::structured {
namespace {

using Ranges = std::vector<std::pair<char32_t, char32_t>>;

Ranges DigitRanges() { return {{'0', '9'}}; }
Ranges WordRanges() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
Ranges SpaceRanges() { return {{'\t', '\r'}, {' ', ' '}}; }  // \t \n \v \f \r and space

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
int HexValue(char c) {
  if (c <= '9') return c - '0';
  return (c | 0x20) - 'a' + 10;
}

std::string Utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// What one escape stands for: a code point, or a class of them.
struct Escape {
  bool is_class = false;
  char32_t cp = 0;
  Ranges ranges;  // is_class: the members (already complemented for \D \W \S)
};

class RegexParser {
 public:
  explicit RegexParser(std::string_view re) : re_(re) {}

  StatusOr<Pattern> Parse() {
    StatusOr<Pattern> p = ParseAlternation(0);
    if (!p.ok()) return p;
    if (pos_ < re_.size()) return Error("unbalanced ) at offset " + std::to_string(pos_));
    if ((*p)->size > kMaxRegexSize) {
      return Error("the regex needs about " + std::to_string((*p)->size) +
                   " automaton states; the limit is " + std::to_string(kMaxRegexSize));
    }
    return p;
  }

 private:
  static Status Error(std::string message) { return InvalidArgumentError(std::move(message)); }
  static Status Unsupported(std::string_view what, size_t at) {
    return InvalidArgumentError(std::string(what) + " at offset " + std::to_string(at) +
                                " is not supported");
  }

  bool AtEnd() const { return pos_ >= re_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < re_.size() ? re_[pos_ + ahead] : '\0';
  }

  StatusOr<Pattern> ParseAlternation(int depth) {
    std::vector<Pattern> options;
    while (true) {
      StatusOr<Pattern> branch = ParseConcat(depth);
      if (!branch.ok()) return branch;
      options.push_back(std::move(*branch));
      if (AtEnd() || Peek() != '|') break;
      ++pos_;
    }
    return Alternate(std::move(options));
  }

  StatusOr<Pattern> ParseConcat(int depth) {
    std::vector<Pattern> parts;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      StatusOr<Pattern> part = ParseRepeat(depth);
      if (!part.ok()) return part;
      parts.push_back(std::move(*part));
    }
    return Concat(std::move(parts));
  }

  // Reads a quantifier at pos_ if there is one. Returns false (pos_ unchanged) if none.
  StatusOr<bool> ParseQuantifier(int32_t* min, int32_t* max) {
    const char c = Peek();
    if (AtEnd()) return false;
    if (c == '*') { *min = 0; *max = -1; ++pos_; return true; }
    if (c == '+') { *min = 1; *max = -1; ++pos_; return true; }
    if (c == '?') { *min = 0; *max = 1; ++pos_; return true; }
    if (c != '{') return false;
    const size_t open = pos_;
    size_t i = pos_ + 1;
    auto number = [&](int32_t* out) -> StatusOr<bool> {
      const size_t begin = i;
      int64_t v = 0;
      while (i < re_.size() && re_[i] >= '0' && re_[i] <= '9') {
        v = v * 10 + (re_[i] - '0');
        if (v > kMaxRegexRepeat) {
          return Error("repetition count at offset " + std::to_string(begin) +
                       " exceeds the limit of " + std::to_string(kMaxRegexRepeat));
        }
        ++i;
      }
      *out = static_cast<int32_t>(v);
      return i > begin;
    };
    int32_t lo = 0, hi = 0;
    StatusOr<bool> has_lo = number(&lo);
    if (!has_lo.ok()) return has_lo.status();
    bool has_hi = false;
    bool comma = false;
    if (i < re_.size() && re_[i] == ',') {
      comma = true;
      ++i;
      StatusOr<bool> h = number(&hi);
      if (!h.ok()) return h.status();
      has_hi = *h;
    }
    if (i >= re_.size() || re_[i] != '}' || (!*has_lo && !has_hi)) {
      return Error("malformed repetition { at offset " + std::to_string(open) +
                   " (write \\{ for a literal brace)");
    }
    pos_ = i + 1;
    *min = lo;
    *max = !comma ? lo : has_hi ? hi : -1;
    if (*max >= 0 && *min > *max) {
      return Error("repetition {" + std::to_string(*min) + "," + std::to_string(*max) +
                   "} at offset " + std::to_string(open) + " has min above max");
    }
    return true;
  }

  StatusOr<Pattern> ParseRepeat(int depth) {
    StatusOr<Pattern> atom = ParseAtom(depth);
    if (!atom.ok()) return atom;
    int32_t min = 0, max = 0;
    const size_t q_at = pos_;
    StatusOr<bool> q = ParseQuantifier(&min, &max);
    if (!q.ok()) return q.status();
    if (!*q) return atom;
    if (is_anchor_) return Error("nothing to repeat at offset " + std::to_string(q_at));
    if (!AtEnd() && Peek() == '?') ++pos_;  // lazy: same language
    if (!AtEnd() && Peek() == '+') return Unsupported("possessive quantifier", pos_);
    int32_t min2 = 0, max2 = 0;
    const size_t q2_at = pos_;
    StatusOr<bool> q2 = ParseQuantifier(&min2, &max2);
    if (!q2.ok()) return q2.status();
    if (*q2) return Unsupported("a second quantifier", q2_at);
    return Repeat(std::move(*atom), min, max);
  }

  StatusOr<Pattern> ParseGroup(int depth) {
    const size_t open = pos_;
    ++pos_;
    if (Peek() == '?') {
      const std::string_view rest = re_.substr(pos_);
      if (rest.starts_with("?:")) {
        pos_ += 2;
      } else if (rest.starts_with("?=")) {
        return Unsupported("lookahead (?=", open);
      } else if (rest.starts_with("?!")) {
        return Unsupported("negative lookahead (?!", open);
      } else if (rest.starts_with("?<=")) {
        return Unsupported("lookbehind (?<=", open);
      } else if (rest.starts_with("?<!")) {
        return Unsupported("negative lookbehind (?<!", open);
      } else if (rest.starts_with("?P=")) {
        return Unsupported("named backreference (?P=", open);
      } else if (rest.starts_with("?P<") || rest.starts_with("?<") || rest.starts_with("?'")) {
        return Unsupported("named group", open);
      } else if (rest.starts_with("?#")) {
        return Unsupported("comment group (?#", open);
      } else {
        return Unsupported("inline flags or group (?" + std::string(rest.substr(1, 1)), open);
      }
    }
    if (depth + 1 > kMaxRegexDepth) {
      return Error("groups nested deeper than " + std::to_string(kMaxRegexDepth) +
                   " at offset " + std::to_string(open) + " (the limit)");
    }
    StatusOr<Pattern> inner = ParseAlternation(depth + 1);
    if (!inner.ok()) return inner;
    if (AtEnd() || Peek() != ')') {
      return Error("missing ) for the group opened at offset " + std::to_string(open));
    }
    ++pos_;
    return inner;
  }

  StatusOr<Pattern> ParseAtom(int depth) {
    is_anchor_ = false;
    const size_t at = pos_;
    const char c = Peek();
    switch (c) {
      case '(':
        return ParseGroup(depth);
      case '[':
        return ParseClass();
      case '.':
        ++pos_;
        return CodepointClass({{U'\n', U'\n'}}, /*negated=*/true);
      case '\\': {
        StatusOr<Escape> e = ParseEscape(/*in_class=*/false);
        if (!e.ok()) return e.status();
        if (e->is_class) return CodepointClass(std::move(e->ranges), false);
        return Literal(Utf8(e->cp));
      }
      case '*':
      case '+':
      case '?':
        return Error("nothing to repeat at offset " + std::to_string(at));
      case '{':
        return Error("malformed repetition { at offset " + std::to_string(at) +
                     " (write \\{ for a literal brace)");
      case '^':
        if (at != 0) return Unsupported("^ away from the start", at);
        ++pos_;
        is_anchor_ = true;
        return Empty();
      case '$':
        if (at + 1 != re_.size()) return Unsupported("$ away from the end", at);
        ++pos_;
        is_anchor_ = true;
        return Empty();
      default:
        break;
    }
    StatusOr<char32_t> cp = ParseCodepoint();
    if (!cp.ok()) return cp.status();
    return Literal(Utf8(*cp));
  }

  StatusOr<char32_t> ParseCodepoint() {
    char32_t cp = 0;
    const size_t n = Utf8DecodeAt(re_, pos_, &cp);
    if (n == 0) return Error("invalid UTF-8 at offset " + std::to_string(pos_));
    pos_ += n;
    return cp;
  }

  StatusOr<char32_t> ParseHex(size_t digits, size_t escape_at) {
    if (pos_ + digits > re_.size()) {
      return Error("truncated escape at offset " + std::to_string(escape_at));
    }
    char32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      if (!IsHex(re_[pos_ + k])) {
        return Error("bad hex digit in the escape at offset " + std::to_string(escape_at));
      }
      v = v * 16 + HexValue(re_[pos_ + k]);
    }
    pos_ += digits;
    return v;
  }

  // REQUIRES: Peek() == '\\'.
  StatusOr<Escape> ParseEscape(bool in_class) {
    const size_t at = pos_;
    ++pos_;
    if (AtEnd()) return Error("trailing backslash at offset " + std::to_string(at));
    const char c = Peek();
    Escape e;
    auto set_class = [&](Ranges r, bool negated) {
      e.is_class = true;
      e.ranges = NormalizeCodepointRanges(std::move(r), negated);
      ++pos_;
      return e;
    };
    switch (c) {
      case 'd': return set_class(DigitRanges(), false);
      case 'D': return set_class(DigitRanges(), true);
      case 'w': return set_class(WordRanges(), false);
      case 'W': return set_class(WordRanges(), true);
      case 's': return set_class(SpaceRanges(), false);
      case 'S': return set_class(SpaceRanges(), true);
      case 'n': e.cp = '\n'; ++pos_; return e;
      case 't': e.cp = '\t'; ++pos_; return e;
      case 'r': e.cp = '\r'; ++pos_; return e;
      case 'f': e.cp = '\f'; ++pos_; return e;
      case 'v': e.cp = '\v'; ++pos_; return e;
      case 'x': {
        ++pos_;
        StatusOr<char32_t> v = ParseHex(2, at);
        if (!v.ok()) return v.status();
        e.cp = *v;
        return e;
      }
      case 'u': {
        ++pos_;
        if (Peek() == '{') return Unsupported("\\u{...}", at);
        StatusOr<char32_t> v = ParseHex(4, at);
        if (!v.ok()) return v.status();
        e.cp = *v;
        if (e.cp >= 0xD800 && e.cp <= 0xDBFF && Peek() == '\\' && Peek(1) == 'u') {
          const size_t low_at = pos_;
          pos_ += 2;
          StatusOr<char32_t> low = ParseHex(4, low_at);
          if (!low.ok()) return low.status();
          if (*low < 0xDC00 || *low > 0xDFFF) {
            return Error("lone surrogate \\u escape at offset " + std::to_string(at));
          }
          e.cp = 0x10000 + ((e.cp - 0xD800) << 10) + (*low - 0xDC00);
        } else if (e.cp >= 0xD800 && e.cp <= 0xDFFF) {
          return Error("lone surrogate \\u escape at offset " + std::to_string(at));
        }
        return e;
      }
      case 'b':
        return Unsupported(in_class ? "backspace escape \\b in a class" : "word boundary \\b", at);
      case 'B': return Unsupported("non-word-boundary \\B", at);
      case 'A': case 'z': case 'Z': case 'G': return Unsupported(std::string("anchor \\") + c, at);
      case 'p': case 'P': return Unsupported(std::string("Unicode property \\") + c, at);
      case 'k': return Unsupported("named backreference \\k", at);
      case '0': return Unsupported("octal or NUL escape \\0", at);
      default:
        break;
    }
    if (c >= '1' && c <= '9') return Unsupported(std::string("backreference \\") + c, at);
    const auto uc = static_cast<unsigned char>(c);
    if (uc < 0x80 && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || uc < 0x20)) {
      return Unsupported(std::string("escape \\") + (uc < 0x20 ? '?' : c), at);
    }
    StatusOr<char32_t> cp = ParseCodepoint();
    if (!cp.ok()) return cp.status();
    e.cp = *cp;
    return e;
  }

  // One class member at pos_: a code point or a class escape.
  StatusOr<Escape> ParseClassItem() {
    if (Peek() == '\\') return ParseEscape(/*in_class=*/true);
    if (Peek() == '[' && Peek(1) == ':') return Unsupported("POSIX class [:", pos_);
    Escape e;
    StatusOr<char32_t> cp = ParseCodepoint();
    if (!cp.ok()) return cp.status();
    e.cp = *cp;
    return e;
  }

  StatusOr<Pattern> ParseClass() {
    const size_t open = pos_;
    ++pos_;
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    if (Peek() == ']') return Error("empty character class at offset " + std::to_string(open));
    Ranges ranges;
    while (true) {
      if (AtEnd()) {
        return Error("unterminated character class opened at offset " + std::to_string(open));
      }
      if (Peek() == ']') break;
      const size_t item_at = pos_;
      StatusOr<Escape> lo = ParseClassItem();
      if (!lo.ok()) return lo.status();
      if (lo->is_class) {
        ranges.insert(ranges.end(), lo->ranges.begin(), lo->ranges.end());
        continue;
      }
      if (Peek() == '-' && pos_ + 1 < re_.size() && Peek(1) != ']') {
        ++pos_;
        StatusOr<Escape> hi = ParseClassItem();
        if (!hi.ok()) return hi.status();
        if (hi->is_class) return Error("bad class range at offset " + std::to_string(item_at));
        if (hi->cp < lo->cp) {
          return Error("reversed class range at offset " + std::to_string(item_at));
        }
        ranges.emplace_back(lo->cp, hi->cp);
      } else {
        ranges.emplace_back(lo->cp, lo->cp);
      }
    }
    ++pos_;
    return CodepointClass(std::move(ranges), negated);
  }

  std::string_view re_;
  size_t pos_ = 0;
  bool is_anchor_ = false;  // the last atom was ^ or $
};

}  // namespace

StatusOr<Pattern> ParseRegex(std::string_view regex) { return RegexParser(regex).Parse(); }

}  // namespace aicloud::engine::structured
