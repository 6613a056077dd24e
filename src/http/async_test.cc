// The non-blocking forms on 127.0.0.1, port 0: AsyncHandler and Router::AddAsync on the
// server's I/O thread, Responder from other threads, and AsyncClient's pool, timeouts and
// connection failures (driven from a proxy server's async handler, whose loop it runs on).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "http/async_client.h"
#include "http/client.h"
#include "http/router.h"
#include "http/server.h"
#include "http/test_socket.h"

namespace aicloud::http {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

std::string ThreadName() {
  std::ostringstream os;
  os << std::this_thread::get_id();
  return os.str();
}

std::string Url(const Server& s) { return "http://127.0.0.1:" + std::to_string(s.port()); }

std::unique_ptr<Server> StartAsync(AsyncHandler handler, ServerOptions options = {}) {
  StatusOr<std::unique_ptr<Server>> s = Server::Start(std::move(options), std::move(handler));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

std::unique_ptr<Server> StartBlocking(Handler handler, ServerOptions options = {}) {
  StatusOr<std::unique_ptr<Server>> s = Server::Start(std::move(options), std::move(handler));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(AsyncServerTest, HandlerRespondsLaterFromAnotherThread) {
  std::string io_thread, answer_thread;
  std::vector<std::thread> answerers;
  std::mutex mu;
  auto server = StartAsync([&](Request& req, Responder respond) {
    std::lock_guard<std::mutex> lock(mu);
    io_thread = ThreadName();
    if (req.path == "/now") return respond(Response::Text(200, "now"));
    answerers.emplace_back([&, respond, body = req.body] {
      std::this_thread::sleep_for(200ms);
      {
        std::lock_guard<std::mutex> l(mu);
        answer_thread = ThreadName();
      }
      respond(Response::Text(200, "late:" + body));
      respond(Response::Text(500, "second answers are ignored"));
    });
  });
  ASSERT_TRUE(server);
  // The late answer does not hold up the I/O thread: another connection is served meanwhile.
  auto late = std::async(std::launch::async, [&] { return Client(Url(*server)).Send("POST", "/late", "x"); });
  std::this_thread::sleep_for(50ms);
  const auto t0 = std::chrono::steady_clock::now();
  StatusOr<ClientResponse> now = Client(Url(*server)).Send("GET", "/now");
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(now->body, "now");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 150ms);
  StatusOr<ClientResponse> r = late.get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "late:x");
  for (auto& t : answerers) t.join();
  EXPECT_NE(io_thread, answer_thread);
}

TEST(AsyncServerTest, DroppedOrThrowingHandlerGives500) {
  auto server = StartAsync([](Request& req, Responder /*respond*/) {
    if (req.path == "/throw") throw std::runtime_error("boom");
    // /drop: the Responder goes away unanswered.
  });
  ASSERT_TRUE(server);
  Client c(Url(*server));
  StatusOr<ClientResponse> r = c.Send("GET", "/drop");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 500);
  EXPECT_NE(r->body.find("without answering"), std::string::npos) << r->body;
  r = c.Send("GET", "/throw");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 500);
  EXPECT_NE(r->body.find("boom"), std::string::npos) << r->body;
}

TEST(AsyncServerTest, RouterRunsAsyncRoutesInlineAndBlockingOnesOnWorkers) {
  Router router;
  std::mutex mu;
  std::set<std::string> async_threads, blocking_threads;
  router.AddAsync("GET", "/async/{x}", [&](Request& req, Responder respond) {
    {
      std::lock_guard<std::mutex> lock(mu);
      async_threads.insert(ThreadName());
    }
    respond(Response::Json(200, {{"x", req.params["x"]}, {"loop", respond.loop() != nullptr}}));
  });
  router.Add("GET", "/blocking", [&](Request&) {
    std::lock_guard<std::mutex> lock(mu);
    blocking_threads.insert(ThreadName());
    return Response::Text(200, "b");
  });
  router.AddAsync("GET", "/deferred", [](Request&, Responder respond) {
    respond.RunBlocking([] { return Response::Text(200, "worker"); });
  });
  router.AddAsync("GET", "/events", [](Request&, Responder respond) {
    Response r;
    r.content_type = "text/event-stream";
    r.stream = [](StreamWriter& w) { w.SendEvent("tick", "1"); };
    respond(std::move(r));
  });
  auto server = StartAsync([&](Request& req, Responder respond) { router.Dispatch(req, std::move(respond)); },
                           {.io_threads = 1, .worker_threads = 2});
  ASSERT_TRUE(server);
  Client c(Url(*server));
  for (int i = 0; i < 4; ++i) {
    StatusOr<ClientResponse> a = c.Send("GET", "/async/v" + std::to_string(i));
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(json::parse(a->body)["x"], "v" + std::to_string(i));
    EXPECT_TRUE(json::parse(a->body)["loop"]);
    ASSERT_EQ(c.Send("GET", "/blocking")->body, "b");
  }
  EXPECT_EQ(c.Send("GET", "/deferred")->body, "worker");
  EXPECT_EQ(c.Send("GET", "/events")->body, "event: tick\ndata: 1\n\n");
  EXPECT_EQ(c.Send("GET", "/nope")->status, 404);
  EXPECT_EQ(c.Send("POST", "/blocking")->status, 405);
  ASSERT_EQ(async_threads.size(), 1u);  // the one I/O thread
  EXPECT_FALSE(blocking_threads.contains(*async_threads.begin()));

  // The blocking Dispatch calls async routes too (with no loop) and waits for the answer.
  Request req;
  req.method = "GET";
  req.path = req.target = "/async/z";
  Response direct = router.Dispatch(req);
  EXPECT_EQ(json::parse(direct.body)["x"], "z");
  EXPECT_FALSE(json::parse(direct.body)["loop"]);
}

