#include "engine/structured/token_grammar.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <unordered_set>

#include <map>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/structured/json_schema.h"
#include "engine/structured/regex.h"
#include "engine/tokenizer/tokenizer_test_util.h"

namespace aicloud::engine::structured {
namespace {

using Json = nlohmann::ordered_json;

// A schema with nested, optional, enum, bounded-array and non-ASCII-friendly parts.
constexpr const char* kPersonSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 20},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c d"]}, "maxItems": 3},
    "ok": {"type": ["boolean", "null"]},
    "address": {"type": "object", "properties": {"city": {"type": "string"},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["city"]}
  },
  "required": ["name", "age"]
})";

const Tokenizer& Gpt2() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    auto t = Tokenizer::FromFile(engine_test::SourcePath("data/tokenizers/gpt2/tokenizer.json"));
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }();
  return *tok;
}

const Tokenizer* Qwen() {
  static const std::unique_ptr<Tokenizer> tok = engine_test::LoadCached("tokenizer-qwen2_5", false);
  return tok.get();
}

std::shared_ptr<const TokenVocabulary> Gpt2Vocab(int32_t model_vocab = 50257) {
  return TokenVocabulary::Build(Gpt2(), model_vocab, {50256});
}

std::shared_ptr<TokenGrammar> MakeGrammar(const Pattern& p,
                                          std::shared_ptr<const TokenVocabulary> vocab,
                                          const AutomatonLimits& limits = {}) {
  StatusOr<std::shared_ptr<ByteAutomaton>> a = ByteAutomaton::Compile(p, limits);
  EXPECT_TRUE(a.ok()) << a.status();
  if (!a.ok()) return nullptr;
  StatusOr<std::shared_ptr<TokenGrammar>> g = TokenGrammar::Create(*a, std::move(vocab));
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : nullptr;
}

std::shared_ptr<TokenGrammar> SchemaGrammar(const char* schema,
                                            std::shared_ptr<const TokenVocabulary> vocab) {
  StatusOr<Pattern> p = JsonSchemaPattern(Json::parse(schema));
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? MakeGrammar(*p, std::move(vocab)) : nullptr;
}

// The completion bound by its definition, computed apart from TokenGrammar: the canonical
// shortest completion (the smallest byte that brings the end one byte closer, each step),
// tokenised greedily by longest match against a set of every token's bytes.
struct ReferenceBounds {
  explicit ReferenceBounds(TokenGrammar& grammar) : g(grammar) {
    for (int32_t t = 0; t < g.vocabulary().size(); ++t) {
      const std::string_view b = g.vocabulary().TokenBytes(t);
      if (b.empty() || g.vocabulary().IsEos(t)) continue;
      tokens.emplace(b);
      longest = std::max(longest, b.size());
    }
  }
  int32_t Of(int32_t state) {
    if (auto it = bounds.find(state); it != bounds.end()) return it->second;
    ByteAutomaton& a = g.automaton();
    std::string completion;
    int32_t left = a.MinBytesToAccept(state);
    for (int32_t cur = state; left > 0; --left) {
      for (int b = 0; b < 256; ++b) {
        const int32_t t = a.Step(cur, static_cast<uint8_t>(b));
        if (t >= 0 && a.MinBytesToAccept(t) == left - 1) {
          completion.push_back(static_cast<char>(b));
          cur = t;
          break;
        }
      }
    }
    int32_t count = 0;
    for (size_t p = 0; p < completion.size(); ++count) {
      size_t n = std::min(longest, completion.size() - p);
      while (n > 0 && tokens.count(completion.substr(p, n)) == 0) --n;
      if (n == 0) return bounds[state] = static_cast<int32_t>(completion.size());
      p += n;
    }
    return bounds[state] = count;
  }
  TokenGrammar& g;
  std::unordered_set<std::string> tokens;
  size_t longest = 0;
  std::map<int32_t, int32_t> bounds;
};

