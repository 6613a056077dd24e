// Sampler and SamplingParams: validation, greedy, filters on hand-made distributions (and
// against a brute-force reference on a 50k vocabulary), seeds and batch independence,
// empirical frequencies, penalties, logprobs and bad logits.
#include "engine/sample/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "core/rng.h"

namespace aicloud::engine {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingParams Params(float temperature, int32_t top_k = 0, float top_p = 1.0f, float min_p = 0.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(p > 0 ? static_cast<float>(std::log(p)) : -kInf);
  return l;
}

std::vector<float> RandomLogits(Rng& rng, size_t vocab, double scale) {
  std::vector<float> l(vocab);
  for (float& v : l) v = static_cast<float>((rng.UniformDouble() * 2 - 1) * scale);
  return l;
}

std::set<int32_t> TokensOf(const std::vector<TokenProb>& d) {
  std::set<int32_t> s;
  for (const TokenProb& t : d) s.insert(t.token);
  return s;
}

// ---- Validation -----------------------------------------------------------------------------

TEST(SamplingParamsTest, Validate) {
  struct Case {
    const char* name;
    void (*edit)(SamplingParams&);
    const char* error;  // nullptr = valid
  };
  const Case cases[] = {
      {"defaults", [](SamplingParams&) {}, nullptr},
      {"greedy", [](SamplingParams& p) { p.temperature = 0; }, nullptr},
      {"negative temperature", [](SamplingParams& p) { p.temperature = -0.1f; }, "temperature"},
      {"nan temperature", [](SamplingParams& p) { p.temperature = std::nanf(""); }, "temperature"},
      {"inf temperature", [](SamplingParams& p) { p.temperature = kInf; }, "temperature"},
      {"top_k -1 is off", [](SamplingParams& p) { p.top_k = -1; }, nullptr},
      {"top_k 0 is off", [](SamplingParams& p) { p.top_k = 0; }, nullptr},
      {"top_k -2", [](SamplingParams& p) { p.top_k = -2; }, "top_k must be >= 1, or 0 or -1"},
      {"top_p 0", [](SamplingParams& p) { p.top_p = 0; }, "top_p must be in (0, 1]"},
      {"top_p 1.01", [](SamplingParams& p) { p.top_p = 1.01f; }, "top_p"},
      {"top_p nan", [](SamplingParams& p) { p.top_p = std::nanf(""); }, "top_p"},
      {"min_p 1", [](SamplingParams& p) { p.min_p = 1; }, nullptr},
      {"min_p -0.1", [](SamplingParams& p) { p.min_p = -0.1f; }, "min_p must be in [0, 1]"},
      {"min_p 1.5", [](SamplingParams& p) { p.min_p = 1.5f; }, "min_p"},
      {"repetition 0", [](SamplingParams& p) { p.repetition_penalty = 0; }, "repetition_penalty"},
      {"presence 2", [](SamplingParams& p) { p.presence_penalty = 2; }, nullptr},
      {"presence 2.5", [](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty"},
      {"frequency -3", [](SamplingParams& p) { p.frequency_penalty = -3; }, "frequency_penalty"},
      {"max_tokens 0", [](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens must be >= 1"},
      {"min_tokens > max", [](SamplingParams& p) { p.min_tokens = 17; }, "min_tokens"},
      {"min_tokens < 0", [](SamplingParams& p) { p.min_tokens = -1; }, "min_tokens"},
      {"logprobs 20", [](SamplingParams& p) { p.logprobs = 20; }, nullptr},
      {"logprobs 21", [](SamplingParams& p) { p.logprobs = 21; }, "logprobs"},
      {"logprobs -1", [](SamplingParams& p) { p.logprobs = -1; }, "logprobs"},
      {"stop id negative", [](SamplingParams& p) { p.stop_token_ids = {5, -1}; }, "stop_token_ids"},
      {"stop id beyond vocab", [](SamplingParams& p) { p.stop_token_ids = {1000}; },
       "stop_token_ids must be token ids in [0, 1000)"},
      {"logit_bias 100", [](SamplingParams& p) { p.logit_bias = {{3, 100}, {4, -100}}; }, nullptr},
      {"logit_bias 101", [](SamplingParams& p) { p.logit_bias = {{3, 101}}; }, "logit_bias must be values in [-100, 100]"},
      {"logit_bias nan", [](SamplingParams& p) { p.logit_bias = {{3, std::nanf("")}}; }, "logit_bias"},
      {"logit_bias id", [](SamplingParams& p) { p.logit_bias = {{1000, 1}}; }, "logit_bias must be keyed by token ids in [0, 1000)"},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.edit(p);
    const Status s = Validate(p, 1000);
    if (c.error == nullptr) {
      EXPECT_TRUE(s.ok()) << c.name << ": " << s;
    } else {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.name;
      EXPECT_NE(s.message().find(c.error), std::string::npos) << c.name << ": " << s;
    }
  }
  EXPECT_EQ(Validate(Params(-1)).message(),
            "sampling: temperature must be >= 0 (0 = greedy), got -1");
}

// ---- Greedy and filters -------------------------------------------------------------------

TEST(SamplerTest, GreedyTakesArgmaxLowestIdOnTies) {
  Sampler s;
  struct Case {
    std::vector<float> logits;
    int32_t want;
  };
  const Case cases[] = {
      {{0.1f, 3.0f, -1.0f, 2.9f}, 1},
      {{5.0f, 5.0f, 5.0f}, 0},
      {{-kInf, 1.0f, 7.0f, 7.0f}, 2},
      {{-3.0f}, 0},
      {{-kInf, -kInf, -50.0f}, 2},
  };
  for (const Case& c : cases) {
    for (uint64_t seed : {1, 2, 3}) {
      SequenceSampling seq(Params(0), seed, {});
      StatusOr<SampleResult> r = s.Sample(seq, c.logits);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->token, c.want);
    }
  }
}

TEST(SamplerTest, TopKOneIsGreedy) {
  Sampler s;
  Rng rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> l = RandomLogits(rng, 300, 4.0);
    if (trial % 3 == 0) l[7] = l[200] = 10.0f;  // a tie for the top: the lower id
    SequenceSampling greedy(Params(0), 0, {});
    SequenceSampling k1(Params(1.5f, 1, 0.5f, 0.0f), static_cast<uint64_t>(trial), {});
    EXPECT_EQ(s.Sample(k1, l)->token, s.Sample(greedy, l)->token);
  }
}

TEST(SamplerTest, FiltersKeepExactlyTheExpectedSets) {
  // Probabilities 0.5, 0.25, 0.15, 0.10 put on shuffled ids so id order is not prob order.
  std::vector<double> probs(6, 0.0);
  probs[4] = 0.5;
  probs[1] = 0.25;
  probs[5] = 0.15;
  probs[0] = 0.10;  // ids 2 and 3 are impossible (-inf)
  const std::vector<float> logits = LogitsOf(probs);
  struct Case {
    const char* name;
    SamplingParams params;
    std::vector<std::pair<int32_t, double>> want;  // token, renormalised probability
  };
  const Case cases[] = {
      {"no filter", Params(1), {{4, 0.5}, {1, 0.25}, {5, 0.15}, {0, 0.10}}},
      {"top_p 0.5: the crossing token only", Params(1, 0, 0.5f), {{4, 1.0}}},
      {"top_p 0.6", Params(1, 0, 0.6f), {{4, 0.5 / 0.75}, {1, 0.25 / 0.75}}},
      {"top_p 0.8", Params(1, 0, 0.8f), {{4, 0.5 / 0.9}, {1, 0.25 / 0.9}, {5, 0.15 / 0.9}}},
      {"top_p 0.95", Params(1, 0, 0.95f), {{4, 0.5}, {1, 0.25}, {5, 0.15}, {0, 0.10}}},
      {"top_k 2", Params(1, 2), {{4, 0.5 / 0.75}, {1, 0.25 / 0.75}}},
      {"top_k beyond vocab = off", Params(1, 100), {{4, 0.5}, {1, 0.25}, {5, 0.15}, {0, 0.10}}},
      {"top_k -1 = off", Params(1, -1), {{4, 0.5}, {1, 0.25}, {5, 0.15}, {0, 0.10}}},
      // top_p applies to the top-k survivors, renormalised: 0.556, 0.833 >= 0.8.
      {"top_k 3 then top_p 0.8", Params(1, 3, 0.8f), {{4, 0.5 / 0.75}, {1, 0.25 / 0.75}}},
      {"min_p 0.4 (>= 0.2)", Params(1, 0, 1, 0.4f), {{4, 0.5 / 0.75}, {1, 0.25 / 0.75}}},
      {"min_p 0.25 (>= 0.125)", Params(1, 0, 1, 0.25f),
       {{4, 0.5 / 0.9}, {1, 0.25 / 0.9}, {5, 0.15 / 0.9}}},
      {"min_p 1", Params(1, 0, 1, 1.0f), {{4, 1.0}}},
      // min_p first (drops 0.10), then top_p over 0.9: 0.556, 0.833 >= 0.8.
      {"min_p 0.25 then top_p 0.8", Params(1, 0, 0.8f, 0.25f), {{4, 0.5 / 0.75}, {1, 0.25 / 0.75}}},
      // Temperature 2: p ~ sqrt(p).
      {"temperature 2", Params(2),
       {{4, std::sqrt(0.5)}, {1, std::sqrt(0.25)}, {5, std::sqrt(0.15)}, {0, std::sqrt(0.10)}}},
      // min_p is relative to the tempered distribution: sqrt(0.15/0.5) = 0.548 >= 0.5.
      {"temperature 2, min_p 0.5", Params(2, 0, 1, 0.5f),
       {{4, std::sqrt(0.5)}, {1, std::sqrt(0.25)}, {5, std::sqrt(0.15)}}},
      {"greedy ignores filters", Params(0, 3, 0.1f, 0.9f), {{4, 1.0}}},
  };
  Sampler s;
  for (const Case& c : cases) {
    SequenceSampling seq(c.params, 1, {});
    StatusOr<std::vector<TokenProb>> d = s.Distribution(seq, logits);
    ASSERT_TRUE(d.ok()) << c.name << ": " << d.status();
    double norm = 0;
    for (const auto& w : c.want) norm += w.second;
    ASSERT_EQ(d->size(), c.want.size()) << c.name;
    for (size_t i = 0; i < c.want.size(); ++i) {
      EXPECT_EQ((*d)[i].token, c.want[i].first) << c.name << " #" << i;
      EXPECT_NEAR((*d)[i].prob, c.want[i].second / norm, 1e-5) << c.name << " #" << i;
    }
    // Whatever Sample draws lies in the set.
    const std::set<int32_t> allowed = TokensOf(*d);
    for (uint64_t seed = 0; seed < 50; ++seed) {
      SequenceSampling sq(c.params, seed, {});
      EXPECT_TRUE(allowed.count(s.Sample(sq, logits)->token)) << c.name;
    }
  }
}

// The sampler's own exp must track the true probabilities closely over the whole range a
// softmax uses, and give exactly 0 to -inf.
TEST(SamplerTest, ProbabilitiesAreAccurate) {
  Sampler s;
  SequenceSampling seq(Params(1), 0, {});
  double worst = 0;
  for (double d = 0; d <= 80; d += 0.037) {
    const std::vector<float> l = {0.0f, static_cast<float>(-d), -kInf};
    StatusOr<std::vector<TokenProb>> dist = s.Distribution(seq, l);
    ASSERT_TRUE(dist.ok());
    ASSERT_EQ(dist->size(), d > 87 ? 1u : 2u) << d;  // the -inf token is never a candidate
    const double e = std::exp(-static_cast<double>(static_cast<float>(d)));
    const double want = e / (1 + e);
    const double got = (*dist)[1].token == 1 ? (*dist)[1].prob : (*dist)[0].prob;
    worst = std::max(worst, std::abs(got - want) / want);
  }
  EXPECT_LT(worst, 1e-6);
  // Temperature scales inside the exp: p(1) = e^(-d / T) / (1 + e^(-d / T)).
  SequenceSampling hot(Params(2.5f), 0, {});
  StatusOr<std::vector<TokenProb>> d = s.Distribution(hot, std::vector<float>{0.0f, -5.0f});
  EXPECT_NEAR((*d)[1].prob, std::exp(-2.0) / (1 + std::exp(-2.0)), 1e-7);
}

TEST(SamplerTest, TopKBreaksTiesTowardsLowerIds) {
  const std::vector<float> logits = {1, 3, 3, 3, 2, 3};
  Sampler s;
  SequenceSampling seq(Params(1, 2), 0, {});
  EXPECT_EQ(TokensOf(*s.Distribution(seq, logits)), (std::set<int32_t>{1, 2}));
}

TEST(SamplerTest, MinPAloneKeepsEverySurvivorOfALargeVocabulary) {
  Rng rng(21);
  const std::vector<float> l = RandomLogits(rng, 50257, 6.0);
  const float mx = *std::max_element(l.begin(), l.end());
  Sampler s;
  for (float min_p : {0.001f, 0.01f, 0.2f}) {
    SequenceSampling seq(Params(0.9f, 0, 1.0f, min_p), 0, {});
    size_t want = 0;
    for (float v : l) want += std::exp((static_cast<double>(v) - mx) / 0.9) >= min_p;
    EXPECT_EQ(s.Distribution(seq, l)->size(), want) << min_p;
  }
}

TEST(SamplerTest, TopPCutThroughTiesKeepsTheLowerIds) {
  // Token 0 leads; tokens 1..30 tie; the cut falls after exactly m of the tied tokens.
  std::vector<float> l(200, 0.0f);
  l[0] = 2.0f;
  for (int i = 1; i <= 30; ++i) l[static_cast<size_t>(i)] = 1.0f;
  double z = 0;
  for (float v : l) z += std::exp(static_cast<double>(v));
  Sampler s;
  for (int m : {1, 7, 13, 30}) {
    // Aim between the mass of m - 1 and m tied tokens.
    const double top_p = (std::exp(2.0) + (m - 0.5) * std::exp(1.0)) / z;
    SequenceSampling seq(Params(1, 0, static_cast<float>(top_p)), 0, {});
    std::set<int32_t> want = {0};
    for (int i = 1; i <= m; ++i) want.insert(i);
    EXPECT_EQ(TokensOf(*s.Distribution(seq, l)), want) << "m " << m;
  }
}

// The selections must give what a full sort gives, on a real vocabulary size.
TEST(SamplerTest, LargeVocabularyMatchesBruteForce) {
  constexpr size_t kVocab = 50257;
  Rng rng(11);
  Sampler s;
  for (int trial = 0; trial < 12; ++trial) {
    std::vector<float> l = RandomLogits(rng, kVocab, trial % 2 == 0 ? 3.0 : 12.0);
    const float t = 0.5f + 0.25f * static_cast<float>(trial % 4);
    const float top_p = trial % 3 == 0 ? 0.3f : (trial % 3 == 1 ? 0.9f : 0.99f);
    const int32_t top_k = trial % 4 == 0 ? 0 : 40 * trial;
    // Reference: full sort, softmax at temperature t, top-k, renormalise, top-p.
    std::vector<int32_t> order(kVocab);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return l[static_cast<size_t>(a)] > l[static_cast<size_t>(b)] ||
             (l[static_cast<size_t>(a)] == l[static_cast<size_t>(b)] && a < b);
    });
    if (top_k > 0) order.resize(static_cast<size_t>(top_k));
    std::vector<double> w;
    double mass = 0;
    for (int32_t id : order) {
      w.push_back(std::exp((static_cast<double>(l[static_cast<size_t>(id)]) - l[static_cast<size_t>(order[0])]) / t));
      mass += w.back();
    }
    size_t keep = order.size();
    double cum = 0;
    for (size_t j = 0; j < order.size(); ++j) {
      cum += w[j];
      if (cum >= top_p * mass) {
        keep = j + 1;
        break;
      }
    }
    SequenceSampling seq(Params(t, top_k, top_p), 5, {});
    StatusOr<std::vector<TokenProb>> d = s.Distribution(seq, l);
    ASSERT_TRUE(d.ok());
    // Float vs double sums may move the cut by one token at the boundary.
    ASSERT_NEAR(static_cast<double>(d->size()), static_cast<double>(keep), 1.0) << "trial " << trial;
    // Same survivors (up to that boundary token); the head in the same order (deep in the tail
    // distinct logits can round to equal float probabilities, which Distribution orders by id).
    std::set<int32_t> want(order.begin(), order.begin() + static_cast<long>(keep));
    const std::set<int32_t> got = TokensOf(*d);
    std::vector<int32_t> diff;
    std::set_symmetric_difference(want.begin(), want.end(), got.begin(), got.end(),
                                  std::back_inserter(diff));
    EXPECT_LE(diff.size(), 1u) << "trial " << trial;
    for (size_t j = 0; j < std::min<size_t>(50, std::min(d->size(), keep) - 1); ++j) {
      ASSERT_EQ((*d)[j].token, order[j]) << "trial " << trial << " rank " << j;
    }
  }
}

// ---- Randomness --------------------------------------------------------------------------------

std::vector<int32_t> Draw(Sampler& s, SequenceSampling& seq, const std::vector<float>& l, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = s.Sample(seq, l)->token;
    seq.Append(t);
    out.push_back(t);
  }
  return out;
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  Rng rng(1);
  const std::vector<float> l = RandomLogits(rng, 1000, 2.0);
  Sampler s1, s2;
  SequenceSampling a(Params(1.0f, 50), 42, {}), b(Params(1.0f, 50), 42, {}), c(Params(1.0f, 50), 43, {});
  const std::vector<int32_t> ta = Draw(s1, a, l, 100);
  EXPECT_EQ(ta, Draw(s2, b, l, 100));
  EXPECT_NE(ta, Draw(s1, c, l, 100));
}

