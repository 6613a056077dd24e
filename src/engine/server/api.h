// EngineApi: the engine's HTTP surface, OpenAI-compatible, with vLLM's extra endpoints.
//
//   GET  /health                 200 while the engine loop is healthy, 503 after an internal error
//   GET  /v1/models              the served model (and its adapters, with `parent`)
//   POST /v1/completions         prompt as text or token ids; "stream": true for SSE
//   POST /v1/chat/completions    messages rendered with the model's chat template
//   POST /v1/embeddings          mean-pooled, L2-normalised final hidden states
//   POST /tokenize, /detokenize  vLLM's helpers: {"prompt"} -> {"tokens"}, {"tokens"} -> {"prompt"}
//   GET  /metrics                Prometheus text with vLLM's metric names
//
//   POST /v1/load_lora_adapter  {"lora_name"}: (re)loads one of the adapters the engine was started
//                               with; a "lora_path" of the caller's only with --allow-runtime-lora-paths
//   POST /v1/unload_lora_adapter {"lora_name"}
//
// Errors use OpenAI's shape ({"error": {"message", "type", "param", "code"}}); a full queue is
// 429 with Retry-After. A streaming client that disconnects cancels its request.
#pragma once

#include <memory>

#include "core/status.h"
#include "engine/server/engine.h"
#include "http/router.h"
#include "http/server.h"

namespace aicloud::engine {

// Adds the routes to `router`; `engine` must outlive it.
void AddEngineRoutes(Engine* engine, http::Router* router);

// The platform's TLS for a Deployment replica: when AICLOUD_TLS_CERT_FILE and AICLOUD_TLS_KEY_FILE
// are set (the node agent writes the files, agent/replica_tls.h), `options` gets them and the
// server serves HTTPS only. Returns whether it does; INVALID_ARGUMENT when only one is set.
StatusOr<bool> TlsFromEnvironment(http::ServerOptions* options);

class EngineServer {
 public:
  // Serves `engine` (not owned; must outlive the server). A non-empty `api_key` is demanded of
  // every request, /health and /metrics included, as "Authorization: Bearer <api_key>" (compared
  // in constant time); anything else is answered 401 before routing.
  static StatusOr<std::unique_ptr<EngineServer>> Start(Engine* engine, http::ServerOptions options,
                                                       std::string api_key = "");
  uint16_t port() const { return server_->port(); }
  void Stop() { server_->Stop(); }

 private:
  EngineServer() = default;
  std::unique_ptr<http::Router> router_;
  std::unique_ptr<http::Server> server_;
};

}  // namespace aicloud::engine