TEST(AsyncServerTest, StopWaitsForOwedAnswers) {
  std::atomic<bool> answered{false};
  std::thread answerer;
  std::promise<void> started;
  auto server = StartAsync([&](Request&, Responder respond) {
    answerer = std::thread([&, respond] {
      std::this_thread::sleep_for(300ms);
      answered = true;
      respond(Response::Text(200, "late"));
    });
    started.set_value();
  });
  ASSERT_TRUE(server);
  auto call = std::async(std::launch::async, [&] { return Client(Url(*server)).Send("GET", "/"); });
  started.get_future().wait();
  server->Stop();
  EXPECT_TRUE(answered.load());
  answerer.join();
  call.wait();
}

// ---- AsyncClient ---------------------------------------------------------------------------

// A proxy whose async handler forwards every request to `upstream` with AsyncClient and answers
// with a JSON summary of the AsyncResult.
struct Proxy {
  Proxy(std::function<std::string()> upstream_fn, AsyncClientOptions o) : client(o), upstream(std::move(upstream_fn)) {
    server = StartAsync([this](Request& req, Responder respond) {
      EventLoop* loop = respond.loop();
      const std::string up = upstream();
      use.load()->Send(*loop, up, method_override.empty() ? req.method : method_override, target_override.empty() ? req.target : target_override,
                  std::make_shared<const std::string>(std::move(req.body)), headers,
                  [respond, loop, up, tls = tls](AsyncResult r) {
                    respond(Response::Json(200, {{"code", std::string(StatusCodeName(r.status.code()))},
                                                 {"message", r.status.message()},
                                                 {"answered", r.answered()},
                                                 {"status", r.response.status},
                                                 {"body", r.response.body},
                                                 {"reused", r.reused},
                                                 {"idle", AsyncClient::IdleConnections(*loop, up, tls.get())}}));
                  },
                  nullptr, tls);
    });
  }
  json Get(const std::string& target) {
    StatusOr<ClientResponse> r = Client(Url(*server)).Send("GET", target);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? json::parse(r->body) : json();
  }

  AsyncClient client;
  std::atomic<AsyncClient*> use{&client};  // the client the next request goes through
  std::function<std::string()> upstream;
  Headers headers = {{"x-test", "1"}};  // sent upstream with every request
  std::string target_override;          // sent instead of the request's target when set
  std::string method_override;          // sent instead of the request's method when set
  std::shared_ptr<const TlsTrust> tls;   // set: the upstream is spoken to over HTTPS
  std::unique_ptr<Server> server;
};

std::string HostPort(const Server& s) { return "127.0.0.1:" + std::to_string(s.port()); }

TEST(AsyncClientTest, ReusesKeptAliveConnections) {
  Router router;
  router.Add("GET", "/who", [](Request& req) { return Response::Text(200, req.remote + " " + req.Header("x-test")); });
  auto up = StartBlocking([&](Request& req) { return router.Dispatch(req); });
  ASSERT_TRUE(up);
  Proxy proxy([&] { return HostPort(*up); }, {});
  std::set<std::string> remotes;
  for (int i = 0; i < 5; ++i) {
    json r = proxy.Get("/who");
    EXPECT_EQ(r["code"], "OK") << r;
    EXPECT_EQ(r["status"], 200);
    EXPECT_EQ(r["reused"], i > 0) << i;
    EXPECT_EQ(r["idle"], 1);  // put back before the callback
    std::string body = r["body"];
    EXPECT_TRUE(body.ends_with(" 1")) << body;  // extra headers are sent
    remotes.insert(body);
  }
  EXPECT_EQ(remotes.size(), 1u);  // one upstream connection for all five
}

