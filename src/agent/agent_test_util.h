// What the agent room's tests share: a temporary directory, reading a file whole, and waiting
// for a condition (or a supervised attempt's end) with a deadline.
#pragma once

#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "agent/supervisor.h"

namespace aicloud::agent::testing {

// A fresh directory under the system's temp dir, removed with everything in it at destruction.
// `mode` other than 0 is set on it (mkdtemp makes it 0700; 0711 lets sandbox uids pass through).
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "agent_test", mode_t mode = 0) {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX")).string();
    path_ = ::mkdtemp(tmpl.data());
    if (mode != 0) ::chmod(path_.c_str(), mode);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls `cond` until it holds or `timeout` passes; its last answer.
inline bool WaitFor(const std::function<bool()>& cond,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return cond();
}

// The attempt's final status once it has ended; a test failure (and its last status) when it is
// still running after `timeout`.
inline ProcStatus WaitDone(const Supervisor& sup, const std::string& id,
                           std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
  ProcStatus last;
  EXPECT_TRUE(WaitFor(
      [&] {
        std::optional<ProcStatus> s = sup.Get(id);
        if (s) last = *s;
        return s && s->state != ProcState::kRunning;
      },
      timeout))
      << id << " still running after " << timeout.count() << " ms";
  return last;
}

}  // namespace aicloud::agent::testing
