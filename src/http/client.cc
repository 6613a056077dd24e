#include "http/client.h"

#include <cctype>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>

#include <nlohmann/json.hpp>

#include "http/asio.h"

// Every operation is an async Beast operation driven to completion by running the client's own
// io_context, because basic_stream timeouts (expires_at) only apply to async operations.

namespace aicloud::http {
namespace {

using TlsStream = beast::ssl_stream<beast::tcp_stream>;

bool IsIpLiteral(const std::string& host) {
  error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

Status DeadlineExceeded(std::string m) { return Status(StatusCode::kDeadlineExceeded, std::move(m)); }

}  // namespace

class Client::Impl {
 public:
  static constexpr size_t kReadBytes = 16 * 1024;  // room the read buffer keeps for an answer

  Impl(std::string base_url, ClientOptions options) : opts_(std::move(options)) {
    init_ = ParseUrl(base_url);
    if (init_.ok() && tls_) init_ = InitTls();
  }

  StatusOr<ClientResponse> Send(std::string_view method, std::string_view target,
                                std::string_view body, const Headers& headers, CancelSignal* cancel) {
    if (!init_.ok()) return init_;
    if (cancel != nullptr && cancel->cancelled()) return Cancelled(method, target);
    CancelScope scope(this, cancel);
    auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
    bhttp::request<bhttp::string_body> req = BuildRequest(method, target, body, headers);
    for (int attempt = 0;; ++attempt) {
      bool reused = connected_;
      if (!connected_) AICLOUD_RETURN_IF_ERROR(Connect(deadline));
      Lowest().expires_at(deadline);
      bhttp::response_parser<bhttp::string_body> parser;
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());
      error_code ec = WithStream([&](auto& s) {
        return Run([&](auto h) { bhttp::async_write(s, req, std::move(h)); });
      });
      if (!ec) {
        // Beast reads what the buffer's spare capacity holds (512 bytes when it has none): give
        // it room, so a large answer does not take hundreds of reads.
        if (buffer_.capacity() < kReadBytes) buffer_.reserve(kReadBytes);
        ec = WithStream([&](auto& s) {
          return Run([&](auto h) { bhttp::async_read(s, buffer_, parser, std::move(h)); });
        });
      }
      if (ec) {
        Close();
        if (reused && attempt == 0 && !parser.got_some() && ec != beast::error::timeout && !aborted_) continue;
        return ErrorFor(ec, method, target);
      }
      ClientResponse out;
      auto& res = parser.get();
      if (TooManyFields(res)) return TooManyFieldsError(method, target);
      out.status = static_cast<int>(res.result_int());
      out.headers = HeadersOf(res);
      bool keep_alive = res.keep_alive();
      out.body = std::move(res.body());
      if (!keep_alive) Close();
      return out;
    }
  }

  Status Stream(std::string_view method, std::string_view target, std::string_view body,
                const Headers& headers, const std::function<bool(std::string_view)>& on_chunk,
                ClientResponse* head, CancelSignal* cancel) {
    if (!init_.ok()) return init_;
    if (cancel != nullptr && cancel->cancelled()) return Cancelled(method, target);
    CancelScope scope(this, cancel);
    auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
    bhttp::request<bhttp::string_body> req = BuildRequest(method, target, body, headers);
    std::optional<bhttp::response_parser<bhttp::buffer_body>> parser;
    for (int attempt = 0;; ++attempt) {
      bool reused = connected_;
      if (!connected_) AICLOUD_RETURN_IF_ERROR(Connect(deadline));
      Lowest().expires_at(deadline);
      parser.emplace();
      parser->body_limit(std::numeric_limits<std::uint64_t>::max());
      error_code ec = WithStream([&](auto& s) {
        return Run([&](auto h) { bhttp::async_write(s, req, std::move(h)); });
      });
      if (!ec) {
        ec = WithStream([&](auto& s) {
          return Run([&](auto h) { bhttp::async_read_header(s, buffer_, *parser, std::move(h)); });
        });
      }
      if (!ec) break;
      Close();
      if (reused && attempt == 0 && !parser->got_some() && ec != beast::error::timeout && !aborted_) continue;
      return ErrorFor(ec, method, target);
    }

    auto& res = parser->get();
    if (TooManyFields(res)) return TooManyFieldsError(method, target);
    ClientResponse head_local;
    head_local.status = static_cast<int>(res.result_int());
    head_local.headers = HeadersOf(res);
    bool keep_alive = res.keep_alive();
    // An error answer is small and wanted whole: keep it in head->body as well.
    bool collect = head != nullptr && (head_local.status < 200 || head_local.status >= 300);
    if (head != nullptr) *head = head_local;

    std::vector<char> buf(16384);
    if (buffer_.capacity() < kReadBytes) buffer_.reserve(kReadBytes);  // as in Send
    while (!parser->is_done()) {
      res.body().data = buf.data();
      res.body().size = buf.size();
      Lowest().expires_after(opts_.timeout);
      error_code ec = WithStream([&](auto& s) {
        return Run([&](auto h) { bhttp::async_read_some(s, buffer_, *parser, std::move(h)); });
      });
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) {
        Close();
        return ErrorFor(ec, method, target);
      }
      size_t n = buf.size() - res.body().size;
      if (n == 0) continue;
      std::string_view bytes(buf.data(), n);
      if (collect && head->body.size() < (1u << 20)) head->body.append(bytes);
      if (!on_chunk(bytes)) {
        Close();  // the rest of the response is still coming: the connection is unusable
        return OkStatus();
      }
    }
    if (!keep_alive) Close();
    return OkStatus();
  }