TEST(SamplerTest, SeededSequenceIgnoresItsBatchNeighbours) {
  Rng rng(2);
  const std::vector<float> la = RandomLogits(rng, 5000, 3.0);
  const std::vector<float> lb = RandomLogits(rng, 5000, 3.0);
  SamplingParams pa = Params(0.8f, 0, 0.95f);
  pa.repetition_penalty = 1.3f;
  pa.seed = 7;
  // Alone.
  Sampler alone;
  SequenceSampling a1(pa, 7, std::vector<int32_t>{1, 2, 3});
  const std::vector<int32_t> want = Draw(alone, a1, la, 60);
  // Interleaved with two others (different params, vocab rows, and sampling order) through
  // one shared Sampler.
  Sampler shared;
  SequenceSampling a2(pa, 7, std::vector<int32_t>{1, 2, 3});
  SequenceSampling b(Params(1.2f, 10, 1.0f, 0.05f), 99, {});
  SequenceSampling c(Params(0), 5, {});
  std::vector<int32_t> got;
  for (int i = 0; i < 60; ++i) {
    if (i % 2 == 0) b.Append(shared.Sample(b, lb)->token);
    const int32_t t = shared.Sample(a2, la)->token;
    a2.Append(t);
    got.push_back(t);
    if (i % 3 == 0) c.Append(shared.Sample(c, lb)->token);
  }
  EXPECT_EQ(got, want);
}

