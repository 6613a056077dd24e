// Unit tests for the pieces without sockets: messages, router, query parsing, SSE framing.
#include <gtest/gtest.h>

#include <stdexcept>

#include "http/client.h"
#include "http/message.h"
#include "http/router.h"
#include "http/sse.h"

namespace aicloud::http {
namespace {

using nlohmann::json;

TEST(PercentDecodeTest, DecodesEscapesAndKeepsMalformedOnes) {
  EXPECT_EQ(PercentDecode("%41b%2Fc"), "Ab/c");
  EXPECT_EQ(PercentDecode("a+b"), "a+b");
  EXPECT_EQ(PercentDecode("100%"), "100%");
  EXPECT_EQ(PercentDecode("%zz%4"), "%zz%4");
  EXPECT_EQ(PercentDecode("%e2%82%ac"), "\xe2\x82\xac");
  EXPECT_EQ(PercentDecode(""), "");
}

TEST(ParseQueryTest, SplitsDecodesAndLastWins) {
  auto q = ParseQuery("a=1&b=x+y%21&c&a=2&&d=");
  EXPECT_EQ(q.size(), 4u);
  EXPECT_EQ(q["a"], "2");
  EXPECT_EQ(q["b"], "x y!");
  EXPECT_EQ(q["c"], "");
  EXPECT_EQ(q["d"], "");
  EXPECT_TRUE(ParseQuery("").empty());
  EXPECT_EQ(ParseQuery("k%3D=v%3D")["k="], "v=");
}

TEST(ResponseTest, ErrorJsonShape) {
  Response r = Response::Error(400, "invalid_argument", "bad name", "metadata.name");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.content_type, "application/json");
  json body = json::parse(r.body);
  EXPECT_EQ(body["error"]["code"], "invalid_argument");
  EXPECT_EQ(body["error"]["message"], "bad name");
  EXPECT_EQ(body["error"]["field"], "metadata.name");
  EXPECT_FALSE(json::parse(Response::Error(500, "internal", "x").body)["error"].contains("field"));
}

TEST(ResponseTest, StatusMapping) {
  struct Case {
    StatusCode code;
    int http;
  };
  for (Case c : {Case{StatusCode::kInvalidArgument, 400}, Case{StatusCode::kFailedPrecondition, 400},
                 Case{StatusCode::kOutOfRange, 410}, Case{StatusCode::kNotFound, 404},
                 Case{StatusCode::kAlreadyExists, 409}, Case{StatusCode::kAborted, 409},
                 Case{StatusCode::kPermissionDenied, 403}, Case{StatusCode::kUnauthenticated, 401},
                 Case{StatusCode::kResourceExhausted, 429}, Case{StatusCode::kUnavailable, 503},
                 Case{StatusCode::kDeadlineExceeded, 504}, Case{StatusCode::kInternal, 500},
                 Case{StatusCode::kDataLoss, 500}}) {
    EXPECT_EQ(HttpStatusOf(Status(c.code, "m")), c.http) << StatusCodeName(c.code);
  }
  Response r = ErrorResponse(NotFoundError("Job nlp/x not found"), "name");
  EXPECT_EQ(r.status, 404);
  json body = json::parse(r.body);
  EXPECT_EQ(body["error"]["code"], "not_found");
  EXPECT_EQ(body["error"]["message"], "Job nlp/x not found");
  EXPECT_EQ(body["error"]["field"], "name");
}

TEST(ResponseTest, StatusOfResponseReadsTheErrorBodyBack) {
  // What ErrorResponse writes, StatusOfResponse reads back, code and message.
  for (const Status& st : {AbortedError("Job a/x: resourceVersion conflict"), NotFoundError("no such thing"),
                           AlreadyExistsError("taken"), UnauthenticatedError("unknown key"),
                           PermissionDeniedError("user u has no role granting get on gateway"),
                           InvalidArgumentError("ops[0].op: bad"), UnavailableError("busy")}) {
    Response r = ErrorResponse(st);
    Status back = StatusOfResponse({.status = r.status, .body = r.body});
    EXPECT_EQ(back.code(), st.code()) << st.ToString();
    EXPECT_EQ(back.message(), st.message());
  }
  EXPECT_TRUE(StatusOfResponse({.status = 204}).ok());
  // Bodies from elsewhere: the HTTP status decides, and the body's start is kept.
  Status proxy = StatusOfResponse({.status = 502, .body = "<html>Bad Gateway</html>"});
  EXPECT_EQ(proxy.code(), StatusCode::kUnavailable);
  EXPECT_NE(proxy.message().find("HTTP 502: <html>Bad Gateway"), std::string::npos) << proxy.message();
  EXPECT_EQ(StatusOfResponse({.status = 409, .body = "{}"}).code(), StatusCode::kAborted);
  EXPECT_EQ(StatusOfResponse({.status = 403}).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusOfResponse({.status = 418, .body = R"({"error": {"code": "teapot"}})"}).code(),
            StatusCode::kInvalidArgument);
  // Other shapes of error body never throw: a null or numeric code, a message that is not text.
  EXPECT_EQ(StatusOfResponse({.status = 404, .body = R"({"error": {"message": "no", "code": null}})"}).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(StatusOfResponse({.status = 429, .body = R"({"error": {"message": 5, "code": 429}})"}).code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(StatusOfResponse({.status = 500, .body = R"({"error": "boom"})"}).code(), StatusCode::kUnavailable);
  EXPECT_EQ(StatusOfResponse({.status = 400, .body = "[1, 2"}).code(), StatusCode::kInvalidArgument);
}

TEST(ResponseTest, JsonAndText) {
  Response j = Response::Json(201, {{"a", 1}});
  EXPECT_EQ(j.status, 201);
  EXPECT_EQ(json::parse(j.body)["a"], 1);
  Response t = Response::Text(200, "hi");
  EXPECT_EQ(t.content_type, "text/plain; charset=utf-8");
  EXPECT_EQ(t.body, "hi");
}

TEST(RequestTest, HeaderAndQueryLookups) {
  Request req;
  req.headers["x-a"] = "1";
  req.query["limit"] = "5";
  EXPECT_EQ(req.Header("x-a"), "1");
  EXPECT_EQ(req.Header("x-b"), "");
  EXPECT_EQ(req.HeaderView("x-a"), "1");
  EXPECT_TRUE(req.HeaderView("x-b").empty());
  EXPECT_EQ(req.Query("limit"), "5");
  EXPECT_EQ(req.Query("missing", "10"), "10");
}

Request Make(std::string method, std::string target) {
  Request r;
  r.method = std::move(method);
  r.target = target;
  r.path = PercentDecode(target.substr(0, target.find('?')));
  return r;
}

Handler Named(std::string name) {
  return [name](Request& req) {
    json params = json::object();
    for (auto& [k, v] : req.params) params[k] = v;
    return Response::Json(200, {{"handler", name}, {"params", params}, {"route", req.route}});
  };
}

TEST(RouterTest, MatchingTable) {
  Router router;
  router.Add("GET", "/api/v1/tenants/{tenant}/jobs", Named("list"));
  router.Add("POST", "/api/v1/tenants/{tenant}/jobs", Named("create"));
  router.Add("GET", "/api/v1/tenants/{tenant}/jobs/{name}", Named("get"));
  router.Add("GET", "/api/v1/tenants/system/jobs/{name}", Named("system-get"));
  router.Add("GET", "/api/v1/tenants/{tenant}/jobs/latest", Named("latest"));
  router.Add("GET", "/files/{rest...}", Named("files"));
  router.Add("GET", "/files/special", Named("special"));
  router.Add("GET", "/files", Named("files-root"));
  router.Add("GET", "/", Named("root"));

  struct Case {
    std::string method, target;
    int status;
    std::string handler;
    json params;
  };
  std::vector<Case> cases = {
      {"GET", "/api/v1/tenants/nlp/jobs", 200, "list", {{"tenant", "nlp"}}},
      {"POST", "/api/v1/tenants/nlp/jobs", 200, "create", {{"tenant", "nlp"}}},
      {"GET", "/api/v1/tenants/nlp/jobs/", 200, "list", {{"tenant", "nlp"}}},
      {"GET", "/api/v1/tenants/nlp/jobs/train-1", 200, "get", {{"tenant", "nlp"}, {"name", "train-1"}}},
      {"GET", "/api/v1/tenants/system/jobs/x", 200, "system-get", {{"name", "x"}}},
      {"GET", "/api/v1/tenants/nlp/jobs/latest", 200, "latest", {{"tenant", "nlp"}}},
      {"GET", "/api/v1/tenants/a%2Fb/jobs/c%20d?x=1", 200, "get", {{"tenant", "a/b"}, {"name", "c d"}}},
      {"GET", "/files/a/b/c.txt", 200, "files", {{"rest", "a/b/c.txt"}}},
      {"GET", "/files/special", 200, "special", json::object()},
      {"GET", "/files/speci%61l", 200, "special", json::object()},  // the same path, escaped
      {"GET", "//files//special/", 200, "special", json::object()},  // and with empty segments
      {"GET", "/files/special/x", 200, "files", {{"rest", "special/x"}}},
      {"POST", "/files/special", 405, "", nullptr},
      {"GET", "/files", 200, "files-root", json::object()},
      {"GET", "/", 200, "root", json::object()},
      {"GET", "/api/v1/tenants/nlp", 404, "", nullptr},
      {"GET", "/nope", 404, "", nullptr},
      {"DELETE", "/api/v1/tenants/nlp/jobs", 405, "", nullptr},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.method + " " + c.target);
    Request req = Make(c.method, c.target);
    Response r = router.Dispatch(req);
    ASSERT_EQ(r.status, c.status) << r.body;
    json body = json::parse(r.body);
    if (c.status == 200) {
      EXPECT_EQ(body["handler"], c.handler);
      EXPECT_EQ(body["params"], c.params);
      EXPECT_EQ(body["route"], req.route);
    }
  }
}

TEST(RouterTest, NotFoundAndMethodNotAllowed) {
  Router router;
  router.Add("GET", "/x/{id}", Named("get"));
  router.Add("PUT", "/x/{id}", Named("put"));
  Request req = Make("GET", "/y");
  Response r = router.Dispatch(req);
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"]["message"], "no route for GET /y");
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "not_found");
  EXPECT_EQ(req.route, "");

  Request del = Make("DELETE", "/x/1");
  r = router.Dispatch(del);
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "method_not_allowed");
  ASSERT_EQ(r.headers.size(), 1u);
  EXPECT_EQ(r.headers[0].first, "Allow");
  EXPECT_EQ(r.headers[0].second, "GET, PUT");
}

