#include "http/tls_trust.h"

#include <map>
#include <mutex>

#include "http/asio.h"

namespace aicloud::http {
namespace {

std::mutex cache_mu;
// PEM text -> its live TlsTrust. Entries of trusts no longer used are swept on the next miss.
std::map<std::string, std::weak_ptr<const TlsTrust>, std::less<>>& Cache() {  // GUARDED_BY(cache_mu)
  static auto* cache = new std::map<std::string, std::weak_ptr<const TlsTrust>, std::less<>>();
  return *cache;
}

}  // namespace

TlsTrust::TlsTrust(std::string pem, std::unique_ptr<Context> context)
    : pem_(std::move(pem)), context_(std::move(context)) {}

TlsTrust::~TlsTrust() = default;

StatusOr<std::shared_ptr<const TlsTrust>> TlsTrust::ForCaPem(std::string_view pem) {
  std::lock_guard<std::mutex> lock(cache_mu);
  auto& cache = Cache();
  if (auto it = cache.find(pem); it != cache.end()) {
    if (std::shared_ptr<const TlsTrust> live = it->second.lock()) return live;
  }
  if (pem.find("-----BEGIN CERTIFICATE-----") == std::string_view::npos) {
    return InvalidArgumentError("TLS trust: no PEM certificate in the CA text");
  }
  auto context = std::make_unique<Context>();
  asio::ssl::context& ssl = context->ssl;
  ssl.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                  asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
  ssl.set_verify_mode(asio::ssl::verify_peer);
  error_code ec;
  ssl.add_certificate_authority(asio::buffer(pem.data(), pem.size()), ec);
  if (ec) return InvalidArgumentError("TLS trust: the CA certificates do not parse: " + ec.message());
  std::erase_if(cache, [](const auto& kv) { return kv.second.expired(); });
  std::shared_ptr<const TlsTrust> trust(new TlsTrust(std::string(pem), std::move(context)));
  cache[std::string(pem)] = trust;
  return trust;
}

}  // namespace aicloud::http
