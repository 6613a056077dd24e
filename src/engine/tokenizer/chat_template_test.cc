// Chat templates: the real Qwen2.5 and Llama-3 tokenizer_config.json files and the published
// templates of Meta-Llama-3-Instruct, SmolLM2 and Qwen2, rendered natively. The expected strings
// are what a Jinja renderer (transformers.js's) produces from the same templates and messages.
#include "engine/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>

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
      {"llama31",
       "{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" "
       "%}{%- endif %}{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting "
       "Knowledge Date: December 2023\\n\" }}{{- '<|eot_id|>' }}",
       "llama31: chat_template: a Llama-3.1-style template"},
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

}  // namespace
}  // namespace aicloud::engine_test