TEST(SamplerTest, EmpiricalFrequenciesMatchTheFilteredDistribution) {
  // Ten tokens; temperature 0.8, top_k 6, min_p 0.05, top_p 0.95: compute the expected
  // distribution by hand from the definitions, then draw 40,000 tokens.
  const std::vector<float> logits = {0.3f, 2.0f, -1.0f, 1.2f, 1.9f, 0.0f, -0.5f, 1.5f, 0.9f, -3.0f};
  const float t = 0.8f;
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<double> p;
  for (int32_t id : ids) p.push_back(std::exp((logits[id] - logits[ids[0]]) / t));
  // min_p: p >= 0.05 * p_max (= 0.05).
  std::vector<int32_t> keep;
  std::vector<double> kp;
  for (size_t j = 0; j < ids.size(); ++j) {
    if (p[j] >= 0.05) {
      keep.push_back(ids[j]);
      kp.push_back(p[j]);
    }
  }
  if (keep.size() > 6) {
    keep.resize(6);
    kp.resize(6);
  }
  double mass = std::accumulate(kp.begin(), kp.end(), 0.0);
  double cum = 0;
  for (size_t j = 0; j < kp.size(); ++j) {
    cum += kp[j];
    if (cum >= 0.95 * mass) {
      keep.resize(j + 1);
      kp.resize(j + 1);
      break;
    }
  }
  mass = std::accumulate(kp.begin(), kp.end(), 0.0);
  ASSERT_GE(keep.size(), 4u);  // the case is only interesting with several survivors

  SamplingParams params = Params(t, 6, 0.95f, 0.05f);
  SequenceSampling seq(params, 2024, {});
  Sampler s;
  constexpr int kDraws = 40000;
  std::map<int32_t, int> count;
  for (int i = 0; i < kDraws; ++i) {
    const int32_t tok = s.Sample(seq, logits)->token;
    seq.Append(tok);
    ++count[tok];
  }
  double chi2 = 0;
  int seen = 0;
  for (size_t j = 0; j < keep.size(); ++j) {
    const double expected = kDraws * kp[j] / mass;
    const double d = count[keep[j]] - expected;
    chi2 += d * d / expected;
    seen += count[keep[j]];
  }
  EXPECT_EQ(seen, kDraws) << "a filtered-out token was drawn";
  // 99.9th percentile of chi-square with up to 5 degrees of freedom is 20.5.
  EXPECT_LT(chi2, 20.5) << "survivors " << keep.size();
}

