#include "engine/structured/pattern.h"

#include <algorithm>
#include <array>

namespace aicloud::engine::structured {
namespace {

int64_t SatAdd(int64_t a, int64_t b) { return std::min(kSizeSaturation, a + b); }
int64_t SatMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  if (a >= kSizeSaturation / b) return kSizeSaturation;
  return std::min(kSizeSaturation, a * b);
}

std::shared_ptr<PatternNode> NewNode(PatternNode::Kind kind) {
  auto n = std::make_shared<PatternNode>();
  n->kind = kind;
  return n;
}

// Depth and size of an inner node from its children.
void Summarize(PatternNode* n) {
  int64_t size = 1;
  int32_t depth = 0;
  for (const Pattern& c : n->children) {
    size = SatAdd(size, c->size);
    depth = std::max(depth, c->depth);
  }
  n->size = size;
  n->depth = depth + 1;
}

// Appends the UTF-8 byte-range sequences of [lo, hi] to `out`.
// REQUIRES: lo and hi encode to the same number of bytes; the range holds no surrogate.
using ByteSeq = std::vector<std::pair<uint8_t, uint8_t>>;

int Utf8Length(char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

std::array<uint8_t, 4> Utf8Encode(char32_t c, int len) {
  std::array<uint8_t, 4> b{};
  if (len == 1) {
    b[0] = static_cast<uint8_t>(c);
  } else if (len == 2) {
    b[0] = static_cast<uint8_t>(0xC0 | (c >> 6));
    b[1] = static_cast<uint8_t>(0x80 | (c & 0x3F));
  } else if (len == 3) {
    b[0] = static_cast<uint8_t>(0xE0 | (c >> 12));
    b[1] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
    b[2] = static_cast<uint8_t>(0x80 | (c & 0x3F));
  } else {
    b[0] = static_cast<uint8_t>(0xF0 | (c >> 18));
    b[1] = static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F));
    b[2] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
    b[3] = static_cast<uint8_t>(0x80 | (c & 0x3F));
  }
  return b;
}

// Splits [lo, hi] until each piece is a product of per-byte ranges: the continuation bytes
// below the first differing position must span their full 0x80..0xBF range.
void SplitSameLength(char32_t lo, char32_t hi, int len, std::vector<ByteSeq>* out) {
  for (int i = 1; i < len; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitSameLength(lo, lo | m, len, out);
        SplitSameLength((lo | m) + 1, hi, len, out);
        return;
      }
      if ((hi & m) != m) {
        SplitSameLength(lo, (hi & ~m) - 1, len, out);
        SplitSameLength(hi & ~m, hi, len, out);
        return;
      }
    }
  }
  const auto a = Utf8Encode(lo, len);
  const auto b = Utf8Encode(hi, len);
  ByteSeq seq;
  for (int i = 0; i < len; ++i) seq.emplace_back(a[i], b[i]);
  out->push_back(std::move(seq));
}

}  // namespace

Pattern Empty() { return NewNode(PatternNode::Kind::kEmpty); }

Pattern Nothing() { return NewNode(PatternNode::Kind::kAlternate); }

Pattern Literal(std::string_view bytes) {
  if (bytes.empty()) return Empty();
  auto n = NewNode(PatternNode::Kind::kBytes);
  n->bytes = std::string(bytes);
  n->size = static_cast<int64_t>(bytes.size()) + 1;
  return n;
}

Pattern ByteSet(const std::bitset<256>& set) {
  auto n = NewNode(PatternNode::Kind::kByteSet);
  n->set = set;
  n->size = 2;
  return n;
}

Pattern ByteRange(uint8_t lo, uint8_t hi) {
  std::bitset<256> set;
  for (int b = lo; b <= hi; ++b) set.set(b);
  return ByteSet(set);
}

