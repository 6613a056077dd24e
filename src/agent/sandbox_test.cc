#include "agent/sandbox.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/agent_test_util.h"

namespace aicloud::agent {
namespace {

namespace fs = std::filesystem;

class TempDir : public testing::TempDir {
 public:
  TempDir() : testing::TempDir("sandbox_test") {}
};

std::string Message(const Status& s) { return std::string(s.message()); }

TEST(UidRange, ParsesAndRefusesWhatIsUnsafe) {
  TempDir tmp;
  std::ofstream(tmp / "passwd") << "root:x:0:0:root:/root:/bin/bash\n"
                                   "alice:x:250042:250042::/home/alice:/bin/sh\n";
  StatusOr<UidRange> r = ParseUidRange("200000-249999", tmp / "passwd");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->first, 200000u);
  EXPECT_EQ(r->last, 249999u);
  EXPECT_EQ(r->ToString(), "200000-249999");

  r = ParseUidRange("200000-299999", tmp / "passwd");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(Message(r.status()).find("includes user alice (uid 250042)"), std::string::npos)
      << r.status();
  r = ParseUidRange("0-99999", tmp / "passwd");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(Message(r.status()).find("uid 0 (root)"), std::string::npos) << r.status();
  for (const char* bad : {"200000", "a-b", "300000-200000", "200000-200010", "1-99x"}) {
    EXPECT_FALSE(ParseUidRange(bad, tmp / "passwd").ok()) << bad;
  }
}

TEST(TenantUids, OneBlockPerTenantKeptAcrossReopens) {
  TempDir tmp;
  const UidRange range{300000, 300299};  // three blocks
  const std::string map = tmp / "uids.json";
  {
    StatusOr<std::unique_ptr<TenantUids>> u = TenantUids::Open(map, range);
    ASSERT_TRUE(u.ok()) << u.status();
    EXPECT_EQ(*(*u)->UidOf("acme"), 300000u);
    EXPECT_EQ(*(*u)->UidOf("globex"), 300100u);
    EXPECT_EQ(*(*u)->UidOf("acme"), 300000u);
  }
  struct stat st {};
  ASSERT_EQ(::stat(map.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // A restarted agent (or another agent sharing the map) sees the same owners.
  StatusOr<std::unique_ptr<TenantUids>> again = TenantUids::Open(map, range);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*(*again)->UidOf("globex"), 300100u);
  EXPECT_EQ(*(*again)->UidOf("initech"), 300200u);
  StatusOr<uint32_t> full = (*again)->UidOf("umbrella");
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
}

TEST(TenantUids, ACorruptOrForeignMapIsAnErrorNotAReset) {
  TempDir tmp;
  const UidRange range{300000, 300299};
  const std::string map = tmp / "uids.json";
  std::ofstream(map) << "{\"range\": \"300000-300299\", \"tenants\": {\"acme\": 3000";
  StatusOr<std::unique_ptr<TenantUids>> u = TenantUids::Open(map, range);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(Message(u.status()).find("sandbox uid map " + map + " is corrupt"), std::string::npos)
      << u.status();

  std::ofstream(map, std::ios::trunc)
      << R"({"range": "300000-300299", "uidsPerTenant": 100, "tenants": {"a": 300000, "b": 300000}})";
  u = TenantUids::Open(map, range);
  ASSERT_FALSE(u.ok());
  EXPECT_NE(Message(u.status()).find("uid 300000 is given to two tenants"), std::string::npos)
      << u.status();

  std::ofstream(map, std::ios::trunc)
      << R"({"range": "300000-300299", "uidsPerTenant": 100, "tenants": {"a": 300050}})";
  u = TenantUids::Open(map, range);
  ASSERT_FALSE(u.ok());
  EXPECT_NE(Message(u.status()).find("not the start of a block"), std::string::npos) << u.status();

  std::ofstream(map, std::ios::trunc)
      << R"({"range": "400000-400999", "uidsPerTenant": 100, "tenants": {}})";
  u = TenantUids::Open(map, range);
  ASSERT_FALSE(u.ok());
  EXPECT_NE(Message(u.status()).find("was made for uid range 400000-400999"), std::string::npos)
      << u.status();
}

TEST(CheckReachable, NamesTheDirectoryThatBlocksAndItsMode) {
  TempDir tmp;  // mkdtemp: 0700
  const std::string deep = tmp / "agents/n1";
  fs::create_directories(deep);
  Status s = CheckReachable(deep, 200000);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(Message(s).find("sandbox: uid 200000 cannot reach " + deep + ": " + tmp.path() +
                            " is mode 0700"),
            std::string::npos)
      << s;
  EXPECT_NE(Message(s).find("chmod o+x"), std::string::npos) << s;
  ::chmod(tmp.path().c_str(), 0711);
  EXPECT_TRUE(CheckReachable(deep, 200000).ok());
  EXPECT_EQ(BlockingComponent(deep + "/x", 200000, false), "");
  ::chmod((tmp / "agents").c_str(), 0750);
  EXPECT_EQ(BlockingComponent(deep + "/x", 200000, false),
            tmp / "agents" + " (mode 0750, owner " + std::to_string(::geteuid()) + ")");
}

TEST(MakePrivateDir, GivesTheDirToTheUidAndRefusesSymlinks) {
  ASSERT_EQ(::geteuid(), 0u) << "chown needs root";
  TempDir tmp;
  const std::string dir = tmp / "ckpt/acme";
  ASSERT_TRUE(MakePrivateDir(dir, 200000).ok());
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 200000u);
  EXPECT_EQ(st.st_gid, 200000u);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(::symlink("/etc", (tmp / "link").c_str()), 0);
  EXPECT_FALSE(MakePrivateDir(tmp / "link", 200000).ok());
  ASSERT_EQ(::stat("/etc", &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
}

}  // namespace
}  // namespace aicloud::agent