// ---- Penalties ---------------------------------------------------------------------------------

TEST(SamplerTest, PenaltiesChangeLogitsAsSpecified) {
  struct Case {
    const char* name;
    float repetition, presence, frequency;
    std::vector<int32_t> prompt, output;
    std::vector<float> want;
  };
  const std::vector<float> base = {2.0f, -2.0f, 4.0f, 0.5f, 1.0f};
  const Case cases[] = {
      {"off", 1, 0, 0, {0, 1}, {2, 2}, {2.0f, -2.0f, 4.0f, 0.5f, 1.0f}},
      // Divide positive, multiply negative, over prompt + output (token 2 once, not twice).
      {"repetition 2", 2, 0, 0, {0, 1}, {2, 2}, {1.0f, -4.0f, 2.0f, 0.5f, 1.0f}},
      {"repetition 0.5 encourages", 0.5f, 0, 0, {0}, {1}, {4.0f, -1.0f, 4.0f, 0.5f, 1.0f}},
      // Output only: token 0 is in the prompt and untouched.
      {"presence 1", 1, 1, 0, {0}, {2, 2, 3}, {2.0f, -2.0f, 3.0f, -0.5f, 1.0f}},
      {"frequency 0.5", 1, 0, 0.5f, {0}, {2, 2, 3}, {2.0f, -2.0f, 3.0f, 0.0f, 1.0f}},
      {"presence + frequency", 1, 1, 0.5f, {}, {2, 2, 3}, {2.0f, -2.0f, 2.0f, -1.0f, 1.0f}},
      {"negative presence encourages", 1, -1, 0, {}, {4}, {2.0f, -2.0f, 4.0f, 0.5f, 2.0f}},
      // Repetition first, then frequency: 4 / 2 - 1 = 1 (not (4 - 1) / 2).
      {"order", 2, 0, 1, {}, {2}, {2.0f, -2.0f, 1.0f, 0.5f, 1.0f}},
      // History tokens outside the logits row are ignored.
      {"out of range ids", 2, 1, 1, {77, -3}, {99}, {2.0f, -2.0f, 4.0f, 0.5f, 1.0f}},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    p.repetition_penalty = c.repetition;
    p.presence_penalty = c.presence;
    p.frequency_penalty = c.frequency;
    SequenceSampling seq(p, 0, c.prompt);
    for (int32_t t : c.output) seq.Append(t);
    std::vector<float> l = base;
    Sampler::ApplyPenalties(seq, l);
    for (size_t i = 0; i < l.size(); ++i) EXPECT_FLOAT_EQ(l[i], c.want[i]) << c.name << " token " << i;
  }
}