  ~Impl() { Close(); }

 private:
  Status ParseUrl(std::string_view url) {
    auto bad = [&](std::string_view why) {
      return InvalidArgumentError("http client: bad base URL \"" + std::string(url) + "\": " + std::string(why));
    };
    std::string_view rest;
    if (url.starts_with("http://")) {
      tls_ = false;
      rest = url.substr(7);
    } else if (url.starts_with("https://")) {
      tls_ = true;
      rest = url.substr(8);
    } else {
      return bad("want http:// or https://");
    }
    size_t slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    if (slash != std::string_view::npos) prefix_ = std::string(rest.substr(slash));
    while (!prefix_.empty() && prefix_.back() == '/') prefix_.pop_back();
    if (prefix_.find_first_of("?#") != std::string::npos) return bad("no query or fragment allowed");
    std::string_view port;
    if (authority.starts_with("[")) {
      size_t close = authority.find(']');
      if (close == std::string_view::npos) return bad("unterminated [IPv6 address]");
      host_ = std::string(authority.substr(1, close - 1));
      std::string_view after = authority.substr(close + 1);
      if (!after.empty()) {
        if (after.front() != ':') return bad("junk after ]");
        port = after.substr(1);
      }
    } else {
      size_t colon = authority.rfind(':');
      host_ = std::string(authority.substr(0, colon));
      if (colon != std::string_view::npos) port = authority.substr(colon + 1);
    }
    if (host_.empty()) return bad("no host");
    if (host_.find('@') != std::string::npos) return bad("user info is not supported");
    if (port.empty()) {
      port_ = tls_ ? "443" : "80";
    } else {
      for (char c : port) {
        if (c < '0' || c > '9') return bad("port is not a number");
      }
      if (port.size() > 5 || std::stoi(std::string(port)) > 65535) return bad("port out of range");
      port_ = std::string(port);
    }
    bool bracket = host_.find(':') != std::string::npos;
    host_header_ = bracket ? "[" + host_ + "]" : host_;
    if (port_ != (tls_ ? "443" : "80")) host_header_ += ":" + port_;
    return OkStatus();
  }

