#include "http/server.h"

#include <poll.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/thread_name.h"
#include "http/asio.h"
#include "http/whole_message.h"
#include "http/wire.h"

// Shape: one acceptor coroutine on its own strand; one coroutine per connection on that
// connection's strand (with one I/O thread the loop itself: EventLoop::ConnectionExecutor), which reads a request, calls the handler (CallHandler: an AsyncHandler
// inline, a blocking Handler on the worker pool) and writes the answer when the Responder
// delivers it. A streaming response gets a thread of its own that writes chunks by
// posting them to the connection's strand and waiting (ChunkWriter), while a second coroutine
// on the strand (WatchDisconnect) reads from the socket so a client that goes away is noticed
// without waiting for a write to fail.

namespace aicloud::http {
namespace server_internal {

using asio::awaitable;
using asio::use_awaitable;
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

template <class Stream>
constexpr bool kIsTls = std::is_same_v<Stream, TlsStream>;

inline auto Redirect(error_code& ec) { return asio::redirect_error(use_awaitable, ec); }

// State shared by a streaming response's thread and its connection's strand.
struct StreamCtl {
  explicit StreamCtl(const asio::any_io_executor& ex) : wake(ex) {
    wake.expires_at(asio::steady_timer::time_point::max());
  }
  // Any thread: the client is gone or the server is stopping.
  void Close() {
    std::lock_guard<std::mutex> lock(mu);
    closed = true;
    cv.notify_all();
  }
  bool IsClosed() {
    std::lock_guard<std::mutex> lock(mu);
    return closed;
  }
  // Strand only: wakes the coroutine waiting in RunStream (also when it has not started waiting).
  void Wake() { wake.expires_at(asio::steady_timer::time_point::min()); }

  std::mutex mu;
  std::condition_variable cv;
  bool closed = false;  // GUARDED_BY(mu)

  // Strand only.
  asio::steady_timer wake;
  int writes_in_flight = 0;
  bool done = false;  // the stream function returned
};

// Beast's request parser writing straight into a Request: method, target, headers (names
// lower-cased, repeats joined with ", ") and body, with no Beast fields container in between.
class RequestReader final : public ParserInto<true> {
 public:
  // The parser has checked an announced length against the body limit already: reserved whole.
  explicit RequestReader(Request& req) : ParserInto(req.headers, req.body, SIZE_MAX), req_(req) {}
  bhttp::verb method() const { return verb_; }
  bool expects_continue() const { return expects_continue_; }

 private:
  void on_request_impl(bhttp::verb verb, beast::string_view method, beast::string_view target, int,
                       error_code&) override {
    verb_ = verb;
    req_.method.assign(method.data(), method.size());
    req_.target.assign(target.data(), target.size());
  }
  void on_response_impl(int, beast::string_view, int, error_code&) override {}
  void on_field_impl(bhttp::field field, beast::string_view name, beast::string_view value, error_code& ec) override {
    if (field == bhttp::field::expect && AsciiIEquals(Sv(value), "100-continue")) expects_continue_ = true;
    ParserInto::on_field_impl(field, name, value, ec);
  }

  Request& req_;
  bhttp::verb verb_ = bhttp::verb::unknown;
  bool expects_continue_ = false;
};

struct ConnBase {
  virtual ~ConnBase() = default;
  // Any thread: ends the current stream and closes the socket.
  virtual void Shutdown() = 0;
  // Any thread: when a request is being answered and its client has closed or reset the
  // connection, raises the request's client_gone signal (on the connection's executor).
  virtual void CheckClient() = 0;

  // Set (on the connection's executor) while a request is with its handler.
  std::atomic<bool> awaiting{false};
  // The client_gone signal of the request being answered (on the connection's executor).
  std::shared_ptr<CancelSignal> gone = std::make_shared<CancelSignal>();
};

class Core;

template <class Stream>
struct Connection final : ConnBase, std::enable_shared_from_this<Connection<Stream>> {
  Connection(tcp::socket socket, asio::ssl::context* ssl, Core* core_in)
      : remote(RemoteOf(socket)), stream(MakeStream(std::move(socket), ssl)), core(core_in) {}

  static std::string RemoteOf(const tcp::socket& s) {
    error_code ec;
    tcp::endpoint ep = s.remote_endpoint(ec);
    return ec ? std::string() : EndpointString(ep);
  }
  static Stream MakeStream(tcp::socket s, asio::ssl::context* ssl) {
    if constexpr (kIsTls<Stream>) {
      return Stream(std::move(s), *ssl);
    } else {
      return Stream(std::move(s));
    }
  }

  void Shutdown() override {
    {
      std::lock_guard<std::mutex> lock(ctl_mu);
      if (ctl) ctl->Close();
    }
    asio::post(stream.get_executor(), [self = this->shared_from_this()] {
      if constexpr (kIsTls<Stream>) {
        beast::get_lowest_layer(self->stream).close();
      } else {
        self->Close();  // also marks it closed for an answer still to come, and stops its timer
      }
    });
  }

  void CheckClient() override {
    if (!awaiting.load(std::memory_order_relaxed)) return;
    asio::post(stream.get_executor(), [self = this->shared_from_this()] {
      auto& socket = beast::get_lowest_layer(self->stream).socket();
      if (!self->awaiting || !socket.is_open() || self->gone->cancelled()) return;
      // POLLRDHUP: the peer closed its side, also when bytes it sent before (pipelined
      // requests, a TLS close_notify) are still unread; POLLHUP/POLLERR: reset.
      pollfd p{socket.native_handle(), POLLRDHUP, 0};
      if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) self->gone->Cancel();
    });
  }

