#include "k8s4r/bridge/robot_subscriptions.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace k8s4r::bridge {
namespace {

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(RobotSubscriptions, ARobotIsItsHeartbeatAndReportsAndABadIdIsNothing) {
  const auto filters = RobotSubscriptions::filters("r-1");
  ASSERT_EQ(filters.size(), 2u);
  EXPECT_EQ(filters[0].filter, "k8s4r/robots/r-1/heartbeat");
  EXPECT_EQ(filters[0].qos, 0);
  EXPECT_EQ(filters[1].filter, "k8s4r/robots/r-1/tasks/+/status");
  EXPECT_EQ(filters[1].qos, 1);
  for (const char* bad : {"a/b", "+", "#", ""}) EXPECT_TRUE(RobotSubscriptions::filters(bad).empty()) << bad;
}

TEST(RobotSubscriptions, WhatChangesIsSentOnceInBatchesOfAtMostTheSizeAsked) {
  RobotSubscriptions subscriptions;
  for (int i = 0; i < 5; ++i) subscriptions.want("r-" + std::to_string(i));
  auto first = subscriptions.next(3);
  EXPECT_EQ(first.subscribe.size(), 3u);
  auto second = subscriptions.next(3);
  EXPECT_EQ(second.subscribe.size(), 2u);
  EXPECT_FALSE(subscriptions.pending());
  EXPECT_TRUE(subscriptions.next(3).empty());
  EXPECT_EQ(subscriptions.held(), 5u);
  first.subscribe.insert(first.subscribe.end(), second.subscribe.begin(), second.subscribe.end());
  EXPECT_EQ(sorted(first.subscribe), (std::vector<std::string>{"r-0", "r-1", "r-2", "r-3", "r-4"}));
  subscriptions.want("r-1");  // already held: nothing to send
  EXPECT_FALSE(subscriptions.pending());
}

TEST(RobotSubscriptions, WantedThenUnwantedBeforeSendingSendsNothing) {
  RobotSubscriptions subscriptions;
  subscriptions.want("r-1");
  subscriptions.unwant("r-1");
  EXPECT_TRUE(subscriptions.next(10).empty());
  subscriptions.want("r-2");
  ASSERT_EQ(subscriptions.next(10).subscribe, std::vector<std::string>{"r-2"});
  subscriptions.unwant("r-2");
  subscriptions.want("r-2");  // held all along: still nothing
  EXPECT_TRUE(subscriptions.next(10).empty());
  subscriptions.unwant("r-2");
  const auto batch = subscriptions.next(10);
  EXPECT_TRUE(batch.subscribe.empty());
  EXPECT_EQ(batch.unsubscribe, std::vector<std::string>{"r-2"});
  EXPECT_EQ(subscriptions.held(), 0u);
}

TEST(RobotSubscriptions, ANewConnectionSubscribesEveryWantedRobotAgain) {
  RobotSubscriptions subscriptions;
  subscriptions.want("r-1");
  subscriptions.want("r-2");
  subscriptions.next(10);
  subscriptions.unwant("r-2");  // not sent before the connection dropped
  subscriptions.reconnected();
  const auto batch = subscriptions.next(10);
  EXPECT_EQ(batch.subscribe, std::vector<std::string>{"r-1"});
  EXPECT_TRUE(batch.unsubscribe.empty());
}

TEST(RobotSubscriptions, AStrayRobotIsUnsubscribedOncePerConnectionAndAWantedOneNever) {
  RobotSubscriptions subscriptions;
  subscriptions.want("mine");
  subscriptions.next(10);
  subscriptions.stray("mine");  // its slot changes hands: not ours to drop
  EXPECT_FALSE(subscriptions.pending());
  subscriptions.stray("theirs");
  EXPECT_EQ(subscriptions.next(10).unsubscribe, std::vector<std::string>{"theirs"});
  subscriptions.stray("theirs");  // still arriving (a shared filter of an older version): once is enough
  EXPECT_FALSE(subscriptions.pending());
  subscriptions.reconnected();
  subscriptions.next(10);
  subscriptions.stray("theirs");
  EXPECT_EQ(subscriptions.next(10).unsubscribe, std::vector<std::string>{"theirs"});
}

TEST(RobotSubscriptions, ARobotWantedAfterItStrayedIsSubscribedWhetherOrNotItsUnsubscribeWentOut) {
  // An upgraded replica hears its future robots through an earlier
  // session's shared filter before it serves their slots; then it serves them.
  RobotSubscriptions subscriptions;
  subscriptions.stray("r-1");
  subscriptions.want("r-1");  // before the unsubscribe went out
  auto batch = subscriptions.next(10);
  EXPECT_EQ(batch.subscribe, std::vector<std::string>{"r-1"});
  EXPECT_TRUE(batch.unsubscribe.empty());
  subscriptions.stray("r-2");
  EXPECT_EQ(subscriptions.next(10).unsubscribe, std::vector<std::string>{"r-2"});
  EXPECT_EQ(subscriptions.held(), 1u);  // a stray is never counted as held
  subscriptions.want("r-2");            // after it went out
  EXPECT_EQ(subscriptions.next(10).subscribe, std::vector<std::string>{"r-2"});
}

TEST(RobotSubscriptions, AnIdNoTopicCanCarryIsNeverWantedSoNoBatchIsEmptyOfFilters) {
  RobotSubscriptions subscriptions;
  subscriptions.want("robot.with.dots");
  subscriptions.stray("a/b");
  EXPECT_FALSE(subscriptions.pending());
  EXPECT_TRUE(subscriptions.next(10).empty());
}

}  // namespace
}  // namespace k8s4r::bridge
