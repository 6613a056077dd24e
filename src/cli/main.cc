// aicloud: one binary, many subcommands (see docs/cli.md).
#include <iostream>

#include <string>

#include "agent/gpu_wipe.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  // The agent's GPU memory wipe helper (agent/gpu_wipe.h): its own argv, before any parsing.
  if (argc > 1 && std::string(argv[1]) == "gpu-wipe") return aicloud::agent::GpuWipeMain(argc - 1, argv + 1);
  CLI::App app{"aicloud: a private AI cloud: GPU scheduling, serving and tenancy"};
  app.require_subcommand(1);
  int exit_code = 0;
  aicloud::cli::AddSimulate(app, &exit_code);
  aicloud::cli::AddSimulateServing(*app.get_subcommand("simulate"), &exit_code);
  aicloud::cli::AddInventory(app, &exit_code);
  aicloud::cli::AddServer(app, &exit_code);
  aicloud::cli::AddClient(app, &exit_code);
  aicloud::cli::AddModel(app, &exit_code);
  aicloud::cli::AddEngine(app, &exit_code);
  aicloud::cli::AddGateway(app, &exit_code);
  aicloud::cli::AddGpu(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
