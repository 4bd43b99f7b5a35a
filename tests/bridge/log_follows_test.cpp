// The bridge's followers wait for their robots' answers: each gets the answer
// to the request it made, from the robot it asked, and nothing else: a late
// answer to an earlier request, another robot's, or another follow's is
// dropped (it would repeat or skip bytes).
#include "k8s4r/bridge/log_follows.h"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

namespace k8s4r::bridge {
namespace {

using namespace std::chrono_literals;

struct Published {
  std::mutex mutex;
  std::vector<std::pair<std::string, std::string>> messages;
};

LogChunk answer_to(const LogRequest& asked, std::string data) {
  LogChunk chunk;
  chunk.robot_id = asked.robot_id;
  chunk.follow_id = asked.follow_id;
  chunk.seq = asked.seq;
  chunk.task_uid = asked.task_uid;
  chunk.stream = asked.stream;
  chunk.offset = asked.offset.value_or(0);
  chunk.size = chunk.offset + static_cast<std::int64_t>(data.size());
  chunk.data = std::move(data);
  return chunk;
}

TEST(LogFollows, AFollowerGetsTheAnswerToItsOwnRequestOnly) {
  Published published;
  LogFollows follows("k8s4r-bridge", [&](const std::string& topic, const std::string& payload) {
    std::lock_guard lock(published.mutex);
    published.messages.emplace_back(topic, payload);
  });
  LogRequest asked;
  asked.robot_id = "robot-a";
  asked.follow_id = follows.new_follow_id();
  asked.seq = 2;
  asked.task_uid = "5b0e7c1a-3f9d-4e21-9a77-0c2d4b6e8f10";
  asked.offset = 10;
  std::optional<LogChunk> got;
  std::thread follower([&] { got = follows.ask(asked, 10s); });
  // Wait until the request is out; then answers arrive, the wrong ones first.
  for (int i = 0; i < 1000 && follows.followers() == 0; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(follows.followers(), 1u);
  LogChunk late = answer_to(asked, "old");
  late.seq = 1;
  EXPECT_FALSE(follows.on_chunk(late));
  LogChunk other_robot = answer_to(asked, "forged");
  other_robot.robot_id = "robot-b";
  EXPECT_FALSE(follows.on_chunk(other_robot));
  LogChunk other_stream = answer_to(asked, "err");
  other_stream.stream = LogStream::stderr_stream;
  EXPECT_FALSE(follows.on_chunk(other_stream));
  EXPECT_TRUE(follows.on_chunk(answer_to(asked, "right\n")));
  EXPECT_FALSE(follows.on_chunk(answer_to(asked, "again\n")));  // one answer per request
  follower.join();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->data, "right\n");
  EXPECT_EQ(follows.chunks_dropped(), 4u);
  ASSERT_EQ(published.messages.size(), 1u);
  EXPECT_EQ(published.messages[0].first, "k8s4r/robots/robot-a/logs/request");
  const auto sent = parse_log_request(published.messages[0].second);
  ASSERT_TRUE(sent);
  EXPECT_EQ(sent.value().reply_to, "k8s4r-bridge");  // where the answer comes
  EXPECT_EQ(sent.value().offset, 10);
  EXPECT_EQ(follows.followers(), 0u);
}

TEST(LogFollows, NoAnswerIsNulloptAfterTheTimeoutAndStopWakesEveryFollower) {
  LogFollows follows("k8s4r-bridge", [](const std::string&, const std::string&) {});
  LogRequest asked;
  asked.robot_id = "robot-a";
  asked.follow_id = "f1";
  asked.task_uid = "5b0e7c1a-3f9d-4e21-9a77-0c2d4b6e8f10";
  EXPECT_FALSE(follows.ask(asked, 20ms));
  std::optional<LogChunk> got = LogChunk{};
  std::thread follower([&] { got = follows.ask(asked, 60s); });
  for (int i = 0; i < 1000 && follows.followers() == 0; ++i) std::this_thread::sleep_for(1ms);
  follows.stop();
  follower.join();  // at once, not after a minute
  EXPECT_FALSE(got);
  EXPECT_FALSE(follows.ask(asked, 60s));  // stopped: nothing more is asked
}

TEST(LogFollows, FollowIdsAreDistinctAndFitATopicLevel) {
  LogFollows follows("k8s4r-bridge", [](const std::string&, const std::string&) {});
  const std::string a = follows.new_follow_id(), b = follows.new_follow_id();
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_of("+#/"), std::string::npos);
}

}  // namespace
}  // namespace k8s4r::bridge
