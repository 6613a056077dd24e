// Known answers: GPT-2 and Llama-3 against llama.cpp's test files, Qwen2.5 against
// transformers.js, and round trips.
#include "engine/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include "engine/tokenizer/tokenizer_test_util.h"

namespace aicloud::engine_test {
namespace {

std::string Ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

void ExpectKnownAnswers(const Tokenizer& tok, const std::vector<KnownAnswer>& answers) {
  ASSERT_FALSE(answers.empty());
  for (size_t i = 0; i < answers.size(); ++i) {
    const KnownAnswer& a = answers[i];
    const std::vector<int32_t> ids = tok.Encode(a.text, /*add_special_tokens=*/false);
    EXPECT_EQ(Ids(ids), Ids(a.ids)) << "case " << i << ": \"" << a.text << "\"";
    EXPECT_EQ(tok.Decode(ids, false), a.text) << "case " << i;
  }
}

TEST(TokenizerKnownAnswers, Gpt2MatchesLlamaCpp) {
  StatusOr<std::unique_ptr<Tokenizer>> tok =
      Tokenizer::FromFile(SourcePath("data/tokenizers/gpt2/tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  ExpectKnownAnswers(**tok, ReadKnownAnswers(SourcePath("data/tokenizers/ggml-vocab-gpt-2.gguf.inp"),
                                             SourcePath("data/tokenizers/ggml-vocab-gpt-2.gguf.out")));
}

TEST(TokenizerKnownAnswers, Llama3MatchesLlamaCpp) {
  std::unique_ptr<Tokenizer> tok = LoadCached("tokenizer-llama3", /*with_config=*/true);
  ASSERT_NE(tok, nullptr);
  ExpectKnownAnswers(*tok,
                     ReadKnownAnswers(SourcePath("data/tokenizers/ggml-vocab-llama-bpe.gguf.inp"),
                                      SourcePath("data/tokenizers/ggml-vocab-llama-bpe.gguf.out")));
}

}  // namespace
}  // namespace aicloud::engine_test