// The mask by definition: each token's bytes fed through the automaton, kept when the
// completion bound after it and an EOS still fit.
bool ExpectedAllowed(TokenGrammar& g, ReferenceBounds& bounds, int32_t state, int32_t token, int32_t remaining) {
  const TokenVocabulary& v = g.vocabulary();
  ByteAutomaton& a = g.automaton();
  if (v.IsEos(token)) return a.IsAccepting(state);
  const std::string_view bytes = v.TokenBytes(token);
  if (bytes.empty()) return false;
  const int32_t after = a.Walk(state, bytes);
  return after != ByteAutomaton::kDead && bounds.Of(after) + 1 <= remaining - 1;
}

void ExpectMaskIsBruteForce(TokenGrammar& g, GrammarMatcher& m, int32_t remaining) {
  const TokenMask& mask = m.Mask(remaining);
  ReferenceBounds bounds(g);
  int32_t count = 0;
  for (int32_t t = 0; t < g.vocabulary().size(); ++t) {
    const bool want = ExpectedAllowed(g, bounds, m.state(), t, remaining);
    count += want;
    ASSERT_EQ(mask.Allows(t), want) << "state " << m.state() << " token " << t << " ("
                                    << g.vocabulary().TokenBytes(t) << ") remaining "
                                    << remaining;
  }
  EXPECT_EQ(mask.count, count);
  if (!mask.allowed.empty()) {
    EXPECT_EQ(static_cast<int32_t>(mask.allowed.size()), mask.count);
    EXPECT_TRUE(std::is_sorted(mask.allowed.begin(), mask.allowed.end()));
  }
}

std::vector<int32_t> AllowedIds(const TokenMask& mask) {
  if (!mask.allowed.empty()) return mask.allowed;
  std::vector<int32_t> ids;
  for (size_t w = 0; w < mask.bits.size(); ++w) {
    for (int b = 0; b < 64; ++b) {
      if ((mask.bits[w] >> b) & 1) ids.push_back(static_cast<int32_t>(w * 64 + b));
    }
  }
  return ids;
}

struct WalkResult {
  std::string text;
  bool finished = false;
  int32_t tokens = 0;
};

// Samples uniformly among the allowed tokens until EOS or the budget runs out.
WalkResult RandomWalk(std::shared_ptr<TokenGrammar> g, uint32_t seed, int32_t budget) {
  std::mt19937 rng(seed);
  GrammarMatcher m(g);
  WalkResult r;
  while (r.tokens < budget && !m.IsFinished()) {
    std::vector<int32_t> ids = AllowedIds(m.Mask(budget - r.tokens));
    if (ids.empty()) break;
    const int32_t t = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
    EXPECT_TRUE(m.Advance(t)) << "token " << t;
    ++r.tokens;
    if (!g->vocabulary().IsEos(t)) r.text += g->vocabulary().TokenBytes(t);
  }
  r.finished = m.IsFinished();
  return r;
}

TEST(TokenGrammarTest, MaskEqualsPerTokenCheckOnRandomStates) {
  auto g = SchemaGrammar(kPersonSchema, Gpt2Vocab());
  ASSERT_NE(g, nullptr);
  std::mt19937 rng(7);
  int checked = 0;
  for (uint32_t seed = 0; seed < 6; ++seed) {
    GrammarMatcher m(g);
    for (int step = 0; step < 12 && !m.IsFinished(); ++step) {
      ExpectMaskIsBruteForce(*g, m, 1000);
      // Near the end of a budget too: the room-to-close filter.
      const int32_t need = ReferenceBounds(*g).Of(m.state());
      EXPECT_EQ(g->CompletionBound(m.state()), need);
      ExpectMaskIsBruteForce(*g, m, need + 2);
      ExpectMaskIsBruteForce(*g, m, need + 6);
      checked += 3;
      std::vector<int32_t> ids = AllowedIds(m.Mask(1000));
      ASSERT_FALSE(ids.empty());
      // Bias towards short tokens so walks reach deep states.
      int32_t pick = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
      for (int tries = 0; tries < 20 && g->vocabulary().TokenBytes(pick).size() > 2; ++tries) {
        pick = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
      }
      ASSERT_TRUE(m.Advance(pick));
    }
  }
  EXPECT_GE(checked, 100);
}

