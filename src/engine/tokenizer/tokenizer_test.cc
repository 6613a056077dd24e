// The real tokenizers: GPT-2 and Llama-3 against llama.cpp's known answers, Qwen2.5 against
// transformers.js, round trips (any bytes), hand-checked Qwen2.5 / Llama-3 rules, special
// tokens and post-processing, and concurrent use.
#include "engine/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "engine/tokenizer/tokenizer_test_util.h"
#include "engine/tokenizer/unicode_nfc.h"

namespace aicloud::engine_test {
namespace {

using nlohmann::json;

constexpr char kGpt2Json[] = "data/tokenizers/gpt2/tokenizer.json";

std::vector<KnownAnswer> Gpt2Answers() {
  return ReadKnownAnswers(SourcePath("data/tokenizers/ggml-vocab-gpt-2.gguf.inp"),
                          SourcePath("data/tokenizers/ggml-vocab-gpt-2.gguf.out"));
}
std::vector<KnownAnswer> Llama3Answers() {
  return ReadKnownAnswers(SourcePath("data/tokenizers/ggml-vocab-llama-bpe.gguf.inp"),
                          SourcePath("data/tokenizers/ggml-vocab-llama-bpe.gguf.out"));
}
std::vector<KnownAnswer> Qwen25Answers() {
  return ReadKnownAnswers(SourcePath("data/tokenizers/qwen2_5-transformersjs.inp"),
                          SourcePath("data/tokenizers/qwen2_5-transformersjs.out"));
}

std::unique_ptr<Tokenizer> LoadGpt2() {
  StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromFile(SourcePath(kGpt2Json));
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

// Every known answer, exactly, without special tokens (the files' convention).
void ExpectKnownAnswers(const Tokenizer& tok, const std::vector<KnownAnswer>& answers) {
  ASSERT_FALSE(answers.empty());
  int failures = 0;
  for (size_t i = 0; i < answers.size(); ++i) {
    const KnownAnswer& a = answers[i];
    const std::string got = IdsText(tok.Encode(a.text, /*add_special_tokens=*/false));
    EXPECT_EQ(got, IdsText(a.ids)) << "case " << i << ": \"" << a.text << "\"";
    failures += got != IdsText(a.ids);
  }
  EXPECT_EQ(failures, 0) << "of " << answers.size() << " known answers";
}

// Decode(Encode(s)) gives back s — NFC(s) for a tokenizer with the NFC normalizer.
void ExpectRoundTrips(const Tokenizer& tok, const std::vector<std::string>& texts, bool nfc) {
  for (const std::string& s : texts) {
    std::string want = s;
    if (nfc) {
      want.clear();
      NormalizeNfc(s, &want);
    }
    EXPECT_EQ(tok.Decode(tok.Encode(s, false), false), want) << "\"" << s << "\"";
  }
}

std::vector<std::string> Texts(const std::vector<KnownAnswer>& answers) {
  std::vector<std::string> texts;
  for (const KnownAnswer& a : answers) texts.push_back(a.text);
  return texts;
}

// Random byte strings, mostly not valid UTF-8, with some ASCII and multi-byte runs mixed in.
std::vector<std::string> RandomByteStrings(int count) {
  std::mt19937 rng(20240611);
  const std::string pieces[] = {" ", "a", "Hello", "\n", "\xc3\xa9", "\xe4\xb8\xad", "12",
                                "\xf0\x9f\x98\x80", "'s", "e\xcc\x81"};
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    std::string s;
    const int n = static_cast<int>(rng() % 24);
    for (int k = 0; k < n; ++k) {
      if (rng() % 3 == 0) {
        s += pieces[rng() % std::size(pieces)];
      } else {
        s.push_back(static_cast<char>(rng() % 256));
      }
    }
    out.push_back(s);
  }
  return out;
}

TEST(TokenizerKnownAnswers, Gpt2MatchesLlamaCpp) {
  std::unique_ptr<Tokenizer> tok = LoadGpt2();
  ASSERT_NE(tok, nullptr);
  ExpectKnownAnswers(*tok, Gpt2Answers());
}

TEST(TokenizerKnownAnswers, Llama3MatchesLlamaCpp) {
  std::unique_ptr<Tokenizer> tok = LoadCached("tokenizer-llama3", /*with_config=*/true);
  ASSERT_NE(tok, nullptr);
  ExpectKnownAnswers(*tok, Llama3Answers());
}

// llama.cpp's strings plus cases for Qwen2.5's own rules (NFC, single digits, added tokens),
// encoded by transformers.js (see data/tokenizers/SOURCE.md).
TEST(TokenizerKnownAnswers, Qwen25MatchesTransformersJs) {
  std::unique_ptr<Tokenizer> tok = LoadCached("tokenizer-qwen2_5", /*with_config=*/true);
  ASSERT_NE(tok, nullptr);
  ExpectKnownAnswers(*tok, Qwen25Answers());
}

TEST(TokenizerRoundTrip, KnownAnswerTextsAndRandomBytes) {
  const std::vector<std::string> random = RandomByteStrings(3000);
  std::unique_ptr<Tokenizer> gpt2 = LoadGpt2();
  std::unique_ptr<Tokenizer> llama3 = LoadCached("tokenizer-llama3", true);
  std::unique_ptr<Tokenizer> qwen = LoadCached("tokenizer-qwen2_5", true);
  ASSERT_TRUE(gpt2 && llama3 && qwen);
  ExpectRoundTrips(*gpt2, Texts(Gpt2Answers()), false);
  ExpectRoundTrips(*gpt2, random, false);
  ExpectRoundTrips(*llama3, Texts(Llama3Answers()), false);
  ExpectRoundTrips(*llama3, random, false);
  ExpectRoundTrips(*qwen, Texts(Qwen25Answers()), true);
  ExpectRoundTrips(*qwen, random, true);
}

TEST(TokenizerRoundTrip, InvalidUtf8IsEncodedByteByByte) {
  std::unique_ptr<Tokenizer> tok = LoadCached("tokenizer-llama3", true);
  ASSERT_NE(tok, nullptr);
  for (std::string s : {std::string("\xff"), std::string("a\xc3"), std::string("\xed\xa0\x80"),
                        std::string("\xc0\xaf"), std::string("x\x80y z"),
                        std::string("\xf4\x90\x80\x80"), std::string("ok \xe2\x82 ok")}) {
    const std::vector<int32_t> ids = tok->Encode(s, false);
    EXPECT_FALSE(ids.empty()) << s;
    EXPECT_EQ(tok->Decode(ids, false), s);
  }
  // A lone invalid byte is the token of that byte, written in the byte-level alphabet.
  EXPECT_EQ(tok->Encode("\xff", false), std::vector<int32_t>{*tok->FindToken("ÿ")});
}

TEST(TokenizerRoundTrip, LongRunsUseTheHeapMergeLoop) {
  std::unique_ptr<Tokenizer> tok = LoadCached("tokenizer-qwen2_5", true);
  ASSERT_NE(tok, nullptr);
  for (const std::string& s : {std::string(5000, ' '), std::string(3000, 'a'),
                               std::string(2000, '='), std::string(1000, '\n') + "x"}) {
    const std::vector<int32_t> ids = tok->Encode(s, false);
    EXPECT_EQ(tok->Decode(ids, false), s);
    EXPECT_LT(ids.size(), s.size() / 4) << "long runs should merge into long tokens";
  }
}

TEST(TokenizerQwen25, SpecialTokensDigitsAndNfc) {
  std::unique_ptr<Tokenizer> tok = LoadCached("tokenizer-qwen2_5", true);
  ASSERT_NE(tok, nullptr);
  auto id = [&](const char* t) { return tok->FindToken(t).value_or(-1); };
  // <|im_start|> and <|im_end|> are single special tokens; the text between them is ordinary
  // BPE ("user", "Ċ" = "\n", "Hello" are vocabulary entries).
  EXPECT_EQ(id("<|im_start|>"), 151644);
  EXPECT_EQ(id("<|im_end|>"), 151645);
  EXPECT_EQ(tok->Encode("<|im_start|>user\nHello<|im_end|>\n", false),
            (std::vector<int32_t>{151644, id("user"), id("Ċ"), id("Hello"), 151645, id("Ċ")}));
  EXPECT_TRUE(tok->IsSpecial(151644));
  // Qwen2's split pattern has \p{N} alone: every digit is its own token, although the
  // vocabulary has no multi-digit tokens to tempt it anyway.
  EXPECT_EQ(tok->Encode("12345", false),
            (std::vector<int32_t>{id("1"), id("2"), id("3"), id("4"), id("5")}));
  EXPECT_EQ(tok->Encode("x 2024", false),
            (std::vector<int32_t>{id("x"), id("Ġ"), id("2"), id("0"), id("2"), id("4")}));
  // NFC: "e" + COMBINING ACUTE encodes as the precomposed "é"; the ANGSTROM SIGN as "Å".
  EXPECT_EQ(tok->Encode("caf" "e\xcc\x81", false), tok->Encode("caf\xc3\xa9", false));
  EXPECT_EQ(tok->Encode("\xe2\x84\xab", false), tok->Encode("\xc3\x85", false));
  // parse_special=false: a special token written in user text stays text ...
  const std::vector<int32_t> literal = tok->Encode("<|im_start|>", false, /*parse_special=*/false);
  EXPECT_GT(literal.size(), 1u);
  EXPECT_EQ(tok->Decode(literal, false), "<|im_start|>");
  // ... while non-special added tokens (<tool_call>, special: false) are still recognised.
  EXPECT_EQ(tok->Encode("<tool_call>", false, false), std::vector<int32_t>{151657});
  EXPECT_FALSE(tok->IsSpecial(151657));
}

TEST(TokenizerQwen25, VocabularyAndSpecialIds) {
  std::unique_ptr<Tokenizer> tok = LoadCached("tokenizer-qwen2_5", true);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->VocabSize(), 151665);  // 151643 BPE tokens + 22 added tokens
  EXPECT_FALSE(tok->bos_id().has_value());  // bos_token: null in tokenizer_config.json
  EXPECT_EQ(tok->eos_id(), 151645);         // eos_token: <|im_end|>
  EXPECT_FALSE(tok->adds_bos());
  EXPECT_EQ(tok->Encode("Hi", true), tok->Encode("Hi", false));
  // Without the config, EOS falls back to the usual name <|endoftext|>.
  StatusOr<std::unique_ptr<Tokenizer>> bare =
      Tokenizer::FromFile(NpmModelDir("tokenizer-qwen2_5") + "/tokenizer.json");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ((*bare)->eos_id(), 151643);
}

TEST(TokenizerLlama3, DigitsIgnoreMergesAndVocabulary) {
  std::unique_ptr<Tokenizer> tok = LoadCached("tokenizer-llama3", true);
  ASSERT_NE(tok, nullptr);
  auto id = [&](const char* t) { return tok->FindToken(t).value_or(-1); };
  // \p{N}{1,3}: digits go in groups of three from the left.
  EXPECT_EQ(tok->Encode("1234567", false), (std::vector<int32_t>{id("123"), id("456"), id("7")}));
  // ignore_merges: a word that is a vocabulary entry is that entry.
  EXPECT_EQ(tok->Encode(" world", false), std::vector<int32_t>{id("Ġworld")});
  EXPECT_EQ(tok->VocabSize(), 128256);
  EXPECT_EQ(tok->bos_id(), 128000);
  EXPECT_EQ(tok->eos_id(), 128001);
  EXPECT_EQ(tok->TokenText(128000), "<|begin_of_text|>");
  EXPECT_EQ(tok->TokenText(id("Ġworld")), "Ġworld");
  EXPECT_EQ(tok->TokenBytes(id("Ġworld")), " world");
  EXPECT_EQ(tok->TokenText(-1), "");
  EXPECT_EQ(tok->TokenText(1 << 30), "");
  EXPECT_FALSE(tok->FindToken("no such token").has_value());
}

// This Llama-3 tokenizer.json (Meta's first release) has a ByteLevel post-processor: like
// Hugging Face's library with the same file, Encode adds no BOS. Meta's later file adds it with
// TemplateProcessing; the same vocabulary with that post-processor does.
TEST(TokenizerLlama3, BosFollowsThePostProcessor) {
  std::unique_ptr<Tokenizer> tok = LoadCached("tokenizer-llama3", true);
  ASSERT_NE(tok, nullptr);
  EXPECT_FALSE(tok->adds_bos());
  EXPECT_EQ(tok->Encode("Hello", true), tok->Encode("Hello", false));

  const std::string path = NpmModelDir("tokenizer-llama3") + "/tokenizer.json";
  json j = json::parse(ReadFileOrEmpty(path));
  j["post_processor"] = json::parse(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}}],
       "pair": [],
       "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000],
                                                "tokens": ["<|begin_of_text|>"]}}}]})");
  StatusOr<std::unique_ptr<Tokenizer>> with_bos = Tokenizer::FromJson(j.dump(), "llama3-bos");
  ASSERT_TRUE(with_bos.ok()) << with_bos.status();
  EXPECT_TRUE((*with_bos)->adds_bos());
  const std::vector<int32_t> ids = (*with_bos)->Encode("Hello", true);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], 128000);
  EXPECT_EQ((*with_bos)->Decode(ids, /*skip_special_tokens=*/true), "Hello");
  EXPECT_EQ((*with_bos)->Decode(ids, false), "<|begin_of_text|>Hello");
}

