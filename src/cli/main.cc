// aicloud: one binary, many subcommands (see docs/cli.md).
#include <iostream>

#include "cli/commands.h"

int main(int argc, char** argv) {
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
