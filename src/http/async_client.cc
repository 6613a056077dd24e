#include "http/async_client.h"

#include <array>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "http/asio.h"
#include "http/whole_message.h"
#include "http/wire.h"

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

// Bytes asked of the socket per read of an answer.
constexpr size_t kReadChunk = 16 * 1024;

// Beast's response parser writing straight into a ClientResponse: status, headers (names
// lower-cased, repeats joined with ", ") and body, with no Beast fields container in between.
class ResponseReader final : public ParserInto<false> {
 public:
  // An answer to HEAD has no body, whatever its Content-Length says. Up to 16 MiB of an
  // announced body is reserved up front.
  ResponseReader(ClientResponse& out, bool head) : ParserInto(out.headers, out.body, size_t{16} << 20) {
    body_limit(std::numeric_limits<std::uint64_t>::max());
    if (head) skip(true);
  }
  int status() const { return status_; }

 private:
  void on_request_impl(bhttp::verb, beast::string_view, beast::string_view, int, error_code&) override {}
  void on_response_impl(int code, beast::string_view, int, error_code&) override { status_ = code; }

  int status_ = 0;
};

// One upstream connection and what was read past the last response (nothing, with HTTP/1.1
// and no pipelining, but the parser needs a buffer that lives as long as the stream).
//
// A pooled exchange is bounded by the connection's one timer, re-armed lazily as the server's
// idle bound is: an exchange sets `bound_until` (a clock read), ending it resets it, and the
// timer, when it fires, closes the socket if the bound passed or sleeps again until the next
// one. So an exchange costs no timer operation and leaves no cancelled wait behind to run —
// unless its bound is earlier than the one armed (a client with a shorter timeout took the
// connection from the loop's pool), which re-arms at once. An idle pooled connection's timer
// may stay armed up to one timeout after its last exchange (loops are stopped, not drained).
//
// A connection to an HTTPS upstream carries its TLS stream in `tls` (over a TCP stream of its
// own; `stream` then stays unopened) and is driven only by Run, never by PooledExchange.
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

struct Conn : std::enable_shared_from_this<Conn> {
  using Clock = std::chrono::steady_clock;
  explicit Conn(const asio::any_io_executor& ex) : stream(ex), bound(ex) {}
  Conn(const asio::any_io_executor& ex, std::shared_ptr<const TlsTrust> t)
      : stream(ex), tls(std::make_unique<TlsStream>(ex, t->context().ssl)), trust(std::move(t)), bound(ex) {}

  // The TCP stream the bytes travel on (timeouts, closing).
  beast::tcp_stream& Tcp() { return tls ? beast::get_lowest_layer(*tls) : stream; }

  // The exchange starting now must end within `timeout`, or its socket is closed (timed_out).
  void Bound(std::chrono::milliseconds timeout) {
    bound_until = Clock::now() + timeout;
    timed_out = false;
    if (!bound_armed || bound_until < armed_at) ArmBound();
  }
  // The exchange ended: nothing to bound until the next one.
  void Unbound() { bound_until = Clock::time_point::max(); }

  beast::tcp_stream stream;
  std::unique_ptr<TlsStream> tls;            // HTTPS upstreams only
  std::shared_ptr<const TlsTrust> trust;     // keeps tls's context alive
  beast::flat_buffer buffer;
  std::string host_header;  // the Host header for its upstream (pooled exchanges skip parsing it)
  bool timed_out = false;   // the bound passed and the socket was closed

 private:
  void ArmBound() {
    bound_armed = true;
    armed_at = bound_until;
    const uint64_t gen = ++armed_gen;
    bound.expires_at(bound_until);  // cancels a wait armed before: its handler sees an old gen
    bound.async_wait([weak = weak_from_this(), gen](error_code ec) {
      std::shared_ptr<Conn> c = weak.lock();
      if (!c || gen != c->armed_gen) return;  // the connection is gone, or this wait was replaced
      c->bound_armed = false;
      if (ec || c->bound_until == Clock::time_point::max()) return;  // idle: armed by the next exchange
      if (Clock::now() < c->bound_until) return c->ArmBound();        // moved on meanwhile
      c->timed_out = true;
      error_code ignored;
      c->stream.socket().close(ignored);
    });
  }

  asio::steady_timer bound;
  Clock::time_point bound_until = Clock::time_point::max();
  Clock::time_point armed_at = Clock::time_point::max();  // when the armed wait ends
  uint64_t armed_gen = 0;                                 // which wait is the armed one
  bool bound_armed = false;
};

