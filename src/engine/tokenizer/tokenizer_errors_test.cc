// Broken tokenizer.json and tokenizer_config.json files: each gives a clear error naming the
// file and the field, with the right code, and nothing crashes.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tokenizer_test_util.h"

namespace aicloud::engine_test {
namespace {

using nlohmann::json;

struct BrokenCase {
  const char* name;
  std::function<void(json&)> mutate;
  StatusCode code;
  const char* message;  // expected substring, after "broken.json: "
};

TEST(TokenizerErrors, BrokenTokenizerJsonTable) {
  const BrokenCase cases[] = {
      {"no model", [](json& j) { j.erase("model"); }, StatusCode::kInvalidArgument,
       "model: missing"},
      {"model not an object", [](json& j) { j["model"] = 3; }, StatusCode::kInvalidArgument,
       "model: expected an object"},
      {"model without type", [](json& j) { j["model"].erase("type"); },
       StatusCode::kInvalidArgument, "model.type: missing"},
      {"WordPiece model", [](json& j) { j["model"]["type"] = "WordPiece"; },
       StatusCode::kUnimplemented, "model.type: \"WordPiece\" models are not supported"},
      {"Unigram model", [](json& j) { j["model"]["type"] = "Unigram"; },
       StatusCode::kUnimplemented, "model.type: \"Unigram\""},
      {"no vocab", [](json& j) { j["model"].erase("vocab"); }, StatusCode::kInvalidArgument,
       "model.vocab: missing"},
      {"vocab is a list", [](json& j) { j["model"]["vocab"] = json::array({"a"}); },
       StatusCode::kInvalidArgument, "model.vocab: expected an object"},
      {"negative id", [](json& j) { j["model"]["vocab"]["zz"] = -1; },
       StatusCode::kInvalidArgument, "model.vocab[\"zz\"]: expected a token id"},
      {"id as string", [](json& j) { j["model"]["vocab"]["zz"] = "7"; },
       StatusCode::kInvalidArgument, "model.vocab[\"zz\"]: expected a token id"},
      {"huge id", [](json& j) { j["model"]["vocab"]["zz"] = 2000000000; },
       StatusCode::kInvalidArgument, "model.vocab[\"zz\"]: id 2000000000 is larger than"},
      {"duplicate id", [](json& j) { j["model"]["vocab"]["zz"] = 5; },
       StatusCode::kInvalidArgument,
       "model.vocab[\"\xc4\x85\"]: id 5 is already used by \"zz\""},  // U+0105 stands for byte 5
      {"no merges", [](json& j) { j["model"].erase("merges"); }, StatusCode::kInvalidArgument,
       "model.merges: missing"},
      {"merges not a list", [](json& j) { j["model"]["merges"] = "h e"; },
       StatusCode::kInvalidArgument, "model.merges: expected an array"},
      {"merge without space", [](json& j) { j["model"]["merges"][1] = "ll"; },
       StatusCode::kInvalidArgument, "model.merges[1]: \"ll\" is not two tokens"},
      {"merge of unknown token", [](json& j) { j["model"]["merges"][2] = "he xyz"; },
       StatusCode::kInvalidArgument, "model.merges[2]: token \"xyz\" is not in model.vocab"},
      {"merge pair of unknown token",
       [](json& j) { j["model"]["merges"][0] = json::array({"q", "zzz"}); },
       StatusCode::kInvalidArgument, "model.merges[0]: token \"zzz\" is not in model.vocab"},
      {"merge result missing", [](json& j) { j["model"]["merges"].push_back("x y"); },
       StatusCode::kInvalidArgument, "model.merges[9]: merged token \"xy\" is not in model.vocab"},
      {"merge of wrong shape", [](json& j) { j["model"]["merges"][0] = json::array({"h"}); },
       StatusCode::kInvalidArgument, "model.merges[0]: expected \"left right\""},
      {"dropout", [](json& j) { j["model"]["dropout"] = 0.1; }, StatusCode::kUnimplemented,
       "model.dropout: BPE dropout"},
      {"byte fallback", [](json& j) { j["model"]["byte_fallback"] = true; },
       StatusCode::kUnimplemented, "model.byte_fallback"},
      {"subword prefix", [](json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       StatusCode::kUnimplemented, "model.continuing_subword_prefix: \"##\""},
      {"unk token missing", [](json& j) { j["model"]["unk_token"] = "<unk>"; },
       StatusCode::kInvalidArgument, "model.unk_token: token \"<unk>\" is not in model.vocab"},
      {"ignore_merges not bool", [](json& j) { j["model"]["ignore_merges"] = "yes"; },
       StatusCode::kInvalidArgument, "model.ignore_merges: expected true or false"},
      {"added tokens not a list", [](json& j) { j["added_tokens"] = json::object(); },
       StatusCode::kInvalidArgument, "added_tokens: expected an array"},
      {"added token without id", [](json& j) { j["added_tokens"][1].erase("id"); },
       StatusCode::kInvalidArgument, "added_tokens[1].id: missing"},
      {"added token empty", [](json& j) { j["added_tokens"][0]["content"] = ""; },
       StatusCode::kInvalidArgument, "added_tokens[0].content: empty"},
      {"added token flag", [](json& j) { j["added_tokens"][0]["lstrip"] = 1; },
       StatusCode::kInvalidArgument, "added_tokens[0].lstrip: expected true or false"},
      {"bad regex",
       [](json& j) {
         j["pre_tokenizer"] = json::parse(
             R"({"type": "Split", "pattern": {"Regex": "(\\p{L}+"}, "behavior": "Isolated"})");
       },
       StatusCode::kInvalidArgument, "pre_tokenizer.pattern.Regex: invalid regex"},
      {"unknown property in regex",
       [](json& j) {
         j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
             {"type": "Split", "pattern": {"Regex": "\\p{Nope}"}, "behavior": "Isolated"},
             {"type": "ByteLevel"}]})");
       },
       StatusCode::kInvalidArgument, "pre_tokenizer.pretokenizers[0].pattern.Regex"},
      {"split without pattern",
       [](json& j) { j["pre_tokenizer"] = json::parse(R"({"type": "Split", "behavior": "Isolated"})"); },
       StatusCode::kInvalidArgument, "pre_tokenizer.pattern: missing"},
      {"split behaviour unknown",
       [](json& j) {
         j["pre_tokenizer"] = json::parse(
             R"({"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways"})");
       },
       StatusCode::kInvalidArgument, "pre_tokenizer.behavior: unknown behavior \"Sideways\""},
      {"pre-tokenizer type unknown", [](json& j) { j["pre_tokenizer"] = json::parse(R"({"type": "Whitespace"})"); },
       StatusCode::kUnimplemented, "pre_tokenizer.type: pre-tokenizer type \"Whitespace\""},
      {"not byte-level", [](json& j) { j["pre_tokenizer"] = nullptr; },
       StatusCode::kUnimplemented, "pre_tokenizer: no ByteLevel step"},
      {"normalizer NFKC", [](json& j) { j["normalizer"] = json::parse(R"({"type": "NFKC"})"); },
       StatusCode::kUnimplemented, "normalizer.type: normalizer type \"NFKC\" is not supported"},
      {"normalizer in sequence",
       [](json& j) {
         j["normalizer"] = json::parse(
             R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]})");
       },
       StatusCode::kUnimplemented, "normalizer.normalizers[1].type"},
      {"decoder WordPiece", [](json& j) { j["decoder"] = json::parse(R"({"type": "WordPiece"})"); },
       StatusCode::kUnimplemented, "decoder.type: decoder type \"WordPiece\""},
      {"template names unknown special",
       [](json& j) {
         j["post_processor"] = json::parse(R"({"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "special_tokens": {}})");
       },
       StatusCode::kInvalidArgument,
       "post_processor.single[0].SpecialToken.id: \"<bos>\" is not in post_processor.special_tokens"},
      {"template id not a token",
       [](json& j) {
         j["post_processor"] = json::parse(R"({"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "special_tokens": {"<s>": {"id": "<s>", "ids": [99999], "tokens": ["<s>"]}}})");
       },
       StatusCode::kInvalidArgument,
       "post_processor.special_tokens[\"<s>\"].ids[0]: id 99999 is not a token"},
      {"template without sequence",
       [](json& j) {
         j["post_processor"] = json::parse(R"({"type": "TemplateProcessing", "single": [],
                                               "special_tokens": {}})");
       },
       StatusCode::kInvalidArgument, "post_processor.single: no {\"Sequence\""},
      {"post-processor unknown", [](json& j) { j["post_processor"] = json::parse(R"({"type": "Magic"})"); },
       StatusCode::kUnimplemented, "post_processor.type: post-processor type \"Magic\""},
  };
  for (const BrokenCase& c : cases) {
    json j = TinyTokenizer();
    c.mutate(j);
    StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromJson(j.dump(), "broken.json");
    ASSERT_FALSE(tok.ok()) << c.name;
    EXPECT_EQ(tok.status().code(), c.code) << c.name << ": " << tok.status();
    EXPECT_NE(tok.status().message().find(std::string("broken.json: ") + c.message),
              std::string::npos)
        << c.name << ": got \"" << tok.status().message() << "\"\n want \"" << c.message << "\"";
  }
}

