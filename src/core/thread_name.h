// Names the calling thread as `top -H`, `ps -L`, perf and gdb show it ("gw-io0", "audit-writer"),
// so an operator can tell which of a process's threads is busy or stalled. Linux keeps 15
// characters; a longer name is cut there. Best effort: a failure leaves the inherited name.
//
//   std::thread([this] { SetThreadName("usage-writer"); Run(); });
#pragma once

#include <pthread.h>

#include <string>
#include <string_view>

namespace aicloud {

inline void SetThreadName(std::string_view name) {
  std::string cut(name.substr(0, 15));
  pthread_setname_np(pthread_self(), cut.c_str());
}

}  // namespace aicloud
