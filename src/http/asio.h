// Private to the http room: the one place Boost.Asio and Boost.Beast are included, so the
// Debian Boost 1.74 quirks are handled once. Never include this from a public header.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "http/header_map.h"
#include "http/tls_trust.h"

namespace aicloud::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using error_code = boost::system::error_code;

// The opaque loop of responder.h: a server's io_context, which async clients share so that a
// proxied call runs on the thread of the connection that made it.
class EventLoop : public asio::io_context {
 public:
  explicit EventLoop(int threads) : asio::io_context(threads), threads_(threads) {}

  // The executor for one connection's work: a strand when several threads run the loop, the
  // loop itself when one does (everything already runs in order there, and a strand would cost
  // a queue and a lock per completion).
  asio::any_io_executor ConnectionExecutor() {
    if (threads_ <= 1) return get_executor();
    return asio::make_strand(*this);
  }

 private:
  const int threads_;
};

// What a TlsTrust holds: an OpenSSL client context that trusts only its CAs and verifies peers.
struct TlsTrust::Context {
  asio::ssl::context ssl{asio::ssl::context::tls_client};
};

// Beast 1.74 uses boost::string_view; these convert at the edges.
inline std::string_view Sv(beast::string_view s) { return {s.data(), s.size()}; }
inline beast::string_view Bv(std::string_view s) { return {s.data(), s.size()}; }

// Beast's parser writing a message's headers (HeaderMap::Add) and body straight into our own types,
// with no Beast fields container in between: what RequestReader (server) and ResponseReader
// (async client) share. Each adds its start line and any field it looks at.
template <bool isRequest>
class ParserInto : public bhttp::basic_parser<isRequest> {
 protected:
  // `reserve_cap`: at most this much is reserved up front for an announced body (more grows as
  // it arrives).
  ParserInto(HeaderMap& headers, std::string& body, size_t reserve_cap)
      : headers_(headers), body_(body), reserve_cap_(reserve_cap) {}

  void on_field_impl(bhttp::field, beast::string_view name, beast::string_view value, error_code& ec) override {
    if (!headers_.Add(Sv(name), Sv(value))) ec = bhttp::error::header_limit;  // over kMaxFields
  }

 private:
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>& length, error_code&) override {
    if (length) body_.reserve(static_cast<size_t>(std::min<std::uint64_t>(*length, reserve_cap_)));
  }
  size_t on_body_impl(beast::string_view body, error_code&) override {
    body_.append(body.data(), body.size());
    return body.size();
  }
  void on_chunk_header_impl(std::uint64_t, beast::string_view, error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, beast::string_view body, error_code&) override {
    body_.append(body.data(), body.size());
    return body.size();
  }
  void on_finish_impl(error_code&) override {}

  HeaderMap& headers_;
  std::string& body_;
  const size_t reserve_cap_;
};

// More fields than a HeaderMap takes: such a message is answered as a header over its limit.
inline bool TooManyFields(const bhttp::fields& f) {
  return static_cast<size_t>(std::distance(f.begin(), f.end())) > HeaderMap::kMaxFields;
}

// A Beast message's headers (REQUIRES: !TooManyFields), names lower-cased, repeated fields joined
// with ", ".
inline HeaderMap HeadersOf(const bhttp::fields& res) {
  HeaderMap out;
  for (const auto& field : res) out.Add(Sv(field.name_string()), Sv(field.value()));
  return out;
}

// "1.2.3.4:80" or "[::1]:80".
inline std::string EndpointString(const tcp::endpoint& ep) {
  std::string addr = ep.address().to_string();
  if (ep.address().is_v6()) addr = "[" + addr + "]";
  return addr + ":" + std::to_string(ep.port());
}

}  // namespace aicloud::http
