// Tool calls read back out of a chat model's text, whole or as it streams.
//
//   ParsedOutput out = ParseToolCalls(ToolCallFormat::kHermes, text);
//   for (const ParsedToolCall& c : out.calls) use(c.name, c.arguments);   // arguments: JSON text
//
//   ToolCallStreamParser p(ToolCallFormat::kHermes);
//   for (auto& ev : p.Push(delta_text)) send(ev);   // content, a call's start (name), argument pieces
//   for (auto& ev : p.Finish()) send(ev);
//
// Formats (the chat template's, tool_call_format() in chat_template.h):
//   Hermes (ChatML, Qwen2.5):  <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
//     any number of them; text before the first is content. Whitespace inside the tags is free;
//     an unclosed last <tool_call> whose JSON is complete counts.
//   Llama-3 JSON:  [<|python_tag|>]{"name": "NAME", "parameters": {...}} [; {...}]...
//     only when the output starts (after whitespace) with "{" or <|python_tag|>; "arguments" is
//     accepted for "parameters".
//
// `arguments` is the verbatim text of the arguments value as the model wrote it, the same whole
// or streamed: the streamed pieces of a call concatenate to exactly ParseToolCalls' string.
// A call starts (its name is sent) once the name string is complete; argument text is then
// passed on as it arrives, without waiting for the closing tag. When the model writes the
// arguments before the name, they are sent at once when the call ends.
//
// Malformed output (a body that is not a JSON object, no name, arguments that are not an
// object): ParseToolCalls returns no calls and the whole text as content, as vLLM does. A
// stream cannot take back what it sent: a call already started is closed as it is, and the
// text after it is streamed on as content; a malformed call not yet started is sent as content.
//
// Thread-safety: ToolCallStreamParser is a plain object for one stream; ParseToolCalls is pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/chat_template.h"

namespace aicloud::engine {

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // the JSON text of the arguments value
};

struct ParsedOutput {
  std::string content;  // text outside the calls; "" when it is only whitespace
  std::vector<ParsedToolCall> calls;
};

ParsedOutput ParseToolCalls(ToolCallFormat format, std::string_view text);

class ToolCallStreamParser {
 public:
  struct Event {
    enum class Kind { kContent, kCallStart, kArguments };
    Kind kind = Kind::kContent;
    int32_t index = 0;  // the call's position among this output's calls
    std::string text;   // kContent: text; kArguments: a piece of the arguments
    std::string name;   // kCallStart
  };

  explicit ToolCallStreamParser(ToolCallFormat format);

  std::vector<Event> Push(std::string_view delta);
  // The end of the output: held-back text is released.
  std::vector<Event> Finish();

  bool saw_tool_call() const { return calls_ > 0; }
  // Whether some call was malformed or left open (ParseToolCalls then returns none).
  bool malformed() const { return malformed_; }

 private:
  enum class Mode { kUndecided, kContent, kBody, kAfterBody, kTextOnly };

  void Run(bool at_end, std::vector<Event>* out);
  // One call body at the head of buf_; true when it made progress.
  bool Body(bool at_end, std::vector<Event>* out);
  void EmitContent(std::string_view text, std::vector<Event>* out);

  const ToolCallFormat format_;
  Mode mode_;
  std::string buf_;           // text not yet consumed
  int32_t calls_ = 0;         // calls started or completed
  bool started_ = false;      // the call in buf_ has sent its start
  size_t args_sent_ = 0;      // bytes of its arguments sent
  bool malformed_ = false;
};

}  // namespace aicloud::engine
