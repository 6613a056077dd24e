#include "engine/tokenizer/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/tokenizer/utf8.h"

namespace aicloud::engine {
namespace {

struct Decomposition {
  char32_t cp;
  uint16_t offset;  // into kDecompositionPool
  uint8_t length;
};
struct CombiningClass {
  char32_t cp;
  uint8_t ccc;
};
struct Composition {
  char32_t first;
  char32_t second;
  char32_t composite;
};

#include "engine/tokenizer/unicode_nfc_data.inc"

// Hangul syllables decompose and compose algorithmically (Unicode §3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

bool QuickCheckFlagged(char32_t cp) {
  if (cp < 0x300) return false;
  const uint64_t* block = kQuickCheckBlocks[kQuickCheckStage1[cp >> 8]];
  const uint32_t low = cp & 0xFF;
  return (block[low >> 6] >> (low & 63)) & 1;
}

uint8_t CanonicalCombiningClass(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = std::end(kCombiningClasses);
  const auto* it = std::lower_bound(std::begin(kCombiningClasses), end, cp,
                                    [](const CombiningClass& c, char32_t v) { return c.cp < v; });
  return (it != end && it->cp == cp) ? it->ccc : 0;
}

void Decompose(char32_t cp, std::vector<char32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0) {
    const auto* end = std::end(kDecompositions);
    const auto* it = std::lower_bound(std::begin(kDecompositions), end, cp,
                                      [](const Decomposition& d, char32_t v) { return d.cp < v; });
    if (it != end && it->cp == cp) {
      out->insert(out->end(), kDecompositionPool + it->offset,
                  kDecompositionPool + it->offset + it->length);
      return;
    }
  }
  out->push_back(cp);
}

// The primary composite of (a, b), or 0 when there is none.
char32_t Compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto* end = std::end(kCompositions);
  const auto* it = std::lower_bound(std::begin(kCompositions), end, std::pair(a, b),
                                    [](const Composition& c, std::pair<char32_t, char32_t> v) {
                                      return c.first < v.first ||
                                             (c.first == v.first && c.second < v.second);
                                    });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

// Full NFC of valid UTF-8 text.
void NormalizeFull(std::string_view s, std::string* out) {
  std::vector<char32_t> cps;
  cps.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    i += Utf8DecodeAt(s, i, &cp);  // the caller passes valid UTF-8 only
    Decompose(cp, &cps);
  }
  // Canonical ordering: stable sort each run of non-starters by combining class.
  std::vector<uint8_t> ccc(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) ccc[i] = CanonicalCombiningClass(cps[i]);
  for (size_t i = 1; i < cps.size(); ++i) {
    if (ccc[i] == 0) continue;
    for (size_t j = i; j > 0 && ccc[j - 1] > ccc[j]; --j) {
      std::swap(cps[j - 1], cps[j]);
      std::swap(ccc[j - 1], ccc[j]);
    }
  }
  // Canonical composition: each character joins the last starter unless blocked, i.e. unless a
  // character in between has a combining class of 0 or >= its own.
  size_t n = 0;
  ptrdiff_t starter = -1;
  int last_ccc = -1;  // class of the last kept character after the starter; -1: adjacent
  for (size_t i = 0; i < cps.size(); ++i) {
    const int c = ccc[i];
    if (starter >= 0 && (last_ccc == -1 || last_ccc < c)) {
      if (char32_t composite = Compose(cps[starter], cps[i])) {
        cps[starter] = composite;
        continue;
      }
    }
    if (c == 0) {
      starter = static_cast<ptrdiff_t>(n);
      last_ccc = -1;
    } else {
      last_ccc = c;
    }
    cps[n] = cps[i];
    ++n;
  }
  for (size_t i = 0; i < n; ++i) AppendUtf8(cps[i], out);
}

void NormalizeValidRun(std::string_view s, std::string* out) {
  // Every code point below U+0300 passes the quick check, and bytes below 0xCC encode only
  // those (or are continuation bytes), so most text is scanned without decoding.
  size_t last_start = 0;  // start of the code point before the current one
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0xCC) {
      if (b < 0x80 || b >= 0xC0) last_start = i;
      ++i;
      continue;
    }
    char32_t cp;
    const size_t len = Utf8DecodeAt(s, i, &cp);
    if (QuickCheckFlagged(cp)) {
      // The code point before this one passed the quick check, so it is a starter that cannot
      // combine with anything before it: text up to it is already final.
      const size_t stable = i == 0 ? 0 : last_start;
      out->append(s.substr(0, stable));
      NormalizeFull(s.substr(stable), out);
      return;
    }
    last_start = i;
    i += len;
  }
  out->append(s);
}

}  // namespace

void NormalizeNfc(std::string_view text, std::string* out) {
  out->reserve(out->size() + text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t valid = Utf8ValidPrefix(text, i);
    NormalizeValidRun(text.substr(i, valid), out);
    i += valid;
    if (i < text.size()) out->push_back(text[i++]);  // a byte outside any valid sequence
  }
}

bool IsNfcQuickCheckYes(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0xCC) {
      ++i;
      continue;
    }
    char32_t cp;
    const size_t len = Utf8DecodeAt(text, i, &cp);
    if (len == 0) {
      ++i;
      continue;
    }
    if (QuickCheckFlagged(cp)) return false;
    i += len;
  }
  return true;
}

const char* NfcUnicodeVersion() { return kUnicodeVersion; }

}  // namespace aicloud::engine
