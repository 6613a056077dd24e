// Reading one whole HTTP message from a buffer: the whole-message reader (picohttpparser,
// src/http/whole_message.h) against Beast's basic_parser writing into the same Request or
// ClientResponse (the reader the server and the pooled client used for every message before,
// and still use for what the whole-message reader leaves). Messages: a chat request like the
// one gateway_bench sends (4 fields, a 103-byte body), a request as the OpenAI Python SDK sends
// it (15 fields), and an engine's answer (4 fields). Both sides reuse their output object across
// iterations, as a kept-alive connection does. Results: bench/RESULTS.md 8.18.
//
//   http_parse_bench
//   http_parse_bench --benchmark_filter=Sdk
#include <benchmark/benchmark.h>

#include <cstdint>
#include <limits>
#include <string>

#include "http/asio.h"
#include "http/whole_message.h"

namespace {

namespace http = aicloud::http;

const std::string kBody =
    R"({"model":"m","messages":[{"role":"user","content":"Say hello in five words, please."}],"max_tokens":16})";

std::string BenchRequest() {
  return "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAuthorization: Bearer sk-bench\r\n"
         "Content-Type: application/json\r\nContent-Length: " +
         std::to_string(kBody.size()) + "\r\n\r\n" + kBody;
}

std::string SdkRequest() {
  return "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway.internal:8080\r\nAccept-Encoding: gzip, deflate\r\n"
         "Connection: keep-alive\r\nAccept: application/json\r\nContent-Type: application/json\r\n"
         "User-Agent: OpenAI/Python 1.54.3\r\nX-Stainless-Lang: python\r\nX-Stainless-Package-Version: 1.54.3\r\n"
         "X-Stainless-OS: Linux\r\nX-Stainless-Arch: x64\r\nX-Stainless-Runtime: CPython\r\n"
         "X-Stainless-Runtime-Version: 3.11.2\r\nAuthorization: Bearer sk-tenant-a-0123456789abcdef\r\n"
         "X-Stainless-Retry-Count: 0\r\nContent-Length: " +
         std::to_string(kBody.size()) + "\r\n\r\n" + kBody;
}

const std::string kAnswerBody =
    R"({"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,)"
    R"("message":{"role":"assistant","content":"Hello! I am a stub upstream."},"finish_reason":"stop"}]})";

std::string EngineAnswer() {
  return "HTTP/1.1 200 OK\r\nServer: aicloud\r\nContent-Type: application/json\r\nx-aicloud-usage: 12 9\r\n"
         "Content-Length: " +
         std::to_string(kAnswerBody.size()) + "\r\n\r\n" + kAnswerBody;
}

// Beast's parser into a Request, as the server's RequestReader does.
class BeastRequestReader final : public http::ParserInto<true> {
 public:
  explicit BeastRequestReader(http::Request& req) : ParserInto(req.headers, req.body, SIZE_MAX), req_(req) {}

 private:
  void on_request_impl(http::bhttp::verb, http::beast::string_view method, http::beast::string_view target, int,
                       http::error_code&) override {
    req_.method.assign(method.data(), method.size());
    req_.target.assign(target.data(), target.size());
  }
  void on_response_impl(int, http::beast::string_view, int, http::error_code&) override {}
  http::Request& req_;
};

// Beast's parser into a ClientResponse, as the pooled client's ResponseReader does.
class BeastResponseReader final : public http::ParserInto<false> {
 public:
  explicit BeastResponseReader(http::ClientResponse& out) : ParserInto(out.headers, out.body, size_t{16} << 20) {
    body_limit(std::numeric_limits<std::uint64_t>::max());
  }

 private:
  void on_request_impl(http::bhttp::verb, http::beast::string_view, http::beast::string_view, int,
                       http::error_code&) override {}
  void on_response_impl(int code, http::beast::string_view, int, http::error_code&) override { status = code; }

 public:
  int status = 0;
};

void ClearRequest(http::Request& req) {
  req.method.clear();
  req.target.clear();
  req.headers.clear();
  req.body.clear();
}

void RequestWhole(benchmark::State& state, const std::string& bytes) {
  http::Request req;
  http::WholeRequestInfo info;
  for (auto _ : state) {
    ClearRequest(req);
    const size_t used = http::ReadWholeRequest(bytes, {.max_header_bytes = 65536, .max_body_bytes = 8 << 20}, &req, &info);
    if (used != bytes.size()) state.SkipWithError("not read whole");
    benchmark::DoNotOptimize(req.body.data());
  }
}

void RequestBeast(benchmark::State& state, const std::string& bytes) {
  http::Request req;
  for (auto _ : state) {
    ClearRequest(req);
    BeastRequestReader reader(req);
    reader.eager(true);
    reader.body_limit(8 << 20);
    http::error_code ec;
    const size_t used = reader.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
    if (ec || !reader.is_done() || used != bytes.size()) state.SkipWithError("Beast did not read it");
    benchmark::DoNotOptimize(req.body.data());
  }
}

void BM_BenchRequestWhole(benchmark::State& s) { RequestWhole(s, BenchRequest()); }
void BM_BenchRequestBeast(benchmark::State& s) { RequestBeast(s, BenchRequest()); }
void BM_SdkRequestWhole(benchmark::State& s) { RequestWhole(s, SdkRequest()); }
void BM_SdkRequestBeast(benchmark::State& s) { RequestBeast(s, SdkRequest()); }

void BM_EngineAnswerWhole(benchmark::State& state) {
  const std::string bytes = EngineAnswer();
  http::ClientResponse out;
  bool keep = false;
  for (auto _ : state) {
    out = http::ClientResponse();  // the pooled client starts each answer afresh
    if (http::ReadWholeResponse(bytes, false, &out, &keep) != bytes.size()) state.SkipWithError("not read whole");
    benchmark::DoNotOptimize(out.body.data());
  }
}

void BM_EngineAnswerBeast(benchmark::State& state) {
  const std::string bytes = EngineAnswer();
  http::ClientResponse out;
  for (auto _ : state) {
    out = http::ClientResponse();
    BeastResponseReader reader(out);
    reader.eager(true);
    http::error_code ec;
    const size_t used = reader.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
    if (ec || !reader.is_done() || used != bytes.size()) state.SkipWithError("Beast did not read it");
    benchmark::DoNotOptimize(out.body.data());
  }
}

BENCHMARK(BM_BenchRequestWhole);
BENCHMARK(BM_BenchRequestBeast);
BENCHMARK(BM_SdkRequestWhole);
BENCHMARK(BM_SdkRequestBeast);
BENCHMARK(BM_EngineAnswerWhole);
BENCHMARK(BM_EngineAnswerBeast);

}  // namespace

BENCHMARK_MAIN();