  Status InitTls() {
    ssl_.emplace(asio::ssl::context::tls_client);
    ssl_->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                      asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                      asio::ssl::context::no_tlsv1_1);
    error_code ec;
    if (!opts_.ca_file.empty()) {
      ssl_->load_verify_file(opts_.ca_file, ec);
      if (ec) return InvalidArgumentError("http client: ca_file " + opts_.ca_file + ": " + ec.message());
    } else if (opts_.ca_pem.empty()) {
      ssl_->set_default_verify_paths(ec);
    }
    if (!opts_.ca_pem.empty()) {
      ssl_->add_certificate_authority(asio::buffer(opts_.ca_pem), ec);
      if (ec) return InvalidArgumentError("http client: ca_pem: the CA certificates do not parse: " + ec.message());
    }
    if (opts_.cert_file.empty() != opts_.key_file.empty()) {
      return InvalidArgumentError("http client: cert_file and key_file must be set together");
    }
    if (!opts_.cert_file.empty()) {
      ssl_->use_certificate_chain_file(opts_.cert_file, ec);
      if (ec) return InvalidArgumentError("http client: cert_file " + opts_.cert_file + ": " + ec.message());
      ssl_->use_private_key_file(opts_.key_file, asio::ssl::context::pem, ec);
      if (ec) return InvalidArgumentError("http client: key_file " + opts_.key_file + ": " + ec.message());
    }
    return OkStatus();
  }

  bhttp::request<bhttp::string_body> BuildRequest(std::string_view method, std::string_view target,
                                                  std::string_view body, const Headers& headers) {
    bhttp::request<bhttp::string_body> req;
    req.version(11);
    req.method_string(Bv(method));
    std::string full = prefix_;
    if (target.empty() || target.front() != '/') full += '/';
    full.append(target);
    req.target(full);
    req.set(bhttp::field::host, host_header_);
    req.set(bhttp::field::user_agent, "aicloud-http");
    for (const auto& [name, value] : headers) req.insert(name, value);
    if (!body.empty() && req.find(bhttp::field::content_type) == req.end()) {
      req.set(bhttp::field::content_type, "application/json");
    }
    req.body().assign(body);
    if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") req.prepare_payload();
    return req;
  }

  Status Connect(std::chrono::steady_clock::time_point deadline) {
    Close();
    if (aborted_) return Status(StatusCode::kCancelled, "http client: cancelled before connecting to " + host_ + ":" + port_);
    std::string where = host_ + ":" + port_;
    error_code ec;
    tcp::resolver resolver(ioc_);
    tcp::resolver::results_type results = resolver.resolve(host_, port_, ec);
    if (ec) return UnavailableError("http client: cannot resolve " + where + ": " + ec.message());
    if (tls_) {
      tls_stream_ = std::make_unique<TlsStream>(ioc_, *ssl_);
    } else {
      tcp_ = std::make_unique<beast::tcp_stream>(ioc_);
    }
    Lowest().expires_at(deadline);
    ec = Run([&](auto h) { Lowest().async_connect(results, std::move(h)); });
    if (ec) {
      Close();
      if (aborted_) return Status(StatusCode::kCancelled, "http client: connect to " + where + " cancelled");
      if (ec == beast::error::timeout) return DeadlineExceeded("http client: connect to " + where + " timed out");
      return UnavailableError("http client: cannot connect to " + where + ": " + ec.message());
    }
    Lowest().socket().set_option(tcp::no_delay(true), ec);
    if (tls_) {
      SSL* ssl = tls_stream_->native_handle();
      bool ip = IsIpLiteral(host_);
      if (!ip) SSL_set_tlsext_host_name(ssl, host_.c_str());
      if (opts_.insecure_skip_verify) {
        tls_stream_->set_verify_mode(asio::ssl::verify_none);
      } else {
        tls_stream_->set_verify_mode(asio::ssl::verify_peer);
        X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
        if (ip) {
          X509_VERIFY_PARAM_set1_ip_asc(param, host_.c_str());
        } else {
          X509_VERIFY_PARAM_set1_host(param, host_.c_str(), 0);
        }
      }
      ec = Run([&](auto h) { tls_stream_->async_handshake(asio::ssl::stream_base::client, std::move(h)); });
      if (ec) {
        Close();
        if (aborted_) return Status(StatusCode::kCancelled, "http client: TLS handshake with " + where + " cancelled");
        if (ec == beast::error::timeout) return DeadlineExceeded("http client: TLS handshake with " + where + " timed out");
        return UnavailableError("http client: TLS handshake with " + where + " failed: " + ec.message());
      }
    }
    connected_ = true;
    return OkStatus();
  }

  void Close() {
    if (tcp_ || tls_stream_) {
      Lowest().close();
    }
    tcp_.reset();
    tls_stream_.reset();
    buffer_.clear();
    connected_ = false;
    ioc_.restart();
    ioc_.poll();  // let the cancelled operations' handlers go
  }

  std::string What(std::string_view method, std::string_view target) const {
    return "http client: " + std::string(method) + " " + host_ + ":" + port_ + prefix_ + std::string(target);
  }

  Status Cancelled(std::string_view method, std::string_view target) const {
    return Status(StatusCode::kCancelled, What(method, target) + ": cancelled");
  }

  Status TooManyFieldsError(std::string_view method, std::string_view target) {
    Close();
    return UnavailableError(What(method, target) + ": the answer has more than " +
                            std::to_string(HeaderMap::kMaxFields) + " header fields");
  }

  Status ErrorFor(const error_code& ec, std::string_view method, std::string_view target) const {
    if (aborted_) return Cancelled(method, target);
    std::string what = What(method, target);
    if (ec == beast::error::timeout) {
      return DeadlineExceeded(what + ": timed out after " + std::to_string(opts_.timeout.count()) + " ms");
    }
    return UnavailableError(what + ": " + ec.message());
  }

  beast::tcp_stream& Lowest() { return tls_stream_ ? beast::get_lowest_layer(*tls_stream_) : *tcp_; }

  template <class F>
  error_code WithStream(F&& f) {
    if (tls_stream_) return f(*tls_stream_);
    return f(*tcp_);
  }

  // Starts one async operation and runs the io_context until it completes.
  template <class Init>
  error_code Run(Init&& init) {
    error_code result = asio::error::would_block;
    init([&result](error_code ec, auto&&...) { result = ec; });
    ioc_.restart();
    ioc_.run();
    return result;
  }

  // Ties one call to its CancelSignal. Raising the signal, on any thread, posts Abort to this
  // client's io_context, which closes the socket: the call's pending operation ends and the call
  // returns CANCELLED. The signal keeps its callback after the call; `impl` is cleared when the
  // call ends (under `mu`, so a post never reaches a destroyed client), and an Abort posted just
  // before that names a call that is over and does nothing.
  struct CancelLink {
    std::mutex mu;
    Impl* impl = nullptr;  // GUARDED_BY(mu)
    uint64_t call = 0;
  };

  class CancelScope {
   public:
    CancelScope(Impl* impl, CancelSignal* signal) : impl_(impl) {
      if (signal == nullptr) return;
      link_ = std::make_shared<CancelLink>();
      link_->impl = impl;
      link_->call = impl->calls_;
      signal->OnCancel([link = link_] {
        std::lock_guard<std::mutex> lock(link->mu);
        if (link->impl != nullptr) {
          asio::post(link->impl->ioc_, [impl = link->impl, call = link->call] { impl->Abort(call); });
        }
      });
    }
    ~CancelScope() {
      if (link_) {
        std::lock_guard<std::mutex> lock(link_->mu);
        link_->impl = nullptr;
      }
      ++impl_->calls_;
      // Raised after the last read finished: the answer stands, but the socket was closed.
      if (impl_->aborted_) impl_->Close();
      impl_->aborted_ = false;
    }
    CancelScope(const CancelScope&) = delete;
    CancelScope& operator=(const CancelScope&) = delete;

   private:
    Impl* impl_;
    std::shared_ptr<CancelLink> link_;
  };

  // On the io_context's thread (the caller's, inside Run).
  void Abort(uint64_t call) {
    if (call != calls_) return;
    aborted_ = true;
    if (tcp_ || tls_stream_) {
      error_code ignored;
      Lowest().socket().close(ignored);
    }
  }

  ClientOptions opts_;
  Status init_;
  bool tls_ = false;
  std::string host_, port_, prefix_, host_header_;
  asio::io_context ioc_{1};
  std::optional<asio::ssl::context> ssl_;
  std::unique_ptr<beast::tcp_stream> tcp_;
  std::unique_ptr<TlsStream> tls_stream_;
  beast::flat_buffer buffer_;
  bool connected_ = false;
  uint64_t calls_ = 0;     // calls made so far: names the current one for Abort
  bool aborted_ = false;   // the current call's signal closed the socket
};

