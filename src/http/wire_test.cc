// Message heads written as text (wire.h): exact bytes, and fields that could end the head early
// or smuggle a second message are left out.
#include "http/wire.h"

#include <gtest/gtest.h>

namespace aicloud::http {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

TEST(WireTest, AsciiIEqualsIgnoresCaseOnly) {
  EXPECT_TRUE(AsciiIEquals("Content-Length", "content-LENGTH"));
  EXPECT_TRUE(AsciiIEquals("", ""));
  EXPECT_FALSE(AsciiIEquals("content-length", "content-lengt"));
  EXPECT_FALSE(AsciiIEquals("close", "clos\xc5"));
  EXPECT_FALSE(AsciiIEquals("[", "{"));  // 0x5B and 0x7B differ by 32 but are not letters
}

TEST(WireTest, ResponseHeadIsStatusLineFieldsAndLength) {
  Fields extra = {{"X-Request-Id", "r-1"}, {"x-aicloud-replica", "10.0.0.5:8000"}};
  std::string out;
  AppendResponseHead(&out, {.status = 200, .content_type = "application/json", .headers = &extra, .body_size = 42});
  EXPECT_EQ(out,
            "HTTP/1.1 200 OK\r\nServer: aicloud\r\nContent-Type: application/json\r\nX-Request-Id: r-1\r\n"
            "x-aicloud-replica: 10.0.0.5:8000\r\nContent-Length: 42\r\n\r\n");

  out.clear();
  AppendResponseHead(&out, {.status = 429, .content_type = "application/json", .keep_alive = false, .body_size = 0});
  EXPECT_EQ(out,
            "HTTP/1.1 429 Too Many Requests\r\nServer: aicloud\r\nContent-Type: application/json\r\n"
            "Connection: close\r\nContent-Length: 0\r\n\r\n");
}

TEST(WireTest, ResponseFramingIsTheWritersAndBadFieldsAreLeftOut) {
  Fields extra = {{"Content-Type", "text/event-stream"},
                  {"Content-Length", "999"},
                  {"transfer-encoding", "chunked"},
                  {"Connection", "keep-alive"},
                  {"X-Split", "a\r\nSet-Cookie: stolen=1"},
                  {"X-Nul", std::string("a\0b", 3)},
                  {"Bad Name", "v"},
                  {"", "v"},
                  {"X-Kept", "fine value; with spaces"}};
  std::string out;
  AppendResponseHead(&out, {.status = 201, .content_type = "application/json", .headers = &extra, .body_size = 3});
  EXPECT_EQ(out,
            "HTTP/1.1 201 Created\r\nServer: aicloud\r\nContent-Type: text/event-stream\r\n"
            "X-Kept: fine value; with spaces\r\nContent-Length: 3\r\n\r\n");
}

TEST(WireTest, AnswersWithoutBodyCarryNoLengthAndOddStatusesAreNamed) {
  for (int status : {100, 204, 304}) {
    std::string out;
    AppendResponseHead(&out, {.status = status, .content_type = "text/plain", .body_size = 5});
    EXPECT_EQ(out.find("Content-Length"), std::string::npos) << out;
    EXPECT_TRUE(StatusHasNoBody(status));
  }
  EXPECT_FALSE(StatusHasNoBody(200));
  std::string out;
  AppendResponseHead(&out, {.status = 1234, .content_type = "text/plain"});
  EXPECT_TRUE(out.starts_with("HTTP/1.1 500 Internal Server Error\r\n")) << out;
  out.clear();
  AppendResponseHead(&out, {.status = 599, .content_type = "text/plain"});
  EXPECT_TRUE(out.starts_with("HTTP/1.1 599 Unknown\r\n")) << out;
  out.clear();
  AppendResponseHead(&out, {.status = 200, .content_type = "text/plain\r\nX-Evil: 1"});
  EXPECT_EQ(out.find("X-Evil"), std::string::npos) << out;
}

TEST(WireTest, RequestHeadHasHostAgentFieldsAndLength) {
  std::string error;
  Fields extra = {{"x-request-id", "r-9"}, {"Host", "evil.example"}, {"Content-Length", "7"}};
  EXPECT_EQ(RequestHeadText({.method = "GET", .target = "/v1/models?x=1", .host = "10.0.0.5:8000", .headers = &extra},
                            &error),
            "GET /v1/models?x=1 HTTP/1.1\r\nHost: 10.0.0.5:8000\r\nUser-Agent: aicloud-http\r\nx-request-id: r-9\r\n\r\n");
  EXPECT_EQ(RequestHeadText({.method = "POST", .target = "/v1/chat/completions", .host = "[::1]:81", .body_size = 12},
                            &error),
            "POST /v1/chat/completions HTTP/1.1\r\nHost: [::1]:81\r\nUser-Agent: aicloud-http\r\n"
            "Content-Type: application/json\r\nContent-Length: 12\r\n\r\n");
  Fields typed = {{"content-type", "text/plain"}};
  EXPECT_EQ(RequestHeadText({.method = "PUT", .target = "/a", .host = "h", .headers = &typed, .send_length = true},
                            &error),
            "PUT /a HTTP/1.1\r\nHost: h\r\nUser-Agent: aicloud-http\r\ncontent-type: text/plain\r\nContent-Length: 0\r\n\r\n");
}

TEST(WireTest, RequestHeadRefusesWhatCannotBeWritten) {
  std::string error;
  EXPECT_EQ(RequestHeadText({.method = "GE T", .target = "/", .host = "h"}, &error), "");
  EXPECT_NE(error.find("bad method"), std::string::npos) << error;
  EXPECT_EQ(RequestHeadText({.method = "GET", .target = "/a b", .host = "h"}, &error), "");
  EXPECT_NE(error.find("bad request target"), std::string::npos) << error;
  EXPECT_EQ(RequestHeadText({.method = "GET", .target = "/a\r\nX: y", .host = "h"}, &error), "");
  EXPECT_EQ(RequestHeadText({.method = "GET", .target = "", .host = "h"}, &error), "");
  EXPECT_EQ(RequestHeadText({.method = "GET", .target = "/", .host = "h\r\n"}, &error), "");
  EXPECT_NE(error.find("bad host"), std::string::npos) << error;
}

// A content-type that is not fit to write is dropped for the default, not for nothing.
TEST(WireTest, ARefusedContentTypeFallsBackToTheDefault) {
  Fields bad_type = {{"content-type", "text/x\x01"}};
  std::string out;
  AppendResponseHead(&out, {.status = 200, .content_type = "application/json", .headers = &bad_type, .body_size = 1});
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nServer: aicloud\r\nContent-Type: application/json\r\nContent-Length: 1\r\n\r\n");
  std::string error;
  EXPECT_EQ(RequestHeadText({.method = "POST", .target = "/p", .host = "h", .headers = &bad_type, .body_size = 2}, &error),
            "POST /p HTTP/1.1\r\nHost: h\r\nUser-Agent: aicloud-http\r\nContent-Type: application/json\r\n"
            "Content-Length: 2\r\n\r\n");
}

TEST(WireTest, TokensAndValues) {
  EXPECT_TRUE(IsHttpToken("X-Request_Id.v2~!"));
  EXPECT_FALSE(IsHttpToken(""));
  EXPECT_FALSE(IsHttpToken("a:b"));
  EXPECT_FALSE(IsHttpToken("a\tb"));
  EXPECT_FALSE(IsHttpToken("\xc3\xa9"));
  EXPECT_TRUE(IsSafeFieldValue(""));
  EXPECT_TRUE(IsSafeFieldValue("a b\tc \xc3\xa9"));
  EXPECT_FALSE(IsSafeFieldValue("a\nb"));
  EXPECT_FALSE(IsSafeFieldValue("a\rb"));
  EXPECT_FALSE(IsSafeFieldValue("a\x01" "b"));
  EXPECT_FALSE(IsSafeFieldValue("a\x7f"));
  EXPECT_TRUE(IsSafeTarget("/v1/chat/completions?x=%20&y=~"));
  EXPECT_FALSE(IsSafeTarget(""));
  EXPECT_FALSE(IsSafeTarget("/a\tb"));
  EXPECT_FALSE(IsSafeTarget("/a b"));
  EXPECT_FALSE(IsSafeTarget("/caf\xc3\xa9"));
  EXPECT_FALSE(IsSafeTarget("/a\x7f"));
  EXPECT_EQ(ReasonPhrase(404), "Not Found");
  EXPECT_EQ(ReasonPhrase(503), "Service Unavailable");
}

}  // namespace
}  // namespace aicloud::http