TEST(TokenizerErrors, FilesAndJsonSyntax) {
  StatusOr<std::unique_ptr<Tokenizer>> missing = Tokenizer::FromFile("/nonexistent/tokenizer.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);

  for (const char* text : {"", "{", "{\"model\": ", "[1, 2", "\xff\xfe{}", "nul"}) {
    StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromJson(text, "broken.json");
    ASSERT_FALSE(tok.ok()) << text;
    EXPECT_EQ(tok.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(tok.status().message().rfind("broken.json: invalid JSON", 0), 0u)
        << tok.status().message();
  }
  StatusOr<std::unique_ptr<Tokenizer>> array = Tokenizer::FromJson("[]", "broken.json");
  EXPECT_EQ(array.status().message(), "broken.json: expected a JSON object");
  // A deeply nested document is rejected without exhausting the stack.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_FALSE(Tokenizer::FromJson(deep, "deep.json").ok());
}

TEST(TokenizerErrors, BrokenTokenizerConfig) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"{", "config.json: invalid JSON"},
      {"3", "config.json: expected a JSON object"},
      {R"({"bos_token": 5})", "config.json: bos_token: expected a string, null or an object"},
      {R"({"eos_token": {"text": "x"}})", "config.json: eos_token.content: missing"},
      {R"({"add_bos_token": "true"})", "config.json: add_bos_token: expected true or false"},
      {R"({"chat_template": 1})", "config.json: chat_template: expected a string or a list"},
      {R"({"chat_template": [{"name": "tool_use", "template": "x"}]})",
       "config.json: chat_template: a list of templates without one named \"default\""},
      {R"({"chat_template": [{"name": "default"}]})", "config.json: chat_template[0].template: missing"},
  };
  for (const Case& c : cases) {
    StatusOr<TokenizerConfig> config = TokenizerConfig::FromJson(c.text, "config.json");
    ASSERT_FALSE(config.ok()) << c.text;
    EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(config.status().message().find(c.message), std::string::npos)
        << config.status().message();
  }
  EXPECT_EQ(TokenizerConfig::FromFile("/nonexistent/tokenizer_config.json").status().code(),
            StatusCode::kNotFound);

  // A config naming a BOS the vocabulary does not have.
  StatusOr<TokenizerConfig> config =
      TokenizerConfig::FromJson(R"({"bos_token": "<|nope|>"})", "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  StatusOr<std::unique_ptr<Tokenizer>> tok =
      Tokenizer::FromJson(TinyTokenizer().dump(), "tiny.json", *config);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().message(),
            "config.json: bos_token: \"<|nope|>\" is not a token of tiny.json");
  // add_bos_token without a bos_token.
  config = TokenizerConfig::FromJson(R"({"add_bos_token": true})", "config.json");
  ASSERT_TRUE(config.ok());
  tok = Tokenizer::FromJson(TinyTokenizer().dump(), "tiny.json", *config);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("add_bos_token: true, but there is no bos_token"),
            std::string::npos);
}

