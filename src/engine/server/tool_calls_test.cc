// Tool calls read back out of generated text: whole outputs, and the same outputs streamed in
// pieces split everywhere, which must give the same calls (the streamed argument pieces
// concatenate to the whole-text arguments, byte for byte).
#include "engine/server/tool_calls.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace aicloud::engine {
namespace {

// Streams `text` in the given pieces and folds the events back into a ParsedOutput.
ParsedOutput Stream(ToolCallFormat format, const std::vector<std::string>& pieces, bool* well_formed = nullptr) {
  ToolCallStreamParser p(format);
  std::vector<ToolCallStreamParser::Event> events;
  for (const std::string& piece : pieces) {
    std::vector<ToolCallStreamParser::Event> ev = p.Push(piece);
    events.insert(events.end(), ev.begin(), ev.end());
  }
  std::vector<ToolCallStreamParser::Event> rest = p.Finish();
  events.insert(events.end(), rest.begin(), rest.end());
  ParsedOutput out;
  int32_t starts = 0;
  for (const auto& ev : events) {
    switch (ev.kind) {
      case ToolCallStreamParser::Event::Kind::kContent:
        out.content += ev.text;
        break;
      case ToolCallStreamParser::Event::Kind::kCallStart:
        EXPECT_EQ(ev.index, starts) << "calls are numbered in order";
        ++starts;
        out.calls.push_back({ev.name, ""});
        break;
      case ToolCallStreamParser::Event::Kind::kArguments:
        EXPECT_EQ(ev.index, starts - 1) << "arguments belong to the last call started";
        out.calls.back().arguments += ev.text;
        break;
    }
  }
  if (well_formed) *well_formed = !p.malformed();
  return out;
}

void ExpectSame(const ParsedOutput& a, const ParsedOutput& b, const std::string& where) {
  EXPECT_EQ(a.content, b.content) << where;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << where;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << where;
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << where;
  }
}

struct Case {
  ToolCallFormat format;
  std::string text;
  std::string content;
  std::vector<ParsedToolCall> calls;
};

std::vector<Case> Cases() {
  const ToolCallFormat H = ToolCallFormat::kHermes, L = ToolCallFormat::kLlama3Json;
  return {
      {H, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "",
       {{"get_weather", "{\"city\": \"Paris\"}"}}},
      {H, "Let me look.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
          "{\"name\": \"b\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}], \"q\": \"say \\\"hi\\\" {\"}}\n</tool_call>",
       "Let me look.", {{"a", "{}"}, {"b", "{\"x\": [1, {\"y\": \"}\"}], \"q\": \"say \\\"hi\\\" {\"}"}}},
      // Unicode, and whitespace inside the tags.
      {H, "<tool_call>   {\"name\":\"t\",\"arguments\":{\"v\":\"h\xC3\xA9llo \xF0\x9F\x98\x80\"}}   </tool_call>", "",
       {{"t", "{\"v\":\"h\xC3\xA9llo \xF0\x9F\x98\x80\"}"}}},
      // Arguments before the name; an unclosed last call whose JSON is complete.
      {H, "<tool_call>\n{\"arguments\": {\"k\": 1}, \"name\": \"late\"}", "", {{"late", "{\"k\": 1}"}}},
      // Not tags at all.
      {H, "a <tool box> and <tool_ca but no call", "a <tool box> and <tool_ca but no call", {}},
      {H, "plain answer", "plain answer", {}},
      // Malformed: the whole text is content.
      {H, "<tool_call>\n{\"name\": \"x\", \"arguments\": [1, 2]}\n</tool_call>",
       "<tool_call>\n{\"name\": \"x\", \"arguments\": [1, 2]}\n</tool_call>", {}},
      {H, "<tool_call>\nnot json\n</tool_call>", "<tool_call>\nnot json\n</tool_call>", {}},
      {H, "<tool_call>\n{\"arguments\": {}}\n</tool_call>", "<tool_call>\n{\"arguments\": {}}\n</tool_call>", {}},
      {H, "<tool_call>\n{\"name\": \"cut\", \"arguments\": {\"a\": ", "<tool_call>\n{\"name\": \"cut\", \"arguments\": {\"a\": ", {}},
      // Llama-3 JSON.
      {L, "{\"name\": \"f\", \"parameters\": {\"a\": 1}}", "", {{"f", "{\"a\": 1}"}}},
      {L, "<|python_tag|>{\"name\": \"f\", \"arguments\": {}}; {\"name\": \"g\", \"parameters\": {\"s\": \"; {\"}}", "",
       {{"f", "{}"}, {"g", "{\"s\": \"; {\"}"}}},
      {L, "  The answer is {\"name\": 1}", "  The answer is {\"name\": 1}", {}},
      // A JSON answer that merely has a "name" is not a call: a call gives its arguments.
      {L, "{\"name\": \"Bob\", \"age\": 3}", "{\"name\": \"Bob\", \"age\": 3}", {}},
      {H, "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", {}},
      {L, "{\"name\": \"f\", \"parameters\": {\"a\": 1}} trailing words", " trailing words", {{"f", "{\"a\": 1}"}}},
  };
}

