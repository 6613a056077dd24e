#include "engine/server/text_stream.h"

#include <algorithm>

namespace aicloud::engine {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the UTF-8 sequence a lead byte announces; 0 for a byte that cannot lead one.
int SequenceLength(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

bool Continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

}  // namespace

TextStream::TextStream(const Tokenizer* tokenizer, std::vector<std::string> stops, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
  for (const std::string& s : stops_) max_stop_ = std::max(max_stop_, s.size());
}

size_t TextStream::CompleteUtf8Prefix() const {
  size_t i = 0;
  while (i < pending_.size()) {
    const int n = SequenceLength(static_cast<unsigned char>(pending_[i]));
    if (n == 0) {
      ++i;  // invalid lead byte: complete (it will be replaced)
      continue;
    }
    if (i + static_cast<size_t>(n) > pending_.size()) {
      // Incomplete at the end, unless what is there already cannot continue it.
      for (size_t j = i + 1; j < pending_.size(); ++j) {
        if (!Continuation(static_cast<unsigned char>(pending_[j]))) return pending_.size();
      }
      return i;
    }
    i += static_cast<size_t>(n);
  }
  return i;
}

// Copies valid UTF-8 through and replaces each malformed sequence with U+FFFD.
static std::string Sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const int n = SequenceLength(static_cast<unsigned char>(s[i]));
    bool ok = n > 0 && i + static_cast<size_t>(n) <= s.size();
    for (int k = 1; ok && k < n; ++k) ok = Continuation(static_cast<unsigned char>(s[i + static_cast<size_t>(k)]));
    if (ok) {
      out.append(s.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    } else {
      out.append(kReplacement);
      ++i;
      while (i < s.size() && Continuation(static_cast<unsigned char>(s[i]))) ++i;
    }
  }
  return out;
}

TextStream::Piece TextStream::Push(int32_t id) {
  Piece p;
  if (stopped_) {
    p.stopped = true;
    return p;
  }
  if (!(skip_special_ && tokenizer_->IsSpecial(id))) pending_.append(tokenizer_->TokenBytes(id));
  const size_t complete = CompleteUtf8Prefix();
  std::string ready = Sanitize(std::string_view(pending_).substr(0, complete));
  std::string rest = pending_.substr(complete);

  if (!stops_.empty()) {
    // A stop string may straddle what was released and what is new only if it was held back,
    // so searching `ready` (held-back text included) is enough.
    size_t first = std::string::npos;
    for (const std::string& s : stops_) first = std::min(first, ready.find(s));
    if (first != std::string::npos) {
      stopped_ = true;
      p.stopped = true;
      p.text = ready.substr(0, first);
      released_ += p.text;
      pending_.clear();
      return p;
    }
    // Hold back the longest suffix of `ready` that is a proper prefix of some stop string.
    size_t hold = 0;
    for (const std::string& s : stops_) {
      for (size_t k = std::min(s.size() - 1, ready.size()); k > hold; --k) {
        if (ready.compare(ready.size() - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
      }
    }
    p.text = ready.substr(0, ready.size() - hold);
    pending_ = ready.substr(ready.size() - hold) + rest;
  } else {
    p.text = std::move(ready);
    pending_ = std::move(rest);
  }
  released_ += p.text;
  return p;
}

std::string TextStream::Finish() {
  if (stopped_) return "";
  std::string out = Sanitize(pending_);
  pending_.clear();
  released_ += out;
  return out;
}

}  // namespace aicloud::engine
