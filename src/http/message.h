// Request and Response: the plain values that HTTP handlers take and return. No Beast or Asio
// types appear here, so handler code compiles fast and tests can build requests by hand.
//
//   Response GetJob(Request& req) {
//     StatusOr<json> job = store->Get({"Job", req.params["tenant"], req.params["name"]});
//     if (!job.ok()) return ErrorResponse(job.status());   // NOT_FOUND -> 404 {"error": ...}
//     return Response::Json(200, *job);
//   }
//
//   Response Watch(Request& req) {   // Server-Sent Events
//     Response r;
//     r.content_type = "text/event-stream";
//     r.stream = [](StreamWriter& w) {
//       while (!w.closed()) { if (!w.SendEvent("tick", "{}")) break; Sleep(1s); }
//     };
//     return r;
//   }
#pragma once

#include <any>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "http/cancel.h"
#include "http/header_map.h"

namespace aicloud::http {

// One parsed HTTP request. A value type; the server hands each handler its own copy.
struct Request {
  std::string method;                          // "GET", "POST", ...
  std::string target;                          // raw, e.g. "/api/v1/jobs?limit=5"
  std::string path;                            // percent-decoded path, no query
  std::map<std::string, std::string> query;    // decoded query parameters (last wins)
  HeaderMap headers;                           // names lower-cased; repeated headers joined by ", "
  std::string body;
  std::string remote;                          // "127.0.0.1:43122"
  std::map<std::string, std::string> params;   // filled by Router from "{name}" segments
  std::string route;  // the matched pattern, e.g. "/api/v1/tenants/{tenant}/jobs" ("" if none)
  // Raised by the server when the client goes away before the answer (checked about once per
  // ServerOptions::client_check_interval); null for requests not read by a server.
  std::shared_ptr<CancelSignal> client_gone;
  // One slot per kept-alive plain connection, handed to each of its requests (a request moved to
  // a worker still writes into it; the connection reads its requests one after another, so they
  // never use it at once). A handler may remember per-connection work here: the gateway keeps the
  // caller the connection's last Authorization header authenticated. Null for requests not read
  // by a plain connection of a server (TLS connections, clients, tests).
  std::shared_ptr<std::any> connection_memo;

  // "" if absent. REQUIRES: lower_name is lower-case.
  std::string Header(std::string_view lower_name) const;
  // The same without a copy: valid while the headers are not changed.
  std::string_view HeaderView(std::string_view lower_name) const;
  std::string Query(std::string_view name, std::string_view def = "") const;
};

// Handed to streaming responses (SSE, log follow). Used by one thread at a time: the one the
// server runs `Response::stream` on.
class StreamWriter {
 public:
  virtual ~StreamWriter() = default;
  // Writes one chunk (HTTP/1.1 chunked encoding); blocks until written. false once the client is
  // gone or the server is stopping; an empty chunk is a no-op that reports the same.
  virtual bool Write(std::string_view chunk) = 0;
  // True once the client disconnected or the server is stopping: the stream should return.
  virtual bool closed() const = 0;
  // Server-Sent Events framing: "id: ..\nevent: ..\ndata: ..\n\n" (multi-line data split into
  // several data: lines; empty event/id omitted). One Write.
  bool SendEvent(std::string_view event, std::string_view data, std::string_view id = {});
};

// "id: 7\nevent: put\ndata: a\ndata: b\n\n" for SendEvent("put", "a\nb", "7").
std::string FormatSseEvent(std::string_view event, std::string_view data, std::string_view id = {});

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
  // When set, the server sends the status+headers with chunked transfer encoding and calls
  // `stream` on a thread of its own (it may block, e.g. long-poll a store); the response ends when
  // it returns, and the connection is closed after it. `body` is ignored.
  std::function<void(StreamWriter&)> stream;

  static Response Json(int status, const nlohmann::json& body);
  static Response Text(int status, std::string body,
                       std::string content_type = "text/plain; charset=utf-8");
  // {"error": {"code": <code>, "message": <message>, "field": <field, omitted when empty>}}
  static Response Error(int status, std::string_view code, std::string_view message,
                        std::string_view field = {});
};

// HTTP status for a Status code: INVALID_ARGUMENT, FAILED_PRECONDITION -> 400; OUT_OF_RANGE -> 410
// (the store's "watcher too far behind", Kubernetes' 410 Gone); NOT_FOUND -> 404; ALREADY_EXISTS,
// ABORTED -> 409; PERMISSION_DENIED -> 403; UNAUTHENTICATED -> 401; RESOURCE_EXHAUSTED -> 429;
// UNAVAILABLE -> 503; DEADLINE_EXCEEDED -> 504; UNIMPLEMENTED -> 501; OK -> 200; others -> 500.
int HttpStatusOf(const Status& status);
// Error(HttpStatusOf(status), "not_found", status.message(), field): the code is the canonical
// code name in lower case.
Response ErrorResponse(const Status& status, std::string_view field = {});

// "%41b%2Fc" -> "Ab/c". '+' stays '+' (see ParseQuery); malformed escapes are kept as they are.
std::string PercentDecode(std::string_view s);
// "a=1&b=x+y&c" -> {a: "1", b: "x y", c: ""}; names and values percent-decoded; last one wins.
std::map<std::string, std::string> ParseQuery(std::string_view query);

}  // namespace aicloud::http
