// Chat templates: the real Qwen2.5 and Llama-3 tokenizer_config.json files and the published
// templates of Meta-Llama-3-Instruct, SmolLM2 and Qwen2, rendered natively. The expected strings
// are what a Jinja renderer (transformers.js's) produces from the same templates and messages.
#include "engine/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "engine/tokenizer/py_json.h"
#include "engine/tokenizer/tokenizer_test_util.h"

namespace aicloud::engine_test {
namespace {

const std::vector<ChatMessage> kOne = {{"user", "Hello"}};
const std::vector<ChatMessage> kMulti = {{"system", "You are terse."},
                                         {"user", "Hi"},
                                         {"assistant", "Hello."},
                                         {"user", "Bye"}};
const std::vector<ChatMessage> kPadded = {{"user", "  padded \n"}};

// Meta-Llama-3-8B-Instruct's template: the generation prompt depends on add_generation_prompt.
constexpr char kLlama3Instruct[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
// SmolLM2-Instruct's template, with real newlines inside its string literals.
constexpr char kSmolLm2[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\n' }}{% endif %}";
// Qwen2-Instruct's template.
constexpr char kQwen2[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' "
    "+ message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

StatusOr<ChatTemplate> FromCache(const std::string& package) {
  const std::string path = NpmModelDir(package) + "/tokenizer_config.json";
  if (!std::filesystem::exists(path)) {
    return NotFoundError(path + " is missing: run scripts/setup");
  }
  return ChatTemplate::FromTokenizerConfig(path);
}

TEST(ChatTemplate, Qwen25FromTokenizerConfig) {
  StatusOr<ChatTemplate> chat = FromCache("tokenizer-qwen2_5");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->family(), ChatFamily::kChatMl);
  EXPECT_EQ(chat->end_of_turn(), "<|im_end|>");
  EXPECT_EQ(chat->default_system_prompt(),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  const std::string system =
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
      "assistant.<|im_end|>\n";
  EXPECT_EQ(chat->Render(kOne, true),
            system + "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat->Render(kOne, false), system + "<|im_start|>user\nHello<|im_end|>\n");
  EXPECT_EQ(chat->Render(kMulti, true),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  // Content is not trimmed in ChatML.
  EXPECT_EQ(chat->Render(kPadded, false), system + "<|im_start|>user\n  padded \n<|im_end|>\n");
  // Consecutive tool results become one user turn of <tool_response> blocks.
  const std::vector<ChatMessage> tools = {{"user", "Weather?"},
                                          {"assistant", "Let me check."},
                                          {"tool", "{\"t\": 20}"},
                                          {"tool", "{\"t\": 21}"},
                                          {"user", "thanks"}};
  EXPECT_EQ(chat->Render(tools, true),
            system +
                "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\nLet me "
                "check.<|im_end|>\n<|im_start|>user\n<tool_response>\n{\"t\": "
                "20}\n</tool_response>\n<tool_response>\n{\"t\": "
                "21}\n</tool_response><|im_end|>\n<|im_start|>user\nthanks<|im_end|>\n"
                "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3FromTokenizerConfig) {
  StatusOr<ChatTemplate> chat = FromCache("tokenizer-llama3");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->family(), ChatFamily::kLlama3);
  EXPECT_EQ(chat->end_of_turn(), "<|eot_id|>");
  const std::string header = "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(chat->Render(kOne, true),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>" + header);
  // This file's template writes the assistant header unconditionally.
  EXPECT_EQ(chat->Render(kOne, false), chat->Render(kOne, true));
  EXPECT_EQ(chat->Render(kMulti, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are "
            "terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>" + header);
  // `| trim` strips the content.
  EXPECT_EQ(chat->Render(kPadded, true),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\npadded<|eot_id|>" + header);
  EXPECT_EQ(chat->Render({}, true), header);
}

TEST(ChatTemplate, PublishedTemplatesOfOtherModels) {
  StatusOr<ChatTemplate> llama = ChatTemplate::FromTemplate(kLlama3Instruct, "llama3", "<|begin_of_text|>");
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(llama->Render(kOne, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>");
  EXPECT_EQ(llama->Render(kOne, true),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");

  StatusOr<ChatTemplate> smol = ChatTemplate::FromTemplate(kSmolLm2, "smollm2", "");
  ASSERT_TRUE(smol.ok()) << smol.status();
  EXPECT_EQ(smol->default_system_prompt(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(smol->Render(kOne, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(smol->Render(kMulti, false),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n");

  StatusOr<ChatTemplate> qwen2 = ChatTemplate::FromTemplate(kQwen2, "qwen2", "");
  ASSERT_TRUE(qwen2.ok()) << qwen2.status();
  EXPECT_EQ(qwen2->Render(kOne, true),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
            "Hello<|im_end|>\n<|im_start|>assistant\n");

  // A ChatML template without a default system prompt adds none.
  StatusOr<ChatTemplate> bare = ChatTemplate::FromTemplate(
      "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + "
      "'<|im_end|>\\n'}}{% endfor %}{% if add_generation_prompt %}{{'<|im_start|>assistant\\n'}}"
      "{% endif %}",
      "bare", "");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_FALSE(bare->default_system_prompt().has_value());
  EXPECT_EQ(bare->Render(kOne, true), "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
}

// The rendered prompt encodes with its markers as single special tokens and one BOS.
TEST(ChatTemplate, RenderedPromptsEncodeToSpecialTokens) {
  std::unique_ptr<Tokenizer> llama = LoadCached("tokenizer-llama3", true);
  StatusOr<ChatTemplate> chat = FromCache("tokenizer-llama3");
  ASSERT_TRUE(llama && chat.ok());
  std::vector<int32_t> ids = llama->Encode(chat->Render(kOne, true), /*add_special_tokens=*/false);
  ASSERT_GE(ids.size(), 8u);
  EXPECT_EQ(ids[0], 128000);  // <|begin_of_text|>, once
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128000), 1);
  EXPECT_EQ(ids[1], 128006);  // <|start_header_id|>
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *llama->FindToken("<|eot_id|>")), 1);

  std::unique_ptr<Tokenizer> qwen = LoadCached("tokenizer-qwen2_5", true);
  StatusOr<ChatTemplate> qchat = FromCache("tokenizer-qwen2_5");
  ASSERT_TRUE(qwen && qchat.ok());
  ids = qwen->Encode(qchat->Render(kOne, true), false);
  EXPECT_EQ(ids[0], 151644);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 151644), 3);  // system, user, assistant
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 151645), 2);
}

TEST(ChatTemplate, UnsupportedTemplatesAreRefused) {
  struct Case {
    const char* name;
    const char* text;
    const char* message;
  } cases[] = {
      {"mistral",
       "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' "
       "+ message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token}}{% endif "
       "%}{% endfor %}",
       "mistral: chat_template: unrecognised template; supported families: ChatML"},
      {"gemma",
       "{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\\n' + "
       "message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}",
       "gemma: chat_template: unrecognised template"},
      {"qwen3",
       "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + "
       "message.content }}{%- if reasoning_content %}<think>{%- endif %}{{- '<|im_end|>\\n' }}"
       "{%- endfor %}",
       "qwen3: chat_template: a ChatML template with reasoning"},
      {"empty", "", "empty: chat_template: unrecognised template"},
  };
  for (const Case& c : cases) {
    StatusOr<ChatTemplate> chat = ChatTemplate::FromTemplate(c.text, c.name, "<s>");
    ASSERT_FALSE(chat.ok()) << c.name;
    EXPECT_EQ(chat.status().code(), StatusCode::kUnimplemented) << c.name;
    EXPECT_NE(chat.status().message().find(c.message), std::string::npos)
        << chat.status().message();
    EXPECT_NE(chat.status().message().find("Llama-3"), std::string::npos)
        << "the message lists the supported families";
  }
}

TEST(ChatTemplate, ConfigWithoutTemplateAndMissingFile) {
  StatusOr<TokenizerConfig> config = TokenizerConfig::FromJson(R"({"eos_token": "</s>"})", "cfg.json");
  ASSERT_TRUE(config.ok());
  StatusOr<ChatTemplate> chat = ChatTemplate::FromConfig(*config);
  EXPECT_EQ(chat.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(chat.status().message(), "cfg.json: chat_template: missing");
  EXPECT_EQ(ChatTemplate::FromTokenizerConfig("/nonexistent/tokenizer_config.json").status().code(),
            StatusCode::kNotFound);
  // From a config, bos_token fills the Llama-3 template's BOS.
  config = TokenizerConfig::FromJson(
      nlohmann::json({{"bos_token", "<B>"}, {"chat_template", kLlama3Instruct}}).dump(), "cfg.json");
  ASSERT_TRUE(config.ok()) << config.status();
  chat = ChatTemplate::FromConfig(*config);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->Render(kOne, false), "<B><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>");
}


// Renders every conversation of a golden file (tests/engine/chat_template_reference.py) and
// expects the prompt Jinja2 rendered from the published template, byte for byte. Tool-call
// arguments are given in the API's form: JSON text, written compactly (not as the template
// writes them). Returns the goldens.
nlohmann::ordered_json ExpectGoldens(const ChatTemplate& chat, const std::string& file) {
  std::ifstream in(SourcePath(file));
  EXPECT_TRUE(in.good()) << file;
  if (!in.good()) return {};
  const nlohmann::ordered_json golden = nlohmann::ordered_json::parse(in);
  EXPECT_GE(golden.size(), 8u);
  for (const auto& g : golden) {
    SCOPED_TRACE(g["name"].get<std::string>());
    std::vector<ChatMessage> msgs;
    for (const auto& m : g["messages"]) {
      ChatMessage msg{m["role"], m.value("content", "")};
      for (const auto& c : m.value("tool_calls", nlohmann::ordered_json::array())) {
        msg.tool_calls.push_back({c["id"], c["function"]["name"], c["function"]["arguments"].dump()});
      }
      msgs.push_back(std::move(msg));
    }
    std::vector<nlohmann::ordered_json> tools(g["tools"].begin(), g["tools"].end());
    StatusOr<std::string> prompt = chat.RenderChat(msgs, tools, g["add_generation_prompt"].get<bool>());
    EXPECT_TRUE(prompt.ok()) << prompt.status();
    if (prompt.ok()) {
      EXPECT_EQ(*prompt, g["prompt"].get<std::string>());
    }
  }
  return golden;
}

// Tool conversations render exactly as Qwen2.5's published template renders them with Jinja2
// (tests/engine/chat_template_reference.py wrote the goldens): the tool list as Python's
// json.dumps writes it, replayed calls with their arguments re-written the same way, and tool
// results grouped into one user turn. The prompt then encodes <tool_call> as its own token.
TEST(ChatTemplate, ToolConversationsMatchThePublishedTemplate) {
  StatusOr<ChatTemplate> chat = FromCache("tokenizer-qwen2_5");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->tool_call_format(), ToolCallFormat::kHermes);
  ExpectGoldens(*chat, "src/engine/tokenizer/testdata/chat_tools_qwen2_5.json");
  std::unique_ptr<Tokenizer> qwen = LoadCached("tokenizer-qwen2_5", true);
  ASSERT_TRUE(qwen);
  std::vector<ChatMessage> replay = {{"user", "x"}, {"assistant", ""}};
  replay[1].tool_calls.push_back({"c", "f", R"({"a": 1})"});
  StatusOr<std::string> p = chat->RenderChat(replay, {}, false);
  ASSERT_TRUE(p.ok());
  const std::vector<int32_t> ids = qwen->Encode(*p, false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 151657), 1);  // <tool_call>
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 151658), 1);  // </tool_call>
}

// Llama-3 renders tools in Llama-3.1's JSON style and replays one call per message.
TEST(ChatTemplate, Llama3ToolsInTheFirstUserMessage) {
  StatusOr<ChatTemplate> chat = ChatTemplate::FromTemplate(kLlama3Instruct, "llama3", "<|begin_of_text|>");
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->tool_call_format(), ToolCallFormat::kLlama3Json);
  const nlohmann::ordered_json tool = nlohmann::ordered_json::parse(
      R"({"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{"type":"number"}}}}})");
  std::vector<ChatMessage> msgs = {{"system", "S"}, {"user", "Q"}, {"assistant", ""}, {"tool", "42"}};
  msgs[2].tool_calls.push_back({"c", "f", R"({"x":1.5})"});
  StatusOr<std::string> p = chat->RenderChat(msgs, std::vector<nlohmann::ordered_json>{tool}, true);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON "
            "for a function call with its proper arguments that best answers the given prompt.\n\nRespond in the "
            "format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use "
            "variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"f\",\n        "
            "\"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n                "
            "\"x\": {\n                    \"type\": \"number\"\n                }\n            }\n        }\n    "
            "}\n}\n\nQ<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"f\", \"parameters\": "
            "{\"x\": 1.5}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n42<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  msgs[2].tool_calls.push_back({"d", "f", "{}"});
  EXPECT_EQ(chat->RenderChat(msgs, {}, true).status().code(), StatusCode::kInvalidArgument);
  msgs[2].tool_calls.resize(1);
  msgs[2].tool_calls[0].arguments = "[1]";
  StatusOr<std::string> bad = chat->RenderChat(msgs, {}, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("messages[2].tool_calls[0].function.arguments"), std::string::npos);
}

