// Subcommands of the `aicloud` executable. Each Add* registers one subcommand on the app and
// stores the exit code of its run in *exit_code.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/status.h"

namespace aicloud::cli {

void AddSimulate(CLI::App& app, int* exit_code);
void AddInventory(CLI::App& app, int* exit_code);
// server, agent, up.
void AddServer(CLI::App& app, int* exit_code);
// login, apply, get, describe, delete, logs, cancel, cordon, uncordon, drain, usage, audit, key,
// whoami.
void AddClient(CLI::App& app, int* exit_code);
// Writes the CLI's saved credentials ($AICLOUD_CONFIG, default ~/.aicloud/config.json, mode 600).
Status SaveClientConfig(const nlohmann::json& config);
// `model init` (random-weight checkpoints) and `model inspect`.
void AddModel(CLI::App& app, int* exit_code);
// `engine` (serve a model over the OpenAI API) and `engine generate`.
void AddEngine(CLI::App& app, int* exit_code);
// `gateway`: the OpenAI front door for engine replicas listed in an upstreams file.
void AddGateway(CLI::App& app, int* exit_code);
// `gpu-check`: MIG state (read only) and a test of the tenant memory wipe on a real GPU.
void AddGpu(CLI::App& app, int* exit_code);
// `simulate events`, registered on the `simulate` subcommand by AddSimulate.
void AddSimulateEvents(CLI::App& simulate, int* exit_code);
// `simulate autoscale` and `simulate routing`, registered on the `simulate` subcommand.
void AddSimulateServing(CLI::App& simulate, int* exit_code);

}  // namespace aicloud::cli