// An answer to HEAD carries the Content-Length of the body it leaves out: the client must not
// wait for that body, on a new connection or a pooled one.
TEST(AsyncClientTest, HeadAnswersEndAtTheirHead) {
  auto up = StartBlocking([](Request&) { return Response::Text(200, "0123456789"); });
  ASSERT_TRUE(up);
  Proxy proxy([&] { return HostPort(*up); }, {.timeout = 2000ms});
  proxy.method_override = "HEAD";
  for (int i = 0; i < 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    json r = proxy.Get("/h");
    EXPECT_EQ(r["code"], "OK") << r;
    EXPECT_EQ(r["status"], 200);
    EXPECT_EQ(r["body"], "");
    EXPECT_EQ(r["reused"], i > 0) << i;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1000ms);
  }
}

TEST(AsyncClientTest, ReplacesAPooledConnectionTheUpstreamClosed) {
  Router router;
  router.Add("GET", "/who", [](Request& req) { return Response::Text(200, req.remote); });
  auto up = StartBlocking([&](Request& req) { return router.Dispatch(req); }, {.idle_timeout = std::chrono::seconds(1)});
  ASSERT_TRUE(up);
  Proxy proxy([&] { return HostPort(*up); }, {});
  json first = proxy.Get("/who");
  ASSERT_EQ(first["code"], "OK") << first;
  std::this_thread::sleep_for(1500ms);  // the upstream drops the idle connection
  json second = proxy.Get("/who");
  EXPECT_EQ(second["code"], "OK") << second;
  EXPECT_EQ(second["status"], 200);
  EXPECT_FALSE(second["reused"]);  // answered over the new connection
  EXPECT_NE(second["body"], first["body"]);
}

