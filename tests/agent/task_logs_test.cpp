#include "k8s4r/agent/task_logs.h"

#include "k8s4r/testing/temp_dir.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace k8s4r::agent {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(LogsTail, IsStdoutThenStderrCutToTheLimit) {
  testing::TempDir dir;
  write(dir / "out", "0123456789");
  write(dir / "err", "abc");
  EXPECT_EQ(logs_tail((dir / "out").string(), (dir / "err").string(), 100), "0123456789abc");
  EXPECT_EQ(logs_tail((dir / "out").string(), (dir / "err").string(), 5), "89abc");
  EXPECT_EQ(logs_tail((dir / "missing").string(), (dir / "err").string(), 5), "abc");
}

TEST(LogsTail, NeverStartsInsideAMultiByteCharacter) {
  testing::TempDir dir;
  write(dir / "out", "x\xE2\x82\xAC");  // "x€": the euro sign is 3 bytes
  EXPECT_EQ(logs_tail((dir / "out").string(), "", 2), "");
  EXPECT_EQ(logs_tail((dir / "out").string(), "", 3), "\xE2\x82\xAC");
}

TEST(CapLog, MovesAnOversizedLogAsideAndLeavesASmallOneAlone) {
  testing::TempDir dir;
  const fs::path log = dir / "stdout.log";
  write(log, "small");
  EXPECT_FALSE(cap_log(log.string(), 10));
  EXPECT_EQ(read(log), "small");
  write(log, std::string(20, 'a'));
  EXPECT_TRUE(cap_log(log.string(), 10));
  EXPECT_EQ(fs::file_size(log), 0u);
  EXPECT_EQ(read(dir / "stdout.log.1"), std::string(20, 'a'));
}

// The task's user owns the directory its logs are in and may put anything at
// their names; the agent, running as root, must neither read through a link
// (the tail travels in the task's status), nor write or truncate through one,
// nor block on a FIFO.
TEST(TaskLogs, AreReadAndCappedOnlyAsRegularFilesOfTheirOwn) {
  testing::TempDir dir;
  const fs::path secret = dir / "shadow";
  write(secret, std::string(100, 's'));
  fs::create_symlink(secret, dir / "stdout.log");
  ASSERT_EQ(::mkfifo((dir / "stderr.log").c_str(), 0600), 0);
  EXPECT_EQ(logs_tail((dir / "stdout.log").string(), (dir / "stderr.log").string(), 1000), "");
  EXPECT_FALSE(cap_log((dir / "stdout.log").string(), 10));
  EXPECT_FALSE(cap_log((dir / "stderr.log").string(), 10));
  EXPECT_EQ(read(secret), std::string(100, 's'));  // not truncated through the link
  // A second name of the secret (a hard link) is no log either.
  fs::remove(dir / "stdout.log");
  fs::create_hard_link(secret, dir / "stdout.log");
  EXPECT_EQ(logs_tail((dir / "stdout.log").string(), "", 1000), "");
  EXPECT_FALSE(cap_log((dir / "stdout.log").string(), 10));
  EXPECT_EQ(read(secret), std::string(100, 's'));

  // A link planted at the rotated name is not written through either.
  const fs::path log = dir / "real.log";
  write(log, std::string(100, 'x'));
  const fs::path victim = dir / "victim";
  write(victim, "keep");
  fs::create_symlink(victim, dir / "real.log.1");
  cap_log(log.string(), 10);
  EXPECT_EQ(read(victim), "keep");
}

}  // namespace
}  // namespace k8s4r::agent
