#include "engine/tokenizer/byte_level.h"

#include <array>

#include "engine/tokenizer/utf8.h"

namespace aicloud::engine {
namespace {

bool StandsForItself(unsigned b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 0x144> to_byte{};  // every alphabet code point is below U+0144

  Tables() {
    to_byte.fill(-1);
    char32_t next = 0x100;
    for (unsigned b = 0; b < 256; ++b) {
      to_char[b] = StandsForItself(b) ? b : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

char32_t ByteToVocabChar(unsigned char b) { return GetTables().to_char[b]; }

std::optional<unsigned char> VocabCharToByte(char32_t c) {
  const Tables& t = GetTables();
  if (c >= t.to_byte.size() || t.to_byte[c] < 0) return std::nullopt;
  return static_cast<unsigned char>(t.to_byte[c]);
}

std::optional<std::string> VocabTextToBytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    const size_t n = Utf8DecodeAt(text, i, &cp);
    if (n == 0) return std::nullopt;
    std::optional<unsigned char> b = VocabCharToByte(cp);
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
    i += n;
  }
  return out;
}

std::string BytesToVocabText(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(ByteToVocabChar(static_cast<unsigned char>(c)), &out);
  return out;
}

}  // namespace aicloud::engine
