// ReplicaCa: the cluster's certificate authority for Deployment replicas, so that the gateway's
// traffic to an engine (prompts and answers) is encrypted and goes only to the replica the
// control plane placed. It exists only when the server serves TLS itself.
//
//   StatusOr<ReplicaCa> ca = ReplicaCa::Load(store);                 // once, at server start
//   StatusOr<ReplicaCert> leaf = ca->Issue("10.0.0.7", "acme", "chat-7f3a-2");
//   // leaf->cert_pem, leaf->key_pem: for the replica's attempt (never stored)
//   http::ClientOptions{.ca_pem = ca->ca_pem()}                      // what callers trust
//
// The CA is an ECDSA P-256 key and a self-signed certificate (ten years) kept in the store as
// {kind: ClusterKey, name: replica-ca, spec: {certificate, key}}, a kind the REST API does not
// serve; the first server to start creates it and every server on the store reads the same one.
// A leaf is issued per replica attempt: a fresh P-256 key, subjectAltName = the node's address (an
// IP address or a DNS name), CN "replica <tenant>/<job>", serverAuth, valid from an hour ago
// (clock skew) for kLeafValidity. Private keys are never logged; a leaf's key travels only in the
// agent protocol's assignment, and the agent hands it to the engine in files
// (agent/replica_tls.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "store/store.h"

namespace aicloud::control {

// How long a replica's certificate is valid: 398 days, the most the CA/Browser Forum lets a
// public TLS certificate live. A replica running longer must be replaced (a rollout does it);
// certificates are not renewed in place.
inline constexpr std::chrono::hours kLeafValidity{24 * 398};

struct ReplicaCert {
  std::string cert_pem;  // the leaf, then the CA certificate
  std::string key_pem;   // PKCS#8, unencrypted: a secret
};

// Copyable; thread-safe (Issue may run on several threads at once).
class ReplicaCa {
 public:
  // Reads the CA, creating it when absent (a lost race with another server reads the winner's).
  // INTERNAL when the stored CA does not parse or its key does not match; the store's errors
  // otherwise.
  static StatusOr<ReplicaCa> Load(store::Store* store);
  // A new CA held in memory only (tests).
  static StatusOr<ReplicaCa> Generate();

  // A certificate for a replica served at `address` (an IP address or a DNS name) of Job
  // tenant/job. INVALID_ARGUMENT when address is neither; INTERNAL when OpenSSL fails.
  StatusOr<ReplicaCert> Issue(std::string_view address, std::string_view tenant, std::string_view job) const;

  // The CA certificate (PEM): what the gateway and the deployment controller trust.
  const std::string& ca_pem() const;

 private:
  struct Impl;
  explicit ReplicaCa(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  static StatusOr<ReplicaCa> Parse(const std::string& cert_pem, const std::string& key_pem);

  std::shared_ptr<const Impl> impl_;
};

}  // namespace aicloud::control