TEST(TokenizerGpt2, EndOfTextAndFallbackNames) {
  std::unique_ptr<Tokenizer> tok = LoadGpt2();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->VocabSize(), 50257);
  EXPECT_EQ(tok->eos_id(), 50256);
  EXPECT_FALSE(tok->bos_id().has_value());
  EXPECT_EQ(tok->Encode("a<|endoftext|>b", false),
            (std::vector<int32_t>{64, 50256, 65}));
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{64, 50256, 65}, true), "ab");
  // Ids outside the vocabulary are skipped, not fatal.
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{64, -5, 999999, 65}, false), "ab");
}

TEST(TokenizerPostProcessor, TemplateRobertaSequenceAndConfigOverrides) {
  const json tmpl = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "</s>", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [265], "tokens": ["<s>"]},
                         "</s>": {"id": "</s>", "ids": [266], "tokens": ["</s>"]}}})");
  std::unique_ptr<Tokenizer> t = LoadJson(TinyTokenizer({{"post_processor", tmpl}}));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(IdsText(t->Encode("hello world", true)), "265 259 264 266");
  EXPECT_EQ(IdsText(t->Encode("hello world", false)), "259 264");
  EXPECT_EQ(t->Decode(t->Encode("hello world", true), true), "hello world");

  std::unique_ptr<Tokenizer> roberta = LoadJson(TinyTokenizer({{"post_processor", json::parse(
      R"({"type": "RobertaProcessing", "sep": ["</s>", 266], "cls": ["<s>", 265]})")}}));
  ASSERT_NE(roberta, nullptr);
  EXPECT_EQ(IdsText(roberta->Encode("hello", true)), "265 259 266");

  json sequence = {{"type", "Sequence"}, {"processors", json::array()}};
  sequence["processors"].push_back({{"type", "ByteLevel"}});
  sequence["processors"].push_back(tmpl);
  std::unique_ptr<Tokenizer> seq = LoadJson(TinyTokenizer({{"post_processor", sequence}}));
  ASSERT_NE(seq, nullptr);
  EXPECT_EQ(IdsText(seq->Encode("hello", true)), "265 259 266");

  // tokenizer_config.json's explicit add_bos_token / add_eos_token win over the file.
  TokenizerConfig config;
  config.origin = "tokenizer_config.json";
  config.bos_token = "<s>";
  config.eos_token = "</s>";
  config.add_bos_token = true;
  config.add_eos_token = false;
  StatusOr<std::unique_ptr<Tokenizer>> plain =
      Tokenizer::FromJson(TinyTokenizer().dump(), "tiny.json", config);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(IdsText((*plain)->Encode("hello", true)), "265 259");
  StatusOr<std::unique_ptr<Tokenizer>> no_eos = Tokenizer::FromJson(
      TinyTokenizer({{"post_processor", tmpl}}).dump(), "tiny.json", config);
  ASSERT_TRUE(no_eos.ok()) << no_eos.status();
  EXPECT_EQ(IdsText((*no_eos)->Encode("hello", true)), "265 259");
}