TEST(SamplerTest, PenaltiesSteerGreedy) {
  // Token 0 wins greedily until the repetition penalty pushes it below token 1.
  SamplingParams p = Params(0);
  p.repetition_penalty = 1.5f;
  SequenceSampling seq(p, 0, std::vector<int32_t>{0});
  Sampler s;
  EXPECT_EQ(s.Sample(seq, std::vector<float>{3.0f, 2.5f})->token, 1);  // 3 / 1.5 = 2 < 2.5
  SequenceSampling plain(Params(0), 0, std::vector<int32_t>{0});
  EXPECT_EQ(s.Sample(plain, std::vector<float>{3.0f, 2.5f})->token, 0);
}

TEST(SamplerTest, MinTokensMasksEosAndStopTokens) {
  SamplingParams p = Params(0);
  p.min_tokens = 2;
  p.stop_token_ids = {1};
  const std::vector<int32_t> eos = {0};
  const std::vector<float> l = {5.0f, 4.0f, 3.0f};
  Sampler s;
  SequenceSampling seq(p, 0, {}, eos);
  EXPECT_EQ(s.Sample(seq, l)->token, 2);  // 0 (EOS) and 1 (stop) masked
  seq.Append(2);
  EXPECT_EQ(s.Sample(seq, l)->token, 2);
  seq.Append(2);
  EXPECT_EQ(s.Sample(seq, l)->token, 0);  // min_tokens reached
  p.ignore_eos = true;
  SequenceSampling ign(p, 0, {}, eos);
  EXPECT_EQ(s.Sample(ign, l)->token, 0);  // EOS is not special for this request; 1 still is
  p.min_tokens = 0;
  SequenceSampling none(p, 0, {}, eos);
  EXPECT_EQ(s.Sample(none, l)->token, 0);
}

