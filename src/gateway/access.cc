#include "gateway/access.h"

#include <algorithm>
#include <cctype>

#include "auth/auth.h"

namespace aicloud::gateway {
namespace {

bool Granted(const Caller& who, std::string_view name) {
  return std::any_of(who.models.begin(), who.models.end(),
                     [&](const std::string& m) { return m == "*" || m == name; });
}

}  // namespace

bool MayUse(const Caller& who, const Route& route, std::string_view adapter) {
  if (!route.tenant.empty() && who.tenant == route.tenant) return true;
  // The base's grant covers its adapters (by public or engine name).
  if (Granted(who, route.model) || Granted(who, route.base_model)) return true;
  return !adapter.empty() && Granted(who, adapter);
}

std::string_view BearerToken(std::string_view h) {
  while (!h.empty() && h.front() == ' ') h.remove_prefix(1);
  if (h.size() < 7) return {};
  for (size_t i = 0; i < 6; ++i) {
    if (std::tolower(static_cast<unsigned char>(h[i])) != "bearer"[i]) return {};
  }
  if (h[6] != ' ') return {};
  h.remove_prefix(7);
  while (!h.empty() && h.front() == ' ') h.remove_prefix(1);
  while (!h.empty() && (h.back() == ' ' || h.back() == '\r' || h.back() == '\n')) h.remove_suffix(1);
  return h;
}

Status StaticKeys::Add(std::string_view token, Caller caller) {
  if (token.empty()) return InvalidArgumentError("key: must not be empty");
  std::optional<auth::Sha256Digest> digest = auth::Sha256(token);
  if (!digest) return InternalError("key: cannot hash it (SHA-256 unavailable)");
  std::lock_guard<std::mutex> lock(mu_);
  if (!by_digest_.emplace(*digest, std::make_shared<const Caller>(std::move(caller))).second) {
    return InvalidArgumentError("key: the same key is listed twice");
  }
  epoch_.fetch_add(1, std::memory_order_release);
  return OkStatus();
}

StatusOr<CallerRef> StaticKeys::Authenticate(std::string_view authorization) const {
  if (authorization.empty()) {
    return UnauthenticatedError("missing API key: send it as 'Authorization: Bearer <key>'");
  }
  std::string_view token = BearerToken(authorization);
  if (token.empty()) return UnauthenticatedError("malformed Authorization header: want 'Bearer <key>'");
  std::optional<auth::Sha256Digest> digest = auth::Sha256(token);
  if (!digest) return InternalError("cannot hash the API key (SHA-256 unavailable)");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_digest_.find(*digest);
  if (it == by_digest_.end()) return UnauthenticatedError("invalid API key");
  return it->second;
}

Authenticator StaticKeys::AsAuthenticator() const {
  return [this](std::string_view authorization) { return Authenticate(authorization); };
}

std::function<uint64_t()> StaticKeys::AsEpoch() const {
  return [this] { return epoch_.load(std::memory_order_acquire); };
}

size_t StaticKeys::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_digest_.size();
}

}  // namespace aicloud::gateway