// A proxy that forwards with its request's client_gone signal: the client going away ends the
// upstream call (CANCELLED) and closes the upstream connection, so the upstream's own handler
// sees its client go away too, over a new connection and over a pooled one.
TEST(AsyncClientTest, ClientGoingAwayCancelsTheUpstreamCall) {
  std::atomic<int> upstream_saw_gone{0};
  std::mutex remotes_mu;
  std::vector<std::string> remotes;  // the upstream connections /quick and /slow came over
  Router router;
  router.Add("GET", "/quick", [&](Request& req) {
    std::lock_guard<std::mutex> lock(remotes_mu);
    remotes.push_back(req.remote);
    return Response::Text(200, "quick");
  });
  router.Add("GET", "/slow", [&](Request& req) {
    {
      std::lock_guard<std::mutex> lock(remotes_mu);
      remotes.push_back(req.remote);
    }
    for (int i = 0; i < 500; ++i) {  // up to 5 s
      if (req.client_gone->cancelled()) {
        ++upstream_saw_gone;
        return Response::Text(200, "unread");
      }
      std::this_thread::sleep_for(10ms);
    }
    return Response::Text(200, "slow");
  });
  ServerOptions fast_checks;
  fast_checks.client_check_interval = 50ms;
  auto up = StartBlocking([&](Request& req) { return router.Dispatch(req); }, fast_checks);
  ASSERT_TRUE(up);
  AsyncClient client;
  std::mutex mu;
  std::vector<std::string> codes;  // the proxy's upstream results, in order
  auto proxy = StartAsync(
      [&](Request& req, Responder respond) {
        client.Send(*respond.loop(), HostPort(*up), "GET", req.target, std::make_shared<const std::string>(), {},
                    [&, respond](AsyncResult r) {
                      {
                        std::lock_guard<std::mutex> lock(mu);
                        codes.push_back(std::string(StatusCodeName(r.status.code())) + " " + r.status.message());
                      }
                      respond(Response::Text(r.answered() ? 200 : 502, r.response.body));
                    },
                    req.client_gone);
      },
      fast_checks);
  ASSERT_TRUE(proxy);

  auto leave_mid_request = [&](int expected_gone) {
    const auto start = std::chrono::steady_clock::now();
    int fd = testing::ConnectLoopback(proxy->port());
    ASSERT_GE(fd, 0);
    const std::string get = "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(::write(fd, get.data(), get.size()), static_cast<ssize_t>(get.size()));
    std::this_thread::sleep_for(100ms);
    ::close(fd);
    while (upstream_saw_gone < expected_gone && std::chrono::steady_clock::now() - start < 4s) {
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(upstream_saw_gone.load(), expected_gone);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  };
  leave_mid_request(1);  // a new upstream connection (none pooled yet)
  StatusOr<ClientResponse> quick = Client(Url(*proxy)).Send("GET", "/quick");
  ASSERT_TRUE(quick.ok()) << quick.status();
  EXPECT_EQ(quick->body, "quick");
  leave_mid_request(2);  // over the pooled connection /quick left
  for (int i = 0; i < 200; ++i) {  // the proxy's callback for the second one
    {
      std::lock_guard<std::mutex> lock(mu);
      if (codes.size() >= 3) break;
    }
    std::this_thread::sleep_for(10ms);
  }
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(codes.size(), 3u);
  EXPECT_TRUE(codes[0].starts_with("CANCELLED")) << codes[0];
  EXPECT_NE(codes[0].find("cancelled"), std::string::npos) << codes[0];
  EXPECT_TRUE(codes[1].starts_with("OK")) << codes[1];
  EXPECT_TRUE(codes[2].starts_with("CANCELLED")) << codes[2];
  std::lock_guard<std::mutex> remotes_lock(remotes_mu);
  ASSERT_EQ(remotes.size(), 3u);
  EXPECT_EQ(remotes[1], remotes[2]);  // the second slow call went over the pooled connection
}

TEST(AsyncClientTest, RefusedIsUnavailableAndSlowIsDeadlineExceeded) {
  uint16_t dead_port;
  {
    auto s = StartBlocking([](Request&) { return Response::Text(200, ""); });
    dead_port = s->port();
  }
  Router router;
  router.Add("GET", "/slow", [](Request&) {
    std::this_thread::sleep_for(600ms);
    return Response::Text(200, "late");
  });
  auto up = StartBlocking([&](Request& req) { return router.Dispatch(req); });
  ASSERT_TRUE(up);
  std::string target;
  Proxy proxy([&] { return target; }, {.timeout = 150ms});

  target = "127.0.0.1:" + std::to_string(dead_port);
  json refused = proxy.Get("/x");
  EXPECT_EQ(refused["code"], "UNAVAILABLE") << refused;
  EXPECT_FALSE(refused["answered"]);
  EXPECT_NE(refused["message"].get<std::string>().find("cannot connect to " + target), std::string::npos) << refused;

  target = HostPort(*up);
  const auto t0 = std::chrono::steady_clock::now();
  json slow = proxy.Get("/slow");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
  EXPECT_EQ(slow["code"], "DEADLINE_EXCEEDED") << slow;
  EXPECT_FALSE(slow["answered"]);
  EXPECT_NE(slow["message"].get<std::string>().find("timed out after 150 ms"), std::string::npos) << slow;
  EXPECT_EQ(slow["idle"], 0);  // a timed-out connection is not pooled

  target = "no-port";
  EXPECT_EQ(proxy.Get("/x")["code"], "INVALID_ARGUMENT");
}

// An upstream answering /quick at once (with the caller's address) and /slow after 2 s.
struct QuickAndSlow {
  QuickAndSlow() {
    router.Add("GET", "/quick", [](Request& req) { return Response::Text(200, req.remote); });
    router.Add("GET", "/slow", [](Request&) {
      std::this_thread::sleep_for(2000ms);
      return Response::Text(200, "late");
    });
    server = StartBlocking([this](Request& req) { return router.Dispatch(req); });
  }
  Router router;
  std::unique_ptr<Server> server;
};

// Exchanges over a pooled connection share its one timer, which re-arms itself for the exchange
// in progress: a bound that passed while the connection sat idle closes nothing, and an
// exchange that starts late is bounded from its own start.
TEST(AsyncClientTest, PooledExchangesAreBoundedFromTheirOwnStart) {
  QuickAndSlow up;
  ASSERT_TRUE(up.server);
  Proxy proxy([&] { return HostPort(*up.server); }, {.timeout = 300ms});
  json first = proxy.Get("/quick");  // a new connection, then pooled
  ASSERT_EQ(first["code"], "OK") << first;
  json second = proxy.Get("/quick");  // pooled: arms the connection's timer for 300 ms
  ASSERT_EQ(second["code"], "OK") << second;
  EXPECT_EQ(second["reused"], true);
  std::this_thread::sleep_for(450ms);  // that bound passes while the connection is idle
  json third = proxy.Get("/quick");
  EXPECT_EQ(third["code"], "OK") << third;  // not closed by the old bound
  EXPECT_EQ(third["reused"], true);
  EXPECT_EQ(third["body"], first["body"]);  // the same upstream connection all along
  std::this_thread::sleep_for(200ms);  // the next exchange starts mid-way into the timer's sleep
  const auto t0 = std::chrono::steady_clock::now();
  json slow = proxy.Get("/slow");
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(slow["code"], "DEADLINE_EXCEEDED") << slow;
  EXPECT_TRUE(slow["reused"]) << slow;
  EXPECT_NE(slow["message"].get<std::string>().find("timed out after 300 ms"), std::string::npos) << slow;
  EXPECT_GE(took, 280ms);  // bounded from its own start, not from the earlier exchange's
  EXPECT_LT(took, 1500ms);  // and not left to the upstream's 2 s
  EXPECT_EQ(slow["idle"], 0);  // a timed-out connection is not pooled
}

// Clients share a loop's pooled connections whatever their timeouts: one with a shorter timeout
// that takes a connection whose timer is armed for a longer one is still bounded by its own.
TEST(AsyncClientTest, AShorterTimeoutOnAPooledConnectionStillBounds) {
  QuickAndSlow up;
  ASSERT_TRUE(up.server);
  Proxy proxy([&] { return HostPort(*up.server); }, {.timeout = 10000ms});
  AsyncClient brief({.timeout = 300ms});
  ASSERT_EQ(proxy.Get("/quick")["code"], "OK");  // a new connection, then pooled
  json armed = proxy.Get("/quick");               // pooled: its timer armed for 10 s
  ASSERT_EQ(armed["code"], "OK") << armed;
  proxy.use = &brief;
  const auto t0 = std::chrono::steady_clock::now();
  json slow = proxy.Get("/slow");
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(slow["code"], "DEADLINE_EXCEEDED") << slow;
  EXPECT_TRUE(slow["reused"]) << slow;  // over the connection the 10 s client left
  EXPECT_NE(slow["message"].get<std::string>().find("timed out after 300 ms"), std::string::npos) << slow;
  EXPECT_LT(took, 1500ms);  // its own 300 ms, not the 10 s armed before, nor the upstream's 2 s
  proxy.use = &proxy.client;
}

// A listening TCP socket on 127.0.0.1 and an ephemeral port (for the raw upstreams below).
int ListenOnLoopback(uint16_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

// A raw TCP upstream: runs `serve` on each connection it accepts, one at a time, then closes it.
class RawUpstream {
 public:
  explicit RawUpstream(std::function<void(int fd)> serve) : serve_(std::move(serve)) {
    fd_ = ListenOnLoopback(&port_);
    thread_ = std::thread([this] {
      for (;;) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        serve_(c);
        ::close(c);
      }
    });
  }
  // Answers each connection's request with `reply` ("" = closes without a byte).
  explicit RawUpstream(std::string reply)
      : RawUpstream([reply = std::move(reply)](int c) {
          if (reply.empty()) return;
          char buf[4096];
          (void)!::read(c, buf, sizeof buf);  // the request (small, one read)
          (void)!::write(c, reply.data(), reply.size());
        }) {}
  ~RawUpstream() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string host_port() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  std::function<void(int)> serve_;
  int fd_;
  uint16_t port_;
  std::thread thread_;
};

TEST(AsyncClientTest, ClosedUpstreamConnectionBeforeAndAfterTheHead) {
  RawUpstream hangs_up("");  // accepts and closes without a byte
  RawUpstream cuts_body("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"partial\"");
  std::string target;
  Proxy proxy([&] { return target; }, {});

  target = hangs_up.host_port();
  json none = proxy.Get("/x");
  EXPECT_EQ(none["code"], "UNAVAILABLE") << none;  // a connection failure: safe to retry elsewhere
  EXPECT_FALSE(none["answered"]);

  target = cuts_body.host_port();
  json cut = proxy.Get("/x");
  EXPECT_EQ(cut["code"], "UNAVAILABLE") << cut;
  EXPECT_TRUE(cut["answered"]);  // the head arrived: the upstream got the request
  EXPECT_EQ(cut["status"], 200);
  EXPECT_EQ(cut["idle"], 0);
}

// An answer with more header fields than HeaderMap::kMaxFields is an error for both clients.
TEST(AsyncClientTest, AnAnswerWithTooManyHeaderFieldsFails) {
  std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n";
  for (size_t i = 0; i < HeaderMap::kMaxFields; ++i) head += "x" + std::to_string(i) + ": 1\r\n";
  RawUpstream many(head + "\r\n{}");
  Proxy proxy([&] { return many.host_port(); }, {});
  json got = proxy.Get("/x");
  EXPECT_EQ(got["code"], "UNAVAILABLE") << got;
  EXPECT_EQ(got["idle"], 0);  // the connection is not kept

  StatusOr<ClientResponse> blocking = Client("http://" + many.host_port()).Send("GET", "/x");
  EXPECT_EQ(blocking.status().code(), StatusCode::kUnavailable) << blocking.status();
  EXPECT_NE(blocking.status().message().find("more than 256 header fields"), std::string::npos) << blocking.status();
}

// A keep-alive exchange for RawUpstream: on each request of the connection it plays the next
// script (pieces of bytes, each after a delay), then waits for the client to close.
using Script = std::vector<std::pair<std::chrono::milliseconds, std::string>>;
std::function<void(int)> Scripted(std::vector<Script> scripts) {
  return [scripts = std::move(scripts)](int c) {
    char buf[4096];
    for (const Script& script : scripts) {
      if (::read(c, buf, sizeof buf) <= 0) return;
      for (const auto& [delay, bytes] : script) {
        std::this_thread::sleep_for(delay);
        (void)!::write(c, bytes.data(), bytes.size());
      }
    }
    (void)!::read(c, buf, sizeof buf);  // until the client closes
  };
}

std::string Ok(std::string_view body) {
  return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
}

// On a new connection (the first request): an interim 100 is skipped for the final answer.
TEST(AsyncClientTest, NewConnectionSkipsInterimAnswers) {
  using std::chrono::milliseconds;
  RawUpstream up(Scripted({
      {{milliseconds(0), "HTTP/1.1 100 Continue\r\n\r\n"}, {milliseconds(50), Ok("final")}},
      {{milliseconds(0), Ok("next")}},
  }));
  Proxy proxy([&] { return up.host_port(); }, {});
  json first = proxy.Get("/1");
  EXPECT_EQ(first["code"], "OK") << first;
  EXPECT_EQ(first["status"], 200);
  EXPECT_EQ(first["body"], "final");
  EXPECT_FALSE(first["reused"]);
  json second = proxy.Get("/2");
  EXPECT_EQ(second["body"], "next") << second;
  EXPECT_TRUE(second["reused"]);
}

// Over a pooled connection: an interim 100 is skipped (the final answer follows and the
// connection stays in step for the next request), and the timeout is counted once for the head
// and again for the body, as on a new connection.
TEST(AsyncClientTest, PooledExchangeSkipsInterimAnswersAndTimesHeadAndBodyApart) {
  using std::chrono::milliseconds;
  RawUpstream up(Scripted({
      {{milliseconds(0), Ok("first")}},
      {{milliseconds(0), "HTTP/1.1 100 Continue\r\n\r\n"}, {milliseconds(50), Ok("second")}},
      {{milliseconds(0), Ok("third")}},
      {{milliseconds(250), "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n"}, {milliseconds(250), "late"}},
      {{milliseconds(450), Ok("too late")}},
  }));
  Proxy proxy([&] { return up.host_port(); }, {.timeout = milliseconds(400)});
  json first = proxy.Get("/1");
  EXPECT_EQ(first["body"], "first") << first;
  EXPECT_FALSE(first["reused"]);
  json second = proxy.Get("/2");
  EXPECT_EQ(second["code"], "OK") << second;
  EXPECT_EQ(second["status"], 200);
  EXPECT_EQ(second["body"], "second");
  EXPECT_TRUE(second["reused"]);
  json third = proxy.Get("/3");
  EXPECT_EQ(third["body"], "third") << third;
  json slow_body = proxy.Get("/4");  // head after 250 ms, body 250 ms later: 500 ms in all
  EXPECT_EQ(slow_body["code"], "OK") << slow_body;
  EXPECT_EQ(slow_body["body"], "late");
  json slow_head = proxy.Get("/5");  // no head within 400 ms
  EXPECT_EQ(slow_head["code"], "DEADLINE_EXCEEDED") << slow_head;
  EXPECT_FALSE(slow_head["answered"]);
}

// A request body larger than the socket buffer, over a pooled connection to an upstream that
// waits before reading: what the first write left goes out asynchronously, from where it stopped.
TEST(AsyncClientTest, LargeRequestBodyOverAPooledConnectionArrivesWhole) {
  constexpr size_t kSize = 6 << 20;
  std::string sent(kSize, '\0');
  for (size_t i = 0; i < kSize; ++i) sent[i] = static_cast<char>('a' + (i * 7 + i / 26) % 26);
  RawUpstream up([&](int c) {
    std::string in;
    char buf[1 << 16];
    for (int request = 0;; ++request) {
      size_t end;
      while ((end = in.find("\r\n\r\n")) == std::string::npos) {
        ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) return;
        in.append(buf, static_cast<size_t>(n));
      }
      size_t length = 0;
      if (size_t at = in.find("Content-Length: "); at != std::string::npos && at < end) length = std::stoul(in.substr(at + 16));
      if (request == 1) std::this_thread::sleep_for(300ms);  // the client fills the socket buffer first
      while (in.size() < end + 4 + length) {
        ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) return;
        in.append(buf, static_cast<size_t>(n));
      }
      const std::string body = in.substr(end + 4, length);
      in.erase(0, end + 4 + length);
      const std::string ok = Ok(std::to_string(body.size()) + (body == sent ? " same" : " differs"));
      (void)!::write(c, ok.data(), ok.size());
    }
  });
  Proxy proxy([&] { return up.host_port(); }, {.timeout = std::chrono::milliseconds(10000)});
  EXPECT_EQ(proxy.Get("/small")["body"], "0 differs");  // pools the connection
  StatusOr<ClientResponse> r = Client(Url(*proxy.server)).Send("POST", "/large", sent);
  ASSERT_TRUE(r.ok()) << r.status();
  const json answer = json::parse(r->body);
  EXPECT_TRUE(answer["reused"]) << answer;
  EXPECT_EQ(answer["body"], std::to_string(kSize) + " same") << answer;
}