TEST(SamplerTest, LogitBiasSteersAndBansTokens) {
  const std::vector<float> l = {3.0f, 2.0f, 1.0f, 0.0f};
  Sampler s;
  SamplingParams p = Params(0);
  p.logit_bias = {{0, -100.0f}};  // bans the argmax
  EXPECT_EQ(s.Sample(SequenceSampling(p, 0, {}), l)->token, 1);
  p.logit_bias = {{3, 2.5f}};  // 0 + 2.5 < 3: not enough
  EXPECT_EQ(s.Sample(SequenceSampling(p, 0, {}), l)->token, 0);
  p.logit_bias = {{3, 3.5f}};
  EXPECT_EQ(s.Sample(SequenceSampling(p, 0, {}), l)->token, 3);
  // +100 forces a token under sampling for every seed; the logprob is still the model's.
  p = Params(1.0f);
  p.logit_bias = {{2, 100.0f}};
  p.logprobs = 0;
  double z = 0;
  for (float v : l) z += std::exp(v);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    StatusOr<SampleResult> r = s.Sample(SequenceSampling(p, seed, {}), l);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->token, 2);
    EXPECT_NEAR(r->logprob, 1.0 - std::log(z), 1e-5);
  }
  // The bias changes the distribution exactly by exp(bias).
  p = Params(1.0f);
  p.logit_bias = {{1, static_cast<float>(std::log(2.0))}};
  StatusOr<std::vector<TokenProb>> d = s.Distribution(SequenceSampling(p, 0, {}), LogitsOf({0.25, 0.25, 0.5}));
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->size(), 3u);
  for (const TokenProb& t : *d) EXPECT_NEAR(t.prob, t.token == 0 ? 0.2 : 0.4, 1e-5) << t.token;
}