// Python's json.dumps, as templates' tojson writes values.
TEST(PyJson, WritesWhatPythonWrites) {
  using nlohmann::ordered_json;
  EXPECT_EQ(PyJsonDumps(ordered_json::parse(R"({"b":[1,2.5,true,null],"a":{"x":"é\n\"q\"\u0001"},"e":{},"l":[]})")),
            "{\"b\": [1, 2.5, true, null], \"a\": {\"x\": \"é\\n\\\"q\\\"\\u0001\"}, \"e\": {}, \"l\": []}");
  EXPECT_EQ(PyJsonDumps(ordered_json::parse("[1.0, 100000.0, 1e16, 1.5e-7, 0.1, -0.0, 123456789.125]")),
            "[1.0, 100000.0, 1e+16, 1.5e-07, 0.1, -0.0, 123456789.125]");
  EXPECT_EQ(PyJsonDumps(ordered_json::parse(R"({"a":[1,{"b":[]}]})"), 2), "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ]\n}");
}


// Llama-3.1's own template: plain and tool conversations render exactly as its published
// template renders them with Jinja2 (the system preamble with dates, tools in the first user
// message, one call per message, tool results written as JSON strings).
TEST(ChatTemplate, Llama31MatchesThePublishedTemplate) {
  std::ifstream tf(SourcePath("src/engine/tokenizer/testdata/llama3_1_instruct.jinja"));
  ASSERT_TRUE(tf.good());
  const std::string text((std::istreambuf_iterator<char>(tf)), std::istreambuf_iterator<char>());
  StatusOr<ChatTemplate> chat = ChatTemplate::FromTemplate(text, "llama31", "<|begin_of_text|>");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->family_name(), "llama3.1");
  EXPECT_EQ(chat->tool_call_format(), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(chat->end_of_turn(), "<|eot_id|>");
  const nlohmann::ordered_json golden = ExpectGoldens(*chat, "src/engine/tokenizer/testdata/chat_tools_llama3_1.json");
  ASSERT_FALSE(golden.empty());
  // What the template refuses: two calls in one message, tools with no user message.
  std::vector<ChatMessage> two = {{"user", "x"}, {"assistant", ""}};
  two[1].tool_calls = {{"a", "f", "{}"}, {"b", "g", "{}"}};
  StatusOr<std::string> r = chat->RenderChat(two, {}, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("messages[1].tool_calls"), std::string::npos) << r.status();
  const nlohmann::ordered_json tool = {{"type", "function"}, {"function", {{"name", "f"}}}};
  std::vector<ChatMessage> only_system = {{"system", "s"}};
  EXPECT_EQ(chat->RenderChat(only_system, std::vector<nlohmann::ordered_json>{tool}, true).status().code(),
            StatusCode::kInvalidArgument);
  // The rendered prompt encodes its markers as the Llama-3 tokenizer's special tokens.
  std::unique_ptr<Tokenizer> llama = LoadCached("tokenizer-llama3", true);
  ASSERT_TRUE(llama);
  const std::vector<int32_t> ids = llama->Encode(golden[0]["prompt"].get<std::string>(), false);
  EXPECT_EQ(ids[0], 128000);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128000), 1);
}

}  // namespace
}  // namespace aicloud::engine_test
