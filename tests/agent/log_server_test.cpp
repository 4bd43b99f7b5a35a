// The robot's side of following a task's log: each request answered once,
// from the offset asked; held while there is nothing new, and answered as
// soon as there is or the task ends; never a byte unless asked. On a fake
// clock, with the real work dir and files.
#include "log_server.h"

#include "k8s4r/common/topics.h"
#include "k8s4r/testing/manual_clock.h"
#include "k8s4r/testing/temp_dir.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

namespace k8s4r::agent {
namespace {

using namespace std::chrono_literals;

constexpr const char* kUid = "5b0e7c1a-3f9d-4e21-9a77-0c2d4b6e8f10";

class LogServerTest : public ::testing::Test {
 protected:
  LogServerTest() : work_dir_(dir_.path().string()), loop_(clock_) {
    work_dir_.make_task_dir(kUid);
    LogServer::Hooks hooks;
    hooks.publish = [this](const std::string& topic, const std::string& payload) {
      EXPECT_EQ(topic, "k8s4r/robots/robot-a/logs/chunks/k8s4r-bridge");
      auto chunk = parse_log_chunk(payload);
      ASSERT_TRUE(chunk) << chunk.error().to_string() << "\n" << payload;
      sent_.push_back(chunk.value());
    };
    hooks.ended = [this](const std::string& uid) -> std::optional<bool> {
      const auto found = ended_.find(uid);
      if (found == ended_.end()) return std::nullopt;
      return found->second;
    };
    server_ = std::make_unique<LogServer>("robot-a", work_dir_, loop_, hooks);
    ended_[kUid] = false;
  }

  void append(const std::string& text) { std::ofstream(work_dir_.stdout_of(kUid), std::ios::app) << text; }

  LogRequest request(std::int64_t seq, std::optional<std::int64_t> offset, std::int64_t wait_ms = 5000) {
    LogRequest asked;
    asked.robot_id = "robot-a";
    asked.follow_id = "f1";
    asked.seq = seq;
    asked.reply_to = "k8s4r-bridge";
    asked.task_uid = kUid;
    asked.offset = offset;
    asked.max_bytes = 16;
    asked.wait_ms = wait_ms;
    return asked;
  }
  void ask(const LogRequest& asked) { server_->on_request(encode(asked)); }

  testing::TempDir dir_;
  WorkDir work_dir_;
  testing::ManualClock clock_;
  daemon::EventLoop loop_;
  std::map<std::string, bool> ended_;
  std::vector<LogChunk> sent_;
  std::unique_ptr<LogServer> server_;
};

TEST_F(LogServerTest, AnswersFromTheOffsetAskedInWholeLinesWhenThePieceIsFull) {
  append("first line\nsecond line\nthird\n");
  ask(request(1, 0));
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].data, "first line\n");  // 16 bytes would cut "second line" in two
  EXPECT_EQ(sent_[0].seq, 1);
  EXPECT_EQ(sent_[0].offset, 0);
  EXPECT_EQ(sent_[0].size, 29);
  EXPECT_FALSE(sent_[0].ended);
  ask(request(2, 11));
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[1].data, "second line\n");
  EXPECT_EQ(sent_[1].seq, 2);
}

TEST_F(LogServerTest, HoldsARequestForBytesNotWrittenYetAndAnswersWhenTheyAre) {
  append("a\n");
  ask(request(1, 2));
  testing::advance(clock_, loop_, 1s);
  EXPECT_TRUE(sent_.empty());  // nothing new: held
  EXPECT_EQ(server_->held(), 1u);
  append("b\n");
  testing::advance(clock_, loop_, 100ms);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].data, "b\n");
  EXPECT_EQ(sent_[0].offset, 2);
  EXPECT_EQ(server_->held(), 0u);
  // Nothing is sent unasked, however much the task writes.
  append("c\nd\n");
  testing::advance(clock_, loop_, 10s);
  EXPECT_EQ(sent_.size(), 1u);
}

TEST_F(LogServerTest, AHeldRequestIsAnsweredEmptyAtItsWaitAndAtOnceWhenTheTaskEnds) {
  ask(request(1, 0, 2000));
  testing::advance(clock_, loop_, 1900ms);
  EXPECT_TRUE(sent_.empty());
  testing::advance(clock_, loop_, 200ms);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].data, "");
  EXPECT_FALSE(sent_[0].ended);
  ask(request(2, 0));
  append("last\n");
  ended_[kUid] = true;
  testing::advance(clock_, loop_, 100ms);
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[1].data, "last\n");
  EXPECT_TRUE(sent_[1].ended);  // ended, and the bytes reach the end
  ask(request(3, 5));
  ASSERT_EQ(sent_.size(), 3u);  // not held: nothing more will come
  EXPECT_TRUE(sent_[2].ended);
}

TEST_F(LogServerTest, ANewerRequestOfAFollowReplacesTheOneHeld) {
  ask(request(1, 0));
  ask(request(2, 0));
  EXPECT_EQ(server_->held(), 1u);
  append("x\n");
  testing::advance(clock_, loop_, 100ms);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].seq, 2);
}

TEST_F(LogServerTest, AnOlderRequestDeliveredAgainDoesNotReplaceANewerOneHeld) {
  ask(request(2, 0));
  ask(request(1, 0));  // the broker's duplicate of an earlier one
  append("x\n");
  testing::advance(clock_, loop_, 100ms);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].seq, 2);
}

TEST_F(LogServerTest, SinceSecondsCountsBackFromTheRobotsOwnClock) {
  append("old\n");
  server_->sample({kUid});
  clock_.advance(10s);
  append("new\n");
  server_->sample({kUid});
  clock_.advance(2s);
  LogRequest asked = request(1, std::nullopt);
  asked.since_seconds = 5;
  ask(asked);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].data, "new\n");
}

TEST_F(LogServerTest, StartsByTailLinesWhenNoOffsetIsGiven) {
  append("1\n2\n3\n4\n");
  LogRequest asked = request(1, std::nullopt);
  asked.tail_lines = 2;
  ask(asked);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].offset, 4);
  EXPECT_EQ(sent_[0].data, "3\n4\n");
}

TEST_F(LogServerTest, SaysSoForATaskItDoesNotHoldAndIgnoresAnotherRobotsRequests) {
  LogRequest asked = request(1, 0);
  asked.task_uid = "9c1e2f4b-0000-4a51-9c1e-2f4b8a7d6e10";
  ask(asked);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].error, "TaskNotFound");
  asked = request(2, 0);
  asked.robot_id = "robot-b";
  ask(asked);
  server_->on_request("{\"robotId\":");
  server_->on_request(
      R"({"robotId":"robot-a","followId":"f","seq":1,"replyTo":"#","taskUid":"x","stream":"stdout","maxBytes":1})");
  EXPECT_EQ(sent_.size(), 1u);
}

TEST_F(LogServerTest, NotesARunningTasksSizesOnlyWhenTheyChange) {
  append("a\n");
  server_->sample({kUid});
  server_->sample({kUid});
  clock_.advance(2s);
  append("bb\n");
  server_->sample({kUid});
  std::ifstream index(work_dir_.task_file(kUid, "logs.index"));
  std::string line;
  int lines = 0;
  while (std::getline(index, line)) ++lines;
  EXPECT_EQ(lines, 2);
}

}  // namespace
}  // namespace k8s4r::agent
