// The bridge's acknowledgements: gathered per robot for a moment, one message
// per robot, never more reports in one than a message may carry.
#include "k8s4r/bridge/ack_sender.h"

#include "k8s4r/testing/manual_clock.h"

#include <gtest/gtest.h>

namespace k8s4r::bridge {
namespace {

using namespace std::chrono_literals;

struct Sent {
  std::string topic;
  Ack ack;
};

class AckSenderTest : public ::testing::Test {
 protected:
  testing::ManualClock clock_;
  daemon::EventLoop loop_{clock_};
  std::vector<Sent> sent_;
  AckSender acks_{loop_, [this](const std::string& topic, const std::string& payload) {
                    sent_.push_back({topic, parse_ack(payload).value()});
                  }};
};

TEST_F(AckSenderTest, WhatIsSaidToARobotWithinAMomentGoesInOneMessage) {
  acks_.report("robot-1", {"t-1", 1, ReportResult::recorded});
  acks_.report("robot-2", {"t-9", 4, ReportResult::refused, "UnknownTask", "no Task"});
  acks_.heartbeat("robot-1", clock_.wall() - 1s);
  acks_.report("robot-1", {"t-1", 2, ReportResult::recorded});
  testing::advance(clock_, loop_, 19ms);
  EXPECT_TRUE(sent_.empty());
  testing::advance(clock_, loop_, 1ms);
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[0].topic, "k8s4r/robots/robot-1/acks");
  EXPECT_EQ(sent_[0].ack.robot_id, "robot-1");
  EXPECT_EQ(sent_[0].ack.reports.size(), 2u);
  EXPECT_EQ(sent_[0].ack.heartbeat, clock_.wall() - 20ms - 1s);
  EXPECT_EQ(sent_[1].topic, "k8s4r/robots/robot-2/acks");
  EXPECT_EQ(sent_[1].ack.reports[0].reason, "UnknownTask");
  EXPECT_FALSE(sent_[1].ack.heartbeat);
  testing::advance(clock_, loop_, 1s);
  EXPECT_EQ(sent_.size(), 2u);  // nothing more to say
}

TEST_F(AckSenderTest, ABurstIsCutIntoMessagesOfAtMostAThousandReports) {
  for (int i = 1; i <= 2500; ++i) acks_.report("robot-1", {"t-" + std::to_string(i), 1, ReportResult::recorded});
  testing::advance(clock_, loop_, 20ms);
  ASSERT_EQ(sent_.size(), 3u);
  EXPECT_EQ(sent_[0].ack.reports.size(), 1000u);
  EXPECT_EQ(sent_[2].ack.reports.size(), 500u);
  EXPECT_EQ(sent_[2].ack.reports.back().task_uid, "t-2500");
}

// A flood of forged reports on a robot's topic is refused; those refusals
// must not become a flood of acknowledgements to the robot, queued ahead of
// its dispatches. What it really sent is always confirmed.
TEST_F(AckSenderTest, RefusalsGoOutAtMostFiveHundredASecondRecordsAlways) {
  for (int i = 1; i <= 5000; ++i)
    acks_.report("robot-1", {"forged-" + std::to_string(i), 1, ReportResult::refused, "UnknownTask", "no Task"});
  acks_.report("robot-1", {"t-real", 3, ReportResult::recorded});
  testing::advance(clock_, loop_, 20ms);
  std::size_t refused = 0, recorded = 0;
  for (const Sent& sent : sent_) {
    for (const ReportAck& ack : sent.ack.reports) (ack.result == ReportResult::refused ? refused : recorded)++;
  }
  EXPECT_EQ(refused, 500u);
  EXPECT_EQ(recorded, 1u);
  EXPECT_EQ(acks_.refusals_dropped(), 4500u);
  testing::advance(clock_, loop_, 1s);  // a second later, the bucket is full again
  acks_.report("robot-1", {"t-gone", 2, ReportResult::refused, "UnknownTask", "no Task"});
  testing::advance(clock_, loop_, 20ms);
  EXPECT_EQ(sent_.back().ack.reports.back().task_uid, "t-gone");
}

// A busy broker takes the bridge's publishes slowly: what is to be said waits
// per robot, not per message, and goes out fresh when the link has room.
TEST(AckSenderRoom, WhileTheLinkHasNoRoomEachRobotsAcknowledgementsWaitAsOne) {
  testing::ManualClock clock;
  daemon::EventLoop loop{clock};
  std::vector<Sent> sent;
  bool room = false;
  AckSender acks{loop,
                 [&sent](const std::string& topic, const std::string& payload) {
                   sent.push_back({topic, parse_ack(payload).value()});
                 },
                 {},
                 [&room] { return room; }};
  for (int beat = 0; beat < 50; ++beat) {
    acks.heartbeat("robot-1", clock.wall());
    acks.heartbeat("robot-2", clock.wall());
    acks.report("robot-1", {"t-1", 2, ReportResult::recorded});  // sent again and again: no answer came
    testing::advance(clock, loop, 100ms);
  }
  EXPECT_TRUE(sent.empty());
  EXPECT_EQ(acks.robots_waiting(), 2u);
  EXPECT_GT(acks.waits_for_room(), 0u);
  acks.report("robot-1", {"t-2", 1, ReportResult::recorded});
  acks.report("robot-1", {"t-1", 2, ReportResult::recorded});  // once more: keeps its place
  const Timestamp newest = clock.wall() - 100ms;
  room = true;
  testing::advance(clock, loop, 20ms);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].ack.heartbeat, newest);   // the newest heartbeat's, not the first
  ASSERT_EQ(sent[0].ack.reports.size(), 2u);  // each report said once, in the order first seen
  EXPECT_EQ(sent[0].ack.reports[0].task_uid, "t-1");
  EXPECT_EQ(sent[0].ack.reports[1].task_uid, "t-2");
  EXPECT_EQ(sent[1].ack.heartbeat, newest);
  EXPECT_EQ(acks.robots_waiting(), 0u);
}

TEST_F(AckSenderTest, NothingIsAddressedToARobotIdThatCouldBreakATopic) {
  acks_.report("robot/#", {"t-1", 1, ReportResult::recorded});
  testing::advance(clock_, loop_, 20ms);
  EXPECT_TRUE(sent_.empty());
}

}  // namespace
}  // namespace k8s4r::bridge