// ---- Logprobs and errors ---------------------------------------------------------------------

TEST(SamplerTest, LogprobsAreTheModelsDistribution) {
  const std::vector<float> l = {1.0f, 3.0f, 3.0f, -2.0f, 0.0f};
  double z = 0;
  for (float v : l) z += std::exp(v);
  SamplingParams p = Params(0);
  p.logprobs = 3;
  p.repetition_penalty = 4.0f;  // changes the pick, not the reported logprobs
  SequenceSampling seq(p, 0, std::vector<int32_t>{1});
  Sampler s;
  StatusOr<SampleResult> r = s.Sample(seq, l);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->token, 2);  // 3 / 4 < 3
  EXPECT_NEAR(r->logprob, 3.0 - std::log(z), 1e-5);
  ASSERT_EQ(r->top_logprobs.size(), 3u);
  EXPECT_EQ(r->top_logprobs[0].token, 1);  // ties: lower id first
  EXPECT_EQ(r->top_logprobs[1].token, 2);
  EXPECT_EQ(r->top_logprobs[2].token, 0);
  EXPECT_NEAR(r->top_logprobs[2].logprob, 1.0 - std::log(z), 1e-5);

  p.logprobs = 0;
  SequenceSampling only(p, 0, {});
  r = s.Sample(only, l);
  EXPECT_TRUE(r->top_logprobs.empty());
  EXPECT_FALSE(std::isnan(r->logprob));
  SequenceSampling none(Params(0), 0, {});
  EXPECT_TRUE(std::isnan(s.Sample(none, l)->logprob));
}