// The request as the upstream reads it, on a new connection and on a pooled one: request line,
// Host, User-Agent, the caller's fields less Host and framing and any that could split the head,
// Content-Type and Content-Length for a body. A target that cannot be written is refused before
// anything is sent.
TEST(AsyncClientTest, WritesTheRequestHeadExactly) {
  std::mutex mu;
  std::vector<std::string> seen;
  RawUpstream up([&](int c) {
    char buf[4096];
    for (ssize_t n; (n = ::read(c, buf, sizeof buf)) > 0;) {
      {
        std::lock_guard<std::mutex> lock(mu);
        seen.emplace_back(buf, static_cast<size_t>(n));
      }
      const std::string ok = Ok("x");
      (void)!::write(c, ok.data(), ok.size());
    }
  });
  Proxy proxy([&] { return up.host_port(); }, {});
  proxy.headers = {{"x-test", "1"}, {"X-Split", "a\r\nX-Injected: 1"}, {"Host", "evil"}, {"content-length", "99"}};
  EXPECT_EQ(proxy.Get("/first?a=1")["body"], "x");
  json pooled = proxy.Get("/second");
  EXPECT_TRUE(pooled["reused"]) << pooled;
  StatusOr<ClientResponse> posted = Client(Url(*proxy.server)).Send("POST", "/third", "{}");
  ASSERT_TRUE(posted.ok()) << posted.status();
  const std::string host = "Host: " + up.host_port() + "\r\nUser-Agent: aicloud-http\r\nx-test: 1\r\n";
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(seen[0], "GET /first?a=1 HTTP/1.1\r\n" + host + "\r\n");
    EXPECT_EQ(seen[1], "GET /second HTTP/1.1\r\n" + host + "\r\n");
    EXPECT_EQ(seen[2], "POST /third HTTP/1.1\r\n" + host +
                           "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
  }
  proxy.target_override = "/a b";
  json refused = proxy.Get("/x");
  EXPECT_EQ(refused["code"], "INVALID_ARGUMENT") << refused;
  EXPECT_NE(refused["message"].get<std::string>().find("bad request target"), std::string::npos) << refused;
  EXPECT_FALSE(refused["answered"]);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(seen.size(), 3u);  // nothing was sent
}

