#include "control/replica_secret.h"

#include <nlohmann/json.hpp>

#include "auth/auth.h"

namespace aicloud::control {
namespace {

using nlohmann::json;

constexpr char kKind[] = "ClusterKey";
constexpr char kName[] = "replica-secrets";

StatusOr<std::string> KeyOf(const json& object) {
  const json spec = object.value("spec", json::object());
  const json key = spec.is_object() ? spec.value("key", json()) : json();
  if (!key.is_string() || key.get<std::string>().size() < 32) {
    return InternalError(std::string(kKind) + "/" + kName + ": spec.key is missing or shorter than 32 characters");
  }
  return key.get<std::string>();
}

}  // namespace

StatusOr<ReplicaSecrets> ReplicaSecrets::Load(store::Store* store) {
  StatusOr<json> existing = store->Get({kKind, "", kName});
  if (existing.ok()) {
    StatusOr<std::string> key = KeyOf(*existing);
    if (!key.ok()) return key.status();
    return ReplicaSecrets(std::move(*key));
  }
  if (existing.status().code() != StatusCode::kNotFound) return existing.status();
  const std::string fresh = auth::RandomHex(32);
  if (fresh.empty()) return InternalError("cannot draw a replica secret key: the CSPRNG failed");
  StatusOr<json> created = store->Create(
      {{"apiVersion", "aicloud/v1"}, {"kind", kKind}, {"metadata", {{"name", kName}}}, {"spec", {{"key", fresh}}}});
  if (created.ok()) return ReplicaSecrets(fresh);
  if (created.status().code() != StatusCode::kAlreadyExists) return created.status();
  StatusOr<json> winner = store->Get({kKind, "", kName});  // another server created it first
  if (!winner.ok()) return winner.status();
  StatusOr<std::string> key = KeyOf(*winner);
  if (!key.ok()) return key.status();
  return ReplicaSecrets(std::move(*key));
}

std::string ReplicaSecrets::For(std::string_view tenant, std::string_view job, std::string_view attempt) const {
  if (key_.empty()) return "";
  std::string data;
  data.reserve(tenant.size() + job.size() + attempt.size() + 2);
  data.append(tenant).append("\n").append(job).append("\n").append(attempt);
  return auth::HmacSha256Hex(key_, data);
}

std::string ReplicaProof(std::string_view secret, std::string_view nonce) {
  return auth::HmacSha256Hex(secret, std::string("aicloud replica proof\n").append(nonce));
}

}  // namespace aicloud::control
