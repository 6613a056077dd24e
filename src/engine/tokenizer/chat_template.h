// ChatTemplate: turns chat messages into the prompt text a model was trained on.
//
//   StatusOr<ChatTemplate> chat = ChatTemplate::FromTokenizerConfig(dir + "/tokenizer_config.json");
//   if (!chat.ok()) return chat.status();   // UNIMPLEMENTED for templates it does not know
//   std::string prompt = chat->Render({{"system", "Be brief."}, {"user", "Hi"}},
//                                     /*add_generation_prompt=*/true);
//   std::vector<int32_t> ids = tokenizer->Encode(prompt, /*add_special_tokens=*/false);
//
// Models ship their template as Jinja in tokenizer_config.json's chat_template. This engine does
// not interpret Jinja: it recognises the template's family by the markers in its text and
// renders that family natively, reproducing what the template renders for plain
// {role, content} messages (no tools, no tool calls):
// - ChatML (Qwen2, Qwen2.5, SmolLM2, ...): "<|im_start|>{role}\n{content}<|im_end|>\n" per
//   message; "<|im_start|>assistant\n" as generation prompt. When the template carries a default
//   system prompt ("You are Qwen, created by Alibaba Cloud. ...") it is inserted if the first
//   message is not a system message. Qwen2.5's grouping of consecutive "tool" messages into one
//   user turn of <tool_response> blocks is reproduced when the template has it.
// - Llama-3: "<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>" per message,
//   content trimmed when the template says `| trim`, bos_token before the first message when
//   the template writes bos_token; the generation prompt
//   "<|start_header_id|>assistant<|end_header_id|>\n\n" is added when asked for, or always
//   when the template does not test add_generation_prompt.
// - Llama-3.1 (3.1, 3.2, 3.3 Instruct): the system turn opens with "Cutting Knowledge Date:
//   December 2023\nToday Date: <date>\n\n" ("Environment: ipython\n" first when tools are
//   given) and holds the trimmed system message; every content is trimmed; the date is the
//   template's default ("26 Jul 2024"), or today's when the template asks strftime_now.
// Anything else — including reasoning (<think>) templates — is refused with UNIMPLEMENTED rather
// than rendered differently from the model's template.
//
// Tools (RenderChat): ChatML renders them as Qwen2.5's template does — a "# Tools" section in
// the system turn with one `tojson` line per tool inside <tools></tools> and the instruction to
// answer in <tool_call></tool_call> blocks; an assistant message's calls replayed as
// <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>; tool results grouped into a user
// turn of <tool_response> blocks. ChatML templates without a tool section of their own
// (SmolLM2, Qwen2) get the same rendering. Llama-3 renders them in the JSON style of Llama-3.1's
// template: the tool list (`tojson(indent=4)`) and its instruction at the head of the first user
// message, a replayed call as {"name": ..., "parameters": ...}, a tool result as an "ipython"
// turn; one call per assistant message. Llama-3.1 templates render exactly that, as the template
// does (builtin tools and tools in the system message are not supported; tool results are
// written as JSON strings, as its `tojson` writes a string). Arguments arrive as JSON text (the API's form) and are
// parsed and re-written as the template's `tojson` writes them (py_json.h).
//
// The rendered prompt holds special tokens as text (and the BOS, for Llama-3): encode it with
// add_special_tokens=false so no second BOS is added.
//
// Thread-safety: immutable value; Render may run concurrently.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/tokenizer/tokenizer_config.h"

namespace aicloud::engine {

// One call an assistant message made, as the OpenAI API carries it.
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of an object
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool"
  std::string content;
  std::vector<ChatToolCall> tool_calls;  // assistant
  std::string tool_call_id;              // tool
  std::string name;
  bool content_is_null = false;          // an assistant message with tool calls only
};

enum class ChatFamily { kChatMl, kLlama3, kLlama31 };

// How a model of this family writes a tool call (and how RenderChat replays one):
//   kHermes      <tool_call>\n{"name": "...", "arguments": {...}}\n</tool_call>
//   kLlama3Json  {"name": "...", "parameters": {...}}
enum class ToolCallFormat { kHermes, kLlama3Json };

class ChatTemplate {
 public:
  // Reads tokenizer_config.json. NOT_FOUND when the file is missing or has no chat_template;
  // UNIMPLEMENTED naming the file when the template is of no supported family.
  static StatusOr<ChatTemplate> FromTokenizerConfig(const std::string& path);
  static StatusOr<ChatTemplate> FromConfig(const TokenizerConfig& config);
  // From template text; bos_token is what the template's `bos_token` renders as.
  static StatusOr<ChatTemplate> FromTemplate(std::string_view text, std::string_view origin,
                                             std::string bos_token);

  std::string Render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  // With tools (each the request's `tools[i]` object as given) and messages that may carry tool
  // calls and tool results. INVALID_ARGUMENT naming the message for tool-call arguments that are
  // not a JSON object, or (Llama-3) more than one call in a message.
  StatusOr<std::string> RenderChat(std::span<const ChatMessage> messages,
                                   std::span<const nlohmann::ordered_json> tools,
                                   bool add_generation_prompt) const;
  ToolCallFormat tool_call_format() const {
    return family_ == ChatFamily::kChatMl ? ToolCallFormat::kHermes : ToolCallFormat::kLlama3Json;
  }

  ChatFamily family() const { return family_; }
  std::string_view family_name() const;
  // The text that ends a model turn ("<|im_end|>", "<|eot_id|>"): a stop sequence.
  const std::string& end_of_turn() const { return end_of_turn_; }
  const std::optional<std::string>& default_system_prompt() const { return default_system_; }

 private:
  ChatTemplate() = default;
  StatusOr<std::string> RenderChatMl(std::span<const ChatMessage> messages,
                                     std::span<const nlohmann::ordered_json> tools,
                                     bool add_generation_prompt) const;
  StatusOr<std::string> RenderLlama3(std::span<const ChatMessage> messages,
                                     std::span<const nlohmann::ordered_json> tools,
                                     bool add_generation_prompt) const;
  StatusOr<std::string> RenderLlama31(std::span<const ChatMessage> messages,
                                      std::span<const nlohmann::ordered_json> tools,
                                      bool add_generation_prompt) const;

  ChatFamily family_ = ChatFamily::kChatMl;
  std::string end_of_turn_;
  std::optional<std::string> default_system_;  // ChatML
  bool tool_responses_ = false;                // ChatML: Qwen2.5's "tool" role handling
  bool trim_content_ = false;                  // Llama-3
  bool bos_first_ = false;                     // Llama-3
  std::string bos_token_;
  bool generation_prompt_always_ = false;  // the template ignores add_generation_prompt
  bool generation_prompt_never_ = false;
  // Llama-3.1: the "Today Date" the template writes: its literal default, or today's date when
  // it asks strftime_now (as transformers renders it).
  std::string default_date_;
  bool date_is_today_ = false;
};

}  // namespace aicloud::engine
