#include "k8s4r/agent/task_logs.h"

#include "k8s4r/testing/temp_dir.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <limits>

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

// ---- read by offset, for followers ----

TEST(ReadLog, KeepsOffsetsAcrossARotationAndSaysWhenBytesAreGone) {
  testing::TempDir dir;
  const std::string log = (dir / "stdout.log").string();
  write(log, "one\ntwo\n");  // bytes 0..7
  EXPECT_EQ(read_log(log, 4, 100).data, "two\n");
  ASSERT_TRUE(cap_log(log, 4));  // moved to .1; the stream goes on at offset 8
  std::ofstream(log, std::ios::app) << "three\n";
  LogPiece piece = read_log(log, 0, 100);
  EXPECT_EQ(piece.offset, 0);
  EXPECT_EQ(piece.data, "one\ntwo\n");  // from the rotated part, up to its end
  EXPECT_EQ(piece.size, 14);
  piece = read_log(log, 8, 100);
  EXPECT_EQ(piece.offset, 8);
  EXPECT_EQ(piece.data, "three\n");
  // A second rotation: the first part is gone, and a reader asking for it is moved on, not given other bytes.
  ASSERT_TRUE(cap_log(log, 4));
  std::ofstream(log, std::ios::app) << "four\n";
  piece = read_log(log, 2, 100);
  EXPECT_EQ(piece.offset, 8);
  EXPECT_EQ(piece.data, "three\n");
  piece = read_log(log, 14, 100);
  EXPECT_EQ(piece.data, "four\n");
  EXPECT_EQ(piece.size, 19);
  EXPECT_EQ(read_log(log, 19, 100).data, "");
  EXPECT_EQ(read_log(log, 19, 100).offset, 19);
}

TEST(TailOffset, CountsAcrossARotationAndStopsAtTheOldestByteKept) {
  testing::TempDir dir;
  const std::string log = (dir / "stdout.log").string();
  write(log, "1\n2\n3\n");
  ASSERT_TRUE(cap_log(log, 2));  // 1..3 in stdout.log.1, offsets 0..5
  std::ofstream(log, std::ios::app) << "4\n5\n";
  EXPECT_EQ(tail_offset(log, 2), 6);   // "4\n5\n"
  EXPECT_EQ(tail_offset(log, 3), 4);   // "3\n" from the rotated part, then the rest
  EXPECT_EQ(tail_offset(log, 10), 0);  // every line kept
  ASSERT_TRUE(cap_log(log, 2));        // 4..5 rotated; 1..3 gone
  std::ofstream(log, std::ios::app) << "6\n";
  EXPECT_EQ(tail_offset(log, 10), 6);  // from the oldest byte kept
}

TEST(TailOffset, CountsTheLinesKeptWhenItsBlockReachesPastTheOldest) {
  testing::TempDir dir;
  const std::string log = (dir / "stdout.log").string();
  write(log, "x\ny\n");
  ASSERT_TRUE(cap_log(log, 2));
  std::ofstream(log, std::ios::app) << "a\nb\nc\n";
  ASSERT_TRUE(cap_log(log, 2));  // x, y gone; a..c rotated (offsets 4..9); d current
  std::ofstream(log, std::ios::app) << "d\n";
  EXPECT_EQ(tail_offset(log, 2), 8);   // "c\nd\n", not every line kept
  EXPECT_EQ(tail_offset(log, 10), 4);  // every line kept, from the oldest
}

TEST(ReadLog, AForgedBaseNeitherOverflowsNorMovesTheStream) {
  testing::TempDir dir;
  const std::string log = (dir / "stdout.log").string();
  write(log, "abc\n");
  write(dir / "stdout.log.base", "9223372036854775807\n");  // what a task could put there
  const LogPiece piece = read_log(log, 0, 100);
  EXPECT_EQ(piece.data, "abc\n");
  EXPECT_EQ(piece.size, 4);
  EXPECT_EQ(line_start_from(log, std::numeric_limits<std::int64_t>::max()), std::numeric_limits<std::int64_t>::max());
}

TEST(LogIndex, KeepsItsNewerHalfWhenFull) {
  testing::TempDir dir;
  const std::string index = (dir / "logs.index").string();
  const std::string filler(1024 * 1024, '\n');
  write(index, "1000 5 0\n" + filler);
  append_log_index(index, 2000, 9, 0);
  EXPECT_LT(fs::file_size(index), 600u * 1024);
  EXPECT_EQ(offset_at(index, false, 1500), 0);  // the older sample dropped: from the start, never later
  EXPECT_EQ(offset_at(index, false, 2500), 9);
}

TEST(ReadLog, AMissingFileIsAnEmptyStreamAndALinkIsNotFollowed) {
  testing::TempDir dir;
  EXPECT_EQ(read_log((dir / "none").string(), 0, 10).size, 0);
  write(dir / "secret", "root's\n");
  fs::create_symlink(dir / "secret", dir / "stdout.log");
  EXPECT_EQ(read_log((dir / "stdout.log").string(), 0, 10).data, "");
}

TEST(TailOffset, CountsLinesBackFromTheEnd) {
  testing::TempDir dir;
  const std::string log = (dir / "stdout.log").string();
  write(log, "a\nbb\nccc\n");
  EXPECT_EQ(tail_offset(log, 1), 5);
  EXPECT_EQ(tail_offset(log, 2), 2);
  EXPECT_EQ(tail_offset(log, 3), 0);
  EXPECT_EQ(tail_offset(log, 10), 0);
  EXPECT_EQ(tail_offset(log, 0), 9);
  write(log, "a\nbb\npartial");  // a last line without its newline counts
  EXPECT_EQ(tail_offset(log, 1), 5);
  EXPECT_EQ(tail_offset(log, 2), 2);
}

TEST(LineStartFrom, MovesToTheNextLine) {
  testing::TempDir dir;
  const std::string log = (dir / "stdout.log").string();
  write(log, "a\nbb\nccc\n");
  EXPECT_EQ(line_start_from(log, 0), 0);
  EXPECT_EQ(line_start_from(log, 2), 2);
  EXPECT_EQ(line_start_from(log, 3), 5);
  EXPECT_EQ(line_start_from(log, 9), 9);
}

TEST(LogIndex, SaysFromWhereTheBytesWrittenSinceATimeStart) {
  testing::TempDir dir;
  const std::string index = (dir / "logs.index").string();
  EXPECT_EQ(offset_at(index, false, 5000), 0);  // no samples: from the start
  append_log_index(index, 1000, 10, 1);
  append_log_index(index, 2000, 25, 1);
  append_log_index(index, 3000, 40, 7);
  EXPECT_EQ(offset_at(index, false, 500), 0);
  EXPECT_EQ(offset_at(index, false, 1000), 10);
  EXPECT_EQ(offset_at(index, false, 2500), 25);  // earlier than asked, never later
  EXPECT_EQ(offset_at(index, true, 9000), 7);
  // A line the task forged or a torn one is skipped, not trusted.
  std::ofstream(index, std::ios::app) << "garbage\n4000 -5 x\n5000 9";
  EXPECT_EQ(offset_at(index, false, 9000), 40);
}

}  // namespace
}  // namespace k8s4r::agent