std::vector<std::pair<char32_t, char32_t>> NormalizeCodepointRanges(
    std::vector<std::pair<char32_t, char32_t>> ranges, bool negated) {
  constexpr char32_t kMax = 0x10FFFF;
  std::vector<std::pair<char32_t, char32_t>> merged;
  for (auto& [lo, hi] : ranges) {
    if (lo > hi || lo > kMax) continue;
    merged.emplace_back(lo, std::min(hi, kMax));
  }
  std::sort(merged.begin(), merged.end());
  std::vector<std::pair<char32_t, char32_t>> norm;
  for (const auto& r : merged) {
    if (!norm.empty() && r.first <= norm.back().second + 1) {
      norm.back().second = std::max(norm.back().second, r.second);
    } else {
      norm.push_back(r);
    }
  }
  if (negated) {
    std::vector<std::pair<char32_t, char32_t>> comp;
    char32_t next = 0;
    for (const auto& [lo, hi] : norm) {
      if (lo > next) comp.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= kMax) comp.emplace_back(next, kMax);
    norm = std::move(comp);
  }
  std::vector<std::pair<char32_t, char32_t>> out;
  for (const auto& [lo, hi] : norm) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      out.emplace_back(lo, hi);
      continue;
    }
    if (lo < 0xD800) out.emplace_back(lo, 0xD7FF);
    if (hi > 0xDFFF) out.emplace_back(0xE000, hi);
  }
  return out;
}

Pattern CodepointClass(std::vector<std::pair<char32_t, char32_t>> ranges, bool negated) {
  std::bitset<256> ascii;
  std::vector<ByteSeq> seqs;
  static constexpr char32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (auto [lo, hi] : NormalizeCodepointRanges(std::move(ranges), negated)) {
    // Cut at the boundaries between encoded lengths.
    for (char32_t end : kLengthEnds) {
      if (lo > hi) break;
      if (lo > end) continue;
      const char32_t piece_hi = std::min(hi, end);
      const int len = Utf8Length(lo);
      if (len == 1) {
        for (char32_t c = lo; c <= piece_hi; ++c) ascii.set(c);
      } else {
        SplitSameLength(lo, piece_hi, len, &seqs);
      }
      lo = piece_hi + 1;
    }
  }
  std::vector<Pattern> options;
  if (ascii.any()) options.push_back(ByteSet(ascii));
  for (const ByteSeq& seq : seqs) {
    std::vector<Pattern> parts;
    for (auto [lo, hi] : seq) parts.push_back(ByteRange(lo, hi));
    options.push_back(Concat(std::move(parts)));
  }
  return Alternate(std::move(options));
}

Pattern Concat(std::vector<Pattern> parts) {
  std::vector<Pattern> flat;
  for (Pattern& p : parts) {
    if (p->kind == PatternNode::Kind::kEmpty) continue;
    if (p->kind == PatternNode::Kind::kConcat) {
      flat.insert(flat.end(), p->children.begin(), p->children.end());
    } else {
      flat.push_back(std::move(p));
    }
  }
  if (flat.empty()) return Empty();
  if (flat.size() == 1) return flat[0];
  auto n = NewNode(PatternNode::Kind::kConcat);
  n->children = std::move(flat);
  Summarize(n.get());
  return n;
}

Pattern Alternate(std::vector<Pattern> options) {
  if (options.size() == 1) return options[0];
  auto n = NewNode(PatternNode::Kind::kAlternate);
  n->children = std::move(options);
  Summarize(n.get());
  return n;
}

Pattern Repeat(Pattern p, int32_t min, int32_t max) {
  if (max == 0) return Empty();
  if (min == 1 && max == 1) return p;
  auto n = NewNode(PatternNode::Kind::kRepeat);
  n->min = min;
  n->max = max;
  const int64_t copies = max < 0 ? int64_t{min} + 1 : max;
  n->size = SatAdd(SatMul(p->size + 1, copies), 1);
  n->depth = p->depth + 1;
  n->children.push_back(std::move(p));
  return n;
}

Pattern Optional(Pattern p) { return Repeat(std::move(p), 0, 1); }

Pattern Subsequence(std::vector<Pattern> items, std::vector<bool> required, Pattern separator) {
  auto n = NewNode(PatternNode::Kind::kSubsequence);
  n->children = std::move(items);
  n->required = std::move(required);
  n->required.resize(n->children.size(), false);
  Summarize(n.get());
  // Each item may be compiled twice (before and after the first present one), and a separator
  // goes before each item after the first.
  n->size = SatAdd(SatMul(n->size, 2), SatMul(separator->size, static_cast<int64_t>(n->children.size())));
  n->depth = std::max(n->depth, separator->depth + 1);
  n->separator = std::move(separator);
  return n;
}

}  // namespace aicloud::engine::structured