// ---- AsyncClient over TLS ------------------------------------------------------------------

// Upstreams serving HTTPS with certificates made by the openssl CLI once for the suite: one for
// 127.0.0.1, another for 127.0.0.1 with another key (a CA the client does not trust), and one
// naming 10.9.9.9 only (trusted, but not the host dialled).
class AsyncTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("command -v openssl >/dev/null 2>&1") != 0) return;
    dir_ = std::filesystem::temp_directory_path() / ("aicloud-async-tls-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    auto make = [](const std::string& name, const std::string& san) {
      std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout " +
                        (dir_ / (name + "-key.pem")).string() + " -out " + (dir_ / (name + ".pem")).string() +
                        " -days 1 -subj /CN=replica -addext subjectAltName=" + san + " >/dev/null 2>&1";
      return std::system(cmd.c_str()) == 0;
    };
    ready_ = make("server", "IP:127.0.0.1") && make("other", "IP:127.0.0.1") && make("elsewhere", "IP:10.9.9.9");
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  void SetUp() override {
    ASSERT_TRUE(ready_) << "the openssl CLI (scripts/setup installs it) makes the test's certificates";
    router_.Add("GET", "/who", [](Request& req) { return Response::Text(200, req.remote); });
    router_.Add("POST", "/echo", [](Request& req) { return Response::Text(200, req.body); });
  }
  static std::string F(const std::string& name) { return (dir_ / name).string(); }
  static std::string Read(const std::string& name) {
    std::ifstream in(F(name));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::unique_ptr<Server> StartTls(const std::string& name) {
    return StartBlocking([this](Request& req) { return router_.Dispatch(req); },
                         {.tls_cert_file = F(name + ".pem"), .tls_key_file = F(name + "-key.pem")});
  }
  static std::shared_ptr<const TlsTrust> Trust(const std::string& name) {
    StatusOr<std::shared_ptr<const TlsTrust>> t = TlsTrust::ForCaPem(Read(name + ".pem"));
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : nullptr;
  }

  static inline std::filesystem::path dir_;
  static inline bool ready_ = false;
  Router router_;
};

