// The OpenAI front door of `aicloud server` and `aicloud up`: the gateway (gateway room) over the
// server's Deployments (DeploymentController) and API keys (AuthService).
//
//   ServerConfig cfg = ...;
//   FrontDoor door;
//   cfg.front_door = door.Factory();      // builds the gateway once the server's parts exist
//   cfg.front_door_metrics = door.Metrics();  // the gateway's metrics in the server's /metrics
//   auto server = ApiServer::Start(cfg);  // /v1/* now reaches the gateway
//   ... server->Stop(); door.Stop();
#pragma once

#include <memory>

#include "control/server.h"
#include "core/status.h"
#include "http/router.h"

namespace aicloud::cli {

class FrontDoor {
 public:
  FrontDoor();
  ~FrontDoor();
  FrontDoor(const FrontDoor&) = delete;
  FrontDoor& operator=(const FrontDoor&) = delete;

  // For ServerConfig::front_door. The FrontDoor must outlive the server it is given to.
  std::function<StatusOr<http::AsyncHandler>(control::ApiServer&)> Factory();
  // For ServerConfig::front_door_metrics: the gateway's metrics (aicloud_gateway_*) in the
  // Prometheus text format; "" before Factory's handler is built.
  std::function<std::string()> Metrics();
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace aicloud::cli
