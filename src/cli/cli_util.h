// Small helpers shared by the `aicloud` subcommands: comma lists, workload names from trace
// paths, and the one error format every command prints.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace aicloud::cli {

// "fgd,bestfit" -> {"fgd", "bestfit"}; "" -> {""}.
std::vector<std::string> SplitCommas(const std::string& text);
// "data/.../openb_pod_list_gpushare40.csv" -> "gpushare40"; other files -> their stem.
std::string WorkloadName(const std::string& path);
// Prints "error: <message>" to stderr and returns `exit_code`.
int Fail(const Status& status, int exit_code);
// Checks every name is a known policy; the error lists the known ones.
Status CheckPolicies(const std::vector<std::string>& policies);

}  // namespace aicloud::cli
