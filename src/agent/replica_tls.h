// The certificate and key a Deployment replica serves HTTPS with when the cluster has TLS: the
// server sends them in the attempt's assignment as "tls": {"cert", "key"} (PEM; control/
// replica_ca.h), and the agent writes them into the attempt's working directory and names the
// files in its environment, where `aicloud engine` finds them.
//
//   Status s = WriteReplicaTls(assignment.value("tls", json()), spec.working_dir, &spec.env);
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace aicloud::agent {

inline constexpr char kTlsCertFileEnv[] = "AICLOUD_TLS_CERT_FILE";
inline constexpr char kTlsKeyFileEnv[] = "AICLOUD_TLS_KEY_FILE";

// With `tls` {"cert", "key"}: writes dir/tls-cert.pem and dir/tls-key.pem (created or replaced,
// mode 0600, never through a symlink), gives them the owner and group of `dir` (a sandboxed
// attempt's tenant uid can read them), and sets kTlsCertFileEnv/kTlsKeyFileEnv in `env`. `dir`
// is created when missing. null `tls`: nothing. INVALID_ARGUMENT for a malformed "tls",
// INTERNAL naming the file when it cannot be written. The key is never logged.
Status WriteReplicaTls(const nlohmann::json& tls, const std::string& dir, std::map<std::string, std::string>* env);

}  // namespace aicloud::agent