TEST(TokenizerAddedTokens, NormalizedTokensMatchAfterNfc) {
  // "é" as a normalized added token matches "e" + COMBINING ACUTE (NFC composes it first);
  // as a non-normalized one it only matches the raw precomposed form.
  const json added = json::parse(R"([
      {"id": 270, "content": "\u00e9", "special": false, "normalized": true},
      {"id": 271, "content": "\u00f1", "special": false, "normalized": false}])");
  std::unique_ptr<Tokenizer> t = LoadJson(
      TinyTokenizer({{"normalizer", {{"type", "NFC"}}}, {"added_tokens", added}}));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(IdsText(t->Encode("e\xcc\x81", false)), "270");
  EXPECT_EQ(IdsText(t->Encode("\xc3\xa9", false)), "270");
  EXPECT_EQ(IdsText(t->Encode("\xc3\xb1", false)), "271");
  // "n" + COMBINING TILDE: not matched raw; NFC then makes it "ñ", which is BPE'd as bytes.
  EXPECT_EQ(IdsText(t->Encode("n\xcc\x83", false)), "195 177");
}

TEST(TokenizerAddedTokens, StripSingleWordAndLongestMatch) {
  const json added = json::parse(R"([
      {"id": 270, "content": "<mask>", "special": true, "lstrip": true},
      {"id": 271, "content": "<sep>", "special": true, "rstrip": true},
      {"id": 272, "content": "ab", "special": false, "single_word": true},
      {"id": 273, "content": "<x>", "special": true},
      {"id": 274, "content": "<x><y>", "special": true}])");
  std::unique_ptr<Tokenizer> t = LoadJson(TinyTokenizer({{"added_tokens", added}}));
  ASSERT_NE(t, nullptr);
  // lstrip absorbs the spaces before, rstrip the whitespace after.
  EXPECT_EQ(IdsText(t->Encode("o  <mask>o", false)), "111 270 111");
  EXPECT_EQ(IdsText(t->Encode("o<sep> \n o", false)), "111 271 111");
  // single_word: only where no word character touches it.
  EXPECT_EQ(IdsText(t->Encode("ab", false)), "272");
  EXPECT_EQ(IdsText(t->Encode("x ab.", false)), "120 32 272 46");
  EXPECT_EQ(IdsText(t->Encode("xab", false)), "120 97 98");
  EXPECT_EQ(IdsText(t->Encode("ab_", false)), "97 98 95");
  EXPECT_EQ(IdsText(t->Encode("\xc3\xa9" "ab", false)), "195 169 97 98");  // é is a letter
  // Leftmost-longest.
  EXPECT_EQ(IdsText(t->Encode("<x><y>", false)), "274");
  EXPECT_EQ(IdsText(t->Encode("<x><z>", false)), "273 60 122 62");
}

TEST(TokenizerConcurrency, ThreadsShareOneTokenizer) {
  std::unique_ptr<Tokenizer> llama3 = LoadCached("tokenizer-llama3", true);
  std::unique_ptr<Tokenizer> gpt2 = LoadGpt2();
  ASSERT_TRUE(llama3 && gpt2);
  std::vector<std::string> texts = Texts(Llama3Answers());
  for (const std::string& s : RandomByteStrings(200)) texts.push_back(s);
  std::vector<std::vector<int32_t>> want_llama3, want_gpt2;
  for (const std::string& s : texts) {
    want_llama3.push_back(llama3->Encode(s, true));
    want_gpt2.push_back(gpt2->Encode(s, true));
  }
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          // Alternate tokenizers so each thread's word cache holds entries of both.
          const size_t k = (i * 7 + static_cast<size_t>(t + round)) % texts.size();
          mismatches[t] += llama3->Encode(texts[k], true) != want_llama3[k];
          mismatches[t] += gpt2->Encode(texts[k], true) != want_gpt2[k];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace aicloud::engine_test