class ConnectionPool final : public asio::execution_context::service {
 public:
  static asio::execution_context::id id;

  explicit ConnectionPool(asio::execution_context& ctx) : service(ctx) {}

  std::shared_ptr<Conn> Take(std::string_view upstream) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = idle_.find(upstream);
    if (it == idle_.end() || it->second.empty()) return nullptr;
    std::shared_ptr<Conn> c = std::move(it->second.back());
    it->second.pop_back();
    return c;
  }

  void Put(std::string_view upstream, std::shared_ptr<Conn> c, size_t max_idle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = idle_.find(upstream);
    if (it == idle_.end()) it = idle_.emplace(std::string(upstream), std::vector<std::shared_ptr<Conn>>()).first;
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
  std::map<std::string, std::vector<std::shared_ptr<Conn>>, std::less<>> idle_;  // GUARDED_BY(mu_)
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
  std::string upstream, host, port;  // host and port: parsed for a new connection only
  std::shared_ptr<const TlsTrust> tls;  // null: plain HTTP
  std::string tls_key;                  // the pool key of an HTTPS upstream (PoolKey)
  std::string host_header;           // likewise
  std::string method, target;
  std::string head;  // the request's head as written (wire.h)
  std::shared_ptr<const std::string> body;  // never null
  std::chrono::milliseconds timeout;
  size_t max_idle;
  AsyncClient::Callback done;
  std::shared_ptr<Conn> conn;  // from the pool, or null
  // On the exchange's executor: the stream in use (closed by a cancellation) and whether the
  // caller's cancel signal was raised.
  beast::tcp_stream* active = nullptr;
  bool cancelled = false;
};

Status Cancelled(const Exchange& x);

// HTTPS connections are pooled apart from plain ones to the same address, and per trust (a
// connection verified against one CA set is never lent to a caller that trusts another).
std::string TlsPoolKey(std::string_view upstream, const TlsTrust* tls) {
  return "https://" + std::string(upstream) + "#" + std::to_string(reinterpret_cast<uintptr_t>(tls));
}
const std::string& PoolKey(const Exchange& x) { return x.tls ? x.tls_key : x.upstream; }

// Fills x.host, x.port and x.host_header from x.upstream; false when it is malformed.
bool ParseUpstream(Exchange& x) {
  if (!SplitHostPort(x.upstream, &x.host, &x.port)) return false;
  const bool bracket = x.host.find(':') != std::string::npos;
  x.host_header = bracket ? "[" + x.host + "]" : x.host;
  if (x.port != (x.tls ? "443" : "80")) x.host_header += ":" + x.port;
  return true;
}

Status BadUpstream(std::string_view upstream) {
  return InvalidArgumentError("http client: bad upstream \"" + std::string(upstream) + "\": want host:port");
}

std::string What(const Exchange& x) { return "http client: " + x.method + " " + x.upstream + x.target; }

Status Cancelled(const Exchange& x) { return Status(StatusCode::kCancelled, What(x) + ": cancelled"); }

// Raising `cancel` closes the exchange's stream on its executor (the pending operation ends
// with an error, which the exchange then reports as CANCELLED).
void CloseOnCancel(CancelSignal& cancel, const std::shared_ptr<Exchange>& x, asio::any_io_executor ex) {
  cancel.OnCancel([weak = std::weak_ptr<Exchange>(x), ex] {
    asio::post(ex, [weak] {
      std::shared_ptr<Exchange> live = weak.lock();
      if (!live) return;  // already delivered
      live->cancelled = true;
      error_code ignored;
      if (live->active) live->active->socket().close(ignored);
    });
  });
}

std::array<asio::const_buffer, 2> RequestBuffers(const Exchange& x) {
  return {asio::buffer(x.head), asio::buffer(*x.body)};
}

