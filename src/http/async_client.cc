#include "http/async_client.h"

#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "http/asio.h"

// Shape: each exchange is one coroutine on the strand of its connection (a pooled connection
// keeps the strand it was made on; with one loop thread the "strand" is the loop itself), so the stream, its timer and the callback never run
// concurrently even when the loop has several threads. Idle connections live in an Asio service
// of the loop (ConnectionPool): they are closed when the loop is destroyed, after the server's
// own sockets, and no client object has to outlive the loop.

namespace aicloud::http {
namespace {

using asio::awaitable;
using asio::use_awaitable;

inline auto Redirect(error_code& ec) { return asio::redirect_error(use_awaitable, ec); }

Status DeadlineExceeded(std::string m) { return Status(StatusCode::kDeadlineExceeded, std::move(m)); }

// One upstream connection and what was read past the last response (nothing, with HTTP/1.1
// and no pipelining, but the parser needs a buffer that lives as long as the stream).
struct Conn {
  explicit Conn(const asio::any_io_executor& ex) : stream(ex) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
};

class ConnectionPool final : public asio::execution_context::service {
 public:
  static asio::execution_context::id id;

  explicit ConnectionPool(asio::execution_context& ctx) : service(ctx) {}

  std::unique_ptr<Conn> Take(std::string_view upstream) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = idle_.find(upstream);
    if (it == idle_.end() || it->second.empty()) return nullptr;
    std::unique_ptr<Conn> c = std::move(it->second.back());
    it->second.pop_back();
    return c;
  }

  void Put(std::string_view upstream, std::unique_ptr<Conn> c, size_t max_idle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = idle_.find(upstream);
    if (it == idle_.end()) it = idle_.emplace(std::string(upstream), std::vector<std::unique_ptr<Conn>>()).first;
    if (it->second.size() < max_idle) it->second.push_back(std::move(c));
  }

  size_t Idle(std::string_view upstream) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = idle_.find(upstream);
    return it == idle_.end() ? 0 : it->second.size();
  }

 private:
  void shutdown() override {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.clear();
  }

  std::mutex mu_;
  std::map<std::string, std::vector<std::unique_ptr<Conn>>, std::less<>> idle_;  // GUARDED_BY(mu_)
};

asio::execution_context::id ConnectionPool::id;

// "host:port" or "[v6]:port" -> host, port; false when malformed.
bool SplitHostPort(std::string_view upstream, std::string* host, std::string* port) {
  size_t colon;
  if (upstream.starts_with("[")) {
    size_t close = upstream.find(']');
    if (close == std::string_view::npos || close + 1 >= upstream.size() || upstream[close + 1] != ':') return false;
    *host = std::string(upstream.substr(1, close - 1));
    colon = close + 1;
  } else {
    colon = upstream.rfind(':');
    if (colon == std::string_view::npos) return false;
    *host = std::string(upstream.substr(0, colon));
  }
  *port = std::string(upstream.substr(colon + 1));
  if (host->empty() || port->empty() || port->size() > 5) return false;
  for (char c : *port) {
    if (c < '0' || c > '9') return false;
  }
  return std::stoi(*port) <= 65535;
}

// Everything one exchange needs; owned by its coroutine.
struct Exchange {
  ConnectionPool* pool;
  std::string upstream, host, port;
  bhttp::request<bhttp::string_body> request;
  std::chrono::milliseconds timeout;
  size_t max_idle;
  AsyncClient::Callback done;
  std::unique_ptr<Conn> conn;  // from the pool, or null
};

std::string What(const Exchange& x) {
  return "http client: " + std::string(x.request.method_string()) + " " + x.host + ":" + x.port +
         std::string(x.request.target());
}

// Connects `c` to the upstream; the error in the synchronous Client's words.
awaitable<Status> Connect(Exchange& x, Conn& c, std::chrono::steady_clock::time_point deadline) {
  const std::string where = x.host + ":" + x.port;
  error_code ec;
  std::vector<tcp::endpoint> endpoints;
  asio::ip::address addr = asio::ip::make_address(x.host, ec);
  if (!ec) {
    endpoints.emplace_back(addr, static_cast<unsigned short>(std::stoi(x.port)));
  } else {
    tcp::resolver resolver(c.stream.get_executor());
    tcp::resolver::results_type results = co_await resolver.async_resolve(x.host, x.port, Redirect(ec));
    if (ec) co_return UnavailableError("http client: cannot resolve " + where + ": " + ec.message());
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  }
  c.stream.expires_at(deadline);
  co_await c.stream.async_connect(endpoints, Redirect(ec));
  if (ec) {
    if (ec == beast::error::timeout) co_return DeadlineExceeded("http client: connect to " + where + " timed out");
    co_return UnavailableError("http client: cannot connect to " + where + ": " + ec.message());
  }
  c.stream.socket().set_option(tcp::no_delay(true), ec);
  co_return OkStatus();
}

