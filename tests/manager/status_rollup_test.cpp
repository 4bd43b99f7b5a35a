// What `kubectl get rjob,rtg` shows, from the Tasks and TaskGroups.
#include "k8s4r/manager/status_rollup.h"

#include <gtest/gtest.h>

namespace k8s4r::manager {
namespace {

using nlohmann::json;

json group(int count, int tasks_per_replica) {
  json tasks = json::array();
  for (int i = 0; i < tasks_per_replica; ++i) tasks.push_back({{"name", "t" + std::to_string(i)}});
  return {{"metadata", {{"name", "job-g"}}}, {"spec", {{"groupName", "g"}, {"count", count}, {"tasks", tasks}}}};
}

json task(int replica, const std::string& name, const std::string& state, const std::string& robot = "",
          int attempt = 0, std::optional<int> exit_code = std::nullopt) {
  json labels = {{"replica", std::to_string(replica)}, {"task", name}};
  if (attempt > 0) labels[kAttemptLabel] = std::to_string(attempt);
  json resource = {{"metadata", {{"labels", labels}}}, {"spec", json::object()}, {"status", json::object()}};
  if (!robot.empty()) resource["spec"]["targetRobot"] = robot;
  if (!state.empty()) resource["status"]["state"] = state;
  if (exit_code) resource["status"]["exitCode"] = *exit_code;
  return resource;
}

TEST(TaskGroupStatus, CountsEachSlotOnceAndSaysWhereItsReplicasRun) {
  const json status = task_group_status(group(2, 2), {task(0, "t0", "running", "r1"), task(0, "t1", "completed", "r1"),
                                                      task(1, "t0", "dispatching", "r2"), task(1, "t1", "", "")});
  EXPECT_EQ(status["state"], "running");
  EXPECT_EQ(status["totalTasks"], 4);
  EXPECT_EQ(status["runningTasks"], 1);
  EXPECT_EQ(status["succeededTasks"], 1);
  EXPECT_EQ(status["pendingTasks"], 2);  // one dispatching, one not yet placed
  EXPECT_EQ(status["statusDescription"], "1 running, 1 dispatching, 1 pending, 1 succeeded of 4 tasks");
  EXPECT_EQ(status["assignedRobots"],
            json::parse(R"([{"replicaIndex":0,"robotName":"r1"},{"replicaIndex":1,"robotName":"r2"}])"));
}

TEST(TaskGroupStatus, EndsCompletedOrFailedOnlyWhenEverySlotEnded) {
  EXPECT_EQ(
      task_group_status(group(2, 1), {task(0, "t0", "completed", "r1"), task(1, "t0", "exited", "r1", 0, 0)})["state"],
      "completed");
  EXPECT_EQ(task_group_status(group(2, 1), {task(0, "t0", "completed", "r1"), task(1, "t0", "failed", "r2")})["state"],
            "failed");
  EXPECT_EQ(
      task_group_status(group(2, 1), {task(0, "t0", "completed", "r1"), task(1, "t0", "exited", "r2", 0, 3)})["state"],
      "failed");
  // One slot's Task not created yet: not complete, whatever the others say.
  EXPECT_EQ(task_group_status(group(2, 1), {task(0, "t0", "completed", "r1")})["state"], "pending");
  EXPECT_EQ(task_group_status(group(1, 1), {task(0, "t0", "dispatching", "r1")})["state"], "scheduled");
  EXPECT_EQ(task_group_status(group(1, 1), {})["statusDescription"], "no tasks yet");
}

TEST(TaskGroupStatus, ARescheduledSlotCountsByItsNewestTask) {
  const json lost = task(0, "t0", "failed", "r1");
  const json replacement = task(0, "t0", "running", "r2", 1);
  for (const auto& tasks : {std::vector<json>{lost, replacement}, std::vector<json>{replacement, lost}}) {
    const json status = task_group_status(group(1, 1), tasks);
    EXPECT_EQ(status["state"], "running");
    EXPECT_EQ(status["totalTasks"], 1);
    EXPECT_EQ(status["failedTasks"], 0);
    EXPECT_EQ(status["assignedRobots"][0]["robotName"], "r2");
  }
}

// A Job of groups a and b, with `count` replicas each.
struct TwoGroups {
  json job = json::parse(R"({"spec":{"taskGroups":[{"name":"a"},{"name":"b"}]}})");
  json a, b;
  TwoGroups(int count_a, int count_b) : a(group(count_a, 1)), b(group(count_b, 1)) {
    a["metadata"]["name"] = "job-a";
    a["spec"]["groupName"] = "a";
    b["metadata"]["name"] = "job-b";
    b["spec"]["groupName"] = "b";
  }
};

TEST(JobStatus, AddsUpItsGroups) {
  TwoGroups groups(3, 2);
  const json& job = groups.job;
  json &a = groups.a, &b = groups.b;
  a["status"] = task_group_status(
      a, {task(0, "t0", "completed", "r1"), task(1, "t0", "completed", "r2"), task(2, "t0", "completed", "r3")});
  b["status"] = task_group_status(b, {task(0, "t0", "running", "r1"), task(1, "t0", "dispatching", "r2")});
  json status = job_status(job, {a, b});
  EXPECT_EQ(status["state"], "running");
  EXPECT_EQ(status["totalTasks"], 5);
  EXPECT_EQ(status["succeededTasks"], 3);
  EXPECT_EQ(status["runningTasks"], 1);
  EXPECT_EQ(status["taskGroups"], json::array({"job-a", "job-b"}));
  EXPECT_EQ(status["taskGroupSummary"]["a"]["complete"], 3);
  EXPECT_EQ(status["taskGroupSummary"]["b"]["running"], 1);
  EXPECT_EQ(job_status(job, {a})["state"], "pending");  // b not created yet
  EXPECT_EQ(job_status(job, {a})["statusDescription"], "creating task groups (1 of 2)");
  b["status"] = task_group_status(b, {task(0, "t0", "completed", "r1"), task(1, "t0", "completed", "r2")});
  EXPECT_EQ(job_status(job, {a, b})["state"], "completed");
  b["status"] = task_group_status(b, {task(0, "t0", "completed", "r1"), task(1, "t0", "failed", "r2")});
  EXPECT_EQ(job_status(job, {a, b})["state"], "failed");
  EXPECT_EQ(job_status(job, {a, b})["statusDescription"], "4 succeeded, 1 failed of 5 tasks");
}

// A Job whose group could make no Task (an invalid constraint) said
// "failed: no tasks yet", the reason only on the TaskGroup.
TEST(JobStatus, AGroupThatMadeNoTaskSaysWhyOnTheJob) {
  TwoGroups groups(1, 1);
  const json& job = groups.job;
  json &a = groups.a, &b = groups.b;
  a["status"] = {{"state", "failed"}, {"statusDescription", "invalid: constraint 0: regexp '([': missing )"}};
  b["status"] = task_group_status(b, {task(0, "t0", "completed", "r1")});
  const json status = job_status(job, {a, b});
  EXPECT_EQ(status["state"], "failed");
  EXPECT_EQ(status["statusDescription"], "task group a: invalid: constraint 0: regexp '([': missing )");
  // Waiting, with no Task yet: why, too.
  a["status"] = {{"state", "pending"}, {"statusDescription", "no robot fits: 2 robots, none in zone lab-z"}};
  b["status"] = {{"state", "pending"}, {"statusDescription", "no tasks yet"}};
  EXPECT_EQ(job_status(job, {a, b})["statusDescription"], "task group a: no robot fits: 2 robots, none in zone lab-z");
}

// A Job whose Tasks wait for a robot said "Pending" and "1 pending of 1
// task"; why was on each Task only.
TEST(JobStatus, AGroupWhoseTasksWaitForARobotSaysWhyOnItselfAndOnTheJob) {
  TwoGroups groups(2, 1);
  const json& job = groups.job;
  json &a = groups.a, &b = groups.b;
  a["status"] = task_group_status(a, {task(0, "t0", "running", "r1"), task(1, "t0", "pending")});
  with_unplaced(a["status"], 1, "no robot fits: 1 robot: 1 is cordoned (spec.unschedulable)");
  EXPECT_EQ(a["status"]["statusDescription"],
            "1 running, 1 pending of 2 tasks; 1 waiting to be placed: no robot fits: 1 robot: 1 is cordoned "
            "(spec.unschedulable)");
  add_conditions(a["status"], a, "2026-11-29T10:00:00Z");
  EXPECT_EQ(a["status"]["conditions"][0]["type"], "Progressing");
  EXPECT_EQ(a["status"]["conditions"][0]["reason"], "Unschedulable");
  b["status"] = task_group_status(b, {task(0, "t0", "completed", "r1"), task(1, "t0", "completed", "r1")});
  json status = job_status(job, {a, b});
  EXPECT_EQ(status["state"], "running");
  EXPECT_EQ(status["statusDescription"],
            "1 running, 1 pending, 2 succeeded of 4 tasks; task group a: 1 waiting to be placed: no robot fits: 1 "
            "robot: 1 is cordoned (spec.unschedulable)");
  add_conditions(status, job, "2026-11-29T10:00:00Z");
  EXPECT_EQ(status["conditions"][0]["reason"], "Unschedulable");

  // Nothing said of a group that has ended, nor of one with nothing waiting.
  json ended = task_group_status(a, {task(0, "t0", "completed", "r1"), task(1, "t0", "failed", "r1")});
  with_unplaced(ended, 1, "no robot fits: ...");
  EXPECT_EQ(ended["statusDescription"], "1 succeeded, 1 failed of 2 tasks");
  json none = task_group_status(a, {task(0, "t0", "running", "r1"), task(1, "t0", "running", "r2")});
  with_unplaced(none, 0, "");
  EXPECT_EQ(none["statusDescription"], "2 running of 2 tasks");
}

TEST(Conditions, SayWhatTheStateSaysAndKeepTheirTimeWhileUnchanged) {
  json job = {{"metadata", {{"generation", 3}}}};
  json status = {{"state", "running"}, {"statusDescription", "1 running, 1 pending"}};
  add_conditions(status, job, "2026-11-29T10:00:00Z");
  EXPECT_EQ(status["observedGeneration"], 3);
  ASSERT_EQ(status["conditions"].size(), 3u);
  const auto find = [](const json& conditions, const std::string& type) {
    for (const json& c : conditions)
      if (c["type"] == type) return c;
    return json();
  };
  const auto expected = [](const char* type, const char* reason, const char* message, const char* since) {
    return json({{"type", type},
                 {"status", "True"},
                 {"reason", reason},
                 {"message", message},
                 {"lastTransitionTime", since},
                 {"observedGeneration", 3}});
  };
  EXPECT_EQ(find(status["conditions"], "Progressing"),
            expected("Progressing", "Running", "1 running, 1 pending", "2026-11-29T10:00:00Z"));
  EXPECT_EQ(find(status["conditions"], "Complete")["status"], "False");
  EXPECT_EQ(find(status["conditions"], "Failed")["status"], "False");

  // Written, then rolled up again later with nothing changed: the same
  // conditions, times included, so nothing is written.
  job["status"] = status;
  json again = {{"state", "running"}, {"statusDescription", "1 running, 1 pending"}};
  add_conditions(again, job, "2026-11-29T10:05:00Z");
  EXPECT_FALSE(status_differs(job, again));

  // Completed: Complete turns True now, Progressing False now, Failed keeps
  // its time (still False).
  json done = {{"state", "completed"}, {"statusDescription", "2 succeeded"}};
  add_conditions(done, job, "2026-11-29T10:09:00Z");
  EXPECT_TRUE(status_differs(job, done));
  EXPECT_EQ(find(done["conditions"], "Complete"),
            expected("Complete", "Completed", "2 succeeded", "2026-11-29T10:09:00Z"));
  EXPECT_EQ(find(done["conditions"], "Progressing")["status"], "False");
  EXPECT_EQ(find(done["conditions"], "Progressing")["reason"], "Completed");
  EXPECT_EQ(find(done["conditions"], "Progressing")["lastTransitionTime"], "2026-11-29T10:09:00Z");
  EXPECT_EQ(find(done["conditions"], "Failed")["lastTransitionTime"], "2026-11-29T10:00:00Z");

  // A spec that cannot run fails as Invalid, saying why.
  json invalid = {{"state", "failed"}, {"statusDescription", "invalid: spec.taskGroups[0].count: must be >= 0"}};
  add_conditions(invalid, json::object(), "2026-11-29T11:00:00Z");
  EXPECT_EQ(find(invalid["conditions"], "Failed")["reason"], "Invalid");
  EXPECT_EQ(find(invalid["conditions"], "Failed")["message"], "invalid: spec.taskGroups[0].count: must be >= 0");
  EXPECT_EQ(invalid["observedGeneration"], 0);
  json group_invalid = {{"state", "failed"}, {"statusDescription", "task group g: invalid: constraint 0: ..."}};
  add_conditions(group_invalid, json::object(), "2026-11-29T11:00:00Z");
  EXPECT_EQ(find(group_invalid["conditions"], "Failed")["reason"], "Invalid");
}

}  // namespace
}  // namespace k8s4r::manager
