// The BPE merge loop against a reference implementation on random merge tables, the word
// cache shared by models on one thread, ignore_merges, unk handling.
#include "engine/tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <climits>
#include <map>
#include <random>

namespace aicloud::engine {
namespace {

struct RandomModel {
  std::vector<std::string> token;                       // by id
  std::map<std::pair<int32_t, int32_t>, std::pair<int, int32_t>> merges;  // pair -> rank, result
};

// Tokens 'a'..'d' plus `n` merges of random pairs of existing tokens.
void Build(uint32_t seed, int n, BpeModel* model, RandomModel* ref) {
  std::mt19937 rng(seed);
  for (char c = 'a'; c <= 'd'; ++c) {
    ref->token.push_back(std::string(1, c));
    model->AddToken(ref->token.back(), static_cast<int32_t>(ref->token.size() - 1));
  }
  int rank = 0;
  while (rank < n) {
    const auto l = static_cast<int32_t>(rng() % ref->token.size());
    const auto r = static_cast<int32_t>(rng() % ref->token.size());
    const std::string merged = ref->token[l] + ref->token[r];
    if (merged.size() > 12 || ref->merges.count({l, r})) continue;
    int32_t id = -1;
    for (size_t i = 0; i < ref->token.size(); ++i) {
      if (ref->token[i] == merged) id = static_cast<int32_t>(i);
    }
    if (id < 0) {
      ref->token.push_back(merged);
      id = static_cast<int32_t>(ref->token.size() - 1);
      model->AddToken(merged, id);
    }
    model->AddMerge(l, r, id);
    ref->merges[{l, r}] = {rank++, id};
  }
}

// The textbook loop: merge the lowest-ranked adjacent pair, leftmost first, until none is left.
std::vector<int32_t> Reference(const RandomModel& ref, const std::string& word) {
  std::vector<int32_t> s;
  for (char c : word) s.push_back(c - 'a');
  while (s.size() > 1) {
    int best_rank = INT_MAX;
    size_t best = 0;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      auto it = ref.merges.find({s[i], s[i + 1]});
      if (it != ref.merges.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        best = i;
      }
    }
    if (best_rank == INT_MAX) break;
    s[best] = ref.merges.at({s[best], s[best + 1]}).second;
    s.erase(s.begin() + static_cast<ptrdiff_t>(best) + 1);
  }
  return s;
}

TEST(Bpe, SmallExample) {
  BpeModel m;
  m.AddToken("a", 0);
  m.AddToken("b", 1);
  m.AddToken("ab", 2);
  m.AddToken("abab", 3);
  m.AddMerge(0, 1, 2);
  std::vector<int32_t> ids;
  m.EncodeWord("abab", &ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 2}));
  // With ignore_merges the whole word is a token even though no merge builds it.
  m.set_ignore_merges(true);
  ids.clear();
  m.EncodeWord("abab", &ids);
  EXPECT_EQ(ids, std::vector<int32_t>{3});
  EXPECT_FALSE(m.AddToken("ab", 9));  // the bytes are already token 2
  EXPECT_EQ(m.FindBytes("ab"), 2);
}

TEST(Bpe, MergeLoopsMatchTheReference) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    BpeModel model;
    RandomModel ref;
    Build(seed, 300, &model, &ref);
    std::mt19937 rng(seed * 7919);
    for (int k = 0; k < 400; ++k) {
      // Lengths on both sides of the small/large switch (48 symbols).
      const size_t n = 1 + rng() % (k % 2 ? 40 : 300);
      std::string word;
      for (size_t i = 0; i < n; ++i) word.push_back(static_cast<char>('a' + rng() % 4));
      std::vector<int32_t> got;
      model.EncodeWordUncached(word, &got);
      ASSERT_EQ(got, Reference(ref, word)) << "seed " << seed << " word " << word;
      std::vector<int32_t> cached;
      model.EncodeWord(word, &cached);
      model.EncodeWord(word, &cached);  // the second time from the cache
      ASSERT_EQ(cached.size(), 2 * got.size());
      EXPECT_TRUE(std::equal(got.begin(), got.end(), cached.begin()));
      EXPECT_TRUE(std::equal(got.begin(), got.end(), cached.begin() + static_cast<ptrdiff_t>(got.size())));
    }
  }
}

TEST(Bpe, CacheIsPerModel) {
  // Two models that encode the same words differently, used alternately on one thread.
  BpeModel a, b;
  for (BpeModel* m : {&a, &b}) {
    m->AddToken("x", 0);
    m->AddToken("y", 1);
    m->AddToken("xy", 2);
  }
  a.AddMerge(0, 1, 2);
  for (int round = 0; round < 3; ++round) {
    std::vector<int32_t> ia, ib;
    a.EncodeWord("xyxy", &ia);
    b.EncodeWord("xyxy", &ib);
    EXPECT_EQ(ia, (std::vector<int32_t>{2, 2}));
    EXPECT_EQ(ib, (std::vector<int32_t>{0, 1, 0, 1}));
  }
  // A model destroyed and another built in its place does not see the old entries.
  auto c = std::make_unique<BpeModel>();
  c->AddToken("x", 0);
  c->AddToken("y", 1);
  c->AddToken("xy", 2);
  c->AddMerge(0, 1, 2);
  std::vector<int32_t> ids;
  c->EncodeWord("xyx", &ids);
  c.reset();
  c = std::make_unique<BpeModel>();
  c->AddToken("x", 0);
  c->AddToken("y", 1);
  ids.clear();
  c->EncodeWord("xyx", &ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 0}));
}

TEST(Bpe, UnknownBytes) {
  BpeModel m;
  m.AddToken("a", 0);
  m.AddToken("?", 1);
  std::vector<int32_t> ids;
  m.EncodeWord("azza", &ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 0}));  // no unk: dropped, as Hugging Face does
  EXPECT_EQ(m.MissingBytes().size(), 254u);
  m.set_unk(1, /*fuse_unk=*/false);
  ids.clear();
  m.EncodeWord("azza", &ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 1, 0}));
  m.set_unk(1, /*fuse_unk=*/true);
  ids.clear();
  m.EncodeWordUncached("azza", &ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 0}));
}

TEST(Bpe, LaterDuplicateMergeWins) {
  BpeModel m;
  m.AddToken("a", 0);
  m.AddToken("b", 1);
  m.AddToken("c", 2);
  m.AddToken("ab", 3);
  m.AddToken("bc", 4);
  m.AddMerge(0, 1, 3);  // rank 0
  m.AddMerge(1, 2, 4);  // rank 1
  m.AddMerge(0, 1, 3);  // rank 2: "a b" now ranks after "b c"
  std::vector<int32_t> ids;
  m.EncodeWordUncached("abc", &ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 4}));
}

}  // namespace
}  // namespace aicloud::engine