TEST(RouterTest, ThrowingHandlerGives500) {
  Router router;
  router.Add("GET", "/boom", [](Request&) -> Response { throw std::runtime_error("kaboom"); });
  router.Add("GET", "/weird", [](Request&) -> Response { throw 42; });
  Request req = Make("GET", "/boom");
  Response r = router.Dispatch(req);
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(json::parse(r.body)["error"]["message"], "kaboom");
  Request weird = Make("GET", "/weird");
  EXPECT_EQ(router.Dispatch(weird).status, 500);
}

// A connection reuses its Request: a literal route's match leaves no parameters of the last one.
TEST(RouterTest, ALiteralMatchClearsTheLastRequestsParameters) {
  Router router;
  router.Add("GET", "/x/{id}", Named("param"));
  router.Add("GET", "/x/one", Named("literal"));
  Request req = Make("GET", "/x/two");
  EXPECT_EQ(json::parse(router.Dispatch(req).body)["params"], json({{"id", "two"}}));
  req.target = "/x/one";
  req.path = "/x/one";
  const json body = json::parse(router.Dispatch(req).body);
  EXPECT_EQ(body["handler"], "literal");
  EXPECT_EQ(body["params"], json::object());
  EXPECT_TRUE(req.params.empty());
  EXPECT_EQ(req.route, "/x/one");
}