TEST(TokenGrammarTest, EncodedValidInstancesReplay) {
  auto vocab = Gpt2Vocab();
  auto g = SchemaGrammar(kPersonSchema, vocab);
  ASSERT_NE(g, nullptr);
  const std::vector<std::string> instances = {
      R"({"name":"Ann","age":31})",
      R"({"name": "Zoë 😀 中文", "age": -4, "tags": ["c d", "a"], "ok": null})",
      "{\n  \"name\": \"x\\\"y\\u00e9\",\n  \"age\": 0,\n  \"address\": {\"city\": \"Köln\", \"zip\": \"50667\"}\n}",
      R"({"name":"","age":7,"ok":true,"address":{"city":"Paris"}})",
  };
  for (const std::string& text : instances) {
    const std::vector<int32_t> ids = Gpt2().Encode(text, /*add_special_tokens=*/false);
    GrammarMatcher m(g);
    for (size_t i = 0; i < ids.size(); ++i) {
      // The room rule counts bytes, not tokens, so give the budget a byte per token.
      const int32_t remaining = static_cast<int32_t>(text.size()) + 1;
      ASSERT_TRUE(m.Mask(remaining).Allows(ids[i])) << text << " token " << i;
      ASSERT_TRUE(m.Advance(ids[i])) << text << " token " << i;
    }
    EXPECT_TRUE(m.IsAccepting()) << text;
    EXPECT_TRUE(m.Mask(1).Allows(50256)) << text;
    EXPECT_EQ(m.Mask(1).count, 1) << text;  // only EOS fits in the last slot
    EXPECT_TRUE(m.Advance(50256));
    EXPECT_TRUE(m.IsFinished());
    EXPECT_EQ(m.Mask(10).count, 0);
    EXPECT_FALSE(m.Advance(ids[0]));
  }
  // An invalid instance is refused somewhere, and the refusal leaves the state unchanged.
  const std::vector<int32_t> bad = Gpt2().Encode(R"({"age":1,"name":"x"})", false);
  GrammarMatcher m(g);
  size_t i = 0;
  while (i < bad.size() && m.Advance(bad[i])) ++i;
  ASSERT_LT(i, bad.size());
  const int32_t state = m.state();
  EXPECT_FALSE(m.Mask(100).Allows(bad[i]));
  EXPECT_FALSE(m.Advance(bad[i]));
  EXPECT_EQ(m.state(), state);
}

TEST(TokenGrammarTest, TokenEndingInsideACharacter) {
  auto vocab = Gpt2Vocab();
  auto g = MakeGrammar(JsonString(1, 1), vocab);
  ASSERT_NE(g, nullptr);
  auto find = [&](std::string_view bytes) {
    for (int32_t t = 0; t < vocab->size(); ++t) {
      if (vocab->TokenBytes(t) == bytes) return t;
    }
    return -1;
  };
  const int32_t quote = find("\"");
  const int32_t f0 = find("\xf0");      // first byte of 😀 (F0 9F 98 80)
  const int32_t x9f = find("\x9f");
  const int32_t x98 = find("\x98");
  const int32_t x80 = find("\x80");
  const int32_t a = find("a");
  ASSERT_GE(std::min({quote, f0, x9f, x98, x80, a}), 0);
  GrammarMatcher m(g);
  ASSERT_TRUE(m.Advance(quote));
  EXPECT_TRUE(m.Mask(100).Allows(f0));
  ASSERT_TRUE(m.Advance(f0));
  // Inside the character: only a continuation byte may come.
  const TokenMask& mid = m.Mask(100);
  EXPECT_TRUE(mid.Allows(x9f));
  EXPECT_FALSE(mid.Allows(x80));  // F0 80 would be an overlong form
  EXPECT_FALSE(mid.Allows(a));
  EXPECT_FALSE(mid.Allows(quote));
  ASSERT_TRUE(m.Advance(x9f));
  ASSERT_TRUE(m.Advance(x98));
  ASSERT_TRUE(m.Advance(x80));
  EXPECT_FALSE(m.Mask(100).Allows(a));  // maxLength 1 reached
  ASSERT_TRUE(m.Advance(quote));
  EXPECT_TRUE(m.IsAccepting());
}

