#include "http/responder.h"

#include <atomic>
#include <exception>
#include <utility>

namespace aicloud::http {

struct Responder::State {
  explicit State(std::unique_ptr<Sink> s) : sink(std::move(s)) {}
  ~State() {
    if (!done.exchange(true)) {
      sink->Deliver(Response::Error(500, "internal", "the handler dropped the request without answering"));
    }
  }
  std::unique_ptr<Sink> sink;
  std::atomic<bool> done{false};
};

Responder::Responder(std::unique_ptr<Sink> sink) : state_(std::make_shared<State>(std::move(sink))) {}

void Responder::operator()(Response response) const {
  if (state_->done.exchange(true)) return;
  state_->sink->Deliver(std::move(response));
}

void Responder::RunBlocking(std::function<Response()> work) const {
  if (state_->done.exchange(true)) return;
  state_->sink->RunBlocking([work = std::move(work)]() -> Response {
    try {
      return work();
    } catch (const std::exception& e) {
      return Response::Error(500, "internal", e.what());
    } catch (...) {
      return Response::Error(500, "internal", "handler threw a non-standard exception");
    }
  });
}

EventLoop* Responder::loop() const { return state_->sink->loop(); }

bool Responder::answered() const { return state_->done.load(); }

}  // namespace aicloud::http