  // The plain-TCP path (Serve and what it calls): callbacks on the connection's executor, no
  // coroutine and no timer per operation. Defined after Core.
  void Serve();
  void ReadRequest();
  void Parse();
  void OnRead(error_code ec, size_t n);
  void OnRequest();
  void OnAnswer(Response response);
  void Answer(Response response);
  void Write(Response response);
  void AfterWrite();
  void HandOff(Response error);
  void Close();
  void ArmIdle();
  void OnIdle(error_code ec);
  // Runs one step of the plain path; a step that throws (out of memory) loses its connection,
  // not the server: completion handlers run outside any coroutine that would catch it.
  template <class Fn>
  void Guarded(Fn&& step) {
    try {
      step();
    } catch (...) {
      Close();
    }
  }

  std::string remote;
  Stream stream;
  beast::flat_buffer buffer;
  std::string head_text;  // the answer's head being written (kept for its capacity)
  Core* core;
  std::mutex ctl_mu;
  std::shared_ptr<StreamCtl> ctl;  // GUARDED_BY(ctl_mu): the running stream, if any

  // The plain path's state; on the connection's executor only.
  enum class Phase { kReading, kHandling, kWriting, kHandedOff, kClosed };
  Phase phase = Phase::kReading;
  std::optional<RequestReader> reader;
  Request req;                      // reused: its strings keep their capacity between requests
  // Handed to each request (Request::connection_memo); kept here, so a request moved to a worker
  // takes only a copy of it.
  std::shared_ptr<std::any> memo = std::make_shared<std::any>();
  bool keep_alive = false, head = false, continue_sent = false;
  bool in_dispatch = false;         // inside the handler call: an inline answer waits in `early`
  std::optional<Response> early;
  Response writing;                 // the answer an asynchronous write is sending
  // Idle bound: one timer that re-arms itself lazily, so a request costs a clock read, not a
  // timer operation. Reading a request or writing an answer must end by idle_until.
  asio::steady_timer idle_timer{stream.get_executor()};
  std::chrono::steady_clock::time_point idle_until;
  bool idle_timer_on = false;
};

class Core {
 public:
  Core(ServerOptions options, Handler handler, AsyncHandler async)
      : opts(std::move(options)),
        handler_(std::move(handler)),
        async_(std::move(async)),
        ioc(std::max(1, opts.io_threads)),
        acceptor(ioc.ConnectionExecutor()),
        workers(static_cast<size_t>(std::max(1, opts.worker_threads))) {}

  ~Core() { Stop(); }

  Status Listen();
  Status LoadTls();
  void Run();
  void Stop();

  // On the connection's strand: runs the async handler inline, or gives the blocking one a
  // worker (the Responder turns a throw into a 500 there).
  void Dispatch(Request& req, Responder respond) const {
    if (!async_) {
      respond.RunBlocking([this, r = std::move(req)]() mutable { return handler_(r); });
      return;
    }
    try {
      async_(req, respond);
    } catch (const std::exception& e) {
      respond(Response::Error(500, "internal", e.what()));
    } catch (...) {
      respond(Response::Error(500, "internal", "handler threw a non-standard exception"));
    }
  }

  // Requests handed to a handler and not answered yet; Stop waits for them.
  // Under the lock, decrement and wake-up both: Stop may see the count at zero only after the
  // last answer has let go of the lock, so an answer from a thread of the handler's own never
  // touches the server after Stop returned.
  void AddPending() {
    std::lock_guard<std::mutex> lock(pending_mu_);
    ++pending_;
  }
  void DonePending() {
    std::lock_guard<std::mutex> lock(pending_mu_);
    if (--pending_ == 0) pending_cv_.notify_all();
  }

  // Starts `body` on a thread of its own; false (and nothing started) once stopping.
  bool StartStreamThread(std::function<void()> body) {
    std::lock_guard<std::mutex> lock(streams_mu_);
    if (stopping) return false;
    // Reap the threads of streams that ended, so a long-running server does not collect them.
    std::erase_if(streams_, [](StreamThread& t) {
      if (!t.finished->load()) return false;
      t.thread.join();
      return true;
    });
    auto finished = std::make_shared<std::atomic<bool>>(false);
    std::thread thread([body = std::move(body), finished, name = opts.thread_name + "-stream"]() mutable {
      SetThreadName(name);
      body();
      body = nullptr;  // drop the connection before saying we are done
      finished->store(true);
    });
    streams_.push_back({std::move(thread), std::move(finished)});
    return true;
  }

  template <class Stream>
  void Register(const std::shared_ptr<Connection<Stream>>& c) {
    std::lock_guard<std::mutex> lock(conns_mu_);
    std::erase_if(conns_, [](const std::weak_ptr<ConnBase>& w) { return w.expired(); });
    conns_.push_back(c);
  }

  const ServerOptions opts;
  std::atomic<bool> stopping{false};
  uint16_t port = 0;

 private:
  struct StreamThread {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> finished;
  };

  awaitable<void> Accept();
  // Every opts.client_check_interval: CheckClient on the connections awaiting an answer.
  void ScheduleClientCheck();

  const Handler handler_;    // exactly one of handler_ and async_ is set
  const AsyncHandler async_;
  std::mutex pending_mu_;
  std::condition_variable pending_cv_;
  int pending_ = 0;  // GUARDED_BY(pending_mu_)
  std::mutex stop_mu_;
  bool stopped_ = false;  // GUARDED_BY(stop_mu_)
  std::mutex conns_mu_;
  std::vector<std::weak_ptr<ConnBase>> conns_;  // GUARDED_BY(conns_mu_)
  std::mutex streams_mu_;
  std::vector<StreamThread> streams_;  // GUARDED_BY(streams_mu_)

 public:
  // Declared after the registries and before the sockets: destroying the io_context destroys the
  // suspended connection coroutines, which must still find the SSL context alive.
  std::optional<asio::ssl::context> ssl;
  EventLoop ioc;
  tcp::acceptor acceptor;
  asio::steady_timer client_check{acceptor.get_executor()};  // on the acceptor's executor
  asio::thread_pool workers;

