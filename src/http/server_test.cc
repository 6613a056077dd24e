// Server and Client together on 127.0.0.1, port 0.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "http/client.h"
#include "http/router.h"
#include "http/server.h"
#include "http/test_socket.h"

namespace aicloud::http {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

std::unique_ptr<Server> StartOrDie(Handler handler, ServerOptions options = {}) {
  StatusOr<std::unique_ptr<Server>> s = Server::Start(std::move(options), std::move(handler));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

std::string Url(const Server& s, std::string scheme = "http") {
  return scheme + "://127.0.0.1:" + std::to_string(s.port());
}

using testing::ConnectLoopback;

// Writes bytes on a plain socket and reads until the server closes (or 5 s pass).
std::string RawExchange(uint16_t port, const std::string& bytes) {
  int fd = ConnectLoopback(port);
  if (fd < 0) return "connect failed";
  (void)!::write(fd, bytes.data(), bytes.size());
  std::string out;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Router EchoRouter() {
  Router router;
  router.Add("POST", "/echo/{name}", [](Request& req) {
    return Response::Json(200, {{"name", req.params["name"]},
                                {"body", json::parse(req.body)},
                                {"limit", req.Query("limit")},
                                {"x-trace", req.Header("x-trace")},
                                {"route", req.route},
                                {"path", req.path}});
  });
  router.Add("GET", "/remote", [](Request& req) { return Response::Text(200, req.remote); });
  router.Add("GET", "/ping", [](Request&) { return Response::Text(200, "pong"); });
  return router;
}

TEST(ServerTest, JsonRoundTrip) {
  Router router = EchoRouter();
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); });
  ASSERT_TRUE(server);
  Client client(Url(*server));
  StatusOr<ClientResponse> r =
      client.Send("POST", "/echo/a%20b?limit=5", R"({"x": [1, 2]})", {{"X-Trace", "t-1"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->headers["content-type"], "application/json");
  json body = json::parse(r->body);
  EXPECT_EQ(body["name"], "a b");
  EXPECT_EQ(body["path"], "/echo/a b");
  EXPECT_EQ(body["body"]["x"][1], 2);
  EXPECT_EQ(body["limit"], "5");
  EXPECT_EQ(body["x-trace"], "t-1");
  EXPECT_EQ(body["route"], "/echo/{name}");

  r = client.Send("GET", "/missing");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "not_found");
  r = client.Send("DELETE", "/ping");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->headers["allow"], "GET");
}

TEST(ServerTest, KeepAliveReusesOneConnection) {
  Router router = EchoRouter();
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); });
  ASSERT_TRUE(server);
  Client client(Url(*server));
  std::set<std::string> remotes;
  for (int i = 0; i < 200; ++i) {
    StatusOr<ClientResponse> r = client.Send("GET", "/remote");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    remotes.insert(r->body);
  }
  EXPECT_EQ(remotes.size(), 1u);
}

TEST(ServerTest, ClientReconnectsAfterServerClosedKeptConnection) {
  Router router = EchoRouter();
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); },
                           {.idle_timeout = std::chrono::seconds(1)});
  ASSERT_TRUE(server);
  Client client(Url(*server));
  ASSERT_TRUE(client.Send("GET", "/ping").ok());
  std::this_thread::sleep_for(1500ms);  // the server drops the idle connection
  StatusOr<ClientResponse> r = client.Send("GET", "/ping");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "pong");
}

TEST(ServerTest, HundredConcurrentClients) {
  Router router = EchoRouter();
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); });
  ASSERT_TRUE(server);
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 100; ++t) {
    threads.emplace_back([&, t] {
      Client client(Url(*server));
      for (int i = 0; i < 5; ++i) {
        std::string body = json{{"t", t}, {"i", i}}.dump();
        StatusOr<ClientResponse> r = client.Send("POST", "/echo/c" + std::to_string(t), body);
        if (r.ok() && r->status == 200 && json::parse(r->body)["body"]["i"] == i) ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 500);
}

TEST(ServerTest, BodyOverLimitIs413AndServerGoesOn) {
  Router router = EchoRouter();
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); }, {.max_body_bytes = 1024});
  ASSERT_TRUE(server);
  Client client(Url(*server));
  std::string big = "\"" + std::string(10000, 'x') + "\"";
  StatusOr<ClientResponse> r = client.Send("POST", "/echo/big", big);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "payload_too_large");
  EXPECT_EQ(r->headers["connection"], "close");
  r = client.Send("POST", "/echo/small", "\"ok\"");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
}

TEST(ServerTest, HeaderOverLimitIs431) {
  Router router = EchoRouter();
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); }, {.max_header_bytes = 1024});
  ASSERT_TRUE(server);
  Client client(Url(*server));
  StatusOr<ClientResponse> r = client.Send("GET", "/ping", "", {{"X-Big", std::string(4000, 'y')}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 431);
  r = client.Send("GET", "/ping");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
}

