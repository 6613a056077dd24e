// The upstreams file of a standalone gateway (`aicloud gateway --upstreams FILE`): models with
// their replicas, tenants' limits and API keys, in YAML or JSON (JSON is read as YAML).
//
//   models:
//     - model: llama-8b              # the name clients send (required)
//       tenant: nlp                  # the owner; its keys may call it (required)
//       deployment: llama-8b         # default: model
//       base_model: llama-8b         # the name the engine serves; default: model
//       adapters: [sql-lora]         # LoRA adapters served with it
//       max_adapters: 4              # adapter slots per replica (LoRA affinity)
//       price: {prompt: 0.15, completion: 0.6}   # cost units per million tokens
//       replicas:
//         - {url: 127.0.0.1:8001, id: r1, ready: true}   # id default url, ready default true
//         - {url: 127.0.0.1:8002, canary: true}          # a new version beside the others
//         - {url: 10.0.0.7:8003, secret_env: R3_KEY}     # presented as "Authorization: Bearer"
//                                                        # (the value of $R3_KEY at load)
//       canary_weight: 10            # percent of requests for canary replicas (default 0)
//   tenants:
//     nlp: {rpm: 6000, tpm: 2000000, budget: {tokens: 50000000, cost: 100, period: 30d}}
//   keys:
//     - key: sk-nlp-alice            # the bearer token (required)
//       id: alice                    # non-secret id in records; default: sha256(key)[:12]
//       tenant: nlp                  # required
//       team: search
//       models: [llama-70b]          # grants beyond the tenant's own models; "*" = all
//       rpm: 60
//       tpm: 100000
//       budget: {tokens: 1000000, cost: 5, period: 1d}   # period: 30s/15m/1h/1d/30d, default lifetime
//
// Errors name the file, line and field: "up.yaml:7:9: models[0].replicas[0].url: want host:port".
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "gateway/access.h"
#include "gateway/directory.h"

namespace aicloud::gateway {

struct UpstreamsConfig {
  std::vector<Route> routes;
  std::vector<std::pair<std::string, Caller>> keys;  // token -> caller (tenant limits filled in)
};

StatusOr<UpstreamsConfig> ParseUpstreams(std::string_view text, std::string_view source);
StatusOr<UpstreamsConfig> LoadUpstreams(const std::string& path);

}  // namespace aicloud::gateway
