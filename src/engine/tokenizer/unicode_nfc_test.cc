// NFC against the Unicode Character Database's answers (data/tokenizers/nfc-cases.txt, every
// code point that decomposes, combines or reorders, alone and in context), plus the handling
// of bytes that are not UTF-8.
#include "engine/tokenizer/unicode_nfc.h"

#include <gtest/gtest.h>

#include <sstream>

#include "engine/tokenizer/tokenizer_test_util.h"
#include "engine/tokenizer/utf8.h"

namespace aicloud::engine_test {
namespace {

std::string FromHex(const std::string& list) {
  std::istringstream in(list);
  std::string out, hex;
  while (in >> hex) AppendUtf8(static_cast<char32_t>(std::stoul(hex, nullptr, 16)), &out);
  return out;
}

std::string Nfc(std::string_view s) {
  std::string out;
  NormalizeNfc(s, &out);
  return out;
}

TEST(UnicodeNfc, MatchesTheUnicodeDatabase) {
  std::istringstream in(ReadFileOrEmpty(SourcePath("data/tokenizers/nfc-cases.txt")));
  std::string line;
  int cases = 0, failures = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t semi = line.find(';');
    ASSERT_NE(semi, std::string::npos) << line;
    const std::string input = FromHex(line.substr(0, semi));
    const std::string want = FromHex(line.substr(semi + 1));
    ++cases;
    if (Nfc(input) != want) {
      if (++failures <= 20) ADD_FAILURE() << "NFC(" << line.substr(0, semi) << ") wrong";
    }
    // Normalizing twice changes nothing; the quick check never claims a changed text is NFC.
    EXPECT_EQ(Nfc(want), want) << line;
    if (want != input) {
      EXPECT_FALSE(IsNfcQuickCheckYes(input)) << line;
    }
  }
  EXPECT_GT(cases, 10000);
  EXPECT_EQ(failures, 0);
  EXPECT_STREQ(NfcUnicodeVersion(), "14.0.0");
}

TEST(UnicodeNfc, Examples) {
  EXPECT_EQ(Nfc("e\xcc\x81"), "\xc3\xa9");                       // e + U+0301 -> é
  EXPECT_EQ(Nfc("\xe2\x84\xab"), "\xc3\x85");                    // ANGSTROM SIGN -> Å
  EXPECT_EQ(Nfc("a\xcc\x82\xcc\xa3"), "\xe1\xba\xad");           // marks reordered, then ậ
  EXPECT_EQ(Nfc("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8"), "\xea\xb0\x81");  // jamo -> 각
  EXPECT_EQ(Nfc("\xef\xac\x81"), "\xef\xac\x81");                // ﬁ: compatibility, kept
  EXPECT_EQ(Nfc("plain ASCII"), "plain ASCII");
  EXPECT_TRUE(IsNfcQuickCheckYes("plain ASCII, caf\xc3\xa9, \xe4\xb8\xad\xe6\x96\x87, \xea\xb0\x81"));
  EXPECT_FALSE(IsNfcQuickCheckYes("cafe\xcc\x81"));
}

TEST(UnicodeNfc, InvalidBytesPassThroughAndSplitRuns) {
  EXPECT_EQ(Nfc("e\xcc\x81\xff"), "\xc3\xa9\xff");
  // The mark after the invalid byte starts a new run: it cannot join the "e" before it.
  EXPECT_EQ(Nfc("e\xff\xcc\x81"), "e\xff\xcc\x81");
  EXPECT_EQ(Nfc("\xc3"), "\xc3");
  EXPECT_EQ(Nfc(std::string("a\0b", 3)), std::string("a\0b", 3));
}

}  // namespace
}  // namespace aicloud::engine_test
