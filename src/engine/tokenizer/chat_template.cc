#include "engine/tokenizer/chat_template.h"

#include <fmt/format.h>

#include <ctime>

#include "engine/tokenizer/py_json.h"
#include "engine/tokenizer/utf8.h"

namespace aicloud::engine {
namespace {

constexpr char kSupported[] =
    "supported families: ChatML (<|im_start|>role\\ncontent<|im_end|>, e.g. Qwen2/2.5, "
    "SmolLM2), Llama-3 (<|start_header_id|>role<|end_header_id|>...<|eot_id|>) and Llama-3.1 "
    "(the same with its Cutting Knowledge Date preamble); the Jinja template itself is not "
    "interpreted";

bool Contains(std::string_view text, std::string_view marker) {
  return text.find(marker) != std::string_view::npos;
}

// Python's str.strip(), which Jinja's trim filter calls: Unicode whitespace and U+001C..U+001F.
std::string Trim(std::string_view s) {
  auto is_space = [](char32_t c) { return IsUnicodeWhiteSpace(c) || (c >= 0x1C && c <= 0x1F); };
  size_t begin = 0;
  while (begin < s.size()) {
    char32_t cp;
    const size_t n = Utf8DecodeAt(s, begin, &cp);
    if (n == 0 || !is_space(cp)) break;
    begin += n;
  }
  size_t end = s.size();
  while (end > begin) {
    size_t j = end - 1;
    while (j > begin && end - j < 4 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
    char32_t cp;
    if (Utf8DecodeAt(s, j, &cp) != end - j || !is_space(cp)) break;
    end = j;
  }
  return std::string(s.substr(begin, end - begin));
}

// The default system prompt of a ChatML template: the text of a Jinja string literal
// '<|im_start|>system\n...<|im_end|>' whose middle is literal text (not `' + messages[0]...`).
std::optional<std::string> FindDefaultSystemPrompt(std::string_view text) {
  constexpr std::string_view kStart = "<|im_start|>system";
  constexpr std::string_view kEnd = "<|im_end|>";
  for (size_t at = text.find(kStart); at != std::string_view::npos;
       at = text.find(kStart, at + 1)) {
    size_t i = at + kStart.size();
    // The newline after the role, written as an escape or as a real newline.
    if (text.substr(i, 2) == "\\n") {
      i += 2;
    } else if (text.substr(i, 1) == "\n") {
      i += 1;
    } else {
      continue;
    }
    std::string prompt;
    bool ok = false;
    while (i < text.size()) {
      if (text.substr(i, kEnd.size()) == kEnd) {
        ok = true;
        break;
      }
      const char c = text[i];
      if (c == '\'' || c == '"') break;  // the literal ends: not a literal prompt
      if (c == '\\' && i + 1 < text.size()) {
        const char e = text[i + 1];
        prompt.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e);
        i += 2;
        continue;
      }
      prompt.push_back(c);
      ++i;
    }
    if (ok && !prompt.empty()) return prompt;
  }
  return std::nullopt;
}

}  // namespace

StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfig(const std::string& path) {
  StatusOr<TokenizerConfig> config = TokenizerConfig::FromFile(path);
  if (!config.ok()) return config.status();
  return FromConfig(*config);
}

StatusOr<ChatTemplate> ChatTemplate::FromConfig(const TokenizerConfig& config) {
  if (!config.chat_template) {
    return NotFoundError(fmt::format("{}: chat_template: missing", config.origin));
  }
  return FromTemplate(*config.chat_template, config.origin, config.bos_token.value_or(""));
}

StatusOr<ChatTemplate> ChatTemplate::FromTemplate(std::string_view text, std::string_view origin,
                                                  std::string bos_token) {
  ChatTemplate t;
  const bool tests_generation_prompt = Contains(text, "add_generation_prompt");
  if (Contains(text, "<|start_header_id|>") && Contains(text, "<|end_header_id|>") &&
      Contains(text, "<|eot_id|>")) {
    if (Contains(text, "Cutting Knowledge Date")) {
      t.family_ = ChatFamily::kLlama31;
      t.end_of_turn_ = "<|eot_id|>";
      t.bos_first_ = Contains(text, "bos_token");
      t.bos_token_ = std::move(bos_token);
      t.date_is_today_ = Contains(text, "strftime_now");
      t.default_date_ = "26 Jul 2024";
      constexpr std::string_view kDefault = "set date_string = \"";
      if (size_t at = text.find(kDefault); at != std::string_view::npos) {
        const size_t begin = at + kDefault.size(), end = text.find('"', begin);
        if (end != std::string_view::npos) t.default_date_ = std::string(text.substr(begin, end - begin));
      }
      t.generation_prompt_always_ = !tests_generation_prompt;
      return t;
    }
    t.family_ = ChatFamily::kLlama3;
    t.end_of_turn_ = "<|eot_id|>";
    t.trim_content_ = Contains(text, "| trim") || Contains(text, "|trim");
    t.bos_first_ = Contains(text, "bos_token");
    t.bos_token_ = std::move(bos_token);
    t.generation_prompt_always_ = !tests_generation_prompt;
    return t;
  }
  if (Contains(text, "<|im_start|>") && Contains(text, "<|im_end|>")) {
    if (Contains(text, "<think>") || Contains(text, "reasoning_content")) {
      return UnimplementedError(fmt::format(
          "{}: chat_template: a ChatML template with reasoning (<think>) handling is not "
          "rendered natively; {}",
          origin, kSupported));
    }
    t.family_ = ChatFamily::kChatMl;
    t.end_of_turn_ = "<|im_end|>";
    t.default_system_ = FindDefaultSystemPrompt(text);
    t.tool_responses_ = Contains(text, "<tool_response>");
    t.generation_prompt_never_ = !tests_generation_prompt;
    return t;
  }
  return UnimplementedError(
      fmt::format("{}: chat_template: unrecognised template; {}", origin, kSupported));
}

std::string_view ChatTemplate::family_name() const {
  switch (family_) {
    case ChatFamily::kLlama3:
      return "llama3";
    case ChatFamily::kLlama31:
      return "llama3.1";
    case ChatFamily::kChatMl:
      break;
  }
  return "chatml";
}

std::string ChatTemplate::Render(std::span<const ChatMessage> messages,
                                 bool add_generation_prompt) const {
  // Plain messages render without errors (no tool calls to parse).
  StatusOr<std::string> r = RenderChat(messages, {}, add_generation_prompt);
  return r.ok() ? std::move(*r) : std::string();
}

StatusOr<std::string> ChatTemplate::RenderChat(std::span<const ChatMessage> messages,
                                               std::span<const nlohmann::ordered_json> tools,
                                               bool add_generation_prompt) const {
  if (generation_prompt_always_) add_generation_prompt = true;
  if (generation_prompt_never_) add_generation_prompt = false;
  switch (family_) {
    case ChatFamily::kLlama3:
      return RenderLlama3(messages, tools, add_generation_prompt);
    case ChatFamily::kLlama31:
      return RenderLlama31(messages, tools, add_generation_prompt);
    case ChatFamily::kChatMl:
      break;
  }
  return RenderChatMl(messages, tools, add_generation_prompt);
}

namespace {

// A call's arguments as the template's `tojson` writes them.
StatusOr<std::string> Arguments(const ChatToolCall& call, size_t message, size_t index) {
  nlohmann::ordered_json args = nlohmann::ordered_json::parse(call.arguments, nullptr, false);
  if (args.is_discarded() || !args.is_object()) {
    return InvalidArgumentError(fmt::format("messages[{}].tool_calls[{}].function.arguments: must be a JSON object "
                                            "written as a string",
                                            message, index));
  }
  return PyJsonDumps(args);
}

}  // namespace

StatusOr<std::string> ChatTemplate::RenderChatMl(std::span<const ChatMessage> messages,
                                                 std::span<const nlohmann::ordered_json> tools,
                                                 bool add_generation_prompt) const {
  std::string out;
  size_t first = 0;
  if (!tools.empty()) {
    // Qwen2.5: the system text (given or default) followed by the tool section.
    std::string system = default_system_.value_or("");
    bool has_system = default_system_.has_value();
    if (!messages.empty() && messages[0].role == "system") {
      system = messages[0].content;
      has_system = true;
      first = 1;
    }
    // Qwen2.5 writes the system text (its own default when none is given) and then the tool
    // section; a template without a default system text starts the turn with the section.
    out += "<|im_start|>system\n" + system;
    if (has_system) out += "\n\n";
    out += "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
           "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const nlohmann::ordered_json& t : tools) out += "\n" + PyJsonDumps(t);
    out += "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
           "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
           "<args-json-object>}\n</tool_call><|im_end|>\n";
  } else if (default_system_ && (messages.empty() || messages[0].role != "system")) {
    out += "<|im_start|>system\n" + *default_system_ + "<|im_end|>\n";
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if ((tool_responses_ || !tools.empty()) && m.role == "tool") {
      // Qwen2.5: a run of tool results is one user turn of <tool_response> blocks.
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
      continue;
    }
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      out += "<|im_start|>assistant";
      if (!m.content.empty()) out += "\n" + m.content;
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        StatusOr<std::string> args = Arguments(m.tool_calls[k], i, k);
        if (!args.ok()) return args.status();
        out += "\n<tool_call>\n{\"name\": \"" + m.tool_calls[k].name + "\", \"arguments\": " + *args + "}\n</tool_call>";
      }
      out += "<|im_end|>\n";
      continue;
    }
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

StatusOr<std::string> ChatTemplate::RenderLlama31(std::span<const ChatMessage> messages,
                                                  std::span<const nlohmann::ordered_json> tools,
                                                  bool add_generation_prompt) const {
  std::string out = bos_first_ ? bos_token_ : "";
  std::string system;
  size_t base = 0;  // messages taken off the front, so errors number messages as the request did
  if (!messages.empty() && messages[0].role == "system") {
    system = Trim(messages[0].content);
    messages = messages.subspan(1);
    ++base;
  }
  std::string date = default_date_;
  if (date_is_today_) {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);  // transformers' strftime_now: datetime.now(), local time
    char buf[32];
    std::strftime(buf, sizeof(buf), "%d %b %Y", &tm);
    date = buf;
  }
  out += "<|start_header_id|>system<|end_header_id|>\n\n";
  if (!tools.empty()) out += "Environment: ipython\n";
  out += "Cutting Knowledge Date: December 2023\nToday Date: " + date + "\n\n" + system + "<|eot_id|>";
  if (!tools.empty()) {
    if (messages.empty()) {
      return InvalidArgumentError("messages: this model's template puts the tools in the first user message, and "
                                  "there is none");
    }
    out += "<|start_header_id|>user<|end_header_id|>\n\n";
    out += "Given the following functions, please respond with a JSON for a function call with its proper "
           "arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, "
           "\"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n";
    for (const nlohmann::ordered_json& t : tools) out += PyJsonDumps(t, 4) + "\n\n";
    out += Trim(messages[0].content) + "<|eot_id|>";
    messages = messages.subspan(1);
    ++base;
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (!m.tool_calls.empty()) {
      if (m.tool_calls.size() > 1) {
        return InvalidArgumentError(fmt::format("messages[{}].tool_calls: this model's template replays one tool call "
                                                "per assistant message",
                                                base + i));
      }
      StatusOr<std::string> args = Arguments(m.tool_calls[0], base + i, 0);
      if (!args.ok()) return args.status();
      out += "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"" + m.tool_calls[0].name +
             "\", \"parameters\": " + *args + "}<|eot_id|>";
    } else if (m.role == "tool" || m.role == "ipython") {
      out += "<|start_header_id|>ipython<|end_header_id|>\n\n" + PyJsonDumps(m.content) + "<|eot_id|>";
    } else {
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + Trim(m.content) + "<|eot_id|>";
    }
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

StatusOr<std::string> ChatTemplate::RenderLlama3(std::span<const ChatMessage> messages,
                                                 std::span<const nlohmann::ordered_json> tools,
                                                 bool add_generation_prompt) const {
  std::string out;
  bool tools_placed = tools.empty();
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (i == 0 && bos_first_) out += bos_token_;
    const std::string role = m.role == "tool" ? "ipython" : m.role;
    out += "<|start_header_id|>" + role + "<|end_header_id|>\n\n";
    if (!tools_placed && m.role == "user") {
      // Llama-3.1's JSON tool calling: the functions head the first user message.
      out += "Given the following functions, please respond with a JSON for a function call with its proper "
             "arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, "
             "\"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n";
      for (const nlohmann::ordered_json& t : tools) out += PyJsonDumps(t, 4) + "\n\n";
      tools_placed = true;
    }
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      if (m.tool_calls.size() > 1) {
        return InvalidArgumentError(fmt::format("messages[{}].tool_calls: this model's template replays one tool call "
                                                "per assistant message",
                                                i));
      }
      StatusOr<std::string> args = Arguments(m.tool_calls[0], i, 0);
      if (!args.ok()) return args.status();
      out += "{\"name\": \"" + m.tool_calls[0].name + "\", \"parameters\": " + *args + "}<|eot_id|>";
      continue;
    }
    out += trim_content_ ? Trim(m.content) : m.content;
    out += "<|eot_id|>";
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

}  // namespace aicloud::engine
