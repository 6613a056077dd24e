#include "engine/tokenizer/stream_decoder.h"

#include <span>

namespace aicloud::engine {
namespace {

// Length of the trailing bytes of s that are the valid start of a UTF-8 character still
// missing bytes (0 when s ends with a whole character or with bytes that cannot be a start).
size_t IncompleteTail(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    size_t need = 0;
    if (b >= 0xC2 && b <= 0xDF) need = 2;
    else if (b >= 0xE0 && b <= 0xEF) need = 3;
    else if (b >= 0xF0 && b <= 0xF4) need = 4;
    if (need <= back) return 0;  // ASCII, invalid lead, or a complete character
    // The second byte's range rules (no overlongs, surrogates or > U+10FFFF) must hold.
    if (back >= 2) {
      const auto c = static_cast<unsigned char>(s[n - back + 1]);
      if ((b == 0xE0 && c < 0xA0) || (b == 0xED && c >= 0xA0) || (b == 0xF0 && c < 0x90) ||
          (b == 0xF4 && c >= 0x90)) {
        return 0;
      }
    }
    return back;
  }
  return 0;
}

}  // namespace

std::string StreamDecoder::Push(int32_t id) {
  const int32_t one[1] = {id};
  pending_ += tokenizer_.Decode(std::span<const int32_t>(one), skip_special_tokens_);
  const size_t hold = IncompleteTail(pending_);
  std::string ready = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return ready;
}

std::string StreamDecoder::Finish() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace aicloud::engine