TEST(RouterTest, LaterAddReplaces) {
  Router router;
  router.Add("GET", "/a", Named("one"));
  router.Add("GET", "/a", Named("two"));
  Request req = Make("GET", "/a");
  EXPECT_EQ(json::parse(router.Dispatch(req).body)["handler"], "two");
  router.Add("GET", "/a/{x}", Named("three"));
  router.Add("GET", "//a/", Named("four"));  // the same path as "/a" spelled otherwise: "/a" was first
  Request again = Make("GET", "/a");
  EXPECT_EQ(json::parse(router.Dispatch(again).body)["handler"], "two");
}

// A handler may dispatch another request through the same router (matching keeps per-thread
// scratch space, which must be free again by then): both get their own route and parameters.
TEST(RouterTest, AHandlerMayDispatchAgain) {
  Router router;
  router.Add("GET", "/inner/{x}/{y}", Named("inner"));
  router.Add("GET", "/outer/{a}/b/{c}", [&](Request& req) {
    Request inner = Make("GET", "/inner/" + req.params["a"] + "/deep");
    json got = json::parse(router.Dispatch(inner).body);
    return Response::Json(200, {{"a", req.params["a"]}, {"c", req.params["c"]}, {"route", req.route}, {"inner", got}});
  });
  Request req = Make("GET", "/outer/1/b/3");
  json r = json::parse(router.Dispatch(req).body);
  EXPECT_EQ(r["a"], "1");
  EXPECT_EQ(r["c"], "3");
  EXPECT_EQ(r["route"], "/outer/{a}/b/{c}");
  EXPECT_EQ(r["inner"]["handler"], "inner");
  EXPECT_EQ(r["inner"]["params"]["x"], "1");
  EXPECT_EQ(r["inner"]["params"]["y"], "deep");
  Request missing = Make("GET", "/outer/1/b");  // and a miss after it still names its path
  EXPECT_EQ(router.Dispatch(missing).status, 404);
}