// Many small fields within the byte limit: more than HeaderMap::kMaxFields is a 431 too.
TEST(ServerTest, TooManyHeaderFieldsIs431) {
  Router router = EchoRouter();
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); });
  ASSERT_TRUE(server);
  std::string fields;
  for (size_t i = 0; i <= HeaderMap::kMaxFields; ++i) fields += "x" + std::to_string(i) + ": 1\r\n";
  const std::string answer = RawExchange(server->port(), "GET /ping HTTP/1.1\r\nHost: x\r\n" + fields + "\r\n");
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 431")) << answer.substr(0, 200);
  EXPECT_NE(answer.find("256 fields"), std::string::npos) << answer;
  // Up to the cap (with Host and Connection) is served.
  fields.clear();
  for (size_t i = 0; i + 2 < HeaderMap::kMaxFields; ++i) fields += "x" + std::to_string(i) + ": 1\r\n";
  const std::string ok = RawExchange(server->port(), "GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + fields + "\r\n");
  EXPECT_TRUE(ok.starts_with("HTTP/1.1 200")) << ok.substr(0, 200);
}

TEST(ServerTest, MalformedRequestIs400AndClosed) {
  Router router = EchoRouter();
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); });
  ASSERT_TRUE(server);
  std::string out = RawExchange(server->port(), "GARBAGE\r\n\r\n");
  EXPECT_TRUE(out.starts_with("HTTP/1.1 400")) << out;
  EXPECT_NE(out.find("bad_request"), std::string::npos) << out;
  out = RawExchange(server->port(), "GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(out.starts_with("HTTP/1.1 200")) << out;
  EXPECT_NE(out.find("pong"), std::string::npos);
}

void Send(int fd, std::string_view bytes) { (void)!::write(fd, bytes.data(), bytes.size()); }

// Reads until the server closes, 5 s pass, or `until` has arrived.
std::string ReadFrom(int fd, std::string_view until = {}) {
  std::string out;
  char buf[4096];
  while (until.empty() || out.find(until) == std::string::npos) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

int Count(const std::string& s, std::string_view what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// How a plain connection reads requests: in pieces, several in one write, with "100 Continue",
// and what happens to a client that stops mid-header (cut off after the idle timeout, no answer)
// or closes mid-header (no answer); the server serves on.
TEST(ServerTest, RequestsInPiecesPipelinedContinuedAndCutOff) {
  Router router = EchoRouter();
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); }, {.idle_timeout = std::chrono::seconds(1)});
  ASSERT_TRUE(server);
  const uint16_t port = server->port();

  int fd = ConnectLoopback(port);
  ASSERT_GE(fd, 0);
  Send(fd, "POST /echo/a HTTP/1.1\r\nHost: x\r\nCont");
  std::this_thread::sleep_for(50ms);
  Send(fd, "ent-Length: 7\r\nConnection: close\r\n\r\n{\"a\":");
  std::this_thread::sleep_for(50ms);
  Send(fd, "1}");
  std::string out = ReadFrom(fd);
  ::close(fd);
  EXPECT_TRUE(out.starts_with("HTTP/1.1 200")) << out;
  EXPECT_NE(out.find(R"("body":{"a":1})"), std::string::npos) << out;

  fd = ConnectLoopback(port);
  ASSERT_GE(fd, 0);
  Send(fd, "GET /ping HTTP/1.1\r\nHost: x\r\n\r\nPOST /echo/b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
           "GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  out = ReadFrom(fd);
  ::close(fd);
  EXPECT_EQ(Count(out, "HTTP/1.1 200"), 3) << out;
  EXPECT_EQ(Count(out, "pong"), 2) << out;
  EXPECT_LT(out.find("pong"), out.find(R"("name":"b")")) << out;  // answered in order

  fd = ConnectLoopback(port);
  ASSERT_GE(fd, 0);
  Send(fd, "POST /echo/c HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 7\r\nConnection: close\r\n\r\n");
  out = ReadFrom(fd, "\r\n\r\n");
  EXPECT_TRUE(out.starts_with("HTTP/1.1 100 Continue")) << out;
  Send(fd, R"({"c":3})");
  out = ReadFrom(fd);
  ::close(fd);
  EXPECT_TRUE(out.starts_with("HTTP/1.1 200")) << out;
  EXPECT_NE(out.find(R"("name":"c")"), std::string::npos) << out;

  fd = ConnectLoopback(port);
  ASSERT_GE(fd, 0);
  Send(fd, "GET /ping HTTP/1.1\r\nHo");
  const auto t0 = std::chrono::steady_clock::now();
  out = ReadFrom(fd);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  EXPECT_EQ(out, "");
  EXPECT_GE(waited, 0.9);  // the idle timeout (1 s) ...
  EXPECT_LE(waited, 2.5);  // ... and at most a quarter more, with room for a busy machine

  fd = ConnectLoopback(port);
  ASSERT_GE(fd, 0);
  Send(fd, "GET /ping HTTP/1.1\r\nHo");
  ::shutdown(fd, SHUT_WR);
  out = ReadFrom(fd);
  ::close(fd);
  EXPECT_EQ(out, "");  // a partial request gets no answer

  out = RawExchange(port, "GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(out.starts_with("HTTP/1.1 200")) << out;
}

// Thousands of requests in one stream to a handler that answers inline, before it returns: all
// are answered, in order, on the one connection.
TEST(ServerTest, ManyPipelinedRequestsToAnInlineHandlerAreAnsweredInOrder) {
  StatusOr<std::unique_ptr<Server>> s = Server::Start({}, AsyncHandler([](Request& req, Responder respond) {
    respond(Response::Text(200, req.path.substr(1)));
  }));
  ASSERT_TRUE(s.ok());
  int fd = ConnectLoopback((*s)->port());
  ASSERT_GE(fd, 0);
  constexpr int kRequests = 20000;
  std::thread writer([fd] {
    std::string all;
    for (int i = 0; i < kRequests; ++i) {
      all += "GET /" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n";
      all += i + 1 == kRequests ? "Connection: close\r\n\r\n" : "\r\n";
    }
    testing::WriteAll(fd, all);
  });
  std::string out;
  std::vector<char> buf(1 << 16);
  for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) out.append(buf.data(), static_cast<size_t>(n));
  writer.join();
  ::close(fd);
  int answered = 0;
  size_t at = 0;
  for (size_t body; (body = out.find("\r\n\r\n", at)) != std::string::npos; ++answered) {
    const std::string want = std::to_string(answered);
    ASSERT_EQ(out.compare(body + 4, want.size(), want), 0) << "answer " << answered;
    at = body + 4 + want.size();
  }
  EXPECT_EQ(answered, kRequests);
}

