#include "http/router.h"

#include <algorithm>
#include <exception>
#include <future>
#include <optional>
#include <set>
#include <string_view>

namespace aicloud::http {
namespace {

// The non-empty segments of `path`, into `out` (cleared first).
void SplitPath(std::string_view path, std::vector<std::string_view>* parts) {
  std::vector<std::string_view>& out = *parts;
  out.clear();
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    std::string_view seg = path.substr(start, slash == std::string_view::npos ? slash : slash - start);
    if (!seg.empty()) out.push_back(seg);
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
}

// Whether a path segment, percent-decoded, is `literal` (decoding only when it holds an escape).
bool SegmentIs(std::string_view segment, std::string_view literal) {
  if (segment.find('%') == std::string_view::npos) return segment == literal;
  return PercentDecode(segment) == literal;
}

// Turns a handler's exception into the 500 every route gives.
template <class F>
Response Guarded(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return Response::Error(500, "internal", e.what());
  } catch (...) {
    return Response::Error(500, "internal", "handler threw a non-standard exception");
  }
}

// The Responder of an async route called from the blocking Dispatch: already on a thread that
// may block, so blocking work runs inline and the answer lands in a future.
class FutureSink final : public Responder::Sink {
 public:
  std::future<Response> Answer() { return answer_.get_future(); }
  void Deliver(Response response) override { answer_.set_value(std::move(response)); }
  void RunBlocking(std::function<Response()> work) override { Deliver(work()); }
  EventLoop* loop() override { return nullptr; }

 private:
  std::promise<Response> answer_;
};

}  // namespace

void Router::Add(std::string method, std::string pattern, Handler handler) {
  AddRoute({std::move(method), std::move(pattern), {}, std::move(handler), nullptr});
}

void Router::AddAsync(std::string method, std::string pattern, AsyncHandler handler) {
  AddRoute({std::move(method), std::move(pattern), {}, nullptr, std::move(handler)});
}

void Router::AddRoute(Route route) {
  std::vector<std::string_view> parts;
  SplitPath(route.pattern, &parts);
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string_view p = parts[i];
    if (p.size() >= 2 && p.front() == '{' && p.back() == '}') {
      std::string_view name = p.substr(1, p.size() - 2);
      if (name.size() > 3 && name.substr(name.size() - 3) == "...") {
        // Only a trailing rest segment makes sense; elsewhere it is an ordinary parameter.
        if (i + 1 == parts.size()) {
          route.segments.push_back({Segment::Kind::kRest, std::string(name.substr(0, name.size() - 3))});
          continue;
        }
      }
      route.segments.push_back({Segment::Kind::kParam, std::string(name)});
    } else {
      route.segments.push_back({Segment::Kind::kLiteral, std::string(p)});
    }
  }
  bool replaced = false;
  for (Route& r : routes_) {
    if (r.method == route.method && r.pattern == route.pattern) {
      r = std::move(route);
      replaced = true;
      break;
    }
  }
  if (!replaced) routes_.push_back(std::move(route));
  literal_.clear();
  for (size_t i = 0; i < routes_.size(); ++i) {
    const Route& r = routes_[i];
    std::string key = r.method + " ";
    bool literal = true;
    for (const Segment& seg : r.segments) {
      literal = literal && seg.kind == Segment::Kind::kLiteral;
      key += '/';
      key += seg.text;
    }
    if (r.segments.empty()) key += '/';
    if (literal) literal_.emplace(std::move(key), i);  // the first route of a path keeps it
  }
}

Response Router::Dispatch(Request& req) const {
  std::optional<Response> error;
  const Route* route = Match(req, &error);
  if (route == nullptr) return std::move(*error);
  if (route->handler) return Guarded([&] { return route->handler(req); });
  auto sink = std::make_unique<FutureSink>();
  std::future<Response> answer = sink->Answer();
  {
    Responder respond(std::move(sink));
    try {
      route->async(req, respond);
    } catch (const std::exception& e) {
      respond(Response::Error(500, "internal", e.what()));
    } catch (...) {
      respond(Response::Error(500, "internal", "handler threw a non-standard exception"));
    }
  }  // a handler that kept no copy and did not answer gets the Responder's 500 here
  return answer.get();
}