// Connects `c` to the upstream; the error in the synchronous Client's words.
awaitable<Status> Connect(Exchange& x, Conn& c, std::chrono::steady_clock::time_point deadline) {
  const std::string where = x.host + ":" + x.port;
  error_code ec;
  std::vector<tcp::endpoint> endpoints;
  asio::ip::address addr = asio::ip::make_address(x.host, ec);
  const bool is_ip = !ec;
  if (is_ip) {
    endpoints.emplace_back(addr, static_cast<unsigned short>(std::stoi(x.port)));
  } else {
    tcp::resolver resolver(c.Tcp().get_executor());
    tcp::resolver::results_type results = co_await resolver.async_resolve(x.host, x.port, Redirect(ec));
    if (ec) co_return UnavailableError("http client: cannot resolve " + where + ": " + ec.message());
    if (x.cancelled) co_return Cancelled(x);  // closing the not yet opened socket did nothing
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  }
  c.Tcp().expires_at(deadline);
  co_await c.Tcp().async_connect(endpoints, Redirect(ec));
  if (ec) {
    if (ec == beast::error::timeout) co_return DeadlineExceeded("http client: connect to " + where + " timed out");
    co_return UnavailableError("http client: cannot connect to " + where + ": " + ec.message());
  }
  c.Tcp().socket().set_option(tcp::no_delay(true), ec);
  if (c.tls) {
    // The certificate must chain to the trusted CAs and name the host dialled (its IP address or
    // DNS name) in its subjectAltName; a failure is a connection failure, never plain HTTP.
    SSL* ssl = c.tls->native_handle();
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    int set = 0;
    if (!is_ip) {
      SSL_set_tlsext_host_name(ssl, x.host.c_str());
      set = X509_VERIFY_PARAM_set1_host(param, x.host.c_str(), 0);
    } else {
      set = X509_VERIFY_PARAM_set1_ip_asc(param, x.host.c_str());
    }
    if (set != 1) co_return InvalidArgumentError("http client: cannot verify TLS peer name " + x.host);
    c.tls->set_verify_mode(asio::ssl::verify_peer);
    co_await c.tls->async_handshake(asio::ssl::stream_base::client, Redirect(ec));
    if (x.cancelled) co_return Cancelled(x);
    if (ec) {
      if (ec == beast::error::timeout) co_return DeadlineExceeded("http client: TLS handshake with " + where + " timed out");
      co_return UnavailableError("http client: TLS handshake with " + where + " failed: " + ec.message());
    }
  }
  co_return OkStatus();
}