 private:
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::vector<std::thread> io_threads_;
};

// The server's Responder::Sink. `resume(Response)` carries the answer back to the connection (a
// coroutine's completion handler posted to its executor, or a plain connection's OnAnswer);
// Deliver and RunBlocking move it out, so the answer gets through however long the Sink lives.
template <class Resume>
class ServerSink final : public Responder::Sink {
 public:
  ServerSink(Core& core, Resume resume) : core_(core), resume_(std::move(resume)) { core_.AddPending(); }

  void Deliver(Response response) override { Finish(core_, std::move(resume_), std::move(response)); }

  void RunBlocking(std::function<Response()> work) override {
    asio::post(core_.workers, [&core = core_, resume = std::move(resume_), work = std::move(work)]() mutable {
      Response response = work();
      work = nullptr;  // let what the work captured go before the answer is written
      Finish(core, std::move(resume), std::move(response));
    });
  }

  EventLoop* loop() override { return &core_.ioc; }

 private:
  static void Finish(Core& core, Resume resume, Response response) {
    resume(std::move(response));
    core.DonePending();
  }

  Core& core_;
  Resume resume_;
};

template <class Resume>
Responder MakeResponder(Core& core, Resume resume) {
  return Responder(std::make_unique<ServerSink<Resume>>(core, std::move(resume)));
}

// Hands the request to the handler and resumes the awaiting coroutine with the answer. (The
// request travels by shared_ptr: GCC 12 miscompiles lambdas with init-captures that are
// temporaries of a co_await expression.)
auto CallHandler(Core& core, std::shared_ptr<Request> req) {
  return asio::async_initiate<const asio::use_awaitable_t<>&, void(Response)>(
      [&core](auto handler, std::shared_ptr<Request> r) {
        core.Dispatch(*r, MakeResponder(core, [handler = std::move(handler)](Response response) mutable {
          auto ex = asio::get_associated_executor(handler);
          asio::post(ex, [handler = std::move(handler), response = std::move(response)]() mutable {
            handler(std::move(response));
          });
        }));
      },
      use_awaitable, std::move(req));
}

Request ToRequest(bhttp::request<bhttp::string_body>&& r, const std::string& remote) {
  Request q;
  q.method = std::string(r.method_string());
  q.target = std::string(r.target());
  std::string_view t = q.target;
  size_t qm = t.find('?');
  q.path = PercentDecode(t.substr(0, qm));
  if (qm != std::string_view::npos) q.query = ParseQuery(t.substr(qm + 1));
  for (const auto& field : r) q.headers.Add(Sv(field.name_string()), Sv(field.value()));
  q.body = std::move(r.body());
  q.remote = remote;
  return q;
}

// The JSON error for a request that could not be read, or nullopt when the client simply went
// away (or timed out) and there is nobody to answer.
std::optional<Response> ReadErrorResponse(const error_code& ec, const ServerOptions& opts) {
  if (ec == bhttp::error::body_limit) {
    return Response::Error(413, "payload_too_large",
                           "request body exceeds " + std::to_string(opts.max_body_bytes) + " bytes");
  }
  if (ec == bhttp::error::header_limit) {
    return Response::Error(431, "header_too_large",
                           "request header exceeds " + std::to_string(opts.max_header_bytes) + " bytes or " +
                               std::to_string(HeaderMap::kMaxFields) + " fields");
  }
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
      ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message &&
      ec != bhttp::error::need_more) {
    return Response::Error(400, "bad_request", "malformed request: " + ec.message());
  }
  return std::nullopt;
}

// The head of a streamed (chunked) answer, which Beast writes; the same fields AppendResponseHead
// would write, and as there none that could split the head.
template <class Fields>
void SetHeaders(Fields& res, Response& r) {
  res.set(bhttp::field::server, "aicloud");
  if (IsSafeFieldValue(r.content_type)) res.set(bhttp::field::content_type, r.content_type);
  for (auto& [name, value] : r.headers) {
    if (AsciiIEquals(name, "connection") || AsciiIEquals(name, "content-length") ||
        AsciiIEquals(name, "transfer-encoding")) {
      continue;  // framing is ours
    }
    if (!IsHttpToken(name) || !IsSafeFieldValue(value)) continue;
    if (AsciiIEquals(name, "content-type")) {
      res.set(bhttp::field::content_type, value);
    } else {
      res.insert(name, value);
    }
  }
}

unsigned ValidStatus(int status) { return status >= 100 && status <= 999 ? status : 500; }

// The answer's head is written as text (wire.h) and goes out with the body in one write.
template <class Stream>
awaitable<error_code> WriteResponse(Connection<Stream>& c, Response r, bool keep_alive, bool head) {
  const int status = static_cast<int>(ValidStatus(r.status));
  const bool no_body = StatusHasNoBody(status);
  c.head_text.clear();
  AppendResponseHead(&c.head_text, {.status = status,
                                    .content_type = r.content_type,
                                    .headers = &r.headers,
                                    .keep_alive = keep_alive,
                                    .body_size = no_body ? 0 : r.body.size()});
  const size_t body_bytes = no_body || head ? 0 : r.body.size();
  const std::array<asio::const_buffer, 2> answer{asio::buffer(c.head_text), asio::buffer(r.body.data(), body_bytes)};
  beast::buffers_suffix<std::array<asio::const_buffer, 2>> rest(answer);
  error_code ec;
  if constexpr (!kIsTls<Stream>) {
    // Most answers fit the socket's send buffer: write them now, without an operation to
    // complete and resume from; only what does not fit goes the asynchronous way.
    tcp::socket& socket = c.stream.socket();
    if (!socket.non_blocking()) socket.non_blocking(true, ec);  // once per connection (an ioctl)
    size_t written = 0;
    if (!ec) written = asio::write(socket, answer, ec);
    if (ec != asio::error::would_block) co_return ec;
    ec = {};
    rest.consume(written);
  }
  beast::get_lowest_layer(c.stream).expires_after(c.core->opts.idle_timeout);
  co_await asio::async_write(c.stream, rest, Redirect(ec));
  co_return ec;
}

