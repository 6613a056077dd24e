// ReplicaSecrets: the secret every Deployment replica demands of each caller, so nothing reaches
// an engine except through the gateway (keys, model RBAC, limits, budgets, usage) or the
// deployment controller (health and metrics probes).
//
//   StatusOr<ReplicaSecrets> secrets = ReplicaSecrets::Load(store);   // once, at server start
//   std::string s = secrets->For("acme", "chat-7f3a-2", attempt_id);  // 64 hex chars
//
// A replica's secret is HMAC-SHA256(cluster key, tenant \n job name \n attempt id): nothing per
// replica is stored, every server on one store derives the same value, and every new attempt of a
// replica (a restart, a move to another node, a replacement: attempt ids are never reused and
// carry the Job's uid) gets a new secret while the old one stops opening anything. The cluster
// key is a random 256-bit value kept in the store as {kind: ClusterKey, name: replica-secrets},
// a kind the REST API does not serve; the first server to start creates it.
//
// The secret is only ever sent to an engine that proved it holds it: a caller first asks
// `GET /health?nonce=N` (no credentials) and checks the answer's "proof" against ReplicaProof;
// a process squatting on a replica's port cannot answer it, so it never receives the secret.
//
// Who sees a secret: the agent running the replica (in the attempt's environment as
// AICLOUD_REPLICA_SECRET, over the agent protocol only; never in the Job object the API shows),
// the deployment controller, and gateways (in the serving state the gateway protocol ships to the
// `gateway` role). It is never logged.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "store/store.h"

namespace aicloud::control {

// The environment variable an attempt of a replica Job receives its secret in.
inline constexpr char kReplicaSecretEnv[] = "AICLOUD_REPLICA_SECRET";

class ReplicaSecrets {
 public:
  // Reads the cluster key, creating it when absent (a lost race with another server reads the
  // winner's). INTERNAL when the stored key is malformed; the store's errors otherwise.
  static StatusOr<ReplicaSecrets> Load(store::Store* store);
  // A fixed key (tests). An empty key makes For() return "" (replicas without secrets).
  explicit ReplicaSecrets(std::string key) : key_(std::move(key)) {}

  // The secret of attempt `attempt` of replica Job tenant/name; "" when the key is empty.
  std::string For(std::string_view tenant, std::string_view job, std::string_view attempt) const;

 private:
  std::string key_;
};

// What an engine holding `secret` answers to GET /health?nonce=<nonce>: HMAC-SHA256(secret,
// "aicloud replica proof\n" + nonce), hex (the engine computes the same, engine/server/api.cc).
std::string ReplicaProof(std::string_view secret, std::string_view nonce);

}  // namespace aicloud::control