awaitable<void> Run(std::shared_ptr<Exchange> x) {
  const auto deadline = std::chrono::steady_clock::now() + x->timeout;
  AsyncResult result;
  std::shared_ptr<Conn> conn = std::move(x->conn);
  for (int attempt = 0;; ++attempt) {
    if (x->cancelled) {
      result = AsyncResult();
      result.status = Cancelled(*x);
      break;
    }
    const bool reused = conn != nullptr;
    if (!conn) {
      // (After a pooled exchange, the upstream was not parsed yet.)
      if (x->host.empty() && !ParseUpstream(*x)) {
        result.status = BadUpstream(x->upstream);
        break;
      }
      // A retry keeps the strand this coroutine runs on.
      asio::any_io_executor ex = co_await asio::this_coro::executor;
      conn = x->tls ? std::make_shared<Conn>(ex, x->tls) : std::make_shared<Conn>(ex);
      x->active = &conn->Tcp();
      result.status = co_await Connect(*x, *conn, deadline);
      if (x->cancelled) result.status = Cancelled(*x);
      if (!result.status.ok()) break;
      conn->host_header = x->host_header;
    }
    x->active = &conn->Tcp();
    conn->Tcp().expires_at(deadline);
    ClientResponse got;
    std::optional<ResponseReader> parser_slot;
    auto fresh_parser = [&]() -> ResponseReader& {
      got = ClientResponse();
      parser_slot.emplace(got, x->method == "HEAD");
      return *parser_slot;
    };
    ResponseReader* p = &fresh_parser();
    bool interim = false;  // an interim (1xx) answer came: the upstream has the request
    error_code ec;
    if (conn->tls) {
      // Head and body apart: a two-buffer write of a large body stalled over Beast 1.74's
      // ssl_stream (async_test: ABodyTravelsWholeBothWays).
      co_await asio::async_write(*conn->tls, asio::buffer(x->head), Redirect(ec));
      if (!ec && !x->body->empty()) co_await asio::async_write(*conn->tls, asio::buffer(*x->body), Redirect(ec));
      if (!ec) co_await bhttp::async_read_header(*conn->tls, conn->buffer, *p, Redirect(ec));
    } else {
      co_await asio::async_write(conn->stream, RequestBuffers(*x), Redirect(ec));
      if (!ec) co_await bhttp::async_read_header(conn->stream, conn->buffer, *p, Redirect(ec));
    }
    // Interim answers are skipped for the final one, which follows on the same connection.
    while (!ec && p->status() / 100 == 1) {
      interim = true;
      p = &fresh_parser();
      if (conn->tls) {
        co_await bhttp::async_read_header(*conn->tls, conn->buffer, *p, Redirect(ec));
      } else {
        co_await bhttp::async_read_header(conn->stream, conn->buffer, *p, Redirect(ec));
      }
    }
    ResponseReader& parser = *p;
    if (!ec) {
      result.response.status = parser.status();
      if (!parser.is_done()) {
        conn->Tcp().expires_after(x->timeout);
        // Room for large pieces (Beast reads the buffer's spare capacity, 512 bytes when none).
        if (conn->buffer.capacity() - conn->buffer.size() < kReadChunk) conn->buffer.reserve(conn->buffer.size() + kReadChunk);
        if (conn->tls) {
          co_await bhttp::async_read(*conn->tls, conn->buffer, parser, Redirect(ec));
        } else {
          co_await bhttp::async_read(conn->stream, conn->buffer, parser, Redirect(ec));
        }
      }
      result.response.headers = std::move(got.headers);
      result.response.body = std::move(got.body);
    }
    result.reused = reused;
    if (ec) {
      conn->Tcp().close();
      x->active = nullptr;
      conn.reset();
      // A kept-alive connection the upstream closed meanwhile: once more on a new one.
      if (reused && attempt == 0 && !interim && !parser.got_some() && ec != beast::error::timeout && !x->cancelled) {
        result = AsyncResult();
        continue;
      }
      result.status = x->cancelled ? Cancelled(*x)
                      : ec == beast::error::timeout
                          ? DeadlineExceeded(What(*x) + ": timed out after " + std::to_string(x->timeout.count()) + " ms")
                          : UnavailableError(What(*x) + ": " + ec.message());
      break;
    }
    conn->Tcp().expires_never();
    x->active = nullptr;
    if (parser.keep_alive()) {
      x->pool->Put(PoolKey(*x), std::move(conn), x->max_idle);
    } else {
      conn->Tcp().close();
    }
    break;
  }
  if (conn) conn->Tcp().close();
  x->active = nullptr;
  AsyncClient::Callback done = std::move(x->done);
  x.reset();
  try {
    done(std::move(result));
  } catch (...) {
    // A callback must not throw (see the header); an exception here would end the I/O thread.
  }
}

// The exchange over a pooled connection, without a coroutine or Beast's composed operations:
// the request is written with a synchronous non-blocking write (a small request fits the socket
// buffer, so there is no completion to wait for), and the response is read with plain
// async_read_some and fed to Beast's parser. The connection's timer bounds the exchange
// (Conn::Bound). A pooled connection the upstream closed before answering falls back to Run on
// a new connection, as Run itself does. Everything after Start runs on the connection's
// executor.
class PooledExchange : public std::enable_shared_from_this<PooledExchange> {
 public:
  explicit PooledExchange(std::shared_ptr<Exchange> x)
      : x_(std::move(x)), conn_(std::move(x_->conn)), ex_(conn_->stream.get_executor()) {}

  void Start() {
    if (x_->cancelled) {
      x_->pool->Put(x_->upstream, std::move(conn_), x_->max_idle);  // unused: still good
      AsyncResult result;
      result.status = Cancelled(*x_);
      return Deliver(std::move(result));
    }
    x_->active = &conn_->stream;
    tcp::socket& socket = conn_->stream.socket();
    error_code ec;
    // Synchronous writes answer would_block instead of waiting (set once: it is an ioctl).
    if (!socket.non_blocking()) socket.non_blocking(true, ec);
    ArmTimer();
    const std::array<asio::const_buffer, 2> request = RequestBuffers(*x_);
    size_t written = 0;
    if (!ec) written = asio::write(socket, request, ec);
    if (ec == asio::error::would_block) {
      beast::buffers_suffix<std::array<asio::const_buffer, 2>> rest(request);
      rest.consume(written);
      asio::async_write(socket, rest, [self = shared_from_this()](error_code e, size_t) {
        if (self->conn_->timed_out) return self->Fail(asio::error::timed_out);
        if (e) return self->Fail(e);
        self->ReadMore();
      });
      return;
    }
    if (ec) return Fail(ec);
    ReadMore();
  }