// After an error answer while the client may still be sending (a body over the limit): stop
// sending, read and drop what arrives for a moment so the client gets to read the answer
// instead of a reset, then close.
template <class Stream>
awaitable<void> DrainAndClose(Connection<Stream>& c) {
  auto& low = beast::get_lowest_layer(c.stream);
  error_code ec;
  low.socket().shutdown(tcp::socket::shutdown_send, ec);
  low.expires_after(std::chrono::seconds(2));
  static constexpr size_t kMaxDrain = 64 << 20;
  size_t total = 0;
  std::vector<char> buf(16384);
  while (total < kMaxDrain) {
    size_t n = co_await low.async_read_some(asio::buffer(buf), Redirect(ec));
    if (ec) break;
    total += n;
  }
  low.close();
}

template <class Stream>
class ChunkWriter final : public StreamWriter {
 public:
  ChunkWriter(std::shared_ptr<Connection<Stream>> c, std::shared_ptr<StreamCtl> ctl)
      : c_(std::move(c)), ctl_(std::move(ctl)) {}

  bool Write(std::string_view chunk) override {
    if (ctl_->IsClosed()) return false;
    if (chunk.empty()) return true;  // an empty chunk would end the response
    struct Op {
      std::string data;
      bool finished = false;  // GUARDED_BY(ctl->mu)
      bool ok = false;        // GUARDED_BY(ctl->mu)
    };
    auto op = std::make_shared<Op>();
    op->data.assign(chunk);
    auto finish = [](StreamCtl& ctl, Op& o, bool ok) {
      std::lock_guard<std::mutex> lock(ctl.mu);
      o.finished = true;
      o.ok = ok;
      ctl.cv.notify_all();
    };
    asio::post(c_->stream.get_executor(), [c = c_, ctl = ctl_, op, finish] {
      if (ctl->IsClosed()) return finish(*ctl, *op, false);
      ++ctl->writes_in_flight;
      asio::async_write(c->stream, bhttp::make_chunk(asio::buffer(op->data)),
                        [c, ctl, op, finish](const error_code& ec, size_t) {
                          --ctl->writes_in_flight;
                          if (ec) ctl->Close();
                          finish(*ctl, *op, !ec);
                          ctl->Wake();
                        });
    });
    std::unique_lock<std::mutex> lock(ctl_->mu);
    ctl_->cv.wait(lock, [&] { return op->finished || ctl_->closed; });
    return op->finished && op->ok;
  }

  bool closed() const override { return ctl_->IsClosed(); }

 private:
  std::shared_ptr<Connection<Stream>> c_;
  std::shared_ptr<StreamCtl> ctl_;
};

// Reads (and drops) whatever the client sends while a stream runs; an error or EOF means the
// client is gone.
template <class Stream>
awaitable<void> WatchDisconnect(std::shared_ptr<Connection<Stream>> c, std::shared_ptr<StreamCtl> ctl) {
  std::vector<char> buf(1024);
  error_code ec;
  while (!ctl->done) {
    co_await c->stream.async_read_some(asio::buffer(buf), Redirect(ec));
    if (ec) break;
  }
  ctl->Close();
}

template <class Stream>
awaitable<void> RunStream(std::shared_ptr<Connection<Stream>> c, Response r) {
  Core& core = *c->core;
  auto& low = beast::get_lowest_layer(c->stream);
  bhttp::response<bhttp::empty_body> res;
  res.version(11);
  res.result(ValidStatus(r.status));
  SetHeaders(res, r);
  if (res.find(bhttp::field::cache_control) == res.end()) res.set(bhttp::field::cache_control, "no-cache");
  res.keep_alive(false);
  res.chunked(true);
  bhttp::response_serializer<bhttp::empty_body> sr(res);
  error_code ec;
  low.expires_after(core.opts.idle_timeout);
  co_await bhttp::async_write_header(c->stream, sr, Redirect(ec));
  if (ec) co_return;
  low.expires_never();  // the stream decides how long this lasts

  auto ctl = std::make_shared<StreamCtl>(c->stream.get_executor());
  {
    std::lock_guard<std::mutex> lock(c->ctl_mu);
    c->ctl = ctl;
  }
  if (core.stopping) ctl->Close();  // Stop may have looked at this connection before ctl was set
  asio::co_spawn(c->stream.get_executor(), WatchDisconnect(c, ctl), asio::detached);
  std::function<void(StreamWriter&)> fn = std::move(r.stream);
  bool started = core.StartStreamThread([c, ctl, fn]() mutable {
    {
      ChunkWriter<Stream> writer(c, ctl);
      try {
        fn(writer);
      } catch (...) {
        // A stream that throws just ends; its status line is long gone.
      }
    }
    fn = nullptr;
    asio::post(c->stream.get_executor(), [ctl] {
      ctl->done = true;
      ctl->Wake();
    });
  });
  if (!started) ctl->done = true;

  while (!(ctl->done && ctl->writes_in_flight == 0)) {
    co_await ctl->wake.async_wait(Redirect(ec));
    ctl->wake.expires_at(asio::steady_timer::time_point::max());
  }
  if (!ctl->IsClosed()) {
    low.expires_after(std::chrono::seconds(5));
    co_await asio::async_write(c->stream, bhttp::make_chunk_last(), Redirect(ec));
  }
  low.close();  // also ends WatchDisconnect
}

