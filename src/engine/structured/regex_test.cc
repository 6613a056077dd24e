#include "engine/structured/regex.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/structured/grammar.h"

namespace aicloud::engine::structured {
namespace {

std::shared_ptr<ByteAutomaton> CompileRegex(const std::string& re) {
  StatusOr<Pattern> p = ParseRegex(re);
  EXPECT_TRUE(p.ok()) << re << ": " << p.status();
  if (!p.ok()) return nullptr;
  StatusOr<std::shared_ptr<ByteAutomaton>> a = ByteAutomaton::Compile(*p);
  EXPECT_TRUE(a.ok()) << re << ": " << a.status();
  return a.ok() ? *a : nullptr;
}

struct RegexCase {
  std::string regex;
  std::vector<std::string> accepted;
  std::vector<std::string> rejected;
};

TEST(RegexTest, AcceptsAndRejects) {
  const std::vector<RegexCase> cases = {
      {"abc", {"abc"}, {"", "ab", "abcd", "abd"}},
      {"^abc$", {"abc"}, {"ab", "^abc$"}},
      {"a|bc|", {"a", "bc", ""}, {"b", "abc"}},
      {"a*b+c?", {"b", "aab", "abbbc", "bc"}, {"", "a", "ac", "abcc"}},
      {"(ab){2,3}", {"abab", "ababab"}, {"ab", "abababab", "aba"}},
      {"x{3}", {"xxx"}, {"xx", "xxxx"}},
      {"x{2,}", {"xx", "xxxxxxxx"}, {"x", ""}},
      {"x{,2}", {"", "x", "xx"}, {"xxx"}},
      {"x{0}", {""}, {"x"}},
      {"(?:a|b)+?c*?", {"a", "abba", "bcc"}, {"", "c"}},
      {"\\d{3}-\\d{4}", {"555-1234"}, {"55-1234", "555-12a4", "５５５-1234"}},
      {"\\w+", {"abc_XYZ09"}, {"a-b", "é"}},
      {"\\s", {" ", "\t", "\n", "\r", "\f", "\v"}, {"x", "\xc2\xa0"}},
      {"\\D\\W\\S", {"a-x", "é é"}, {"1-x", "a_x", "a- "}},
      {"[a-c]+", {"abcabc"}, {"d", "abd", ""}},
      {"[^a-c]", {"d", "é", "\n", "😀"}, {"a", "b", "", "dd"}},
      {"[-a]", {"-", "a"}, {"b"}},
      {"[a-]", {"-", "a"}, {"b"}},
      {"[\\d.]+", {"3.14"}, {"3,14"}},
      {"[^\\d]", {"x"}, {"5"}},
      {"[\\]\\\\]", {"]", "\\"}, {"a"}},
      {".", {"a", "é", "😀", "\t"}, {"\n", "", "ab", "\xff", "\xc3", "\xed\xa0\x80"}},
      {"\\.\\\\\\(\\)\\[\\]\\{\\}\\*\\+\\?\\|\\^\\$\\/", {".\\()[]{}*+?|^$/"}, {}},
      {"\\n\\t\\r\\f\\v", {"\n\t\r\f\v"}, {"ntrfv"}},
      {"\\x41\\xe9", {"A\xc3\xa9"}, {"A\xe9"}},
      {"\\u00e9\\u4e2d\\ud83d\\ude00", {"é中😀"}, {"e中😀"}},
      {"[é-ë]", {"é", "ê", "ë"}, {"e", "ì"}},
      {"[\\u0800-\\uffff]", {"\xe0\xa0\x80", "\xef\xbf\xbf", "中"}, {"\xed\xa0\x80", "\xdf\xbf"}},
      {"[\\x00-\\x{10}]?", {""}, {}},
      {"日本語", {"日本語"}, {"日本"}},
      {"a(b(c|d)*)?e", {"ae", "abe", "abcdce"}, {"ace", "abc"}},
  };
  for (const RegexCase& c : cases) {
    if (c.regex == "[\\x00-\\x{10}]?") continue;  // see the refusal test
    auto a = CompileRegex(c.regex);
    ASSERT_NE(a, nullptr);
    for (const std::string& s : c.accepted) EXPECT_TRUE(a->Matches(s)) << c.regex << " ~ " << s;
    for (const std::string& s : c.rejected) EXPECT_FALSE(a->Matches(s)) << c.regex << " !~ " << s;
  }
}

TEST(RegexTest, RefusalsNameTheConstructAndOffset) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"abc(?=x)", "lookahead (?= at offset 3 is not supported"},
      {"a(?!x)", "negative lookahead (?! at offset 1 is not supported"},
      {"(?<=x)a", "lookbehind (?<= at offset 0 is not supported"},
      {"(?<!x)a", "negative lookbehind (?<! at offset 0 is not supported"},
      {"(?P<n>a)", "named group at offset 0 is not supported"},
      {"(?<n>a)", "named group at offset 0 is not supported"},
      {"(?i)abc", "inline flags or group (?i at offset 0 is not supported"},
      {"(a)\\1", "backreference \\1 at offset 3 is not supported"},
      {"a\\bc", "word boundary \\b at offset 1 is not supported"},
      {"\\p{L}", "Unicode property \\p at offset 0 is not supported"},
      {"a\\q", "escape \\q at offset 1 is not supported"},
      {"a^b", "^ away from the start at offset 1 is not supported"},
      {"a$b", "$ away from the end at offset 1 is not supported"},
      {"a*+", "possessive quantifier at offset 2 is not supported"},
      {"a**", "a second quantifier at offset 2 is not supported"},
      {"[[:alpha:]]", "POSIX class [: at offset 1 is not supported"},
      {"*a", "nothing to repeat at offset 0"},
      {"^*", "nothing to repeat at offset 1"},
      {"a{1001}", "repetition count at offset 2 exceeds the limit of 1000"},
      {"a{5,2}", "repetition {5,2} at offset 1 has min above max"},
      {"a{x}", "malformed repetition { at offset 1"},
      {"(ab", "missing ) for the group opened at offset 0"},
      {"ab)", "unbalanced ) at offset 2"},
      {"[ab", "unterminated character class opened at offset 0"},
      {"[]", "empty character class at offset 0"},
      {"[z-a]", "reversed class range at offset 1"},
      {"a\\", "trailing backslash at offset 1"},
      {"\\ud800", "lone surrogate \\u escape at offset 0"},
      {"\\x4", "truncated escape at offset 0"},
      {"\xff", "invalid UTF-8 at offset 0"},
      {"[\\x00-\\x{10}]?", "bad hex digit in the escape at offset 6"},
  };
  for (const auto& [re, message] : cases) {
    StatusOr<Pattern> p = ParseRegex(re);
    ASSERT_FALSE(p.ok()) << re;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << re;
    EXPECT_NE(p.status().message().find(message), std::string::npos)
        << re << ": got \"" << p.status().message() << "\", want \"" << message << "\"";
  }
}