TEST_F(AsyncTlsTest, AnswersOverHttpsAndReusesThePooledSession) {
  auto up = StartTls("server");
  ASSERT_TRUE(up);
  Proxy proxy([&] { return HostPort(*up); }, {});
  proxy.tls = Trust("server");
  std::set<std::string> remotes;
  for (int i = 0; i < 4; ++i) {
    json r = proxy.Get("/who");
    ASSERT_EQ(r["code"], "OK") << r;
    EXPECT_EQ(r["status"], 200);
    EXPECT_EQ(r["reused"], i > 0) << i;
    EXPECT_EQ(r["idle"], 1);  // pooled apart from plain connections to the same address
    remotes.insert(r["body"].get<std::string>());
  }
  EXPECT_EQ(remotes.size(), 1u);  // one TLS connection for all four
  // The same PEM gives the same trust (and so the same pool).
  EXPECT_EQ(Trust("server").get(), proxy.tls.get());
}

TEST_F(AsyncTlsTest, ABodyTravelsWholeBothWays) {
  auto up = StartTls("server");
  ASSERT_TRUE(up);
  Proxy proxy([&] { return HostPort(*up); }, {});
  proxy.tls = Trust("server");
  proxy.method_override = "POST";
  proxy.target_override = "/echo";
  std::string big(300 * 1024, 'x');
  for (size_t i = 0; i < big.size(); i += 97) big[i] = static_cast<char>('a' + i % 26);
  StatusOr<ClientResponse> direct = Client("https://" + HostPort(*up), {.ca_pem = Read("server.pem"), .timeout = 5000ms})
                                        .Send("POST", "/echo", big, {{"content-type", "text/plain"}});
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(direct->body, big);
  StatusOr<ClientResponse> r = Client(Url(*proxy.server)).Send("POST", "/any", big, {{"content-type", "text/plain"}});
  ASSERT_TRUE(r.ok()) << r.status();
  json j = json::parse(r->body);
  EXPECT_EQ(j["code"], "OK") << j["message"];
  EXPECT_EQ(j["body"], big);
}