// Async handlers run on the I/O threads, which carry the server's thread name (top -H, perf).
TEST(ServerTest, IoThreadsCarryTheServersThreadName) {
  ServerOptions options;
  options.thread_name = "probe";
  options.io_threads = 2;
  StatusOr<std::unique_ptr<Server>> s = Server::Start(options, AsyncHandler([](Request&, Responder respond) {
    char name[32] = {};
    pthread_getname_np(pthread_self(), name, sizeof(name));
    respond(Response::Text(200, name));
  }));
  ASSERT_TRUE(s.ok());
  std::set<std::string> seen;
  for (int i = 0; i < 40; ++i) {  // fresh connections, so both threads are likely to answer
    Client c(Url(**s));
    StatusOr<ClientResponse> r = c.Send("GET", "/", "");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    seen.insert(r->body);
  }
  ASSERT_FALSE(seen.empty());
  for (const std::string& name : seen) EXPECT_TRUE(name == "probe-io0" || name == "probe-io1") << name;
}

// The idle timeout bounds the whole request, however it trickles in, and the answer, not the
// handler: a client sending a byte every 100 ms is cut off, and a handler slower than the
// timeout still gets its answer through on the same connection.
TEST(ServerTest, IdleTimeoutBoundsReadingNotHandling) {
  Router router = EchoRouter();
  router.Add("GET", "/slow", [](Request&) {
    std::this_thread::sleep_for(1500ms);
    return Response::Text(200, "slow");
  });
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); }, {.idle_timeout = std::chrono::seconds(1)});
  ASSERT_TRUE(server);

  int fd = ConnectLoopback(server->port());
  ASSERT_GE(fd, 0);
  const std::string request = "GET /ping HTTP/1.1\r\nHost: x\r\nX-Padding: " + std::string(100, 'p') + "\r\n\r\n";
  const auto t0 = std::chrono::steady_clock::now();
  bool cut = false;
  for (char c : request) {
    if (::send(fd, &c, 1, MSG_NOSIGNAL) != 1) {
      cut = true;
      break;
    }
    std::this_thread::sleep_for(100ms);
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) == 1) {
      cut = true;
      break;
    }
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  EXPECT_TRUE(cut);
  EXPECT_GE(waited, 0.9);
  EXPECT_LE(waited, 3.0);

  Client client(Url(*server));
  StatusOr<ClientResponse> before = client.Send("GET", "/remote");
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  StatusOr<ClientResponse> slow = client.Send("GET", "/slow");
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  EXPECT_EQ(slow->body, "slow");
  StatusOr<ClientResponse> after = client.Send("GET", "/remote");
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->body, before->body);  // the same kept connection throughout
}

