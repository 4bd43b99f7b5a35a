#include "k8s4r/common/topics.h"

#include <gtest/gtest.h>

namespace k8s4r::topics {
namespace {

TEST(Topics, BuildsTheContractTopics) {
  EXPECT_EQ(response("robot-1").value(), "k8s4r/robots/robot-1/response");
  EXPECT_EQ(dispatch("robot-1").value(), "k8s4r/robots/robot-1/tasks/dispatch");
  EXPECT_EQ(task_status("robot-1", "3f6c2b1e-9d7a").value(), "k8s4r/robots/robot-1/tasks/3f6c2b1e-9d7a/status");
  EXPECT_EQ(task_status_filter("robot-1").value(), "k8s4r/robots/robot-1/tasks/+/status");
  EXPECT_EQ(presence("robot-1").value(), "k8s4r/robots/robot-1/presence");
  EXPECT_EQ(robot_register("robot-1").value(), "k8s4r/robots/robot-1/register");
  EXPECT_EQ(robot_heartbeat("robot-1").value(), "k8s4r/robots/robot-1/heartbeat");
}

TEST(Topics, RefusesIdentifiersThatWouldChangeTheTopic) {
  EXPECT_EQ(dispatch("robot/other").error().field, "robotId");
  EXPECT_EQ(dispatch("#").error().field, "robotId");
  EXPECT_EQ(task_status("robot-1", "+").error().field, "taskUid");
  EXPECT_EQ(task_status("robot+", "abc").error().field, "robotId");
  EXPECT_FALSE(response(""));
  EXPECT_EQ(robot_register("a/b").error().field, "robotId");
  EXPECT_EQ(robot_heartbeat("+").error().field, "robotId");
}

TEST(Topics, ParsesEveryContractTopic) {
  EXPECT_EQ(parse_topic("k8s4r/register").value(), (ParsedTopic{TopicKind::register_robot, "", "", true}));
  EXPECT_EQ(parse_topic("k8s4r/heartbeat").value(), (ParsedTopic{TopicKind::heartbeat, "", "", true}));
  EXPECT_EQ(parse_topic("k8s4r/robots/r1/register").value(), (ParsedTopic{TopicKind::register_robot, "r1", ""}));
  EXPECT_EQ(parse_topic("k8s4r/robots/r1/heartbeat").value(), (ParsedTopic{TopicKind::heartbeat, "r1", ""}));
  EXPECT_EQ(parse_topic("k8s4r/robots/r1/response").value(), (ParsedTopic{TopicKind::response, "r1", ""}));
  EXPECT_EQ(parse_topic("k8s4r/robots/r1/presence").value(), (ParsedTopic{TopicKind::presence, "r1", ""}));
  EXPECT_EQ(parse_topic("k8s4r/robots/r1/tasks/dispatch").value(), (ParsedTopic{TopicKind::dispatch, "r1", ""}));
  EXPECT_EQ(parse_topic("k8s4r/robots/r1/tasks/abc-1/status").value(),
            (ParsedTopic{TopicKind::task_status, "r1", "abc-1"}));
}

TEST(Topics, BuildAndParseAreInverse) {
  auto topic = task_status("robot-7", "0a1b2c").value();
  auto parsed = parse_topic(topic).value();
  EXPECT_EQ(task_status(parsed.robot_id, parsed.task_uid).value(), topic);
}

TEST(Topics, RejectsUnknownAndMalformedTopics) {
  for (const char* topic :
       {"", "k8s4r", "k8s4r/robots", "k8s4r/robots/r1", "k8s4r/robots/r1/unknown",
        "k8s4r/robots/r1/tasks/x/status/extra", "other/robots/r1/response", "k8s4r/robots/R1/response",
        "k8s4r/robots//response", "k8s4r/robots/r1/tasks/UP/status", "k8s4r/register/", "k8s4r/robots/r1/register/x",
        "k8s4r/robots/+/heartbeat", "k8s4r/robots/r#/register"}) {
    auto parsed = parse_topic(topic);
    EXPECT_FALSE(parsed) << topic;
    if (!parsed) {
      EXPECT_EQ(parsed.error().field, "topic") << topic;
    }
  }
}

}  // namespace
}  // namespace k8s4r::topics