awaitable<void> Run(std::shared_ptr<Exchange> x) {
  const auto deadline = std::chrono::steady_clock::now() + x->timeout;
  AsyncResult result;
  std::unique_ptr<Conn> conn = std::move(x->conn);
  for (int attempt = 0;; ++attempt) {
    const bool reused = conn != nullptr;
    if (!conn) {
      // A retry keeps the strand this coroutine runs on.
      conn = std::make_unique<Conn>(co_await asio::this_coro::executor);
      result.status = co_await Connect(*x, *conn, deadline);
      if (!result.status.ok()) break;
    }
    conn->stream.expires_at(deadline);
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    error_code ec;
    co_await bhttp::async_write(conn->stream, x->request, Redirect(ec));
    if (!ec) co_await bhttp::async_read_header(conn->stream, conn->buffer, parser, Redirect(ec));
    if (!ec) {
      result.response.status = static_cast<int>(parser.get().result_int());
      result.response.headers = HeadersOf(parser.get());
      if (!parser.is_done()) {
        conn->stream.expires_after(x->timeout);
        co_await bhttp::async_read(conn->stream, conn->buffer, parser, Redirect(ec));
      }
      result.response.body = std::move(parser.get().body());
    }
    result.reused = reused;
    if (ec) {
      conn->stream.close();
      conn.reset();
      // A kept-alive connection the upstream closed meanwhile: once more on a new one.
      if (reused && attempt == 0 && !parser.got_some() && ec != beast::error::timeout) {
        result = AsyncResult();
        continue;
      }
      result.status = ec == beast::error::timeout
                          ? DeadlineExceeded(What(*x) + ": timed out after " + std::to_string(x->timeout.count()) + " ms")
                          : UnavailableError(What(*x) + ": " + ec.message());
      break;
    }
    conn->stream.expires_never();
    if (parser.get().keep_alive()) {
      x->pool->Put(x->upstream, std::move(conn), x->max_idle);
    } else {
      conn->stream.close();
    }
    break;
  }
  if (conn) conn->stream.close();
  AsyncClient::Callback done = std::move(x->done);
  x.reset();
  try {
    done(std::move(result));
  } catch (...) {
    // A callback must not throw (see the header); an exception here would end the I/O thread.
  }
}

}  // namespace

void AsyncClient::Send(EventLoop& loop, std::string_view upstream, std::string_view method, std::string_view target,
                       std::string body, const Headers& headers, Callback done) const {
  auto x = std::make_shared<Exchange>();
  x->pool = &asio::use_service<ConnectionPool>(loop);
  x->upstream = std::string(upstream);
  x->timeout = opts_.timeout;
  x->max_idle = opts_.max_idle_per_upstream;
  x->done = std::move(done);
  if (!SplitHostPort(upstream, &x->host, &x->port)) {
    AsyncResult r;
    r.status = InvalidArgumentError("http client: bad upstream \"" + std::string(upstream) + "\": want host:port");
    asio::post(loop, [done = std::move(x->done), r = std::move(r)]() mutable { done(std::move(r)); });
    return;
  }
  auto& req = x->request;
  req.version(11);
  req.method_string(Bv(method));
  req.target(Bv(target));
  const bool bracket = x->host.find(':') != std::string::npos;
  std::string host_header = bracket ? "[" + x->host + "]" : x->host;
  if (x->port != "80") host_header += ":" + x->port;
  req.set(bhttp::field::host, host_header);
  req.set(bhttp::field::user_agent, "aicloud-http");
  for (const auto& [name, value] : headers) req.insert(name, value);
  if (!body.empty() && req.find(bhttp::field::content_type) == req.end()) {
    req.set(bhttp::field::content_type, "application/json");
  }
  req.body() = std::move(body);
  if (!req.body().empty() || method == "POST" || method == "PUT" || method == "PATCH") req.prepare_payload();
  x->conn = x->pool->Take(upstream);
  asio::any_io_executor ex = x->conn ? x->conn->stream.get_executor() : loop.ConnectionExecutor();
  asio::co_spawn(ex, Run(std::move(x)), asio::detached);
}

size_t AsyncClient::IdleConnections(EventLoop& loop, std::string_view upstream) {
  return asio::use_service<ConnectionPool>(loop).Idle(upstream);
}

}  // namespace aicloud::http
