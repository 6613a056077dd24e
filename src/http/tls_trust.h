// TlsTrust: the certificate authorities a client trusts for an upstream served over HTTPS, loaded
// once into an OpenSSL client context that every connection to such upstreams shares.
//
//   StatusOr<std::shared_ptr<const TlsTrust>> ca = TlsTrust::ForCaPem(ca_pem);
//   if (!ca.ok()) return ca.status();                  // INVALID_ARGUMENT: no certificate in it
//   async_client.Send(loop, "10.0.0.7:21000", "POST", "/v1/chat/completions", body, {}, done,
//                     nullptr, *ca);                   // https, verified against ca_pem
//
// A connection made with a TlsTrust verifies the peer's certificate chain against these CAs only
// (never the system store) and its subjectAltName against the upstream's host (an IP address or a
// DNS name); anything else fails the handshake.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace aicloud::http {

// Immutable and thread-safe once made.
class TlsTrust {
 public:
  // The trust of these PEM CA certificates. The same PEM text gives the same object while one is
  // alive (directories rebuilt on every change keep their connection pools keyed to it).
  // INVALID_ARGUMENT when the text holds no certificate or one does not parse.
  static StatusOr<std::shared_ptr<const TlsTrust>> ForCaPem(std::string_view pem);

  ~TlsTrust();
  TlsTrust(const TlsTrust&) = delete;
  TlsTrust& operator=(const TlsTrust&) = delete;

  const std::string& ca_pem() const { return pem_; }

  // The OpenSSL client context; private to the http room (defined in asio.h).
  struct Context;
  Context& context() const { return *context_; }

 private:
  TlsTrust(std::string pem, std::unique_ptr<Context> context);

  const std::string pem_;
  const std::unique_ptr<Context> context_;
};

}  // namespace aicloud::http
