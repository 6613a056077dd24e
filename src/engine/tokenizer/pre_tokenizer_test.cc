// Pre-tokenizer steps on their own: Split behaviours (the examples of Hugging Face's
// SplitDelimiterBehavior documentation), invert, ByteLevel's prefix space and regex, invalid
// UTF-8, and the \s rewrite that makes PCRE2 read patterns as Oniguruma does.
#include "engine/tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include "engine/tokenizer/regex.h"

namespace aicloud::engine {
namespace {

using nlohmann::json;

std::vector<std::string> Pieces(const json& config, std::string_view text) {
  PreTokenizerInfo info;
  StatusOr<std::unique_ptr<PreTokenizer>> pre = ParsePreTokenizer(config, "pre_tokenizer", &info);
  EXPECT_TRUE(pre.ok()) << pre.status();
  PreTokenized p;
  p.Reset(text);
  if (pre.ok() && *pre) (*pre)->Apply(&p);
  std::vector<std::string> out;
  for (const TextSpan& s : p.spans) out.emplace_back(p.Piece(s));
  return out;
}

json Split(const json& pattern, const char* behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", invert}};
}

using V = std::vector<std::string>;

TEST(PreTokenizerSplit, DelimiterBehaviours) {
  const json dash = {{"String", "-"}};
  const std::string text = "the-final--countdown";
  EXPECT_EQ(Pieces(Split(dash, "Removed"), text), (V{"the", "final", "countdown"}));
  EXPECT_EQ(Pieces(Split(dash, "Isolated"), text), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(Pieces(Split(dash, "MergedWithPrevious"), text),
            (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(Pieces(Split(dash, "MergedWithNext"), text), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(Pieces(Split(dash, "Contiguous"), text), (V{"the", "-", "final", "--", "countdown"}));
  // Delimiters at the ends.
  EXPECT_EQ(Pieces(Split(dash, "MergedWithPrevious"), "-a-"), (V{"-", "a-"}));
  EXPECT_EQ(Pieces(Split(dash, "MergedWithNext"), "-a-"), (V{"-a", "-"}));
  EXPECT_EQ(Pieces(Split(dash, "Removed"), "--"), V{});
}

TEST(PreTokenizerSplit, InvertAndRegex) {
  const json letters = {{"Regex", "\\p{L}+"}};
  // invert: the pattern describes what to keep; the rest is the delimiter.
  EXPECT_EQ(Pieces(Split(letters, "Removed", true), "ab, cd!"), (V{"ab", "cd"}));
  EXPECT_EQ(Pieces(Split(letters, "Removed", false), "ab, cd!"), (V{", ", "!"}));
  EXPECT_EQ(Pieces(Split(letters, "Isolated", true), "ab, cd"), (V{"ab", ", ", "cd"}));
  EXPECT_EQ(Pieces(Split(letters, "MergedWithPrevious", true), "ab, cd"), (V{"ab, ", "cd"}));
  // The Llama-3 pattern, including its lookahead: the last space of a run goes with the word.
  const json llama3 = {{"Regex",
                        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}};
  EXPECT_EQ(Pieces(Split(llama3, "Isolated"), "Hello   world 12345 I'LL\n\n  go"),
            (V{"Hello", "  ", " world", " ", "123", "45", " I", "'LL", "\n\n", " ", " go"}));
}

TEST(PreTokenizerSplit, InvalidUtf8StaysBetweenPieces) {
  const json letters = {{"Regex", "\\p{L}+"}};
  EXPECT_EQ(Pieces(Split(letters, "Isolated"), "ab\xff" "cd\xc3"), (V{"ab", "\xff", "cd", "\xc3"}));
  EXPECT_EQ(Pieces(Split(letters, "Removed", true), "\x80\x80x"), (V{"x"}));
}

TEST(PreTokenizerByteLevel, PrefixSpaceAndGpt2Regex) {
  EXPECT_EQ(Pieces({{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}}, "hi"),
            V{" hi"});
  EXPECT_EQ(Pieces({{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}}, " hi"),
            V{" hi"});
  EXPECT_EQ(Pieces({{"type", "ByteLevel"}, {"add_prefix_space", true}}, "hello world!"),
            (V{" hello", " world", "!"}));
  EXPECT_EQ(Pieces({{"type", "ByteLevel"}, {"add_prefix_space", false}}, "a  b\t\n"),
            (V{"a", " ", " b", "\t\n"}));
  // In a sequence, the prefix space goes before every piece the earlier steps made.
  const json seq = {{"type", "Sequence"},
                    {"pretokenizers",
                     {Split({{"Regex", "\\p{N}{1,3}"}}, "Isolated"),
                      {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}}}}};
  EXPECT_EQ(Pieces(seq, "ab1234"), (V{" ab", " 123", " 4"}));
  PreTokenizerInfo info;
  ASSERT_TRUE(ParsePreTokenizer(seq, "pre_tokenizer", &info).ok());
  EXPECT_TRUE(info.byte_level);
}

TEST(PreTokenizerRegex, WhitespaceAsOniguruma) {
  EXPECT_EQ(OnigurumaCompatiblePattern(R"(\s+(?!\S)|\s+)"),
            R"([\t\n\x{0B}\f\r\x{85}\p{Z}]+(?![^\t\n\x{0B}\f\r\x{85}\p{Z}])|[\t\n\x{0B}\f\r\x{85}\p{Z}]+)");
  EXPECT_EQ(OnigurumaCompatiblePattern(R"([^\s\p{L}])"), R"([^\t\n\x{0B}\f\r\x{85}\p{Z}\p{L}])");
  // Left alone: \S inside a class, an escaped backslash, \Q...\E, a leading ']' in a class.
  EXPECT_EQ(OnigurumaCompatiblePattern(R"([\S])"), R"([\S])");
  EXPECT_EQ(OnigurumaCompatiblePattern(R"(\\s)"), R"(\\s)");
  EXPECT_EQ(OnigurumaCompatiblePattern(R"(\Q\s\E\s)"), R"(\Q\s\E[\t\n\x{0B}\f\r\x{85}\p{Z}])");
  EXPECT_EQ(OnigurumaCompatiblePattern(R"([]\s])"), R"([]\t\n\x{0B}\f\r\x{85}\p{Z}])");
  EXPECT_EQ(OnigurumaCompatiblePattern(R"([[:alpha:]\s])"), R"([[:alpha:]\t\n\x{0B}\f\r\x{85}\p{Z}])");

  EXPECT_EQ(OnigurumaCompatiblePattern(R"(\w+|\W|[\w-])"),
            R"([\p{L}\p{M}\p{N}\p{Pc}]+|[^\p{L}\p{M}\p{N}\p{Pc}]|[\p{L}\p{M}\p{N}\p{Pc}-])");
  StatusOr<std::unique_ptr<Regex>> word = Regex::Compile(R"(\w+)");
  ASSERT_TRUE(word.ok()) << word.status();
  EXPECT_TRUE((*word)->FullMatch("e\xcc\x81_\xe2\x80\xbf" "9"));  // mark, '_', U+203F, digit
  EXPECT_FALSE((*word)->FullMatch("a-b"));

  StatusOr<std::unique_ptr<Regex>> space = Regex::Compile(R"(\s)");
  ASSERT_TRUE(space.ok()) << space.status();
  EXPECT_TRUE((*space)->FullMatch("\xc2\x85"));       // U+0085 NEXT LINE
  EXPECT_TRUE((*space)->FullMatch("\xe3\x80\x80"));   // U+3000 IDEOGRAPHIC SPACE
  EXPECT_FALSE((*space)->FullMatch("\xe1\xa0\x8e"));  // U+180E MONGOLIAN VOWEL SEPARATOR
  EXPECT_FALSE((*space)->FullMatch("\xef\xbb\xbf"));  // U+FEFF
}

TEST(PreTokenizerRegex, EmptyMatchesAndLongInput) {
  StatusOr<std::unique_ptr<Regex>> re = Regex::Compile("a*");
  ASSERT_TRUE(re.ok());
  std::vector<Regex::Match> m;
  EXPECT_TRUE((*re)->FindAll("baab\xc3\xa9" "a", &m));
  ASSERT_EQ(m.size(), 2u);  // empty matches are skipped, one character at a time
  EXPECT_EQ(m[0].begin, 1u);
  EXPECT_EQ(m[0].end, 3u);
  EXPECT_EQ(m[1].begin, 6u);
  // A megabyte of whitespace under the lookahead pattern: one piece, no stack trouble.
  re = Regex::Compile(R"(\s+(?!\S)|\s+)");
  ASSERT_TRUE(re.ok());
  m.clear();
  EXPECT_TRUE((*re)->FindAll(std::string(1 << 20, ' ') + "x", &m));
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].end, (1u << 20) - 1);
}

}  // namespace
}  // namespace aicloud::engine
