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

TEST_F(ReplicaTlsTest, NothingWithoutTlsAndNeverThroughASymlink) {
  std::map<std::string, std::string> env;
  ASSERT_TRUE(WriteReplicaTls(nullptr, (dir_ / "w").string(), &env).ok());
  EXPECT_TRUE(env.empty());
  EXPECT_FALSE(fs::exists(dir_ / "w"));

  Status bad = WriteReplicaTls({{"cert", "x"}}, (dir_ / "w").string(), &env);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);

  fs::create_directories(dir_ / "w");
  fs::create_symlink(dir_ / "elsewhere", dir_ / "w" / "tls-key.pem");
  Status s = WriteReplicaTls({{"cert", "c"}, {"key", "k"}}, (dir_ / "w").string(), &env);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("tls-key.pem"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(dir_ / "elsewhere"));
  EXPECT_FALSE(env.count(kTlsKeyFileEnv));
}

}  // namespace
}  // namespace aicloud::agent