 private:
  // The exchange's bound, as Run's: request + response head, then again the body. On expiry
  // the connection closes its socket, so an operation whose completion was already queued ends
  // too (its handler checks timed_out as well).
  void ArmTimer() { conn_->Bound(x_->timeout); }

  void NewParser() {
    response_ = ClientResponse();
    parser_.emplace(response_, x_->method == "HEAD");
  }

  void ReadMore() {
    conn_->stream.socket().async_read_some(conn_->buffer.prepare(kReadChunk),
                                           [self = shared_from_this()](error_code e, size_t n) { self->OnRead(e, n); });
  }

  void OnRead(error_code ec, size_t n) {
    if (conn_->timed_out) return Fail(asio::error::timed_out);
    beast::flat_buffer& buf = conn_->buffer;
    buf.commit(n);
    if (!ec && !parser_) {
      // The first bytes of the answer: a whole simply framed answer is taken at once (see
      // whole_message.h); anything else is Beast's parser's, from the same bytes.
      bool keep = false;
      const auto* data = static_cast<const char*>(buf.data().data());
      const size_t used = ReadWholeResponse({data, buf.size()}, x_->method == "HEAD", &response_, &keep);
      if (used > 0) {
        buf.consume(used);
        got_bytes_ = true;
        return Finish(keep);
      }
    }
    if (ec == asio::error::eof) {
      // Parse what came, then let the parser decide whether the close ended the message.
      // (put_eof requires that some bytes came: on a fresh parser it would report a message.)
      error_code e2;
      if (Parse(e2) && parser_->got_some() && !parser_->is_done()) parser_->put_eof(e2);
      if (!e2 && parser_->is_done()) return Finish(/*keep=*/false);
      return Fail(e2 ? e2 : ec);
    }
    if (ec) return Fail(ec);
    if (!Parse(ec)) return Fail(ec);
    if (parser_->is_done()) return Finish(parser_->keep_alive());
    ReadMore();
  }

  // Feeds the buffered bytes to the parser; false with `ec` on a malformed response. An interim
  // (1xx) response is skipped: the final one follows on the same connection.
  bool Parse(error_code& ec) {
    if (!parser_) NewParser();
    beast::flat_buffer& buf = conn_->buffer;
    while (buf.size() > 0 && !parser_->is_done()) {
      const size_t used = parser_->put(buf.data(), ec);
      buf.consume(used);
      if (used > 0) got_bytes_ = true;
      if (ec == bhttp::error::need_more) {
        ec = {};
        break;
      }
      if (ec) return false;
      if (parser_->is_done() && parser_->status() / 100 == 1) {
        NewParser();
        head_seen_ = false;
        continue;
      }
      if (used == 0) break;
    }
    if (!head_seen_ && parser_->is_header_done()) {
      head_seen_ = true;
      if (!parser_->is_done()) ArmTimer();  // the body gets the timeout again, as in Run
    }
    return true;
  }

  void Finish(bool keep) {
    conn_->Unbound();
    x_->active = nullptr;
    AsyncResult result;
    result.reused = true;
    const int status = parser_ ? parser_->status() : response_.status;  // Beast's, or read whole
    result.response = std::move(response_);
    result.response.status = status;
    if (keep && conn_->buffer.size() == 0) {
      x_->pool->Put(x_->upstream, std::move(conn_), x_->max_idle);
    } else {
      error_code ignored;
      conn_->stream.socket().close(ignored);
    }
    Deliver(std::move(result));
  }

  void Fail(error_code ec) {
    conn_->Unbound();
    const bool timed_out = conn_->timed_out;
    x_->active = nullptr;
    error_code ignored;
    conn_->stream.socket().close(ignored);
    if (!timed_out && !x_->cancelled && !got_bytes_ && !(parser_ && parser_->got_some())) {
      // A kept-alive connection the upstream closed meanwhile: once more on a new one.
      x_->conn.reset();
      asio::co_spawn(ex_, Run(std::move(x_)), asio::detached);
      return;
    }
    AsyncResult result;
    result.reused = true;
    if (parser_ && parser_->is_header_done()) {
      result.response = std::move(response_);
      result.response.status = parser_->status();
    }
    result.status = x_->cancelled ? Cancelled(*x_)
                    : timed_out   ? DeadlineExceeded(What(*x_) + ": timed out after " +
                                                  std::to_string(x_->timeout.count()) + " ms")
                               : UnavailableError(What(*x_) + ": " + ec.message());
    Deliver(std::move(result));
  }

