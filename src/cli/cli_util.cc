#include "cli/cli_util.h"

#include <filesystem>
#include <iostream>

#include "sched/profile.h"

namespace aicloud::cli {

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos <= text.size();) {
    size_t comma = text.find(',', pos);
    out.push_back(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string WorkloadName(const std::string& path) {
  std::string stem = std::filesystem::path(path).stem().string();
  const std::string prefix = "openb_pod_list_";
  return stem.rfind(prefix, 0) == 0 ? stem.substr(prefix.size()) : stem;
}

int Fail(const Status& status, int exit_code) {
  std::cerr << "error: " << status.message() << "\n";
  return exit_code;
}

Status CheckPolicies(const std::vector<std::string>& policies) {
  for (const std::string& p : policies) {
    StatusOr<sched::Profile> profile = sched::PolicyProfile(p);
    if (!profile.ok()) return profile.status();
  }
  return OkStatus();
}

}  // namespace aicloud::cli