Client::Client(std::string base_url, ClientOptions options)
    : impl_(std::make_unique<Impl>(std::move(base_url), std::move(options))) {}

Client::~Client() = default;

StatusOr<ClientResponse> Client::Send(std::string_view method, std::string_view target,
                                      std::string_view body, const Headers& headers, CancelSignal* cancel) {
  return impl_->Send(method, target, body, headers, cancel);
}

Status Client::Stream(std::string_view method, std::string_view target, std::string_view body,
                      const Headers& headers, const std::function<bool(std::string_view)>& on_chunk,
                      ClientResponse* head, CancelSignal* cancel) {
  return impl_->Stream(method, target, body, headers, on_chunk, head, cancel);
}

Status StatusOfResponse(const ClientResponse& response) {
  const int st = response.status;
  if (st >= 200 && st < 300) return OkStatus();
  nlohmann::json body = nlohmann::json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    const nlohmann::json& e = body["error"];
    // OpenAI-shaped bodies (a proxy's, an engine's) may carry a null or numeric code.
    const std::string code = e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>() : "";
    const std::string message = e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>()
                                                                                    : "HTTP " + std::to_string(st);
    for (int c = 1; c <= static_cast<int>(StatusCode::kUnauthenticated); ++c) {
      std::string name(StatusCodeName(static_cast<StatusCode>(c)));
      for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (name == code) return Status(static_cast<StatusCode>(c), message);
    }
  }
  StatusCode code = StatusCode::kUnknown;
  if (st == 401) code = StatusCode::kUnauthenticated;
  else if (st == 403) code = StatusCode::kPermissionDenied;
  else if (st == 404) code = StatusCode::kNotFound;
  else if (st == 409) code = StatusCode::kAborted;
  else if (st == 429) code = StatusCode::kResourceExhausted;
  else if (st >= 500) code = StatusCode::kUnavailable;
  else if (st >= 400) code = StatusCode::kInvalidArgument;
  return Status(code, "HTTP " + std::to_string(st) + (response.body.empty() ? "" : ": " + response.body.substr(0, 200)));
}

}  // namespace aicloud::http