  void Deliver(AsyncResult result) {
    AsyncClient::Callback done = std::move(x_->done);
    x_.reset();
    try {
      done(std::move(result));
    } catch (...) {
      // A callback must not throw (see the header); an exception here would end the I/O thread.
    }
  }

  std::shared_ptr<Exchange> x_;
  std::shared_ptr<Conn> conn_;  // until Finish hands it back to the pool
  asio::any_io_executor ex_;     // the connection's
  ClientResponse response_;  // what parser_ read so far
  std::optional<ResponseReader> parser_;  // made when the answer is not read whole
  bool head_seen_ = false;  // the final response's head arrived (the timer was re-armed)
  bool got_bytes_ = false;  // the upstream answered something (an interim response counts)
};

}  // namespace

void AsyncClient::Send(EventLoop& loop, std::string_view upstream, std::string_view method, std::string_view target,
                       std::string body, const Headers& headers, Callback done) const {
  Send(loop, upstream, method, target, std::make_shared<const std::string>(std::move(body)), headers, std::move(done));
}

void AsyncClient::Send(EventLoop& loop, std::string_view upstream, std::string_view method, std::string_view target,
                       std::shared_ptr<const std::string> body, const Headers& headers, Callback done,
                       std::shared_ptr<CancelSignal> cancel, std::shared_ptr<const TlsTrust> tls) const {
  auto x = std::make_shared<Exchange>();
  x->pool = &asio::use_service<ConnectionPool>(loop);
  x->upstream = std::string(upstream);
  if (tls) {
    x->tls_key = TlsPoolKey(upstream, tls.get());
    x->tls = std::move(tls);
  }
  x->timeout = opts_.timeout;
  x->max_idle = opts_.max_idle_per_upstream;
  x->done = std::move(done);
  // A pooled connection knows its Host header; only a new one needs the upstream parsed.
  x->conn = x->pool->Take(PoolKey(*x));
  if (!x->conn && !ParseUpstream(*x)) {
    AsyncResult r;
    r.status = BadUpstream(upstream);
    asio::post(loop, [done = std::move(x->done), r = std::move(r)]() mutable { done(std::move(r)); });
    return;
  }
  x->method = std::string(method);
  x->target = std::string(target);
  std::string error;
  x->head = RequestHeadText({.method = method,
                             .target = target,
                             .host = x->conn ? x->conn->host_header : x->host_header,
                             .headers = &headers,
                             .body_size = body->size(),
                             .send_length = method == "POST" || method == "PUT" || method == "PATCH"},
                            &error);
  if (x->head.empty()) {
    if (x->conn) x->pool->Put(PoolKey(*x), std::move(x->conn), x->max_idle);  // unused: still good
    AsyncResult r;
    r.status = InvalidArgumentError("http client: " + error);
    asio::post(loop, [done = std::move(x->done), r = std::move(r)]() mutable { done(std::move(r)); });
    return;
  }
  x->body = std::move(body);
  if (x->conn && x->conn->tls) {  // HTTPS: Run drives pooled connections too
    asio::any_io_executor ex = x->conn->stream.get_executor();
    if (cancel) CloseOnCancel(*cancel, x, ex);
    asio::co_spawn(ex, Run(std::move(x)), asio::detached);
    return;
  }
  if (x->conn) {
    asio::any_io_executor ex = x->conn->stream.get_executor();
    if (cancel) CloseOnCancel(*cancel, x, ex);
    auto exchange = std::make_shared<PooledExchange>(std::move(x));
    const auto* on = ex.target<asio::io_context::executor_type>();
    if (on != nullptr && on->running_in_this_thread()) return exchange->Start();  // dispatch, unwrapped
    asio::dispatch(ex, [exchange] { exchange->Start(); });
    return;
  }
  asio::any_io_executor ex = loop.ConnectionExecutor();
  if (cancel) CloseOnCancel(*cancel, x, ex);
  asio::co_spawn(ex, Run(std::move(x)), asio::detached);
}

size_t AsyncClient::IdleConnections(EventLoop& loop, std::string_view upstream, const TlsTrust* tls) {
  return asio::use_service<ConnectionPool>(loop).Idle(tls ? TlsPoolKey(upstream, tls) : std::string(upstream));
}

}  // namespace aicloud::http