void Router::Dispatch(Request& req, Responder respond) const {
  std::optional<Response> error;
  const Route* route = Match(req, &error);
  if (route == nullptr) return respond(std::move(*error));
  if (route->handler) {
    // The Router outlives serving (see the class comment), so the handler is not copied.
    const Handler* h = &route->handler;
    respond.RunBlocking([h, r = std::move(req)]() mutable { return (*h)(r); });
    return;
  }
  try {
    route->async(req, respond);
  } catch (const std::exception& e) {
    respond(Response::Error(500, "internal", e.what()));
  } catch (...) {
    respond(Response::Error(500, "internal", "handler threw a non-standard exception"));
  }
}

const Router::Route* Router::Match(Request& req, std::optional<Response>* error) const {
  std::string_view raw = req.target.empty() ? std::string_view(req.path) : std::string_view(req.target);
  raw = raw.substr(0, raw.find('?'));
  if (raw.find('%') == std::string_view::npos) {
    // A path spelled as a literal route is (no escapes to decode, no empty segments to drop).
    thread_local std::string key;  // reused: the lookup allocates nothing
    key.assign(req.method);
    key += ' ';
    key += raw;
    if (auto it = literal_.find(key); it != literal_.end()) {
      const Route& route = routes_[it->second];
      req.params.clear();
      req.route = route.pattern;
      return &route;
    }
  }
  thread_local std::vector<std::string_view> parts;  // reused: matching allocates nothing
  SplitPath(raw, &parts);

  // Rank of a match: one entry per path segment (3 literal, 2 param, 1 inside a rest), then 1 for
  // an exact-length pattern or 0 for a rest pattern, so every rank has the same length; larger
  // wins, which makes "/files" beat "/files/{rest...}" on "/files". Kept as characters: a short
  // path's rank fits a string without allocating.
  auto rank_of = [&](const Route& route, std::string* rank) {
    rank->clear();
    size_t i = 0;
    for (const Segment& seg : route.segments) {
      if (seg.kind == Segment::Kind::kRest) {
        rank->resize(parts.size(), '1');
        rank->push_back('0');
        return true;
      }
      if (i >= parts.size() || (seg.kind == Segment::Kind::kLiteral && !SegmentIs(parts[i], seg.text))) return false;
      rank->push_back(seg.kind == Segment::Kind::kLiteral ? '3' : '2');
      ++i;
    }
    if (i != parts.size()) return false;
    rank->push_back('1');
    return true;
  };
  const Route* best = nullptr;
  bool path_matched = false;  // by a route of any method
  std::string best_rank, rank;
  for (const Route& route : routes_) {
    if (!rank_of(route, &rank)) continue;
    path_matched = true;
    if (route.method != req.method) continue;
    if (best == nullptr || rank > best_rank) {
      best = &route;
      best_rank.swap(rank);
    }
  }

  if (best == nullptr) {
    std::set<std::string> allowed;
    if (path_matched) {
      for (const Route& route : routes_) {
        if (rank_of(route, &rank)) allowed.insert(route.method);
      }
    }
    if (allowed.empty()) {
      *error = Response::Error(404, "not_found", "no route for " + req.method + " " + req.path);
      return nullptr;
    }
    std::string allow;
    for (const std::string& m : allowed) allow += (allow.empty() ? "" : ", ") + m;
    Response r = Response::Error(405, "method_not_allowed",
                                 "method " + req.method + " not allowed for " + req.path +
                                     " (allowed: " + allow + ")");
    r.headers.emplace_back("Allow", allow);
    *error = std::move(r);
    return nullptr;
  }

  req.params.clear();
  size_t i = 0;
  for (const Segment& seg : best->segments) {
    if (seg.kind == Segment::Kind::kParam) {
      req.params[seg.text] = PercentDecode(parts[i]);
    } else if (seg.kind == Segment::Kind::kRest) {
      std::string rest;
      for (size_t j = i; j < parts.size(); ++j) {
        if (j > i) rest += '/';
        rest += PercentDecode(parts[j]);
      }
      req.params[seg.text] = std::move(rest);
      break;
    }
    ++i;
  }
  req.route = best->pattern;
  return best;
}

}  // namespace aicloud::http
