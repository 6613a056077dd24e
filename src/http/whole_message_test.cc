// Whole simple messages read at once (whole_message.h): what is taken, what it holds, and that
// everything outside the narrow "simple" is left untouched for Beast's parser.
#include "http/whole_message.h"

#include <gtest/gtest.h>

#include <boost/beast/http.hpp>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace aicloud::http {
namespace {

const WholeRequestLimits kLimits{.max_header_bytes = 4096, .max_body_bytes = 1 << 20};

// Taken or not; when not, the request must be untouched.
size_t Read(const std::string& bytes, Request* req, WholeRequestInfo* info, const WholeRequestLimits& limits = kLimits) {
  return ReadWholeRequest(bytes, limits, req, info);
}

void ExpectLeftForBeast(const std::string& bytes, const WholeRequestLimits& limits = kLimits) {
  Request req;
  WholeRequestInfo info;
  EXPECT_EQ(Read(bytes, &req, &info, limits), 0u) << bytes;
  EXPECT_TRUE(req.method.empty()) << bytes;
  EXPECT_TRUE(req.headers.empty()) << bytes;
  EXPECT_TRUE(req.body.empty()) << bytes;
}

TEST(WholeRequestTest, TakesAWholeRequestAndWhatFollowsStays) {
  const std::string one =
      "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: gw:8080\r\nAuthorization: Bearer sk-1\r\n"
      "Content-Type: application/json  \r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 7\r\n\r\n{\"a\":1}";
  const std::string next = "GET /health HTTP/1.1\r\n";  // a pipelined request's first bytes
  Request req;
  WholeRequestInfo info;
  ASSERT_EQ(Read(one + next, &req, &info), one.size());
  EXPECT_EQ(req.method, "POST");
  EXPECT_EQ(req.target, "/v1/chat/completions?x=1");
  EXPECT_EQ(req.headers.Get("host"), "gw:8080");
  EXPECT_EQ(req.headers.Get("authorization"), "Bearer sk-1");
  EXPECT_EQ(req.headers.Get("content-type"), "application/json");  // trailing spaces trimmed
  EXPECT_EQ(req.headers.Get("x-a"), "1, 2");                      // repeats joined
  EXPECT_EQ(req.body, "{\"a\":1}");
  EXPECT_TRUE(info.keep_alive);
  EXPECT_FALSE(info.head_method);
}

TEST(WholeRequestTest, KeepAliveFollowsTheVersionAndTheConnectionField) {
  Request req;
  WholeRequestInfo info;
  ASSERT_GT(Read("GET / HTTP/1.1\r\nConnection: close\r\n\r\n", &req, &info), 0u);
  EXPECT_FALSE(info.keep_alive);
  req = Request();
  ASSERT_GT(Read("GET / HTTP/1.0\r\n\r\n", &req, &info), 0u);
  EXPECT_FALSE(info.keep_alive);
  req = Request();
  ASSERT_GT(Read("HEAD / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &req, &info), 0u);
  EXPECT_TRUE(info.keep_alive);
  EXPECT_TRUE(info.head_method);
  EXPECT_TRUE(req.body.empty());
}

TEST(WholeRequestTest, LeavesEverythingNotWholeAndSimpleToBeast) {
  ExpectLeftForBeast("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n12345");            // body still coming
  ExpectLeftForBeast("POST / HTTP/1.1\r\nContent-Length: 10\r\n");                     // head still coming
  ExpectLeftForBeast("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");  // chunked
  ExpectLeftForBeast("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nab");
  ExpectLeftForBeast("POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\na");
  // 2^64 and 19 nines: a length that does not fit is never read as a smaller one.
  ExpectLeftForBeast("POST / HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n");
  ExpectLeftForBeast("POST / HTTP/1.1\r\nContent-Length: 9999999999999999999\r\n\r\nx");
  ExpectLeftForBeast("GET / HTTP/1.1\r\nProxy-Connection: close\r\n\r\n");  // Beast reads it as Connection
  ExpectLeftForBeast("POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\na");
  ExpectLeftForBeast("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\na");
  ExpectLeftForBeast("GET / HTTP/1.1\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n");
  ExpectLeftForBeast("GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n");  // obs-fold
  ExpectLeftForBeast("GET / HTTP/1.1\nHost: a\r\n\r\n");                 // a bare LF
  ExpectLeftForBeast("GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n");
  ExpectLeftForBeast("G(T / HTTP/1.1\r\n\r\n");                          // method not a token
  ExpectLeftForBeast("GET /\xc3\xa9 HTTP/1.1\r\n\r\n");                  // target not visible ASCII
  ExpectLeftForBeast("GET / HTTP/1.2\r\n\r\n");
  ExpectLeftForBeast("GET / HTTP/1.1\r\nHo st: a\r\n\r\n");             // malformed: Beast says why
  ExpectLeftForBeast(std::string("GET / HTTP/1.1\r\nX: a\x01z\r\n\r\n"));
  // Over the limits: Beast answers 431 / 413.
  ExpectLeftForBeast("GET / HTTP/1.1\r\nX: " + std::string(200, 'a') + "\r\n\r\n",
                     {.max_header_bytes = 100, .max_body_bytes = 100});
  ExpectLeftForBeast("POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n" + std::string(101, 'a'),
                     {.max_header_bytes = 4096, .max_body_bytes = 100});
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 80; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  ExpectLeftForBeast(many + "\r\n");
}

TEST(WholeResponseTest, TakesAWholeAnswerWithALength) {
  const std::string answer =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nx-aicloud-usage: 3 5\r\nContent-Length: 2\r\n\r\n{}";
  ClientResponse out;
  bool keep = false;
  ASSERT_EQ(ReadWholeResponse(answer, /*head_request=*/false, &out, &keep), answer.size());
  EXPECT_EQ(out.status, 200);
  EXPECT_EQ(out.headers.Get("x-aicloud-usage"), "3 5");
  EXPECT_EQ(out.body, "{}");
  EXPECT_TRUE(keep);

  out = ClientResponse();
  ASSERT_GT(ReadWholeResponse("HTTP/1.1 503 Busy\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false, &out, &keep),
            0u);
  EXPECT_EQ(out.status, 503);
  EXPECT_FALSE(keep);
}

TEST(WholeResponseTest, LeavesEverythingElseToBeast) {
  const auto left = [](const std::string& bytes, bool head_request = false) {
    ClientResponse out;
    bool keep = true;
    EXPECT_EQ(ReadWholeResponse(bytes, head_request, &out, &keep), 0u) << bytes;
    EXPECT_EQ(out.status, 0) << bytes;
    EXPECT_TRUE(out.headers.empty()) << bytes;
    EXPECT_TRUE(keep) << bytes;
  };
  left("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", /*head_request=*/true);
  left("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");  // interim first
  left("HTTP/1.1 204 No Content\r\n\r\n");
  left("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello");  // no body, whatever the length says
  left("HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n");
  left("HTTP/1.1 100 Continue\r\nContent-Length: 0\r\n\r\n");  // interim, even with a length
  left("HTTP/1.1 200 OK\r\nProxy-Connection: close\r\nContent-Length: 0\r\n\r\n");
  left("HTTP/1.1 200 OK\r\n\r\nruns to the close");  // no length
  left("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  left("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab");  // body still coming
  left("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n");        // head still coming
  left("HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\n{}");
}

// Differential: over many mutated messages, whatever the whole-message reader takes, Beast's
// parser takes the same way — the same length, method, target, status, fields, body and
// keep-alive. (It may leave more to Beast than it has to; it must never read a message
// differently.)
namespace bhttp = boost::beast::http;

std::string Mutate(std::string s, std::mt19937& rng) {
  static const std::string kBytes[] = {"\r", "\n", "\r\n", " ", "\t", ":", ",", "\x01", "\x7f", "\xc3",
                                       "0", "9", "-", "chunked", "close", "keep-alive", "Content-Length: 3\r\n", "Proxy-",
                                       "Transfer-Encoding: chunked\r\n", "Connection: close\r\n", "\r\n\r\n"};
  const int edits = std::uniform_int_distribution<int>(0, 3)(rng);
  for (int e = 0; e < edits && !s.empty(); ++e) {
    const size_t at = std::uniform_int_distribution<size_t>(0, s.size() - 1)(rng);
    const std::string& piece = kBytes[std::uniform_int_distribution<size_t>(0, std::size(kBytes) - 1)(rng)];
    switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
      case 0: s.insert(at, piece); break;
      case 1: s.erase(at, std::uniform_int_distribution<size_t>(1, 4)(rng)); break;
      default: s.replace(at, std::min(piece.size(), s.size() - at), piece); break;
    }
  }
  return s;
}

template <class Message>
HeaderMap FieldsOf(const Message& m) {
  HeaderMap out;
  for (const auto& f : m) out.Add({f.name_string().data(), f.name_string().size()}, {f.value().data(), f.value().size()});
  return out;
}

// Beast's parser, given all of `bytes` at once, reads one whole message of `used` bytes.
template <class Parser>
void ExpectBeastTakesTheSameBytes(const std::string& bytes, size_t used, Parser& beast) {
  beast.eager(true);
  boost::beast::error_code ec;
  const size_t beast_used = beast.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
  ASSERT_FALSE(ec) << ec.message() << " on: " << bytes;
  ASSERT_TRUE(beast.is_done()) << bytes;
  ASSERT_EQ(beast_used, used) << bytes;
}

TEST(WholeMessageDifferentialTest, WhatItTakesBeastReadsTheSameWay) {
  const std::vector<std::string> requests = {
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAuthorization: Bearer sk-1\r\n"
      "Content-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"model\":1}",
      "GET /v1/models?x=%41 HTTP/1.0\r\nConnection: keep-alive\r\nAccept: a\r\naccept: b\r\n\r\n",
      "HEAD / HTTP/1.1\r\nConnection: close\r\nX-Empty:\r\nX-Pad:   v  \r\n\r\n",
  };
  const std::vector<std::string> answers = {
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nx-aicloud-usage: 1 2\r\nContent-Length: 2\r\n\r\n{}",
      "HTTP/1.0 429 Too Many Requests\r\nConnection: keep-alive\r\nRetry-After: 3\r\nContent-Length: 0\r\n\r\n",
  };
  // AICLOUD_DIFF_CASES raises the count for a longer search (the default keeps the suite fast).
  const char* cases_env = std::getenv("AICLOUD_DIFF_CASES");
  const int kCases = cases_env != nullptr ? std::atoi(cases_env) : 20000;
  std::mt19937 rng(cases_env != nullptr ? std::random_device{}() : 20261129u);
  int taken = 0, left = 0;
  for (int i = 0; i < kCases; ++i) {
    const std::string bytes = Mutate(requests[static_cast<size_t>(i) % requests.size()], rng);
    Request req;
    WholeRequestInfo info;
    const size_t used = ReadWholeRequest(bytes, kLimits, &req, &info);
    if (used == 0) {
      ++left;
      continue;
    }
    ++taken;
    bhttp::request_parser<bhttp::string_body> beast;
    ASSERT_NO_FATAL_FAILURE(ExpectBeastTakesTheSameBytes(bytes, used, beast));
    const auto& m = beast.get();
    EXPECT_EQ(std::string_view(m.method_string().data(), m.method_string().size()), req.method) << bytes;
    EXPECT_EQ(std::string_view(m.target().data(), m.target().size()), req.target) << bytes;
    EXPECT_EQ(m.body(), req.body) << bytes;
    EXPECT_EQ(beast.keep_alive(), info.keep_alive) << bytes;  // the parser's, which the server reads
    EXPECT_EQ(m.method() == bhttp::verb::head, info.head_method) << bytes;
    EXPECT_EQ(FieldsOf(m), req.headers) << bytes;
  }
  for (int i = 0; i < kCases; ++i) {
    const std::string bytes = Mutate(answers[static_cast<size_t>(i) % answers.size()], rng);
    ClientResponse out;
    bool keep = false;
    const size_t used = ReadWholeResponse(bytes, false, &out, &keep);
    if (used == 0) {
      ++left;
      continue;
    }
    ++taken;
    bhttp::response_parser<bhttp::string_body> beast;
    ASSERT_NO_FATAL_FAILURE(ExpectBeastTakesTheSameBytes(bytes, used, beast));
    const auto& m = beast.get();
    EXPECT_EQ(m.result_int(), static_cast<unsigned>(out.status)) << bytes;
    EXPECT_EQ(m.body(), out.body) << bytes;
    EXPECT_EQ(beast.keep_alive(), keep) << bytes;
    EXPECT_EQ(FieldsOf(m), out.headers) << bytes;
  }
  // Both kinds of outcome were exercised.
  EXPECT_GT(taken, kCases / 4) << taken << " taken, " << left << " left";
  EXPECT_GT(left, kCases / 4) << taken << " taken, " << left << " left";
}

}  // namespace
}  // namespace aicloud::http