TEST_F(AsyncTlsTest, AnUntrustedOrMisnamedCertificateIsAConnectionFailure) {
  auto untrusted = StartTls("other");
  auto misnamed = StartTls("elsewhere");
  ASSERT_TRUE(untrusted && misnamed);
  Proxy proxy([&] { return HostPort(*untrusted); }, {});
  proxy.tls = Trust("server");
  json r = proxy.Get("/who");
  EXPECT_EQ(r["code"], "UNAVAILABLE") << r;
  EXPECT_FALSE(r["answered"]);
  EXPECT_NE(r["message"].get<std::string>().find("TLS handshake"), std::string::npos) << r;
  EXPECT_EQ(r["idle"], 0);

  Proxy named([&] { return HostPort(*misnamed); }, {});
  named.tls = Trust("elsewhere");  // trusted, but it names 10.9.9.9, not 127.0.0.1
  r = named.Get("/who");
  EXPECT_EQ(r["code"], "UNAVAILABLE") << r;
  EXPECT_NE(r["message"].get<std::string>().find("TLS handshake"), std::string::npos) << r;

  // Plain HTTP to a TLS upstream is not an answer either (no silent change of scheme).
  Proxy plain([&] { return HostPort(*untrusted); }, {.timeout = 2000ms});
  r = plain.Get("/who");
  EXPECT_NE(r["code"], "OK") << r;
}

TEST(TlsTrustTest, RefusesTextWithoutACertificate) {
  StatusOr<std::shared_ptr<const TlsTrust>> t = TlsTrust::ForCaPem("not a certificate");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  t = TlsTrust::ForCaPem("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace aicloud::http