TEST(RegexTest, LimitsFailFast) {
  std::string deep;
  for (int i = 0; i < 201; ++i) deep += "(";
  deep += "a";
  for (int i = 0; i < 201; ++i) deep += ")";
  StatusOr<Pattern> p = ParseRegex(deep);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("deeper than 200"), std::string::npos) << p.status();

  // 200 levels is fine.
  std::string ok_deep;
  for (int i = 0; i < 200; ++i) ok_deep += "(";
  ok_deep += "a";
  for (int i = 0; i < 200; ++i) ok_deep += ")";
  EXPECT_TRUE(ParseRegex(ok_deep).ok());

  // Within the per-count limit but too big in total.
  p = ParseRegex("((a{1000}){1000}){1000}");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("the limit is 200000"), std::string::npos) << p.status();

  // 60k parentheses: refused by the depth cap, not by the stack.
  EXPECT_FALSE(ParseRegex(std::string(60000, '(')).ok());
}

TEST(RegexTest, LargeButAllowedRepeatCompiles) {
  auto a = CompileRegex("[a-z]{1,1000}");
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->Matches(std::string(1000, 'q')));
  EXPECT_FALSE(a->Matches(std::string(1001, 'q')));
  EXPECT_EQ(a->MinBytesToAccept(a->start()), 1);
}

