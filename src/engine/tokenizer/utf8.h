// UTF-8 helpers for the tokenizer: strict decoding and validation.
//
// Tokenizer input is arbitrary bytes. Valid UTF-8 runs go through normalization and the
// pre-tokenizer regexes; bytes that are not part of a valid sequence (stray continuation bytes,
// overlong forms, surrogates, truncated sequences) are handed to the byte-level BPE as they are,
// so nothing is lost and Decode(Encode(s)) == s holds for every byte string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace aicloud::engine {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when s[i] does not start one
// (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF). Stores the code point.
// REQUIRES: i < s.size().
inline size_t Utf8DecodeAt(std::string_view s, size_t i, char32_t* cp) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const size_t left = s.size() - i;
  const unsigned char b0 = p[0];
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  auto cont = [&](size_t k) { return k < left && (p[k] & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (!cont(1)) return 0;
    *cp = (char32_t(b0 & 0x1F) << 6) | (p[1] & 0x3F);
    return 2;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (b0 == 0xE0 && p[1] < 0xA0) return 0;   // overlong
    if (b0 == 0xED && p[1] >= 0xA0) return 0;  // surrogate
    *cp = (char32_t(b0 & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (b0 == 0xF0 && p[1] < 0x90) return 0;   // overlong
    if (b0 == 0xF4 && p[1] >= 0x90) return 0;  // above U+10FFFF
    *cp = (char32_t(b0 & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
          (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    return 4;
  }
  return 0;
}

// Length of the longest valid UTF-8 prefix of s[i..].
inline size_t Utf8ValidPrefix(std::string_view s, size_t i) {
  size_t j = i;
  while (j < s.size()) {
    // ASCII fast path, eight bytes at a time.
    while (j + 8 <= s.size()) {
      uint64_t w;
      std::memcpy(&w, s.data() + j, 8);
      if (w & 0x8080808080808080ULL) break;
      j += 8;
    }
    if (j >= s.size()) break;
    if (static_cast<unsigned char>(s[j]) < 0x80) {
      ++j;
      continue;
    }
    char32_t cp;
    const size_t n = Utf8DecodeAt(s, j, &cp);
    if (n == 0) break;
    j += n;
  }
  return j - i;
}

inline bool IsValidUtf8(std::string_view s) { return Utf8ValidPrefix(s, 0) == s.size(); }

inline void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Unicode White_Space (PropList.txt); what lstrip/rstrip of added tokens trim.
inline bool IsUnicodeWhiteSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace aicloud::engine
