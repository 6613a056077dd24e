// Server: an HTTP/1.1 (or HTTPS-only) server that calls one handler per request. A Handler runs
// on a worker pool, never on the I/O threads, so it may block (a store read, a long poll). An
// AsyncHandler (responder.h) runs inline on the connection's I/O thread and must not block: it
// answers through its Responder, now or later from any thread, or hands work to the pool with
// Responder::RunBlocking. A proxy that forwards with AsyncClient thus serves a request without a
// thread hand-off (Router::Dispatch(req, respond) picks per route).
//
//   Router router;
//   router.Add("GET", "/healthz", [](Request&) { return Response::Text(200, "ok"); });
//   StatusOr<std::unique_ptr<Server>> server = Server::Start(
//       {.host = "0.0.0.0", .port = 8443, .tls_cert_file = "c.pem", .tls_key_file = "k.pem"},
//       [&](Request& req) { return router.Dispatch(req); });
//   if (!server.ok()) return server.status();   // names the address or file that failed
//   ... (*server)->port() ...
//   (*server)->Stop();                           // or let the unique_ptr go
//
// Protocol: keep-alive unless the client or a handler's "Connection: close" header asks
// otherwise; responses carry Content-Length, except streaming ones (Response::stream), which use
// chunked encoding and close the connection when the stream returns. A body over max_body_bytes
// gets 413, a header block over max_header_bytes or with more than HeaderMap::kMaxFields (256)
// fields 431, an unparsable request 400 (all JSON errors,
// then the connection closes). A connection idle for idle_timeout is closed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "http/message.h"
#include "http/responder.h"
#include "http/router.h"

namespace aicloud::http {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;       // 0: pick a free port (see Server::port())
  int io_threads = 1;
  int worker_threads = 4;  // blocking handlers run here; streams get their own thread each
  size_t max_body_bytes = 8 << 20;     // larger -> 413 JSON error, connection closed
  size_t max_header_bytes = 64 << 10;  // -> 431 (as are more than 256 fields)
  std::chrono::seconds idle_timeout{60};
  // How often connections whose request is still being answered are checked for a client that
  // went away (closed or reset); when one has, the request's client_gone signal is raised. A
  // client that only shuts down its sending side counts as gone, as nginx and Go's net/http
  // count it. 0: never checked.
  std::chrono::milliseconds client_check_interval{1000};
  std::string tls_cert_file, tls_key_file;  // both set -> HTTPS only
  std::string tls_client_ca_file;           // set -> require and verify client certificates (mTLS)
  // I/O threads are named "<thread_name>-io<N>" (SetThreadName; shown by top -H, ps -L, perf).
  std::string thread_name = "http";
};

// Thread-safe. Stop (and the destructor) waits for running handlers to return and for async
// handlers to answer, and tells open streams to end (StreamWriter::closed() turns true), then
// waits for them: a stream must watch closed() or Write's result and return, and an async
// handler must answer in bounded time (as a blocking one must return).
class Server {
 public:
  // Binds and starts serving; `handler` (usually a Router's Dispatch) is called for every request
  // on a worker thread. A handler that throws gets a 500 JSON error.
  // Errors: INVALID_ARGUMENT for bad options or unreadable cert/key/CA files (naming the file),
  // UNAVAILABLE when the address cannot be resolved or bound (naming host:port).
  static StatusOr<std::unique_ptr<Server>> Start(ServerOptions options, Handler handler);
  // The same with a non-blocking handler, called for every request on the I/O thread that read
  // it. A handler that throws before answering gets a 500 JSON error.
  static StatusOr<std::unique_ptr<Server>> Start(ServerOptions options, AsyncHandler handler);

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  ~Server();  // calls Stop()

  // The bound port (the chosen one when options.port was 0).
  uint16_t port() const;
  // Stops accepting, closes connections, ends streams and joins all threads. Idempotent.
  // REQUIRES: not called from a handler or stream (it would wait for itself).
  void Stop();

 private:
  class Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace aicloud::http