// The answer's head as it goes out: status line, Server, Content-Type (a handler's own
// content-type wins), the handler's fields less the framing ones and any that could split the
// head, Connection: close, Content-Length. HEAD gets the length without the body; 204 neither.
TEST(ServerTest, AnswerHeadsAreWrittenExactly) {
  auto server = StartOrDie([](Request& req) {
    Response r = Response::Text(req.path == "/empty" ? 204 : 200, "hi");
    r.headers = {{"X-Ok", "1"},
                 {"X-Split", "a\r\nSet-Cookie: stolen=1"},
                 {"Content-Length", "999"},
                 {"content-type", "text/x"}};
    return r;
  });
  ASSERT_TRUE(server);
  const std::string head = "HTTP/1.1 200 OK\r\nServer: aicloud\r\nContent-Type: text/x\r\nX-Ok: 1\r\n"
                           "Connection: close\r\nContent-Length: 2\r\n\r\n";
  EXPECT_EQ(RawExchange(server->port(), "GET /h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), head + "hi");
  EXPECT_EQ(RawExchange(server->port(), "HEAD /h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), head);
  EXPECT_EQ(RawExchange(server->port(), "GET /empty HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
            "HTTP/1.1 204 No Content\r\nServer: aicloud\r\nContent-Type: text/x\r\nX-Ok: 1\r\n"
            "Connection: close\r\n\r\n");
  // Kept alive: no Connection field, and the next request is answered on the same connection.
  int fd = ConnectLoopback(server->port());
  ASSERT_GE(fd, 0);
  const std::string two = "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::write(fd, two.data(), two.size()), static_cast<ssize_t>(two.size()));
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nServer: aicloud\r\nContent-Type: text/x\r\nX-Ok: 1\r\nContent-Length: 2\r\n\r\nhi" +
                     head + "hi");
}

// Byte i of a test body: a pattern in which a byte skipped or written twice shows.
std::string Patterned(size_t n, size_t salt = 0) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 26 + salt) % 26);
  return s;
}

// Answers larger than the socket buffer, pipelined, to a client that waits before reading: the
// part that does not fit at once goes out asynchronously, from where the first write stopped.
TEST(ServerTest, LargeAnswersToASlowReaderArriveWhole) {
  constexpr size_t kSize = 6 << 20;
  auto server = StartOrDie([](Request& req) { return Response::Text(200, Patterned(kSize, req.path == "/b" ? 1 : 0)); });
  ASSERT_TRUE(server);
  int fd = ConnectLoopback(server->port());
  ASSERT_GE(fd, 0);
  const std::string two = "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::write(fd, two.data(), two.size()), static_cast<ssize_t>(two.size()));
  std::this_thread::sleep_for(300ms);  // the server fills the socket buffer and must wait
  std::string out;
  std::vector<char> buf(1 << 16);
  for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) out.append(buf.data(), static_cast<size_t>(n));
  ::close(fd);
  const std::string head = "HTTP/1.1 200 OK\r\nServer: aicloud\r\nContent-Type: text/plain; charset=utf-8\r\n";
  const std::string first = head + "Content-Length: " + std::to_string(kSize) + "\r\n\r\n" + Patterned(kSize, 0);
  const std::string second =
      head + "Connection: close\r\nContent-Length: " + std::to_string(kSize) + "\r\n\r\n" + Patterned(kSize, 1);
  ASSERT_EQ(out.size(), first.size() + second.size());
  EXPECT_TRUE(out.compare(0, first.size(), first) == 0);
  EXPECT_TRUE(out.compare(first.size(), second.size(), second) == 0);
}

// A streamed answer's head (written by Beast) leaves out the same fields a plain one does.
TEST(ServerTest, StreamedAnswerHeadsLeaveOutFieldsThatSplitTheHead) {
  auto server = StartOrDie([](Request&) {
    Response r;
    r.content_type = "text/event-stream";
    r.headers = {{"X-Ok", "1"}, {"X-Split", "a\r\nSet-Cookie: stolen=1"}, {"Bad Name", "v"}};
    r.stream = [](StreamWriter& w) { w.Write("data: hi\n\n"); };
    return r;
  });
  ASSERT_TRUE(server);
  const std::string out = RawExchange(server->port(), "GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string head = out.substr(0, out.find("\r\n\r\n"));
  EXPECT_NE(head.find("X-Ok: 1"), std::string::npos) << out;
  EXPECT_EQ(head.find("Set-Cookie"), std::string::npos) << out;
  EXPECT_EQ(head.find("X-Split"), std::string::npos) << out;
  EXPECT_EQ(head.find("Bad Name"), std::string::npos) << out;
  EXPECT_NE(out.find("data: hi"), std::string::npos) << out;
}

TEST(ServerTest, BlockingHandlerDoesNotBlockOthers) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  Router router = EchoRouter();
  router.Add("GET", "/block", [&](Request&) {
    released.wait_for(10s);
    return Response::Text(200, "unblocked");
  });
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); });
  ASSERT_TRUE(server);
  std::thread blocked([&] {
    Client c(Url(*server));
    StatusOr<ClientResponse> r = c.Send("GET", "/block");
    EXPECT_TRUE(r.ok() && r->body == "unblocked");
  });
  std::this_thread::sleep_for(50ms);
  Client client(Url(*server));
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) {
    StatusOr<ClientResponse> r = client.Send("GET", "/ping");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->body, "pong");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  release.set_value();
  blocked.join();
}

