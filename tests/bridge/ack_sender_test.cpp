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

TEST_F(AckSenderTest, NothingIsAddressedToARobotIdThatCouldBreakATopic) {
  acks_.report("robot/#", {"t-1", 1, ReportResult::recorded});
  testing::advance(clock_, loop_, 20ms);
  EXPECT_TRUE(sent_.empty());
}

}  // namespace
}  // namespace k8s4r::bridge
