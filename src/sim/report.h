// Renders FGD experiment results as a table (for people), JSON (for programs) or CSV (for
// spreadsheets and plots).
#pragma once

#include <string>
#include <vector>

#include "sim/fgd_experiment.h"

namespace aicloud::sim {

// `seeds` describes what each run averages, e.g. "42" or "42-51".
std::string FormatTable(const std::vector<FgdRun>& runs, const std::string& seeds);
// One JSON object for a single run; {"workload", "seeds", "runs": [...]} for several.
std::string FormatJson(const std::vector<FgdRun>& runs, const std::string& seeds);
std::string FormatCsv(const std::vector<FgdRun>& runs);

}  // namespace aicloud::sim