TEST(SseTest, FormatsEvents) {
  EXPECT_EQ(FormatSseEvent("put", "a\nb", "7"), "id: 7\nevent: put\ndata: a\ndata: b\n\n");
  EXPECT_EQ(FormatSseEvent("", "x"), "data: x\n\n");
}

TEST(SseTest, ParsesAcrossChunkBoundaries) {
  std::string stream = FormatSseEvent("put", "line1\nline2", "1") + ": heartbeat\n\n" +
                       FormatSseEvent("", "{\"a\":1}") + "event: del\r\ndata:x\r\nid: 3\r\n\r\n";
  // Every split point gives the same events.
  for (size_t split = 0; split <= stream.size(); ++split) {
    SseParser parser;
    std::vector<SseEvent> events = parser.Feed(stream.substr(0, split));
    for (SseEvent& e : parser.Feed(stream.substr(split))) events.push_back(std::move(e));
    ASSERT_EQ(events.size(), 3u) << "split at " << split;
    EXPECT_EQ(events[0].event, "put");
    EXPECT_EQ(events[0].data, "line1\nline2");
    EXPECT_EQ(events[0].id, "1");
    EXPECT_EQ(events[1].event, "");
    EXPECT_EQ(events[1].data, "{\"a\":1}");
    EXPECT_EQ(events[1].id, "");
    EXPECT_EQ(events[2].event, "del");
    EXPECT_EQ(events[2].data, "x");
    EXPECT_EQ(events[2].id, "3");
  }
  SseParser bytewise;
  size_t n = 0;
  for (char c : stream) n += bytewise.Feed(std::string_view(&c, 1)).size();
  EXPECT_EQ(n, 3u);
}

TEST(ClientTest, MalformedBaseUrlIsInvalidArgument) {
  for (const char* url : {"ftp://x", "http://", "http://host:abc", "http://host:99999", "localhost:80"}) {
    Client client(url);
    StatusOr<ClientResponse> r = client.Send("GET", "/");
    ASSERT_FALSE(r.ok()) << url;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << url;
  }
}

TEST(ClientTest, ConnectionRefusedIsUnavailable) {
  Client client("http://127.0.0.1:1", {.timeout = std::chrono::milliseconds(2000)});
  StatusOr<ClientResponse> r = client.Send("GET", "/");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
}

}  // namespace
}  // namespace aicloud::http