TEST(SamplerTest, BadLogitsAreErrors) {
  struct Case {
    const char* name;
    std::vector<float> logits;
    const char* error;
  };
  const Case cases[] = {
      {"empty", {}, "empty logits"},
      {"nan", {1.0f, std::nanf(""), 0.0f}, "logit of token 1 is NaN"},
      {"+inf", {kInf, 0.0f}, "logit of token 0 is +inf"},
      {"all -inf", {-kInf, -kInf}, "every logit is -inf"},
  };
  Sampler s;
  for (const Case& c : cases) {
    for (float t : {0.0f, 1.0f}) {
      SequenceSampling seq(Params(t, 0, 0.9f), 0, {});
      StatusOr<SampleResult> r = s.Sample(seq, c.logits);
      ASSERT_FALSE(r.ok()) << c.name;
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(r.status().message().find(c.error), std::string::npos) << c.name << ": " << r.status();
    }
  }
  // Penalties that would turn everything -inf are still caught (here: nothing to do, but a
  // -inf logit stays -inf and others survive).
  SamplingParams p = Params(1);
  p.repetition_penalty = 2;
  SequenceSampling seq(p, 0, std::vector<int32_t>{0});
  EXPECT_EQ(s.Sample(seq, std::vector<float>{-kInf, 1.0f})->token, 1);
}

}  // namespace
}  // namespace aicloud::engine