TEST(AutomatonTest, MinBytesAndDeadStates) {
  auto a = CompileRegex("ab(cd|e)f");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->MinBytesToAccept(a->start()), 4);
  int32_t s = a->Walk(a->start(), "ab");
  EXPECT_EQ(a->MinBytesToAccept(s), 2);
  EXPECT_EQ(a->Step(s, 'x'), ByteAutomaton::kDead);
  EXPECT_EQ(a->Walk(s, "cdf"), a->Walk(s, "ef"));  // same DFA state: the end
  EXPECT_TRUE(a->IsAccepting(a->Walk(s, "ef")));
  EXPECT_EQ(a->MinBytesToAccept(ByteAutomaton::kDead), ByteAutomaton::kUnreachable);
}

TEST(AutomatonTest, EmptyLanguageIsRefusedAndDeadEndsAreTrimmed) {
  StatusOr<std::shared_ptr<ByteAutomaton>> none = ByteAutomaton::Compile(Nothing());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("matches no string"), std::string::npos);
  // "a" leads only into nothing: the automaton must refuse "a" at once, not later.
  StatusOr<std::shared_ptr<ByteAutomaton>> a =
      ByteAutomaton::Compile(Alternate({Concat({Literal("a"), Nothing()}), Literal("b")}));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->Step((*a)->start(), 'a'), ByteAutomaton::kDead);
  EXPECT_TRUE((*a)->Matches("b"));
}

TEST(AutomatonTest, NfaLimitAndDepthLimit) {
  AutomatonLimits limits;
  limits.max_nfa_states = 50;
  StatusOr<std::shared_ptr<ByteAutomaton>> a =
      ByteAutomaton::Compile(Repeat(Literal("abc"), 30, 30), limits);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("limit"), std::string::npos) << a.status();

  Pattern deep = Literal("x");
  for (int i = 0; i < 3000; ++i) deep = Alternate({Concat({Literal("("), deep}), Literal("y")});
  a = ByteAutomaton::Compile(deep);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("levels deep"), std::string::npos) << a.status();
}

TEST(AutomatonTest, DfaOverflowFailsClosed) {
  // (a|b)*a(a|b){12}: the classic 2^13-state DFA.
  StatusOr<Pattern> p = ParseRegex("(a|b)*a(a|b){12}");
  ASSERT_TRUE(p.ok());
  AutomatonLimits limits;
  limits.max_dfa_states = 1000;
  StatusOr<std::shared_ptr<ByteAutomaton>> a = ByteAutomaton::Compile(*p, limits);
  ASSERT_TRUE(a.ok());
  std::string text;
  uint32_t x = 12345;
  for (int i = 0; i < 20000; ++i) {
    x = x * 1103515245u + 12345u;
    text += (x >> 16) & 1 ? 'a' : 'b';
  }
  const int32_t s = (*a)->Walk((*a)->start(), text);
  EXPECT_EQ(s, ByteAutomaton::kDead);
  EXPECT_EQ((*a)->status().code(), StatusCode::kResourceExhausted);
  EXPECT_LE((*a)->dfa_states(), 1000);
  // Sticky: even the first byte is refused now.
  EXPECT_EQ((*a)->Step((*a)->start(), 'a'), ByteAutomaton::kDead);
}

}  // namespace
}  // namespace aicloud::engine::structured
