// A Task of its own (no TaskGroup): sent to its robot once that is Online,
// waiting with a reason while it cannot be, and lost as any other.
#include "k8s4r/manager/plan_task.h"

#include <gtest/gtest.h>

namespace k8s4r::manager {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const Timestamp kNow = parse_rfc3339("2026-11-22T01:30:00Z").value();

json task(const std::string& robot, const std::string& state = "", const std::string& message = "") {
  json t = {{"apiVersion", "robot.k8s4r.io/v1alpha1"},
            {"kind", "Task"},
            {"metadata", {{"name", "hello"}, {"namespace", "default"}, {"uid", "hello-uid"}}},
            {"spec", {{"name", "hello"}, {"driver", "exec"}}},
            {"status", json::object()}};
  if (!robot.empty()) t["spec"]["targetRobot"] = robot;
  if (!state.empty()) t["status"]["state"] = state;
  if (!message.empty()) t["status"]["message"] = message;
  return t;
}

json robot(const std::string& phase, std::vector<std::string> running = {}) {
  return {{"metadata", {{"name", "robot-001"}, {"namespace", "default"}}},
          {"status", {{"phase", phase}, {"lastHeartbeatTime", "2026-11-22T01:29:59Z"}, {"runningTasks", running}}}};
}

LivenessInputs inputs(const json* r) {
  LivenessInputs in;
  in.robot = r;
  in.now = kNow;
  in.dispatch_timeout = 2min;
  in.disconnect_grace = 30s;
  return in;
}

TEST(PlanTask, APinnedTaskIsSentOnceItsRobotIsOnline) {
  const json online = robot("Online");
  const TaskPlan plan = plan_task(task("robot-001"), inputs(&online));
  ASSERT_TRUE(plan.status);
  EXPECT_EQ((*plan.status)["state"], "dispatching");
  ASSERT_TRUE(plan.event);
  EXPECT_EQ(plan.event->reason, "Scheduled");

  const json pending = robot("Pending");
  const TaskPlan waiting = plan_task(task("robot-001"), inputs(&pending));
  EXPECT_EQ((*waiting.status)["state"], "pending");
  EXPECT_EQ((*waiting.status)["message"], "waiting for robot robot-001 to be Online (it is Pending)");
}

TEST(PlanTask, ATaskForARobotThatDoesNotExistSaysSoOnceWithAWarning) {
  const TaskPlan plan = plan_task(task("robot-404"), inputs(nullptr));
  ASSERT_TRUE(plan.status);
  EXPECT_EQ((*plan.status)["message"], "robot robot-404 does not exist");
  ASSERT_TRUE(plan.event);
  EXPECT_EQ(plan.event->type, "Warning");
  EXPECT_EQ(plan.event->reason, "RobotNotFound");
  // Said already: nothing written, no Event again.
  const TaskPlan again = plan_task(task("robot-404", "pending", "robot robot-404 does not exist"), inputs(nullptr));
  EXPECT_FALSE(again.status);
  EXPECT_FALSE(again.event);
  const TaskPlan unnamed = plan_task(task(""), inputs(nullptr));
  EXPECT_EQ(unnamed.event->reason, "NoRobot");
}

TEST(PlanTask, ATaskSetDispatchingByHandForARobotThatDoesNotExistIsLostNamingIt) {
  const TaskPlan plan = plan_task(task("robot-404", "dispatching"), inputs(nullptr));
  ASSERT_TRUE(plan.status);
  EXPECT_EQ((*plan.status)["state"], "failed");
  EXPECT_EQ((*plan.status)["reason"], "Lost");
  EXPECT_EQ((*plan.status)["message"], "its robot robot-404 does not exist");
  EXPECT_EQ(plan.event->reason, "Lost");
}

TEST(PlanTask, ATaskSetDispatchingByHandIsSubjectToTheDispatchTimeoutFromWhenItWasFirstSeen) {
  const json online = robot("Online");
  LivenessInputs in = inputs(&online);
  const TaskPlan first = plan_task(task("robot-001", "dispatching"), in);
  EXPECT_FALSE(first.status);
  ASSERT_TRUE(first.liveness.seen_dispatching);  // remembered: the timeout counts from here
  EXPECT_EQ(*first.liveness.recheck, 2min + 100ms);
  in.seen_dispatching = kNow;
  in.now = kNow + 3min;
  json beat = online;
  beat["status"]["lastHeartbeatTime"] = "2026-11-22T01:32:50Z";  // since, without it
  in.robot = &beat;
  const TaskPlan later = plan_task(task("robot-001", "dispatching"), in);
  ASSERT_TRUE(later.status);
  EXPECT_EQ((*later.status)["reason"], "Lost");
  EXPECT_NE((*later.status)["message"].get<std::string>().find("did not start it within 2m0s"), std::string::npos);
}

TEST(PlanTask, AFinishedTaskIsLeftAlone) {
  const json online = robot("Online");
  EXPECT_FALSE(plan_task(task("robot-001", "completed"), inputs(&online)).status);
}

}  // namespace
}  // namespace k8s4r::manager