TEST(ToolCalls, WholeOutputs) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.text);
    const ParsedOutput got = ParseToolCalls(c.format, c.text);
    ExpectSame(got, ParsedOutput{c.content, c.calls}, "whole");
  }
}

// Every way of cutting an output in two, and random cuts into many pieces, stream to the same
// calls as the whole text (for the well-formed cases; the malformed ones are sent as content).
TEST(ToolCalls, StreamedPiecesMatchTheWholeText) {
  std::mt19937 rng(5);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.text);
    const ParsedOutput whole = ParseToolCalls(c.format, c.text);
    bool ok = true;
    const ParsedOutput one = Stream(c.format, {c.text}, &ok);
    if (!whole.calls.empty()) {
      ExpectSame(one, whole, "one piece");
      EXPECT_TRUE(ok);
    }
    for (size_t cut = 0; cut <= c.text.size(); ++cut) {
      const ParsedOutput two = Stream(c.format, {c.text.substr(0, cut), c.text.substr(cut)});
      if (!whole.calls.empty()) {
        ExpectSame(two, whole, "cut at " + std::to_string(cut));
      } else if (!ok) {
        // Malformed after all: nothing is lost, whatever was not a call is content.
        EXPECT_TRUE(two.calls.empty() || two.content.size() + two.calls.size() > 0);
      }
    }
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<std::string> pieces;
      for (size_t i = 0; i < c.text.size();) {
        const size_t n = 1 + rng() % 4;
        pieces.push_back(c.text.substr(i, n));
        i += n;
      }
      const ParsedOutput many = Stream(c.format, pieces);
      if (!whole.calls.empty()) ExpectSame(many, whole, "random pieces");
    }
  }
}

// Plain text streams through as it comes, except what may still become a tag.
TEST(ToolCalls, ContentIsNotHeldBackLongerThanATag) {
  ToolCallStreamParser p(ToolCallFormat::kHermes);
  std::vector<ToolCallStreamParser::Event> ev = p.Push("Hello there <tool");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "Hello there");  // " <tool" may be the start of a call
  ev = p.Push("kit");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, " <toolkit");
  ev = p.Finish();
  EXPECT_TRUE(ev.empty());
  EXPECT_FALSE(p.saw_tool_call());

  // A call's name is sent as soon as it is complete, its arguments as they come.
  ToolCallStreamParser q(ToolCallFormat::kHermes);
  EXPECT_TRUE(q.Push("<tool_call>\n{\"name\": \"wea").empty());
  ev = q.Push("ther\", \"arguments\": {\"ci");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, ToolCallStreamParser::Event::Kind::kCallStart);
  EXPECT_EQ(ev[0].name, "weather");
  EXPECT_EQ(ev[1].kind, ToolCallStreamParser::Event::Kind::kArguments);
  EXPECT_EQ(ev[1].text, "{\"ci");
  ev = q.Push("ty\": \"Oslo\"}}\n</tool_call>");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "ty\": \"Oslo\"}");
  EXPECT_TRUE(q.saw_tool_call());
  EXPECT_FALSE(q.malformed());

  // Llama-3: text that does not start with a call is never held.
  ToolCallStreamParser l(ToolCallFormat::kLlama3Json);
  ev = l.Push("Sure, ");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "Sure, ");
}

}  // namespace
}  // namespace aicloud::engine
