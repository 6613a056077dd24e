// Client: a small synchronous HTTP/1.1 client (http and https) for the CLI, agents and tests.
//
//   Client api("https://127.0.0.1:8443", {.ca_file = "ca.pem"});
//   StatusOr<ClientResponse> r = api.Send("POST", "/api/v1/tenants/nlp/jobs", job.dump());
//   if (!r.ok()) return r.status();              // UNAVAILABLE, DEADLINE_EXCEEDED, ...
//   if (r->status != 201) ...                    // HTTP errors are responses, not Status
//
//   SseParser sse;                               // follow a server-sent event stream
//   Status s = api.Stream("GET", "/api/v1/watch?kind=Job", "", {}, [&](std::string_view bytes) {
//     for (SseEvent& e : sse.Feed(bytes)) Print(e);
//     return !stop;                              // false ends the stream (and the connection)
//   });
//
// One keep-alive connection is kept and reused; when a reused connection turns out to have been
// closed by the server before any response byte arrives, the request is sent once more on a new
// connection (this may repeat a non-idempotent request the server never answered).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "http/cancel.h"
#include "http/message.h"
#include "http/sse.h"

namespace aicloud::http {

struct ClientOptions {
  std::string ca_file;              // https: trust these CAs (default system store)
  std::string ca_pem;               // https: trust these PEM CA certificates (with or instead of ca_file)
  std::string cert_file, key_file;  // https: client certificate (mTLS)
  bool insecure_skip_verify = false;
  // Connect + whole request for Send; connect + response head, then each read, for Stream.
  std::chrono::milliseconds timeout{30000};
};

struct ClientResponse {
  int status = 0;
  std::string body;
  HeaderMap headers;  // lower-cased names
};

using Headers = std::vector<std::pair<std::string, std::string>>;

// The Status an aicloud server's answer stands for: OK for 2xx; otherwise the code its error body
// names ({"error": {"code": "aborted", "message": ...}}, http::ErrorResponse's shape) with its
// message, or, for a body without one, the code the HTTP status usually means (401
// UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 NOT_FOUND, 409 ABORTED, 429 RESOURCE_EXHAUSTED,
// 5xx UNAVAILABLE, other 4xx INVALID_ARGUMENT) with "HTTP <status>" and the body's start.
Status StatusOfResponse(const ClientResponse& response);

// Thread-compatible: one thread at a time (a call's CancelSignal may be raised from any thread).
class Client {
 public:
  // base_url: "http://127.0.0.1:8080" or "https://host:port", optionally with a path prefix that
  // is put before every target. A malformed URL makes every call return INVALID_ARGUMENT.
  explicit Client(std::string base_url, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends one request and reads the whole response. A body without a Content-Type header is sent
  // as application/json. Errors: INVALID_ARGUMENT (URL, TLS files), UNAVAILABLE (connect, TLS
  // handshake, connection lost, an answer with more than HeaderMap::kMaxFields fields),
  // DEADLINE_EXCEEDED (timeout), CANCELLED (`cancel` was raised, from any thread: the call's
  // thread closes the connection as soon as it next waits on it — at once while it waits on the
  // network, after on_chunk returns while that runs — so the peer sees its client leave). One
  // signal per request: each call given one leaves a small callback in it until it is raised or
  // Reset.
  StatusOr<ClientResponse> Send(std::string_view method, std::string_view target,
                                std::string_view body = {}, const Headers& headers = {},
                                CancelSignal* cancel = nullptr);

  // Streams the response body: on_chunk gets body bytes as they arrive; return false to stop
  // (which closes the connection). Returns the status line/headers via *head (may be null),
  // filled before the first on_chunk call. UNAVAILABLE if the connection fails; CANCELLED as
  // for Send, also between chunks.
  Status Stream(std::string_view method, std::string_view target, std::string_view body,
                const Headers& headers, const std::function<bool(std::string_view)>& on_chunk,
                ClientResponse* head = nullptr, CancelSignal* cancel = nullptr);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace aicloud::http
