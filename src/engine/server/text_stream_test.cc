#include "engine/server/text_stream.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace aicloud::engine {
namespace {

const Tokenizer& Gpt2() {
  static std::unique_ptr<Tokenizer> t = [] {
    StatusOr<std::unique_ptr<Tokenizer>> r =
        Tokenizer::FromFile(std::string(AICLOUD_SOURCE_DIR) + "/data/tokenizers/gpt2/tokenizer.json");
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }();
  return *t;
}

bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + static_cast<size_t>(n) > s.size()) return false;
    for (int k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0xC0) != 0x80) return false;
    }
    i += static_cast<size_t>(n);
  }
  return true;
}

struct Streamed {
  std::vector<std::string> pieces;
  std::string text;
  bool stopped = false;
};

Streamed Stream(const std::string& text, std::vector<std::string> stops, bool skip_special = true,
           std::vector<int32_t> extra_ids = {}) {
  const Tokenizer& tok = Gpt2();
  std::vector<int32_t> ids = tok.Encode(text, false);
  ids.insert(ids.end(), extra_ids.begin(), extra_ids.end());
  TextStream ts(&tok, std::move(stops), skip_special);
  Streamed r;
  for (int32_t id : ids) {
    TextStream::Piece p = ts.Push(id);
    r.pieces.push_back(p.text);
    r.text += p.text;
    if (p.stopped) {
      r.stopped = true;
      break;
    }
  }
  if (!r.stopped) {
    std::string tail = ts.Finish();
    r.pieces.push_back(tail);
    r.text += tail;
  }
  EXPECT_EQ(r.text, ts.text());
  return r;
}

TEST(TextStream, ReleasesOnlyWholeCharacters) {
  const std::string text = "Hello w\xC3\xB6rld, \xF0\x9F\xA6\x99 and \xE4\xB8\xAD\xE6\x96\x87!";
  Streamed r = Stream(text, {});
  EXPECT_EQ(r.text, text);
  EXPECT_FALSE(r.stopped);
  int held = 0;
  for (const std::string& p : r.pieces) {
    EXPECT_TRUE(ValidUtf8(p)) << "piece splits a character";
    if (p.empty()) ++held;
  }
  EXPECT_GT(held, 0) << "the llama emoji spans several byte tokens, so some step releases nothing";
}

TEST(TextStream, StopStrings) {
  struct Case {
    std::string text;
    std::vector<std::string> stops;
    std::string want;
    bool stopped;
  };
  const Case cases[] = {
      {"Hello world. Stop here please", {"Stop"}, "Hello world. ", true},
      {"Hello world", {"lo wor"}, "Hel", true},               // spans tokens
      {"world peace", {"worldwide"}, "world peace", false},    // held back, then released
      {"a\n\nb", {"\n\n"}, "a", true},
      {"abc", {"x", "bc", "c"}, "a", true},                    // the earliest match wins
      {"no stops at all", {""}, "no stops at all", false},     // empty stop strings are ignored
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    Streamed r = Stream(c.text, c.stops);
    EXPECT_EQ(r.text, c.want);
    EXPECT_EQ(r.stopped, c.stopped);
  }
}

TEST(TextStream, SpecialTokensAndBrokenBytes) {
  Streamed skipped = Stream("end", {}, true, {50256});
  EXPECT_EQ(skipped.text, "end");
  Streamed kept = Stream("end", {}, false, {50256});
  EXPECT_EQ(kept.text, "end<|endoftext|>");
  // A lone lead byte at the end of a request becomes U+FFFD, not a broken string.
  const Tokenizer& tok = Gpt2();
  std::vector<int32_t> llama = tok.Encode("\xF0\x9F\xA6\x99", false);
  ASSERT_GE(llama.size(), 2u);
  TextStream ts(&tok, {}, true);
  std::string out;
  for (size_t i = 0; i + 1 < llama.size(); ++i) out += ts.Push(llama[i]).text;
  out += ts.Finish();
  EXPECT_EQ(out, "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace aicloud::engine
