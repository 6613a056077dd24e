// AsyncClient: non-blocking HTTP/1.1 requests to HTTP and HTTPS upstreams, run on a server's event
// loop with keep-alive connections pooled per loop and upstream. A proxy's async handler forwards
// with it and answers from the completion, so neither the request nor the upstream call leaves
// the I/O thread (the shape of nginx's proxy_pass with an upstream keepalive pool).
//
//   AsyncClient upstream({.timeout = 30s});
//   router.AddAsync("POST", "/v1/chat/completions", [&](Request& req, Responder respond) {
//     upstream.Send(*respond.loop(), "127.0.0.1:8001", "POST", "/v1/chat/completions",
//                   std::move(req.body), {}, [respond](AsyncResult r) {
//       if (!r.answered()) return respond(Response::Error(502, "bad_gateway", r.status.message()));
//       respond(Response::Text(r.response.status, std::move(r.response.body)));
//     });
//   });
//
// Errors tell a proxy whether a retry elsewhere is safe: UNAVAILABLE is a connection failure
// (refused, reset, closed), DEADLINE_EXCEEDED a timeout (the upstream may be working on it);
// answered() says whether a response head arrived (then the request reached the upstream).
// Interim (1xx) answers on a pooled connection are skipped for the final one. As the
// synchronous Client does, a pooled connection that turns out to have been closed by the
// upstream before any response byte is replaced by a new one once, transparently.
//
// HTTPS: a Send given a TlsTrust speaks TLS to its upstream, verifying the certificate against
// the trust's CAs and the upstream's host (tls_trust.h); a certificate that does not verify is a
// connection failure (UNAVAILABLE), never a fall back to plain HTTP. Each pooled connection keeps
// its TLS session; such exchanges run as coroutines, while plain HTTP's pooled fast path (one
// non-blocking write and plain reads) is unchanged.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "http/cancel.h"
#include "http/client.h"
#include "http/responder.h"
#include "http/tls_trust.h"

namespace aicloud::http {

struct AsyncClientOptions {
  // Connect + request + response head; then, again, the response body.
  std::chrono::milliseconds timeout{30000};
  size_t max_idle_per_upstream = 64;  // kept-alive connections kept per upstream and loop
};

struct AsyncResult {
  // OK: the whole response arrived. UNAVAILABLE: connection failure; DEADLINE_EXCEEDED: timeout;
  // CANCELLED: the caller's cancel signal was raised.
  Status status;
  // status != 0 once the response head arrived, also when the body was then cut short (status
  // not OK): body holds what arrived.
  ClientResponse response;
  bool reused = false;  // the answer came over a pooled keep-alive connection

  bool answered() const { return response.status != 0; }
};

// Thread-safe and cheap: the connections live in the loops' pools, not here.
class AsyncClient {
 public:
  using Callback = std::function<void(AsyncResult)>;

  explicit AsyncClient(AsyncClientOptions options = {}) : opts_(options) {}

  // Sends one request to `upstream` ("host:port" or "[v6]:port") over a connection of `loop`'s
  // pool (or a new one) and calls `done` once, on one of the loop's threads, when the response
  // has been read or the exchange failed. `done` must not block or throw. A body without a
  // Content-Type header is sent as application/json.
  // REQUIRES: the loop runs until `done` was called (a Server waits for its async handlers).
  void Send(EventLoop& loop, std::string_view upstream, std::string_view method, std::string_view target,
            std::string body, const Headers& headers, Callback done) const;
  // The same with a body the caller shares (a proxy that may send it again to another upstream
  // keeps one copy for all its attempts). REQUIRES: body is not null. With `cancel`, raising it
  // ends the exchange: its connection is closed (the upstream sees its client go away) and
  // `done` gets CANCELLED, unless the answer was complete already. With `tls`, the upstream is
  // spoken to over HTTPS and must present a certificate `tls` verifies (see above).
  void Send(EventLoop& loop, std::string_view upstream, std::string_view method, std::string_view target,
            std::shared_ptr<const std::string> body, const Headers& headers, Callback done,
            std::shared_ptr<CancelSignal> cancel = nullptr, std::shared_ptr<const TlsTrust> tls = nullptr) const;

  // Idle connections in `loop`'s pool for `upstream` (HTTPS ones with `tls`: those made with that
  // trust) (for tests and metrics). Any thread.
  static size_t IdleConnections(EventLoop& loop, std::string_view upstream, const TlsTrust* tls = nullptr);

 private:
  const AsyncClientOptions opts_;
};

}  // namespace aicloud::http
