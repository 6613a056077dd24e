#include "engine/tokenizer/stream_decoder.h"

#include <gtest/gtest.h>

#include "engine/tokenizer/tokenizer_test_util.h"
#include "engine/tokenizer/utf8.h"

namespace aicloud::engine_test {
namespace {

TEST(StreamDecoder, PiecesAreWholeCharactersAndAddUpToDecode) {
  std::unique_ptr<Tokenizer> tok = LoadCached("tokenizer-llama3", true);
  ASSERT_NE(tok, nullptr);
  for (const KnownAnswer& a :
       ReadKnownAnswers(SourcePath("data/tokenizers/ggml-vocab-llama-bpe.gguf.inp"),
                        SourcePath("data/tokenizers/ggml-vocab-llama-bpe.gguf.out"))) {
    StreamDecoder stream(*tok, /*skip_special_tokens=*/true);
    std::string all;
    for (int32_t id : a.ids) {
      const std::string piece = stream.Push(id);
      EXPECT_TRUE(IsValidUtf8(piece)) << a.text;
      all += piece;
    }
    all += stream.Finish();
    EXPECT_EQ(all, a.text);
  }
  // "🦙" (4 bytes) is more than one token here: the first tokens give nothing yet.
  StreamDecoder stream(*tok, true);
  const std::vector<int32_t> ids = tok->Encode("\xf0\x9f\xa6\x99!", false);
  ASSERT_GT(ids.size(), 2u);
  EXPECT_EQ(stream.Push(ids[0]), "");
  std::string rest;
  for (size_t i = 1; i < ids.size(); ++i) rest += stream.Push(ids[i]);
  EXPECT_EQ(rest, "\xf0\x9f\xa6\x99!");
}

TEST(StreamDecoder, InvalidBytesAreNotHeldAndSpecialsSkipped) {
  std::unique_ptr<Tokenizer> tok = LoadCached("tokenizer-llama3", true);
  ASSERT_NE(tok, nullptr);
  const int32_t lead = *tok->FindToken("\xc3\xa4");  // "ä" in the byte alphabet: byte 0xE4
  StreamDecoder stream(*tok, true);
  EXPECT_EQ(stream.Push(lead), "");             // 0xE4 starts a 3-byte character
  EXPECT_EQ(stream.Push(*tok->FindToken("a")), "\xe4" "a");  // which never comes
  EXPECT_EQ(stream.Push(128000), "");           // <|begin_of_text|>, skipped
  EXPECT_EQ(stream.Push(lead), "");
  EXPECT_EQ(stream.Finish(), "\xe4");
  StreamDecoder keep(*tok, false);
  EXPECT_EQ(keep.Push(128000), "<|begin_of_text|>");
}

}  // namespace
}  // namespace aicloud::engine_test