// A client that closes its connection while its request is with the handler raises the
// request's client_gone signal (a blocking handler polls it); one that waits for its answer does
// not, and the next request on a kept-alive connection starts with the signal lowered.
TEST(ServerTest, ClientThatGoesAwayRaisesClientGone) {
  std::atomic<int> gone_seen{0}, answered_waiting{0};
  std::atomic<bool> lowered_at_start{true};
  Router router = EchoRouter();
  router.Add("GET", "/slow", [&](Request& req) {
    if (!req.client_gone || req.client_gone->cancelled()) lowered_at_start = false;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::stoi(req.Query("ms", "5000")));
    while (std::chrono::steady_clock::now() < until) {
      if (req.client_gone->cancelled()) {
        ++gone_seen;
        return Response::Text(200, "nobody reads this");
      }
      std::this_thread::sleep_for(10ms);
    }
    ++answered_waiting;
    return Response::Text(200, "done");
  });
  ServerOptions o;
  o.client_check_interval = 50ms;
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); }, o);
  ASSERT_TRUE(server);

  // Goes away mid-request: noticed within a few checks, long before the 5 s the handler would take.
  const auto start = std::chrono::steady_clock::now();
  int fd = ConnectLoopback(server->port());
  ASSERT_GE(fd, 0);
  const std::string get = "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::write(fd, get.data(), get.size()), static_cast<ssize_t>(get.size()));
  std::this_thread::sleep_for(100ms);
  ::close(fd);
  while (gone_seen == 0 && std::chrono::steady_clock::now() - start < 4s) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(gone_seen.load(), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);

  // Waits for its answers, twice on one connection: not raised.
  Client client(Url(*server));
  for (int i = 0; i < 2; ++i) {
    StatusOr<ClientResponse> r = client.Send("GET", "/slow?ms=300");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->body, "done");
  }
  EXPECT_EQ(answered_waiting.load(), 2);
  EXPECT_EQ(gone_seen.load(), 1);
  EXPECT_TRUE(lowered_at_start.load());
}

// A blocking Client call given a CancelSignal ends with CANCELLED as soon as another thread
// raises it, and closes its connection, so the server sees its client leave; the client is then
// usable again, and a signal raised after its call ended touches nothing.
TEST(ClientTest, ACancelSignalEndsTheCallAndClosesItsConnection) {
  std::atomic<int> gone_seen{0}, slow_started{0};
  Router router = EchoRouter();
  router.Add("GET", "/slow", [&](Request& req) {
    ++slow_started;
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < until) {
      if (req.client_gone->cancelled()) {
        ++gone_seen;
        return Response::Text(200, "nobody reads this");
      }
      std::this_thread::sleep_for(10ms);
    }
    return Response::Text(200, "done");
  });
  ServerOptions o;
  o.client_check_interval = 50ms;
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); }, o);
  ASSERT_TRUE(server);
  Client client(Url(*server));

  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "Stream" : "Send");
    const int gone_before = gone_seen.load();
    CancelSignal cancel;
    std::thread raiser([&] {
      std::this_thread::sleep_for(200ms);
      cancel.Cancel();
    });
    const auto start = std::chrono::steady_clock::now();
    Status st;
    if (stream) {
      int chunks = 0;
      st = client.Stream("GET", "/slow", {}, {}, [&](std::string_view) { return ++chunks, true; }, nullptr, &cancel);
      EXPECT_EQ(chunks, 0);
    } else {
      st = client.Send("GET", "/slow", {}, {}, &cancel).status();
    }
    raiser.join();
    EXPECT_EQ(st.code(), StatusCode::kCancelled) << st.ToString();
    EXPECT_NE(st.message().find("/slow: cancelled"), std::string::npos) << st.ToString();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);  // not the handler's 5 s
    while (gone_seen == gone_before && std::chrono::steady_clock::now() - start < 4s) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(gone_seen.load(), gone_before + 1);  // the server saw the connection close

    StatusOr<ClientResponse> again = client.Send("GET", "/ping");
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->body, "pong");
  }

  // Raised before the call: nothing is sent.
  CancelSignal raised;
  raised.Cancel();
  const int started = slow_started.load();
  EXPECT_EQ(client.Send("GET", "/slow", {}, {}, &raised).status().code(), StatusCode::kCancelled);
  EXPECT_EQ(client.Stream("GET", "/slow", {}, {}, [](std::string_view) { return true; }, nullptr, &raised).code(),
            StatusCode::kCancelled);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(slow_started.load(), started);

  // Raised while the call's last bytes are being handed over, after its last read: the call
  // stands, and the close it posted finds a later call and does nothing to it.
  CancelSignal during;
  Status streamed = client.Stream("GET", "/remote", {}, {}, [&](std::string_view) { return during.Cancel(), true; },
                                  nullptr, &during);
  EXPECT_TRUE(streamed.ok()) << streamed.ToString();
  StatusOr<ClientResponse> after = client.Send("GET", "/ping");
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->body, "pong");

  // Raised after its call ended: the next calls keep the same kept-alive connection.
  CancelSignal late;
  StatusOr<ClientResponse> first = client.Send("GET", "/remote", {}, {}, &late);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  late.Cancel();
  for (int i = 0; i < 2; ++i) {
    StatusOr<ClientResponse> next = client.Send("GET", "/remote");
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    EXPECT_EQ(next->body, first->body);  // same client address: the same connection
  }
}

