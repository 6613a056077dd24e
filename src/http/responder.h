// Responder and AsyncHandler: the non-blocking handler form. An AsyncHandler runs on the
// server's I/O thread, where it must not block; it answers through its Responder, at once or
// later from any thread (an upstream call's completion), or hands blocking work to the worker
// pool with RunBlocking.
//
//   router.AddAsync("POST", "/v1/echo", [](Request& req, Responder respond) {
//     if (req.body.empty()) return respond(Response::Error(400, "bad_request", "empty body"));
//     if (NeedsTheStore(req)) {                         // would block: take a worker
//       return respond.RunBlocking([req = std::move(req)]() mutable { return Slow(req); });
//     }
//     client.Send(*respond.loop(), ..., [respond](AsyncResult r) { respond(Answer(r)); });
//   });
//
// An answer given on the I/O thread of the request's connection (an upstream call's completion)
// may be written before operator() returns, and the connection may go on to its next request:
// the handler's `Request&` is not valid after it answered.
//
// Exactly one answer counts: the first call of operator() (or RunBlocking's result); later ones
// are ignored. A Responder whose last copy is dropped without answering answers 500, so a lost
// callback shows up as an error rather than a connection that hangs.
#pragma once

#include <functional>
#include <memory>

#include "http/message.h"

namespace aicloud::http {

// The event loop (an I/O thread's Asio io_context) a request arrived on. Opaque outside the http
// room: async clients take it so that a proxied call's sockets live on the same thread as the
// connection that asked for it.
class EventLoop;

// Copyable and thread-safe; copies answer the same request.
class Responder {
 public:
  // Where an answer goes. Implemented by the server (the connection's coroutine) and by the
  // blocking Router::Dispatch (a future).
  class Sink {
   public:
    virtual ~Sink() = default;
    // Called once.
    virtual void Deliver(Response response) = 0;
    // Runs `work` where it may block (the worker pool) and then calls Deliver with its result
    // (a throwing `work` gives a 500). Called at most once, instead of Deliver.
    virtual void RunBlocking(std::function<Response()> work) = 0;
    // The loop the request arrived on; nullptr when the caller is already on a thread that may
    // block (then an async handler should simply do its work inline).
    virtual EventLoop* loop() = 0;
  };

  explicit Responder(std::unique_ptr<Sink> sink);

  // Answers the request (the first answer counts). Any thread.
  void operator()(Response response) const;
  // Answers with what `work` returns, run on the server's worker pool (it may block). Ignored
  // when the request was already answered.
  void RunBlocking(std::function<Response()> work) const;
  // See Sink::loop.
  EventLoop* loop() const;
  // True once answered (or handed to RunBlocking).
  bool answered() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// A non-blocking handler: called on an I/O thread. `req` is valid during the call only (move out
// what you keep); answer through `respond`.
using AsyncHandler = std::function<void(Request& req, Responder respond)>;

}  // namespace aicloud::http
