// What the gateway reads from a request body (model, stream, max_tokens, the prompt text) and
// from an answer (usage), against building the whole nlohmann document of the same text, which
// is what both took before they were read with simdjson; and the rewrite of a body (a stream's
// include_usage, an alias's model name) written from the parsed tape, against the document
// rewrite (parse, edit, dump). Chat bodies of a few sizes: a short question, a 4 KiB and a
// 64 KiB RAG prompt, a 1 MiB one (beyond the per-thread parser).
//
//   gateway_parse_bench                       # all
//   gateway_parse_bench --benchmark_filter=Request
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/request.h"

namespace {

using aicloud::gateway::Endpoint;
using nlohmann::json;

std::string ChatBody(size_t content_bytes) {
  std::string content;
  static constexpr std::string_view kWords[] = {"the ", "context ", "says ", "that ", "GPU ", "memory ", "is ", "42 ", "GiB. "};
  for (size_t i = 0; content.size() < content_bytes; ++i) content += kWords[i % std::size(kWords)];
  content.resize(content_bytes);
  return json{{"model", "llama-3-8b"},
              {"messages", {{{"role", "system"}, {"content", "Answer from the context."}}, {{"role", "user"}, {"content", content}}}},
              {"max_tokens", 256},
              {"temperature", 0.2},
              {"stream", false}}
      .dump();
}

const std::string kAnswer =
    R"({"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,)"
    R"("message":{"role":"assistant","content":"Hello! I am a stub upstream answering quickly."},"finish_reason":"stop"}],)"
    R"("usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21}})";

void BM_RequestInfo(benchmark::State& state) {
  const std::string body = ChatBody(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    auto info = aicloud::gateway::ParseRequestInfo(body, Endpoint::kChat);
    benchmark::DoNotOptimize(info);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_RequestInfo)->Arg(64)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20);

void BM_RequestDocument(benchmark::State& state) {  // the baseline: the document alone
  const std::string body = ChatBody(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    json doc = json::parse(body, nullptr, false);
    benchmark::DoNotOptimize(doc);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_RequestDocument)->Arg(64)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20);

// A stream's body gets include_usage (and an alias its model name): written from the tape, against
// the document rewrite (parse, edit, dump) it replaced. The parse is included: a small other text
// is read between rewrites, so the rewrite cannot reuse the document of the one before.
const std::string kOther = R"({"usage":{"prompt_tokens":1,"completion_tokens":1}})";

void BM_RewriteBody(benchmark::State& state) {
  const std::string body = ChatBody(static_cast<size_t>(state.range(0)));
  const aicloud::gateway::BodyEdits edits{.model = "llama-3-8b-instruct", .include_usage = true};
  for (auto _ : state) {
    benchmark::DoNotOptimize(aicloud::gateway::UsageOfText(kOther));
    auto out = aicloud::gateway::RewriteBody(body, edits);
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_RewriteBody)->Arg(64)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20);

void BM_RewriteDocument(benchmark::State& state) {  // the baseline
  const std::string body = ChatBody(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    json doc = json::parse(body, nullptr, false);
    doc["model"] = "llama-3-8b-instruct";
    doc["stream_options"]["include_usage"] = true;
    std::string out = doc.dump();
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_RewriteDocument)->Arg(64)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20);

// What the gateway does with a stream's body: read it, then rewrite it. The rewrite uses the
// document the read left in the thread's parser (a small other text is read first, so both
// variants read the same texts) ...
void BM_ReadThenRewrite(benchmark::State& state) {
  const std::string body = ChatBody(static_cast<size_t>(state.range(0)));
  const aicloud::gateway::BodyEdits edits{.include_usage = true};
  for (auto _ : state) {
    benchmark::DoNotOptimize(aicloud::gateway::UsageOfText(kOther));  // as the baseline does, elsewhere
    benchmark::DoNotOptimize(aicloud::gateway::ParseRequestInfo(body, Endpoint::kChat));
    benchmark::DoNotOptimize(aicloud::gateway::RewriteBody(body, edits));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ReadThenRewrite)->Arg(64)->Arg(4 << 10)->Arg(64 << 10);

// ... the baseline: the same with a small other text read in between, so the rewrite parses the
// body again, as every rewrite did before.
void BM_ReadThenRewriteParsingTwice(benchmark::State& state) {
  const std::string body = ChatBody(static_cast<size_t>(state.range(0)));
  const aicloud::gateway::BodyEdits edits{.include_usage = true};
  for (auto _ : state) {
    benchmark::DoNotOptimize(aicloud::gateway::ParseRequestInfo(body, Endpoint::kChat));
    benchmark::DoNotOptimize(aicloud::gateway::UsageOfText(kOther));
    benchmark::DoNotOptimize(aicloud::gateway::RewriteBody(body, edits));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ReadThenRewriteParsingTwice)->Arg(64)->Arg(4 << 10)->Arg(64 << 10);

void BM_PrefixHashes(benchmark::State& state) {  // the prefix-affinity routers' block hashes
  const std::string text(static_cast<size_t>(state.range(0)), 'x');
  for (auto _ : state) benchmark::DoNotOptimize(aicloud::gateway::PrefixHashes(text, 256, 256));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_PrefixHashes)->Arg(4 << 10)->Arg(64 << 10);

// The baseline: the same chain with byte-wise FNV-1a-64, as the gateway hashed before.
std::vector<uint64_t> FnvPrefixHashes(std::string_view text, size_t block_bytes, int max_blocks) {
  std::vector<uint64_t> out;
  uint64_t prev = 0xcbf29ce484222325ull;
  for (size_t at = 0; at + block_bytes <= text.size() && static_cast<int>(out.size()) < max_blocks; at += block_bytes) {
    uint64_t h = prev;
    for (size_t i = at; i < at + block_bytes; ++i) h = (h ^ static_cast<unsigned char>(text[i])) * 0x100000001b3ull;
    out.push_back(h);
    prev = h;
  }
  return out;
}

void BM_PrefixHashesFnv(benchmark::State& state) {
  const std::string text(static_cast<size_t>(state.range(0)), 'x');
  for (auto _ : state) benchmark::DoNotOptimize(FnvPrefixHashes(text, 256, 256));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_PrefixHashesFnv)->Arg(4 << 10)->Arg(64 << 10);

void BM_UsageOfText(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(aicloud::gateway::UsageOfText(kAnswer));
}
BENCHMARK(BM_UsageOfText);

void BM_UsageOfDocument(benchmark::State& state) {  // the baseline
  for (auto _ : state) benchmark::DoNotOptimize(aicloud::gateway::UsageOf(json::parse(kAnswer, nullptr, false)));
}
BENCHMARK(BM_UsageOfDocument);

}  // namespace

BENCHMARK_MAIN();