// A request's signal is its own: what an earlier request on the same connection kept of its
// signal (a callback, the pointer) does not fire when a later request's client goes away.
TEST(ServerTest, ClientGoneBelongsToOneRequest) {
  std::atomic<bool> first_fired{false}, second_saw_gone{false};
  std::shared_ptr<CancelSignal> kept;
  Router router;
  router.Add("GET", "/first", [&](Request& req) {
    kept = req.client_gone;
    req.client_gone->OnCancel([&] { first_fired = true; });
    return Response::Text(200, "first");
  });
  router.Add("GET", "/second", [&](Request& req) {
    for (int i = 0; i < 300 && !req.client_gone->cancelled(); ++i) std::this_thread::sleep_for(10ms);
    second_saw_gone = req.client_gone->cancelled();
    return Response::Text(200, "unread");
  });
  ServerOptions o;
  o.client_check_interval = 20ms;
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); }, o);
  ASSERT_TRUE(server);
  int fd = ConnectLoopback(server->port());
  ASSERT_GE(fd, 0);
  const std::string first = "GET /first HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::write(fd, first.data(), first.size()), static_cast<ssize_t>(first.size()));
  char buf[512];
  ASSERT_GT(::read(fd, buf, sizeof buf), 0);  // the first answer
  const std::string second = "GET /second HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::write(fd, second.data(), second.size()), static_cast<ssize_t>(second.size()));
  std::this_thread::sleep_for(100ms);
  ::close(fd);
  for (int i = 0; i < 300 && !second_saw_gone; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(second_saw_gone.load());
  EXPECT_FALSE(first_fired.load());
  EXPECT_FALSE(kept->cancelled());
  server->Stop();
}

// The signal also reaches an async handler's callback, which runs on the connection's thread.
TEST(ServerTest, ClientGoneCallbackReachesAnAsyncHandler) {
  std::promise<void> called;
  std::future<void> was_called = called.get_future();
  std::mutex mu;
  std::vector<Responder> held;  // answered only when the test ends
  ServerOptions o;
  o.client_check_interval = 50ms;
  StatusOr<std::unique_ptr<Server>> s = Server::Start(o, AsyncHandler([&](Request& req, Responder respond) {
    req.client_gone->OnCancel([&called] { called.set_value(); });
    std::lock_guard<std::mutex> lock(mu);
    held.push_back(std::move(respond));
  }));
  ASSERT_TRUE(s.ok());
  int fd = ConnectLoopback((*s)->port());
  ASSERT_GE(fd, 0);
  const std::string get = "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::write(fd, get.data(), get.size()), static_cast<ssize_t>(get.size()));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(was_called.wait_for(0ms), std::future_status::timeout);  // still connected
  ::close(fd);
  EXPECT_EQ(was_called.wait_for(3s), std::future_status::ready);
  {
    std::lock_guard<std::mutex> lock(mu);
    for (Responder& r : held) r(Response::Text(200, "late"));
  }
  (*s)->Stop();
}

