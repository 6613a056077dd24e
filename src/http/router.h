// Router: maps (method, path pattern) to a Handler (blocking: runs on a worker thread) or an
// AsyncHandler (non-blocking: runs on the I/O thread, see responder.h). Build it once at startup,
// then hand `Dispatch` to the Server; Dispatch is const and safe to call from many threads at once.
//
//   Router router;
//   router.Add("GET", "/api/v1/tenants/{tenant}/jobs/{name}", [&](Request& req) {
//     return GetJob(req.params["tenant"], req.params["name"]);
//   });
//   router.Add("GET", "/static/{rest...}", ServeFile);      // req.params["rest"] = "css/a.css"
//   auto server = Server::Start({.port = 8080},
//                               [&](Request& req) { return router.Dispatch(req); });
//   // or, to run AddAsync routes on the I/O thread (blocking routes still go to the workers):
//   auto server = Server::Start({.port = 8080}, [&](Request& req, Responder respond) {
//     router.Dispatch(req, std::move(respond));
//   });
//
// Matching: a path is split at '/', empty segments ignored; each segment is percent-decoded
// after splitting, so "%2F" inside a parameter stays in that parameter. A literal segment beats
// "{param}", which beats "{rest...}", compared left to right. A route for another method on the
// same path gives 405 with an Allow header rather than 404.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "http/message.h"
#include "http/responder.h"

namespace aicloud::http {

using Handler = std::function<Response(Request&)>;

// Thread-compatible: Add before serving, then Dispatch concurrently.
class Router {
 public:
  // pattern: "/api/v1/tenants/{tenant}/jobs/{name}"; a "{name}" segment matches one non-empty
  // path segment. A trailing "{rest...}" matches the remainder (zero or more segments, joined
  // with '/'). Literal segments win over parameters. A later Add of the same method and pattern
  // replaces the earlier one.
  void Add(std::string method, std::string pattern, Handler handler);
  // The same for a non-blocking handler (it replaces a blocking one of the same method and
  // pattern, and the other way round).
  void AddAsync(std::string method, std::string pattern, AsyncHandler handler);

  // Calls the matching handler (fills req.params and req.route). No path match -> 404 error JSON
  // ("no route for GET /x"); path matches but not the method -> 405 with an Allow header.
  // A handler that throws -> 500 error JSON with the exception's message. An async route is
  // called with a Responder whose loop() is null, and Dispatch waits for its answer.
  Response Dispatch(Request& req) const;
  // From an I/O thread (Server's AsyncHandler form): an async route runs inline; a blocking one
  // is handed to respond.RunBlocking; 404/405 are answered inline.
  void Dispatch(Request& req, Responder respond) const;

 private:
  struct Segment {
    enum class Kind { kLiteral, kParam, kRest };
    Kind kind;
    std::string text;  // literal text or parameter name
  };
  struct Route {
    std::string method;
    std::string pattern;
    std::vector<Segment> segments;
    Handler handler;     // exactly one of handler and async is set
    AsyncHandler async;
  };

  void AddRoute(Route route);
  // The route for req (req.params and req.route filled), or nullptr and *error set to 404/405
  // (a Response is built only then).
  const Route* Match(Request& req, std::optional<Response>* error) const;

  std::vector<Route> routes_;
  // "METHOD /canonical/path" of every route made of literal segments only -> its index in
  // routes_ (the first, as Match's ties go): such a route outranks every other on its own path,
  // so a request for exactly that path needs no ranking.
  std::unordered_map<std::string, size_t> literal_;
};

}  // namespace aicloud::http
