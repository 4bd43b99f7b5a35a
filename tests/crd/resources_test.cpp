// Typed reads of Tasks and Robots, conditions, composed merge patches,
// finalizer patches and the token digest.
#include "k8s4r/crd/resources.h"

#include <gtest/gtest.h>

namespace k8s4r::crd {
namespace {

using nlohmann::json;

TEST(Crd, ReadsATaskAndTreatsWrongTypesAsAbsent) {
  const json task = json::parse(R"({"metadata":{"name":"t","namespace":"lab","uid":"u-1",
    "deletionTimestamp":"2026-11-23T10:00:00Z","finalizers":["other","robot.k8s4r.io/bridge"]},
    "spec":{"targetRobot":"robot-1"},
    "status":{"state":"dispatching","statusSeq":4,"dispatchedAt":"2026-11-23T09:59:00Z"}})");
  const TaskView view = read_task(task);
  EXPECT_EQ(view.namespace_, "lab");
  EXPECT_EQ(view.uid, "u-1");
  EXPECT_EQ(view.target_robot, "robot-1");
  EXPECT_EQ(view.state, TaskState::dispatching);
  EXPECT_EQ(view.status_seq, 4);
  EXPECT_TRUE(view.dispatched_at.has_value());
  EXPECT_TRUE(view.deleting);
  EXPECT_TRUE(view.has_bridge_finalizer);

  const TaskView odd = read_task(json::parse(
      R"({"metadata":{"name":5,"finalizers":"x"},"spec":[],"status":{"state":"sleeping","statusSeq":"4"}})"));
  EXPECT_EQ(odd.name, "");
  EXPECT_EQ(odd.state, std::nullopt);
  EXPECT_EQ(odd.status_seq, std::nullopt);
  EXPECT_FALSE(odd.has_bridge_finalizer);
  EXPECT_EQ(read_task(json("not an object")).uid, "");
}

TEST(Crd, TaskStatesAndRobotPhasesRoundTrip) {
  for (const char* state : {"pending", "dispatching", "scheduled", "running", "exited", "completed", "failed"}) {
    ASSERT_TRUE(parse_task_state(state)) << state;
    EXPECT_EQ(to_string(*parse_task_state(state)), state);
  }
  EXPECT_TRUE(is_terminal(TaskState::completed));
  EXPECT_TRUE(is_terminal(TaskState::failed));
  EXPECT_FALSE(is_terminal(TaskState::exited));
  for (const char* phase : {"Pending", "Online", "Offline", "Unknown", "Rejected"}) {
    ASSERT_TRUE(parse_robot_phase(phase)) << phase;
    EXPECT_EQ(to_string(*parse_robot_phase(phase)), phase);
  }
  EXPECT_FALSE(parse_robot_phase("online"));
}

TEST(Crd, ASetConditionMovesItsTransitionTimeOnlyWhenItsStatusChanges) {
  const auto t1 = parse_rfc3339("2026-11-23T10:00:00Z").value();
  const auto t2 = parse_rfc3339("2026-11-23T10:05:00Z").value();
  json robot = {{"status", {{"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
  robot["status"]["conditions"] = set_condition(robot, {"Connected", "True", "Online", "connected"}, t1);
  ASSERT_EQ(robot["status"]["conditions"].size(), 2u);
  EXPECT_EQ(robot["status"]["conditions"][0]["type"], "Ready");  // others kept
  robot["status"]["conditions"] = set_condition(robot, {"Connected", "True", "Online", "still"}, t2);
  EXPECT_EQ(robot["status"]["conditions"][1]["lastTransitionTime"], "2026-11-23T10:00:00Z");
  EXPECT_EQ(robot["status"]["conditions"][1]["message"], "still");
  robot["status"]["conditions"] = set_condition(robot, {"Connected", "False", "LastWill", "gone"}, t2);
  EXPECT_EQ(robot["status"]["conditions"][1]["lastTransitionTime"], "2026-11-23T10:05:00Z");
  EXPECT_EQ(robot["status"]["conditions"][1]["status"], "False");
}

TEST(Crd, ComposedMergePatchesEqualApplyingBothInOrder) {
  const json object = json::parse(R"({"status":{"state":"dispatching","message":"old","deviceInfo":{"a":1,"b":2}}})");
  const json older = json::parse(R"({"status":{"state":"running","startedAt":"t1","deviceInfo":{"a":5}}})");
  const json newer = json::parse(R"({"status":{"state":"completed","message":null,"deviceInfo":{"b":null}}})");
  json sequential = object;
  sequential.merge_patch(older);
  sequential.merge_patch(newer);
  json composed = object;
  composed.merge_patch(compose_merge_patches(older, newer));
  EXPECT_EQ(composed, sequential);
  EXPECT_EQ(composed["status"]["state"], "completed");
  EXPECT_EQ(composed["status"]["startedAt"], "t1");
  EXPECT_FALSE(composed["status"].contains("message"));
}

TEST(Crd, TheMergePatchBetweenTwoObjectsTurnsOneIntoTheOther) {
  const json current = json::parse(
      R"({"count":2,"tasks":[{"name":"a"}],"reschedulePolicy":{"attempts":3,"delay":"5s"},"meta":{"x":"1","y":"2"}})");
  const json wanted =
      json::parse(R"({"count":3,"tasks":[{"name":"b"}],"reschedulePolicy":{"attempts":3},"meta":{"y":"2"}})");
  const json patch = merge_patch_between(current, wanted);
  json applied = current;
  applied.merge_patch(patch);
  EXPECT_EQ(applied, wanted);
  // Only what differs: a nested field dropped is a nested null, equal fields are left out.
  EXPECT_EQ(patch,
            json::parse(R"({"count":3,"tasks":[{"name":"b"}],"reschedulePolicy":{"delay":null},"meta":{"x":null}})"));
  EXPECT_TRUE(merge_patch_between(wanted, wanted).is_null());
}

TEST(Crd, FinalizerPatchesTestWhatTheCacheSaw) {
  json task = {{"metadata", {{"name", "t"}}}};
  json patched = task.patch(add_finalizer_patch(task, kBridgeFinalizer));
  EXPECT_EQ(patched["metadata"]["finalizers"], json::array({"robot.k8s4r.io/bridge"}));

  task["metadata"]["finalizers"] = {"keep"};
  patched = task.patch(add_finalizer_patch(task, kBridgeFinalizer));
  EXPECT_EQ(patched["metadata"]["finalizers"], json::array({"keep", "robot.k8s4r.io/bridge"}));
  // A list that changed since: the test fails, nothing is overwritten.
  json changed = task;
  changed["metadata"]["finalizers"] = {"keep", "new"};
  EXPECT_THROW(changed.patch(add_finalizer_patch(task, kBridgeFinalizer)), json::exception);

  const json removed = patched.patch(remove_finalizer_patch(patched, kBridgeFinalizer));
  EXPECT_EQ(removed["metadata"]["finalizers"], json::array({"keep"}));
  EXPECT_TRUE(remove_finalizer_patch(removed, kBridgeFinalizer).is_null());
}

TEST(Crd, TokenDigestIsSha256InHex) {
  EXPECT_EQ(token_digest(""), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(token_digest("abc"), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace k8s4r::crd