TEST(ServerTest, SseEventsArriveIncrementally) {
  std::promise<void> first_seen;
  std::future<void> first_seen_f = first_seen.get_future();
  std::atomic<bool> seen_before_end{false};
  Router router;
  router.Add("GET", "/events", [&](Request&) {
    Response r;
    r.content_type = "text/event-stream";
    r.stream = [&](StreamWriter& w) {
      w.SendEvent("put", "{\"n\": 1}", "1");
      // The client must see event 1 while the stream is still open.
      seen_before_end = first_seen_f.wait_for(5s) == std::future_status::ready;
      std::this_thread::sleep_for(20ms);
      w.SendEvent("put", "line a\nline b", "2");
      std::this_thread::sleep_for(20ms);
      w.SendEvent("delete", "{\"n\": 3}", "3");
    };
    return r;
  });
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); });
  ASSERT_TRUE(server);
  Client client(Url(*server));
  SseParser parser;
  std::vector<SseEvent> events;
  ClientResponse head;
  Status s = client.Stream("GET", "/events", "", {}, [&](std::string_view bytes) {
    for (SseEvent& e : parser.Feed(bytes)) {
      events.push_back(std::move(e));
      if (events.size() == 1) first_seen.set_value();
    }
    return true;
  }, &head);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.headers["content-type"], "text/event-stream");
  EXPECT_EQ(head.headers["transfer-encoding"], "chunked");
  ASSERT_EQ(events.size(), 3u);
  EXPECT_TRUE(seen_before_end.load());
  EXPECT_EQ(events[0].data, "{\"n\": 1}");
  EXPECT_EQ(events[1].data, "line a\nline b");
  EXPECT_EQ(events[1].id, "2");
  EXPECT_EQ(events[2].event, "delete");
  // The connection closed after the stream; the client reconnects for the next request.
  router.Add("GET", "/ping", [](Request&) { return Response::Text(200, "pong"); });
  StatusOr<ClientResponse> r = client.Send("GET", "/ping");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
}

TEST(ServerTest, ClientDisconnectMakesWriteFail) {
  std::promise<int> writes_until_false;
  std::future<int> result = writes_until_false.get_future();
  Router router;
  router.Add("GET", "/tail", [&](Request&) {
    Response r;
    r.content_type = "text/plain";
    r.stream = [&](StreamWriter& w) {
      int n = 0;
      auto deadline = std::chrono::steady_clock::now() + 5s;
      while (std::chrono::steady_clock::now() < deadline && w.Write("line\n")) {
        ++n;
        std::this_thread::sleep_for(10ms);
      }
      EXPECT_TRUE(w.closed());
      writes_until_false.set_value(n);
    };
    return r;
  });
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); });
  ASSERT_TRUE(server);
  {
    Client client(Url(*server));
    Status s = client.Stream("GET", "/tail", "", {}, [](std::string_view) { return false; });
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  ASSERT_EQ(result.wait_for(3s), std::future_status::ready);
  EXPECT_LT(result.get(), 300);
}

TEST(ServerTest, StopWithOpenStreamReturnsPromptly) {
  std::promise<void> streaming;
  Router router;
  router.Add("GET", "/forever", [&](Request&) {
    Response r;
    r.stream = [&](StreamWriter& w) {
      w.Write("first\n");
      streaming.set_value();
      while (!w.closed()) std::this_thread::sleep_for(5ms);
      EXPECT_FALSE(w.Write("after stop\n"));
    };
    return r;
  });
  router.Add("GET", "/blocked-in-write", [&](Request&) {
    Response r;
    r.stream = [](StreamWriter& w) {
      std::string chunk(1 << 16, 'z');
      while (w.Write(chunk)) {}  // the client never reads: Write blocks until Stop
    };
    return r;
  });
  auto server = StartOrDie([&](Request& req) { return router.Dispatch(req); });
  ASSERT_TRUE(server);
  std::thread reader([&] {
    Client client(Url(*server));
    Status s = client.Stream("GET", "/forever", "", {}, [](std::string_view) { return true; });
    (void)s;  // the server ends the stream mid-way: an error is fine
  });
  // A raw client that sends a request and never reads, so the server's writes back up.
  int fd = ConnectLoopback(server->port());
  ASSERT_GE(fd, 0);
  std::string req = "GET /blocked-in-write HTTP/1.1\r\nHost: x\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());

  ASSERT_EQ(streaming.get_future().wait_for(5s), std::future_status::ready);
  std::this_thread::sleep_for(200ms);
  auto start = std::chrono::steady_clock::now();
  server->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  server->Stop();  // idempotent
  reader.join();
  ::close(fd);
}

TEST(ServerTest, BindFailureNamesAddress) {
  auto first = StartOrDie([](Request&) { return Response::Text(200, ""); });
  ASSERT_TRUE(first);
  StatusOr<std::unique_ptr<Server>> second =
      Server::Start({.port = first->port()}, [](Request&) { return Response::Text(200, ""); });
  // SO_REUSEADDR does not allow two listeners on one port.
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(first->port())),
            std::string::npos)
      << second.status().ToString();
}