TEST(TokenizerErrors, ConfigTokensAsObjectsAndNull) {
  StatusOr<TokenizerConfig> config = TokenizerConfig::FromJson(
      R"({"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
          "eos_token": "</s>", "pad_token": null, "add_eos_token": false,
          "chat_template": [{"name": "default", "template": "t1"}, {"name": "rag", "template": "t2"}]})",
      "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->bos_token, "<s>");
  EXPECT_EQ(config->eos_token, "</s>");
  EXPECT_FALSE(config->pad_token.has_value());
  EXPECT_EQ(config->add_eos_token, false);
  EXPECT_FALSE(config->add_bos_token.has_value());
  EXPECT_EQ(config->chat_template, "t1");
}

// Every JSON pointer of a document (the vocabulary sampled, it is large).
void Pointers(const json& j, const json::json_pointer& at, std::vector<json::json_pointer>* out) {
  out->push_back(at);
  if (j.is_object()) {
    int k = 0;
    for (const auto& [key, value] : j.items()) {
      if (at.to_string() == "/model/vocab" && k++ % 37 != 0) continue;
      Pointers(value, at / key, out);
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) Pointers(j[i], at / i, out);
  }
}

// Random structural damage to a valid file: every result is a Status or a working tokenizer,
// never a crash (run under AICLOUD_SANITIZE=ON to check memory safety as well).
TEST(TokenizerErrors, RandomMutationsNeverCrash) {
  json base = TinyTokenizer();
  base["normalizer"] = {{"type", "NFC"}};
  base["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}| ?\\p{L}+|\\s+(?!\\S)|\\s+|."},
       "behavior": "MergedWithNext", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}]})");
  base["post_processor"] = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [265], "tokens": ["<s>"]}}})");
  std::vector<json::json_pointer> pointers;
  Pointers(base, json::json_pointer(), &pointers);
  const json values[] = {nullptr, -1, 3, 1e30, 70000, "", "x", "Isolated", "(", true,
                         json::array(), json::object(), json::array({"a", "b"}),
                         json::parse(R"({"type": "ByteLevel"})"),
                         json::parse(R"({"Regex": "[\\s"})")};
  std::mt19937 rng(42);
  int loaded = 0;
  for (int i = 0; i < 1500; ++i) {
    json j = base;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
      const json::json_pointer& at = pointers[rng() % pointers.size()];
      if (at.empty() || !j.contains(at)) continue;
      if (rng() % 4 == 0) {
        json& parent = j[at.parent_pointer()];
        if (parent.is_object()) {
          parent.erase(at.back());
        } else if (parent.is_array()) {
          parent.erase(std::stoul(at.back()));
        }
      } else {
        j[at] = values[rng() % std::size(values)];
      }
    }
    std::string text = j.dump();
    if (rng() % 5 == 0 && !text.empty()) text[rng() % text.size()] = static_cast<char>(rng());
    StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromJson(text, "mutated.json");
    if (!tok.ok()) {
      EXPECT_EQ(tok.status().message().rfind("mutated.json: ", 0), 0u) << tok.status();
      continue;
    }
    ++loaded;
    const std::vector<int32_t> ids = (*tok)->Encode("<s>hello wÃ¶rld 123ÿ Ì", true);
    (*tok)->Decode(ids, true);
  }
  EXPECT_GT(loaded, 100);  // some mutations are harmless
}

}  // namespace
}  // namespace aicloud::engine_test
