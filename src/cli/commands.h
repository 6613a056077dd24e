// Subcommands of the `aicloud` executable. Each Add* registers one subcommand on the app and
// stores the exit code of its run in *exit_code.
#pragma once

#include <CLI/CLI.hpp>

namespace aicloud::cli {

void AddSimulate(CLI::App& app, int* exit_code);
void AddInventory(CLI::App& app, int* exit_code);
// `simulate events`, registered on the `simulate` subcommand by AddSimulate.
void AddSimulateEvents(CLI::App& simulate, int* exit_code);

}  // namespace aicloud::cli
