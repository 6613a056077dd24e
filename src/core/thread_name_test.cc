#include "core/thread_name.h"

#include <pthread.h>

#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace aicloud {
namespace {

std::string NameOfThisThread() {
  char buf[32] = {};
  pthread_getname_np(pthread_self(), buf, sizeof(buf));
  return buf;
}

TEST(SetThreadName, NamesTheCallingThreadOnly) {
  const std::string before = NameOfThisThread();
  std::string inside;
  std::thread([&] {
    SetThreadName("usage-log");
    inside = NameOfThisThread();
  }).join();
  EXPECT_EQ(inside, "usage-log");
  EXPECT_EQ(NameOfThisThread(), before);
}

TEST(SetThreadName, CutsLongNamesToTheKernelsFifteenCharacters) {
  std::string inside;
  std::thread([&] {
    SetThreadName("a-name-longer-than-fifteen");
    inside = NameOfThisThread();
  }).join();
  EXPECT_EQ(inside, "a-name-longer-t");  // without the cut, Linux refuses the name (ERANGE)
}

}  // namespace
}  // namespace aicloud