TEST(TokenGrammarTest, RandomWalksAlwaysFinishValid) {
  auto vocab = Gpt2Vocab();
  auto g = SchemaGrammar(kPersonSchema, vocab);
  ASSERT_NE(g, nullptr);
  ASSERT_LE(g->MinTokens(), 40);
  for (int32_t budget : {g->MinTokens(), 40, 200}) {
    for (uint32_t seed = 0; seed < 40; ++seed) {
      WalkResult r = RandomWalk(g, seed, budget);
      ASSERT_TRUE(r.finished) << "budget " << budget << " seed " << seed << ": " << r.text;
      EXPECT_LE(r.tokens, budget);
      EXPECT_TRUE(g->automaton().Matches(r.text)) << r.text;
      Json parsed = Json::parse(r.text, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(parsed.is_discarded()) << r.text;
      EXPECT_TRUE(parsed["name"].is_string()) << r.text;
      // Long digit runs parse as doubles; the grammar itself is the integer one.
      EXPECT_TRUE(parsed["age"].is_number()) << r.text;
    }
  }
}

TEST(TokenGrammarTest, RandomWalksFreeFormJsonWithQwen) {
  const Tokenizer* qwen = Qwen();
  ASSERT_NE(qwen, nullptr);
  auto im_end = qwen->FindToken("<|im_end|>");
  auto endoftext = qwen->FindToken("<|endoftext|>");
  ASSERT_TRUE(im_end && endoftext);
  auto vocab = TokenVocabulary::Build(*qwen, 152064, {*im_end, *endoftext});
  EXPECT_TRUE(vocab->has_all_bytes());
  auto g = MakeGrammar(AnyJsonObject(), vocab);
  ASSERT_NE(g, nullptr);
  for (int32_t budget : {40, 200}) {
    for (uint32_t seed = 0; seed < 25; ++seed) {
      WalkResult r = RandomWalk(g, 1000 + seed, budget);
      ASSERT_TRUE(r.finished) << r.text;
      Json parsed = Json::parse(r.text, nullptr, false);
      ASSERT_FALSE(parsed.is_discarded()) << r.text;
      EXPECT_TRUE(parsed.is_object());
    }
  }
}

TEST(TokenGrammarTest, SpecialTokensNeverTextButPlainAddedTokensAre) {
  const Tokenizer* qwen = Qwen();
  ASSERT_NE(qwen, nullptr);
  const int32_t im_end = *qwen->FindToken("<|im_end|>");
  const int32_t im_start = *qwen->FindToken("<|im_start|>");
  const int32_t tool_call = *qwen->FindToken("<tool_call>");
  ASSERT_FALSE(qwen->IsSpecial(tool_call));
  auto vocab = TokenVocabulary::Build(*qwen, qwen->VocabSize(), {im_end});
  auto g = MakeGrammar(JsonString(), vocab);
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  ASSERT_TRUE(m.Advance(*qwen->FindToken("\"")));
  const TokenMask& mask = m.Mask(100);
  EXPECT_TRUE(mask.Allows(tool_call));  // "<tool_call>" is fine string content
  EXPECT_FALSE(mask.Allows(im_start));  // special: never text
  EXPECT_FALSE(mask.Allows(im_end));    // EOS: only when accepting
  EXPECT_FALSE(m.Advance(im_start));
  ASSERT_TRUE(m.Advance(*qwen->FindToken("\"")));
  EXPECT_TRUE(m.Mask(100).Allows(im_end));
}

// MinTokens counts the greedy tokenisation of the shortest output, plus the EOS: 100 x's are 13
// GPT-2 tokens ("xxxxxxxx" is one), and a budget below it is refused by an empty mask.
TEST(TokenGrammarTest, BudgetBelowMinTokensIsDetectable) {
  auto g = MakeGrammar(Literal(std::string(100, 'x')), Gpt2Vocab());
  ASSERT_NE(g, nullptr);
  const int32_t greedy = static_cast<int32_t>(Gpt2().Encode(std::string(100, 'x'), false).size());
  EXPECT_LE(g->MinTokens(), greedy + 1);  // longest match is never worse than BPE here
  EXPECT_LT(g->MinTokens(), 101);         // far below one token per byte
  EXPECT_EQ(g->MinTokens(), ReferenceBounds(*g).Of(g->automaton().start()) + 1);
  GrammarMatcher m(g);
  EXPECT_EQ(m.Mask(g->MinTokens() - 1).count, 0);
  EXPECT_GT(m.Mask(g->MinTokens()).count, 0);
  EXPECT_TRUE(m.status().ok());
  // With exactly MinTokens of budget, following only the forced path still ends complete.
  for (int32_t left = g->MinTokens(); left > 0 && !m.IsFinished(); --left) {
    std::vector<int32_t> ids = AllowedIds(m.Mask(left));
    ASSERT_FALSE(ids.empty()) << left;
    ASSERT_TRUE(m.Advance(ids.back()));
  }
  EXPECT_TRUE(m.IsFinished());

  auto schema = SchemaGrammar(kPersonSchema, Gpt2Vocab());
  ASSERT_NE(schema, nullptr);
  EXPECT_EQ(schema->MinTokens(), ReferenceBounds(*schema).Of(schema->automaton().start()) + 1);
  EXPECT_LT(schema->MinTokens(), static_cast<int32_t>(std::string(R"({"name":"","age":0})").size()) + 1);
}

TEST(TokenGrammarTest, ModelVocabularyLargerOrSmallerThanTokenizer) {
  auto big = Gpt2Vocab(50257 + 300);
  EXPECT_EQ(big->size(), 50557);
  auto g = MakeGrammar(AnyJsonObject(), big);
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  ASSERT_TRUE(m.Advance(Gpt2().Encode("{\"", false)[0]));
  const TokenMask& mask = m.Mask(1000);
  EXPECT_EQ(mask.bits.size(), (50557u + 63) / 64);
  for (int32_t t = 50257; t < 50557; ++t) EXPECT_FALSE(mask.Allows(t)) << t;
  EXPECT_FALSE(m.Advance(50400));
  EXPECT_GT(mask.count, 40000);  // string content: most of the vocabulary

  // A model vocabulary cut below the tokenizer's: nothing at or past it, EOS dropped.
  auto small = Gpt2Vocab(30000);
  EXPECT_TRUE(small->eos_ids().empty());
  auto gs = MakeGrammar(JsonString(), small);
  ASSERT_NE(gs, nullptr);
  GrammarMatcher ms(gs);
  ASSERT_TRUE(ms.Advance(Gpt2().Encode("\"", false)[0]));
  EXPECT_EQ(ms.Mask(1000).bits.size(), (30000u + 63) / 64);
}

TEST(TokenGrammarTest, ApplySetsMinusInfinityExactlyAtDisallowedIds) {
  auto g = SchemaGrammar(kPersonSchema, Gpt2Vocab());
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  const TokenMask& sparse = m.Mask(1000);
  ASSERT_FALSE(sparse.allowed.empty());  // only tokens starting with '{' (and whitespace)
  std::vector<TokenMask> masks = {sparse};
  ASSERT_TRUE(m.Advance(Gpt2().Encode("{", false).front()));
  for (int32_t t : Gpt2().Encode("\"name\":\"", false)) ASSERT_TRUE(m.Advance(t));
  const TokenMask& dense = m.Mask(1000);
  ASSERT_TRUE(dense.allowed.empty());
  ASSERT_GT(dense.count, 1000);
  masks.push_back(dense);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (const TokenMask& mask : masks) {
    std::vector<float> logits(50257);
    for (float& x : logits) x = normal(rng);
    const std::vector<float> before = logits;
    mask.Apply(logits);
    int32_t kept = 0;
    for (int32_t t = 0; t < 50257; ++t) {
      if (mask.Allows(t)) {
        ASSERT_EQ(logits[t], before[t]) << t;
        ++kept;
      } else {
        ASSERT_TRUE(std::isinf(logits[t]) && logits[t] < 0) << t;
      }
    }
    EXPECT_EQ(kept, mask.count);
  }
  // Hand-made masks over a size that is not a multiple of 64.
  for (bool sparse_list : {false, true}) {
    TokenMask mask;
    mask.Reset(130);
    for (int32_t t : {0, 63, 64, 100, 129}) mask.Set(t);
    mask.FinishSparseList(130);
    EXPECT_TRUE(mask.allowed.empty());  // 5 > 130 / 32: dense
    if (sparse_list) mask.allowed = {0, 63, 64, 100, 129};
    std::vector<float> logits(130, 1.0f);
    mask.Apply(logits);
    for (int32_t t = 0; t < 130; ++t) {
      EXPECT_EQ(logits[t] == 1.0f, t == 0 || t == 63 || t == 64 || t == 100 || t == 129) << t;
    }
  }
}

TEST(TokenGrammarTest, MasksAreCachedAndIndependentOfHistory) {
  auto vocab = Gpt2Vocab();
  auto g = SchemaGrammar(kPersonSchema, vocab);
  ASSERT_NE(g, nullptr);
  // Two different token paths to the same text, hence the same state.
  GrammarMatcher a(g), b(g);
  for (int32_t t : Gpt2().Encode(R"({"name":"ab)", false)) ASSERT_TRUE(a.Advance(t));
  for (char c : std::string(R"({"name":"ab)")) {
    const std::vector<int32_t> one = Gpt2().Encode(std::string(1, c), false);
    ASSERT_EQ(one.size(), 1u);
    ASSERT_TRUE(b.Advance(one[0]));
  }
  ASSERT_EQ(a.state(), b.state());
  const TokenMask& ma = a.Mask(500);
  const int64_t cached = g->cached_states();
  const TokenMask& mb = b.Mask(500);
  EXPECT_EQ(&ma, &mb);  // the cached entry itself
  EXPECT_EQ(g->cached_states(), cached);

  // A fresh grammar computing the same state first gives the same bits (batch invariance).
  auto fresh = SchemaGrammar(kPersonSchema, vocab);
  GrammarMatcher c(fresh);
  for (int32_t t : Gpt2().Encode(R"({"name":"ab)", false)) ASSERT_TRUE(c.Advance(t));
  EXPECT_EQ(c.Mask(500).bits, ma.bits);
  EXPECT_EQ(c.Mask(500).count, ma.count);
}

TEST(TokenGrammarTest, ConcurrentMatchersOnOneGrammarGiveTheSerialResults) {
  auto vocab = Gpt2Vocab();
  std::vector<std::string> serial;
  {
    auto g = SchemaGrammar(kPersonSchema, vocab);
    for (uint32_t seed = 0; seed < 16; ++seed) serial.push_back(RandomWalk(g, seed, 120).text);
  }
  auto shared = SchemaGrammar(kPersonSchema, vocab);  // cold: threads race to fill the caches
  std::vector<std::string> parallel(serial.size());
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (size_t seed = w; seed < parallel.size(); seed += 4) {
        parallel[seed] = RandomWalk(shared, static_cast<uint32_t>(seed), 120).text;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(parallel, serial);
}

TEST(TokenGrammarTest, AutomatonOverflowFailsClosed) {
  StatusOr<Pattern> p = ParseRegex("(a|b)*a(a|b){12}");
  ASSERT_TRUE(p.ok());
  AutomatonLimits limits;
  limits.max_dfa_states = 40;
  auto g = MakeGrammar(*p, Gpt2Vocab(), limits);
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  int32_t steps = 0;
  while (steps < 200) {
    const TokenMask& mask = m.Mask(1000);
    if (mask.count == 0) break;
    std::vector<int32_t> ids = AllowedIds(mask);
    ASSERT_TRUE(m.Advance(ids[steps % ids.size()]));
    ++steps;
  }
  EXPECT_LT(steps, 200);
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(m.Mask(1000).count, 0);
  EXPECT_FALSE(m.Advance(Gpt2().Encode("a", false)[0]));
}

TEST(TokenGrammarTest, CacheLimitDropsEntriesButKeepsHeldMasks) {
  StatusOr<std::shared_ptr<ByteAutomaton>> a = ByteAutomaton::Compile(JsonString());
  ASSERT_TRUE(a.ok());
  auto g = TokenGrammar::Create(*a, Gpt2Vocab(), /*cache_bytes=*/1);
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(*g);
  const TokenMask& first = m.Mask(100);
  const std::vector<uint64_t> bits = first.bits;
  GrammarMatcher other(*g);
  ASSERT_TRUE(other.Advance(Gpt2().Encode("\"", false)[0]));
  other.Mask(100);  // evicts the start state's entry
  EXPECT_EQ((*g)->cached_states(), 1);
  EXPECT_EQ(first.bits, bits);  // still alive: held by m
  EXPECT_EQ(m.Mask(100).bits, bits);
}

}  // namespace
}  // namespace aicloud::engine::structured
