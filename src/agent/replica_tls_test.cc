#include "agent/replica_tls.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace aicloud::agent {
namespace {

namespace fs = std::filesystem;

class ReplicaTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("replica-tls-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  fs::path dir_;
};

TEST_F(ReplicaTlsTest, WritesPrivateFilesOwnedAsTheDirAndNamesThem) {
  const fs::path work = dir_ / "attempts" / "a1";
  fs::create_directories(work);
  // A sandboxed attempt's dir belongs to its tenant's uid: the files must follow it.
  const bool root = ::geteuid() == 0;
  if (root) {
    ASSERT_EQ(::chown(work.c_str(), 4321, 4322), 0);
  }
  std::map<std::string, std::string> env;
  Status s = WriteReplicaTls({{"cert", "CERT PEM"}, {"key", "KEY PEM"}}, work.string(), &env);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(env[kTlsCertFileEnv], (work / "tls-cert.pem").string());
  ASSERT_EQ(env[kTlsKeyFileEnv], (work / "tls-key.pem").string());
  EXPECT_EQ(Read(env[kTlsCertFileEnv]), "CERT PEM");
  EXPECT_EQ(Read(env[kTlsKeyFileEnv]), "KEY PEM");
  for (const std::string& f : {env[kTlsCertFileEnv], env[kTlsKeyFileEnv]}) {
    struct stat st {};
    ASSERT_EQ(::stat(f.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
    if (root) {
      EXPECT_EQ(st.st_uid, 4321u) << f;
      EXPECT_EQ(st.st_gid, 4322u) << f;
    }
  }
}

TEST_F(ReplicaTlsTest, NothingWithoutTlsAndNothingWrittenThroughWhatTheTenantPlanted) {
  std::map<std::string, std::string> env;
  ASSERT_TRUE(WriteReplicaTls(nullptr, (dir_ / "w").string(), &env).ok());
  EXPECT_TRUE(env.empty());
  EXPECT_FALSE(fs::exists(dir_ / "w"));

  Status bad = WriteReplicaTls({{"cert", "x"}}, (dir_ / "w").string(), &env);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);

  // The tenant owns the dir and plants a symlink, a hard link to a file of someone else's and a
  // FIFO (an open would block the agent) at the names: each is replaced by a fresh private file,
  // and what they pointed at is untouched.
  fs::create_directories(dir_ / "w");
  { std::ofstream(dir_ / "victim") << "root's"; }
  fs::create_symlink(dir_ / "elsewhere", dir_ / "w" / "tls-key.pem");
  fs::create_hard_link(dir_ / "victim", dir_ / "w" / "tls-cert.pem");
  Status s = WriteReplicaTls({{"cert", "c"}, {"key", "k"}}, (dir_ / "w").string(), &env);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_FALSE(fs::exists(dir_ / "elsewhere"));
  EXPECT_EQ(Read((dir_ / "victim").string()), "root's");
  EXPECT_EQ(Read(env[kTlsCertFileEnv]), "c");
  EXPECT_EQ(Read(env[kTlsKeyFileEnv]), "k");
  EXPECT_FALSE(fs::is_symlink(env[kTlsKeyFileEnv]));
  EXPECT_EQ(fs::hard_link_count(env[kTlsCertFileEnv]), 1u);

  fs::remove(dir_ / "w" / "tls-cert.pem");
  ASSERT_EQ(::mkfifo((dir_ / "w" / "tls-cert.pem").c_str(), 0666), 0);
  s = WriteReplicaTls({{"cert", "c2"}, {"key", "k2"}}, (dir_ / "w").string(), &env);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(fs::is_regular_file(env[kTlsCertFileEnv]));
  EXPECT_EQ(Read(env[kTlsCertFileEnv]), "c2");

  // A dir that is itself a symlink is refused.
  fs::create_directories(dir_ / "real");
  fs::create_directory_symlink(dir_ / "real", dir_ / "link");
  s = WriteReplicaTls({{"cert", "c"}, {"key", "k"}}, (dir_ / "link").string(), &env);
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s;
  EXPECT_FALSE(fs::exists(dir_ / "real" / "tls-key.pem"));
}

}  // namespace
}  // namespace aicloud::agent