// TLS: certificates made with the openssl CLI once for the suite.
class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("command -v openssl >/dev/null 2>&1") != 0) return;
    dir_ = std::filesystem::temp_directory_path() /
           ("aicloud-http-tls-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    auto make = [](const std::string& name, const std::string& cn) {
      std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + (dir_ / (name + "-key.pem")).string() +
                        " -out " + (dir_ / (name + ".pem")).string() + " -days 1 -subj /CN=" + cn +
                        " -addext subjectAltName=DNS:localhost,IP:127.0.0.1 >/dev/null 2>&1";
      return std::system(cmd.c_str()) == 0;
    };
    ready_ = make("server", "localhost") && make("other", "localhost") && make("client", "client");
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  void SetUp() override {
    if (!ready_) GTEST_SKIP() << "openssl CLI not available";
    router_.Add("GET", "/ping", [](Request&) { return Response::Text(200, "pong"); });
  }
  static std::string F(const std::string& name) { return (dir_ / name).string(); }
  std::unique_ptr<Server> StartTls(std::string client_ca = "") {
    return StartOrDie([this](Request& req) { return router_.Dispatch(req); },
                      {.tls_cert_file = F("server.pem"), .tls_key_file = F("server-key.pem"),
                       .tls_client_ca_file = std::move(client_ca)});
  }

  static inline std::filesystem::path dir_;
  static inline bool ready_ = false;
  Router router_;
};

TEST_F(TlsTest, HttpsRoundTripWithCaFile) {
  auto server = StartTls();
  ASSERT_TRUE(server);
  Client client(Url(*server, "https"), {.ca_file = F("server.pem")});
  for (int i = 0; i < 3; ++i) {
    StatusOr<ClientResponse> r = client.Send("GET", "/ping");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->body, "pong");
  }
  Client by_name("https://localhost:" + std::to_string(server->port()), {.ca_file = F("server.pem")});
  StatusOr<ClientResponse> r = by_name.Send("GET", "/ping");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Plain HTTP to an HTTPS-only server gets nothing useful.
  Client plain(Url(*server), {.timeout = std::chrono::milliseconds(3000)});
  r = plain.Send("GET", "/ping");
  EXPECT_TRUE(!r.ok() || r->status != 200);
}

TEST_F(TlsTest, WrongCaIsRejected) {
  auto server = StartTls();
  ASSERT_TRUE(server);
  Client client(Url(*server, "https"), {.ca_file = F("other.pem")});
  StatusOr<ClientResponse> r = client.Send("GET", "/ping");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  Client insecure(Url(*server, "https"), {.insecure_skip_verify = true});
  r = insecure.Send("GET", "/ping");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
}

TEST_F(TlsTest, MutualTlsRequiresClientCertificate) {
  auto server = StartTls(F("client.pem"));
  ASSERT_TRUE(server);
  Client without(Url(*server, "https"), {.ca_file = F("server.pem")});
  StatusOr<ClientResponse> r = without.Send("GET", "/ping");
  EXPECT_FALSE(r.ok() && r->status == 200);
  Client with(Url(*server, "https"), {.ca_file = F("server.pem"), .cert_file = F("client.pem"),
                                      .key_file = F("client-key.pem")});
  r = with.Send("GET", "/ping");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "pong");
  // A client certificate the server does not trust is rejected too.
  Client wrong(Url(*server, "https"), {.ca_file = F("server.pem"), .cert_file = F("other.pem"),
                                       .key_file = F("other-key.pem")});
  r = wrong.Send("GET", "/ping");
  EXPECT_FALSE(r.ok() && r->status == 200);
}

TEST_F(TlsTest, BadFilesNameTheFile) {
  auto handler = [](Request&) { return Response::Text(200, ""); };
  StatusOr<std::unique_ptr<Server>> s =
      Server::Start({.tls_cert_file = F("missing.pem"), .tls_key_file = F("server-key.pem")}, handler);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("missing.pem"), std::string::npos) << s.status().ToString();
  // A key that does not belong to the certificate.
  s = Server::Start({.tls_cert_file = F("server.pem"), .tls_key_file = F("other-key.pem")}, handler);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("other-key.pem"), std::string::npos) << s.status().ToString();
  // A key file given as the certificate.
  s = Server::Start({.tls_cert_file = F("server-key.pem"), .tls_key_file = F("server-key.pem")}, handler);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("server-key.pem"), std::string::npos) << s.status().ToString();
  s = Server::Start({.tls_cert_file = F("server.pem")}, handler);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace aicloud::http