// Beast reads as much as the buffer's spare capacity holds, and 512 bytes when it has none, so a
// buffer left at its first size reads a 64 KiB body in 128 pieces (as many system calls and
// loop turns). Before a body the buffer gets room for up to kBodyReadBytes of it at a time (not
// for all of it: a client that announces a large body and sends nothing must not cost the
// server that much), and a connection keeps at most that much between requests.
constexpr size_t kBodyReadBytes = size_t{16} << 10;

void ReserveForBody(beast::flat_buffer& buffer, const bhttp::request_parser<bhttp::string_body>& parser) {
  const boost::optional<std::uint64_t> length = parser.content_length();
  const size_t want = length ? static_cast<size_t>(std::min<std::uint64_t>(*length, kBodyReadBytes)) : kBodyReadBytes;
  if (buffer.capacity() - buffer.size() < want) buffer.reserve(buffer.size() + want);
}

template <class Stream>
awaitable<void> Session(std::shared_ptr<Connection<Stream>> c) {
  Core& core = *c->core;
  const ServerOptions& opts = core.opts;
  auto& low = beast::get_lowest_layer(c->stream);
  error_code ec;
  if constexpr (kIsTls<Stream>) {
    low.expires_after(opts.idle_timeout);
    co_await c->stream.async_handshake(asio::ssl::stream_base::server, Redirect(ec));
    if (ec) {
      low.close();
      co_return;
    }
  }
  while (!core.stopping) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.body_limit(opts.max_body_bytes);
    parser.header_limit(static_cast<std::uint32_t>(
        std::min<size_t>(opts.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
    low.expires_after(opts.idle_timeout);
    co_await bhttp::async_read_header(c->stream, c->buffer, parser, Redirect(ec));
    if (!ec && TooManyFields(parser.get())) ec = bhttp::error::header_limit;
    if (!ec && !parser.is_done()) {
      ReserveForBody(c->buffer, parser);
      if (AsciiIEquals(Sv(parser.get()[bhttp::field::expect]), "100-continue")) {
        bhttp::response<bhttp::empty_body> cont(bhttp::status::continue_, 11);
        co_await bhttp::async_write(c->stream, cont, Redirect(ec));
        if (ec) break;
      }
      co_await bhttp::async_read(c->stream, c->buffer, parser, Redirect(ec));
    }
    if (ec) {
      if (std::optional<Response> err = ReadErrorResponse(ec, opts)) {
        co_await WriteResponse(*c, std::move(*err), /*keep_alive=*/false, /*head=*/false);
        co_await DrainAndClose(*c);
        co_return;
      }
      break;
    }

    bool keep_alive = parser.get().keep_alive();
    bool head = parser.get().method() == bhttp::verb::head;
    auto req = std::make_shared<Request>(ToRequest(parser.release(), c->remote));
    req->client_gone = c->gone;
    c->awaiting = true;
    Response resp = co_await CallHandler(core, req);
    c->awaiting = false;
    req.reset();
    // The next request gets a lowered signal: this one again when nothing but the connection
    // holds it (no one can still register or look), a new one otherwise.
    if (c->gone.use_count() == 1) {
      c->gone->Reset();
    } else {
      c->gone = std::make_shared<CancelSignal>();
    }
    if (resp.stream) {
      co_await RunStream(c, std::move(resp));
      co_return;
    }
    for (const auto& [name, value] : resp.headers) {
      if (AsciiIEquals(name, "connection") && AsciiIEquals(value, "close")) keep_alive = false;
    }
    if (core.stopping) keep_alive = false;
    ec = co_await WriteResponse(*c, std::move(resp), keep_alive, head);
    if (ec || !keep_alive) break;
    if (c->buffer.size() == 0 && c->buffer.capacity() > 2 * kBodyReadBytes) c->buffer.shrink_to_fit();
  }
  if constexpr (kIsTls<Stream>) {
    if (!ec) {
      low.expires_after(std::chrono::seconds(2));
      co_await c->stream.async_shutdown(Redirect(ec));
    }
  } else {
    low.socket().shutdown(tcp::socket::shutdown_send, ec);
  }
  low.close();
}

// ---- The plain-TCP path --------------------------------------------------------------------
// A connection without TLS is served by callbacks: read into the connection's buffer, parse into
// its reused Request (RequestReader), call the handler, write the answer with a synchronous
// non-blocking write when it fits the socket buffer, read again. The rare turns (an error answer
// that drains the client, a streamed answer) hand the connection to the coroutines above.

template <class Stream>
void Connection<Stream>::Serve() {
  error_code ec;
  stream.socket().non_blocking(true, ec);  // answers are written synchronously when they fit
  ReadRequest();
}

template <class Stream>
void Connection<Stream>::ReadRequest() {
  if (core->stopping) return Close();
  phase = Phase::kReading;
  // The request object is reused; what a handler moved out is simply empty.
  req.method.clear();
  req.target.clear();
  req.path.clear();
  req.query.clear();
  req.headers.clear();
  if (req.body.capacity() > 2 * kBodyReadBytes) std::string().swap(req.body);
  req.body.clear();
  req.params.clear();
  req.route.clear();
  req.client_gone = nullptr;
  if (req.connection_memo != memo) req.connection_memo = memo;
  reader.reset();  // made when the first bytes are not a whole simple request
  continue_sent = false;
  ArmIdle();
  Parse();
}

// Feeds what the buffer holds to the parser; reads more when it needs more. The first bytes of a
// request are offered to ReadWholeRequest, which takes a whole simply framed request at once;
// anything else (a head or body still arriving, chunked framing, Expect, a malformed head) is
// Beast's, from the same bytes.
template <class Stream>
void Connection<Stream>::Parse() {
  if (!reader && buffer.size() > 0) {
    WholeRequestInfo info;
    const auto* data = static_cast<const char*>(buffer.data().data());
    const size_t used = ReadWholeRequest({data, buffer.size()},
                                         {.max_header_bytes = core->opts.max_header_bytes,
                                          .max_body_bytes = core->opts.max_body_bytes},
                                         &req, &info);
    if (used > 0) {
      buffer.consume(used);
      keep_alive = info.keep_alive;
      head = info.head_method;
      return OnRequest();
    }
    reader.emplace(req);
    reader->eager(true);
    reader->body_limit(core->opts.max_body_bytes);
    reader->header_limit(static_cast<std::uint32_t>(
        std::min<size_t>(core->opts.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  }
  while (reader && buffer.size() > 0) {
    error_code ec;
    const size_t used = reader->put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == bhttp::error::need_more) break;
    if (ec) {
      if (std::optional<Response> err = ReadErrorResponse(ec, core->opts)) return HandOff(std::move(*err));
      return Close();
    }
    if (reader->is_done()) {
      keep_alive = reader->keep_alive();
      head = reader->method() == bhttp::verb::head;
      return OnRequest();
    }
    if (used == 0) break;
  }
  if (reader && reader->is_header_done() && !continue_sent) {
    continue_sent = true;
    if (reader->expects_continue()) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      error_code ec;
      const size_t sent = asio::write(stream.socket(), asio::buffer(kContinue.data(), kContinue.size()), ec);
      if (ec == asio::error::would_block) {  // a send buffer still full of earlier answers
        asio::async_write(stream.socket(), asio::buffer(kContinue.data() + sent, kContinue.size() - sent),
                          [self = this->shared_from_this()](error_code e, size_t) {
                            if (e) self->Close();
                          });
      } else if (ec) {
        return Close();
      }
    }
    // Room for large pieces of the body (see kBodyReadBytes).
    const boost::optional<std::uint64_t> length = reader->content_length();
    const size_t want =
        length ? static_cast<size_t>(std::min<std::uint64_t>(*length, kBodyReadBytes)) : kBodyReadBytes;
    if (buffer.capacity() - buffer.size() < want) buffer.reserve(buffer.size() + want);
  }
  // Beast's own reads ask for the buffer's spare room and 512 bytes when it has none.
  const size_t room = std::max<size_t>(buffer.capacity() - buffer.size(), 512);
  stream.socket().async_read_some(buffer.prepare(room), [self = this->shared_from_this()](error_code ec, size_t n) {
    self->Guarded([&] { self->OnRead(ec, n); });
  });
}

template <class Stream>
void Connection<Stream>::OnRead(error_code ec, size_t n) {
  buffer.commit(n);
  if (ec || phase != Phase::kReading) return Close();  // EOF, reset, idle bound or Stop
  Parse();
}

template <class Stream>
void Connection<Stream>::OnRequest() {
  phase = Phase::kHandling;
  std::string_view t = req.target;
  const size_t qm = t.find('?');
  const std::string_view path = t.substr(0, qm);
  if (path.find('%') == std::string_view::npos) {
    req.path.assign(path);  // into the reused Request's string
  } else {
    req.path = PercentDecode(path);
  }
  if (qm != std::string_view::npos) req.query = ParseQuery(t.substr(qm + 1));
  req.remote = remote;
  req.client_gone = gone;
  awaiting = true;
  in_dispatch = true;
  // The answer comes back onto the connection's executor: inline when it is given on it (an
  // upstream call's completion), posted from any other thread.
  core->Dispatch(req, MakeResponder(*core, [c = this->shared_from_this()](Response response) mutable {
    auto ex = c->stream.get_executor();
    const auto* loop = ex.template target<asio::io_context::executor_type>();
    if (loop != nullptr && loop->running_in_this_thread()) {
      // What dispatch would do, without wrapping the answer in a type-erased function first.
      return c->Guarded([&] { c->OnAnswer(std::move(response)); });
    }
    asio::dispatch(ex, [c = std::move(c), response = std::move(response)]() mutable {
      c->Guarded([&] { c->OnAnswer(std::move(response)); });
    });
  }));
  in_dispatch = false;
  if (early) {
    Response r = std::move(*early);
    early.reset();
    Answer(std::move(r));
  }
}

template <class Stream>
void Connection<Stream>::OnAnswer(Response response) {
  if (in_dispatch) {
    early = std::move(response);  // answered inline: written once the handler has returned
    return;
  }
  Answer(std::move(response));
}

template <class Stream>
void Connection<Stream>::Answer(Response response) {
  awaiting = false;
  req.client_gone = nullptr;
  // The next request gets a lowered signal: this one again when nothing but the connection
  // holds it (no one can still register or look), a new one otherwise.
  if (gone.use_count() == 1) {
    gone->Reset();
  } else {
    gone = std::make_shared<CancelSignal>();
  }
  if (phase == Phase::kClosed) return;  // Stop closed the connection meanwhile
  if (response.stream) {
    phase = Phase::kHandedOff;
    idle_timer.cancel();
    asio::co_spawn(stream.get_executor(), RunStream(this->shared_from_this(), std::move(response)), asio::detached);
    return;
  }
  for (const auto& [name, value] : response.headers) {
    if (AsciiIEquals(name, "connection") && AsciiIEquals(value, "close")) keep_alive = false;
  }
  if (core->stopping) keep_alive = false;
  Write(std::move(response));
}

template <class Stream>
void Connection<Stream>::Write(Response r) {
  phase = Phase::kWriting;
  const int status = static_cast<int>(ValidStatus(r.status));
  const bool no_body = StatusHasNoBody(status);
  head_text.clear();
  AppendResponseHead(&head_text, {.status = status,
                                  .content_type = r.content_type,
                                  .headers = &r.headers,
                                  .keep_alive = keep_alive,
                                  .body_size = no_body ? 0 : r.body.size()});
  const size_t body_bytes = no_body || head ? 0 : r.body.size();
  const std::array<asio::const_buffer, 2> answer{asio::buffer(head_text), asio::buffer(r.body.data(), body_bytes)};
  error_code ec;
  const size_t written = asio::write(stream.socket(), answer, ec);
  if (!ec) return AfterWrite();
  if (ec != asio::error::would_block) return Close();
  // What does not fit the socket buffer goes the asynchronous way, from the connection's copy
  // of the answer (which outlives the write).
  writing = std::move(r);
  const std::array<asio::const_buffer, 2> kept{asio::buffer(head_text), asio::buffer(writing.body.data(), body_bytes)};
  beast::buffers_suffix<std::array<asio::const_buffer, 2>> rest(kept);
  rest.consume(written);
  ArmIdle();
  asio::async_write(stream.socket(), rest, [self = this->shared_from_this()](error_code e, size_t) {
    self->writing = Response();
    if (e || self->phase != Phase::kWriting) return self->Close();
    self->Guarded([&] { self->AfterWrite(); });
  });
}

template <class Stream>
void Connection<Stream>::AfterWrite() {
  if (!keep_alive) {
    error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    return Close();
  }
  if (buffer.size() == 0 && buffer.capacity() > 2 * kBodyReadBytes) buffer.shrink_to_fit();
  if (buffer.size() > 0) {
    // A pipelined request is waiting: read it from the loop, not from this call, so that a
    // client sending many at once does not stack one call chain per request.
    ArmIdle();  // the bound runs from now, not from when the last request began
    asio::post(stream.get_executor(), [self = this->shared_from_this()] { self->Guarded([&] { self->ReadRequest(); }); });
    return;
  }
  ReadRequest();
}

// An error answer to a request that could not be read: written, then the client is drained
// (DrainAndClose) by a coroutine.
template <class Stream>
awaitable<void> AnswerAndDrain(std::shared_ptr<Connection<Stream>> c, Response error) {
  co_await WriteResponse(*c, std::move(error), /*keep_alive=*/false, /*head=*/false);
  co_await DrainAndClose(*c);
}

template <class Stream>
void Connection<Stream>::HandOff(Response error) {
  phase = Phase::kHandedOff;
  idle_timer.cancel();
  asio::co_spawn(stream.get_executor(), AnswerAndDrain(this->shared_from_this(), std::move(error)), asio::detached);
}

template <class Stream>
void Connection<Stream>::Close() {
  if (phase == Phase::kClosed) return;
  phase = Phase::kClosed;
  idle_timer.cancel();
  beast::get_lowest_layer(stream).close();  // the socket, and the timer a handed-off coroutine set
}

template <class Stream>
void Connection<Stream>::ArmIdle() {
  idle_until = std::chrono::steady_clock::now() + core->opts.idle_timeout;
  if (idle_timer_on) return;
  idle_timer_on = true;
  idle_timer.expires_at(idle_until);
  idle_timer.async_wait([self = this->shared_from_this()](error_code ec) { self->OnIdle(ec); });
}

template <class Stream>
void Connection<Stream>::OnIdle(error_code ec) {
  idle_timer_on = false;
  if (ec) return;
  // A handler may take as long as it takes; ArmIdle starts the bound again after it.
  if (phase != Phase::kReading && phase != Phase::kWriting) return;
  if (std::chrono::steady_clock::now() >= idle_until) {
    // The pending read or write ends with an error and closes the connection.
    error_code ignored;
    stream.socket().close(ignored);
    return;
  }
  idle_timer_on = true;
  idle_timer.expires_at(idle_until);
  idle_timer.async_wait([self = this->shared_from_this()](error_code e) { self->OnIdle(e); });
}

awaitable<void> Core::Accept() {
  asio::steady_timer backoff(acceptor.get_executor());
  while (!stopping) {
    error_code ec;
    asio::any_io_executor strand = ioc.ConnectionExecutor();
    tcp::socket socket = co_await acceptor.async_accept(strand, Redirect(ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      // Out of descriptors and the like: wait a moment instead of spinning.
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(Redirect(ec));
      continue;
    }
    if (stopping) co_return;
    socket.set_option(tcp::no_delay(true), ec);
    if (ssl) {
      auto c = std::make_shared<Connection<TlsStream>>(std::move(socket), &*ssl, this);
      Register(c);
      asio::co_spawn(strand, Session(c), asio::detached);
    } else {
      auto c = std::make_shared<Connection<PlainStream>>(std::move(socket), nullptr, this);
      Register(c);
      asio::post(strand, [c] { c->Guarded([&] { c->Serve(); }); });
    }
  }
}

// "tls_cert_file /x/c.pem: No such file or directory" when a file cannot be read at all.
Status CheckReadable(std::string_view what, const std::string& file) {
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (f == nullptr) {
    return InvalidArgumentError(std::string(what) + " " + file + ": " + std::strerror(errno));
  }
  std::fclose(f);
  return OkStatus();
}

Status Core::LoadTls() {
  if (opts.tls_cert_file.empty() != opts.tls_key_file.empty()) {
    return InvalidArgumentError("tls_cert_file and tls_key_file must be set together");
  }
  if (opts.tls_cert_file.empty()) {
    if (!opts.tls_client_ca_file.empty()) {
      return InvalidArgumentError("tls_client_ca_file needs tls_cert_file and tls_key_file");
    }
    return OkStatus();
  }
  AICLOUD_RETURN_IF_ERROR(CheckReadable("tls_cert_file", opts.tls_cert_file));
  AICLOUD_RETURN_IF_ERROR(CheckReadable("tls_key_file", opts.tls_key_file));
  ssl.emplace(asio::ssl::context::tls_server);
  ssl->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                   asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                   asio::ssl::context::no_tlsv1_1);
  error_code ec;
  ssl->use_certificate_chain_file(opts.tls_cert_file, ec);
  if (ec) {
    return InvalidArgumentError("tls_cert_file " + opts.tls_cert_file +
                                ": not a PEM certificate chain (" + ec.message() + ")");
  }
  ssl->use_private_key_file(opts.tls_key_file, asio::ssl::context::pem, ec);
  if (ec) {
    return InvalidArgumentError("tls_key_file " + opts.tls_key_file + ": not a PEM private key (" +
                                ec.message() + ")");
  }
  if (SSL_CTX_check_private_key(ssl->native_handle()) != 1) {
    return InvalidArgumentError("tls_key_file " + opts.tls_key_file +
                                " does not match tls_cert_file " + opts.tls_cert_file);
  }
  static const unsigned char kSessionContext[] = "aicloud";
  SSL_CTX_set_session_id_context(ssl->native_handle(), kSessionContext, sizeof(kSessionContext) - 1);
  if (!opts.tls_client_ca_file.empty()) {
    AICLOUD_RETURN_IF_ERROR(CheckReadable("tls_client_ca_file", opts.tls_client_ca_file));
    ssl->load_verify_file(opts.tls_client_ca_file, ec);
    if (ec) {
      return InvalidArgumentError("tls_client_ca_file " + opts.tls_client_ca_file +
                                  ": not a PEM certificate file (" + ec.message() + ")");
    }
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(opts.tls_client_ca_file.c_str())) {
      SSL_CTX_set_client_CA_list(ssl->native_handle(), names);
    }
    ssl->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  }
  return OkStatus();
}

Status Core::Listen() {
  std::string where = opts.host + ":" + std::to_string(opts.port);
  error_code ec;
  tcp::endpoint endpoint;
  asio::ip::address addr = asio::ip::make_address(opts.host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(addr, opts.port);
  } else {
    tcp::resolver resolver(ioc);
    auto results = resolver.resolve(opts.host, std::to_string(opts.port), ec);
    if (ec || results.empty()) {
      return UnavailableError("http server: cannot resolve " + where + ": " +
                              (ec ? ec.message() : std::string("no addresses")));
    }
    endpoint = results.begin()->endpoint();
  }
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return UnavailableError("http server: cannot listen on " + where + ": " + ec.message());
  port = acceptor.local_endpoint(ec).port();
  return OkStatus();
}

void Core::ScheduleClientCheck() {
  client_check.expires_after(opts.client_check_interval);
  client_check.async_wait([this](error_code ec) {
    if (ec || stopping) return;
    {
      std::lock_guard<std::mutex> lock(conns_mu_);
      for (const std::weak_ptr<ConnBase>& w : conns_) {
        if (std::shared_ptr<ConnBase> c = w.lock()) c->CheckClient();
      }
    }
    ScheduleClientCheck();
  });
}

void Core::Run() {
  work_.emplace(ioc.get_executor());
  asio::co_spawn(acceptor.get_executor(), Accept(), asio::detached);
  if (opts.client_check_interval.count() > 0) {
    asio::post(acceptor.get_executor(), [this] { ScheduleClientCheck(); });
  }
  for (int i = 0; i < std::max(1, opts.io_threads); ++i) {
    io_threads_.emplace_back([this, name = opts.thread_name + "-io" + std::to_string(i)] {
      SetThreadName(name);
      ioc.run();
    });
  }
}

void Core::Stop() {
  std::lock_guard<std::mutex> stop_lock(stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    stopping = true;
  }
  // 1. No new connections. 2. Close the open ones and tell their streams to end.
  asio::post(acceptor.get_executor(), [this] {
    error_code ec;
    acceptor.close(ec);
    client_check.cancel();
  });
  std::vector<std::shared_ptr<ConnBase>> live;
  {
    std::lock_guard<std::mutex> lock(conns_mu_);
    for (auto& w : conns_) {
      if (auto c = w.lock()) live.push_back(std::move(c));
    }
    conns_.clear();
  }
  for (auto& c : live) c->Shutdown();
  live.clear();
  // 3. Wait for the streams and the handlers, then for the I/O threads.
  std::vector<StreamThread> streams;
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    streams.swap(streams_);
  }
  for (StreamThread& t : streams) t.thread.join();
  // 4. Wait for the answers still owed (async handlers, blocking ones on the workers).
  {
    std::unique_lock<std::mutex> lock(pending_mu_);
    pending_cv_.wait(lock, [&] { return pending_ == 0; });
  }
  workers.join();
  work_.reset();
  ioc.stop();
  for (std::thread& t : io_threads_) t.join();
  io_threads_.clear();
}

}  // namespace server_internal

class Server::Impl : public server_internal::Core {
 public:
  using Core::Core;
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { Stop(); }

namespace {

Status Launch(server_internal::Core& core) {
  AICLOUD_RETURN_IF_ERROR(core.LoadTls());
  AICLOUD_RETURN_IF_ERROR(core.Listen());
  core.Run();
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options, Handler handler) {
  if (!handler) return InvalidArgumentError("http server: no handler");
  auto impl = std::make_unique<Impl>(std::move(options), std::move(handler), nullptr);
  AICLOUD_RETURN_IF_ERROR(Launch(*impl));
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options, AsyncHandler handler) {
  if (!handler) return InvalidArgumentError("http server: no handler");
  auto impl = std::make_unique<Impl>(std::move(options), nullptr, std::move(handler));
  AICLOUD_RETURN_IF_ERROR(Launch(*impl));
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

uint16_t Server::port() const { return impl_->port; }

void Server::Stop() {
  if (impl_) impl_->Stop();
}

}  // namespace aicloud::http
