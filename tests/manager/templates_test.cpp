// What a Job asks to exist: TaskGroups and Tasks with names that depend on
// the Job alone (a restarted manager creates nothing twice), the Go K8s4r
// manager's labels, and owner references for the garbage collector.
#include "k8s4r/manager/templates.h"
#include "k8s4r/manager/status_rollup.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>

namespace k8s4r::manager {
namespace {

using nlohmann::json;

// examples/job.yaml, as the API server returns it.
json example_job() {
  return json::parse(R"({
    "apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Job",
    "metadata": {"name": "hello-batch", "namespace": "default", "uid": "job-uid-1"},
    "spec": {"name": "hello-batch", "type": "batch", "robotSelector": {"zone": "lab-a"},
             "taskGroups": [{"name": "greeters", "count": 2,
                             "restartPolicy": {"attempts": 1, "interval": "1m", "delay": "5s", "mode": "fail"},
                             "constraints": [{"lTarget": "${attr.arch}", "operand": "=", "rTarget": "arm64"}],
                             "initTasks": [{"name": "prepare", "driver": "exec", "config": {"execConfig": {"command": "/bin/true"}}}],
                             "tasks": [{"name": "greet", "driver": "exec", "timeout": "30s",
                                        "config": {"execConfig": {"command": "/bin/sh", "args": ["-c", "echo hi"]}},
                                        "constraints": [{"ltarget": "${meta.camera}", "operand": "=", "rtarget": "yes"}]},
                                       {"name": "wave", "driver": "exec", "restartPolicy": {"attempts": 0},
                                        "config": {"execConfig": {"command": "/bin/true"}}}]}]}})");
}

bool valid_name(const std::string& name) {
  static const std::regex subdomain(R"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)");
  return name.size() <= 253 && std::regex_match(name, subdomain);
}

bool valid_label(const std::string& value) {
  static const std::regex label(R"(([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?)");
  return value.size() <= 63 && std::regex_match(value, label);
}

TEST(Templates, AJobGetsOneTaskGroupPerEntryOwnedByIt) {
  auto groups = task_groups_of(example_job());
  ASSERT_TRUE(groups) << groups.error().to_string();
  ASSERT_EQ(groups.value().size(), 1u);
  const json& group = groups.value()[0];
  EXPECT_EQ(group["kind"], "TaskGroup");
  EXPECT_EQ(group["metadata"]["name"], "hello-batch-greeters");
  EXPECT_EQ(group["metadata"]["namespace"], "default");
  EXPECT_EQ(group["metadata"]["labels"], json({{"job", "hello-batch"}, {"groupName", "greeters"}}));
  const json& owner = group["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "Job");
  EXPECT_EQ(owner["uid"], "job-uid-1");
  EXPECT_EQ(owner["controller"], true);
  EXPECT_EQ(group["spec"]["jobName"], "hello-batch");
  EXPECT_EQ(group["spec"]["count"], 2);
  EXPECT_EQ(group["spec"]["initTasks"][0]["name"], "prepare");  // Go K8s4r dropped these
  EXPECT_EQ(group["spec"]["restartPolicy"]["attempts"], 1);
  // The same Job, asked again (a restarted manager): the same names.
  EXPECT_EQ(task_groups_of(example_job()).value()[0]["metadata"]["name"], "hello-batch-greeters");
}

TEST(Templates, ATaskGroupGetsCountReplicasOfEachTask) {
  json group = task_groups_of(example_job()).value()[0];
  group["metadata"]["uid"] = "tg-uid-1";
  auto tasks = tasks_of(group);
  ASSERT_TRUE(tasks) << tasks.error().to_string();
  ASSERT_EQ(tasks.value().size(), 4u);
  std::vector<std::string> names;
  for (const json& task : tasks.value()) names.push_back(task["metadata"]["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"hello-batch-greeters-r0-greet", "hello-batch-greeters-r0-wave",
                                             "hello-batch-greeters-r1-greet", "hello-batch-greeters-r1-wave"}));
  const json& greet = tasks.value()[2];
  EXPECT_EQ(greet["metadata"]["labels"],
            json({{"job", "hello-batch"}, {"taskgroup", "hello-batch-greeters"}, {"replica", "1"}, {"task", "greet"}}));
  EXPECT_EQ(greet["metadata"]["ownerReferences"][0]["kind"], "TaskGroup");
  EXPECT_EQ(greet["metadata"]["ownerReferences"][0]["uid"], "tg-uid-1");
  EXPECT_EQ(greet["spec"]["jobName"], "hello-batch");
  EXPECT_EQ(greet["spec"]["taskGroupName"], "hello-batch-greeters");
  EXPECT_EQ(greet["spec"]["timeout"], "30s");
  EXPECT_EQ(greet["spec"]["restartPolicy"]["attempts"], 1);               // the group's
  EXPECT_EQ(tasks.value()[1]["spec"]["restartPolicy"]["attempts"], 0);    // its own
  ASSERT_EQ(greet["spec"]["constraints"].size(), 2u);                     // its own, then the group's
  EXPECT_EQ(greet["spec"]["constraints"][1]["ltarget"], "${attr.arch}");  // as a Task spells it
  EXPECT_EQ(greet["spec"]["constraints"][1]["rtarget"], "arm64");
  EXPECT_FALSE(greet["spec"].contains("targetRobot"));  // the scheduler's to set
}

TEST(Templates, NamesAndLabelsAreValidAndDistinctWhateverTheJobSays) {
  std::set<std::string> seen;
  for (const std::string& group_name : {std::string("Greeters"), std::string("greeters_2"), std::string("greeters.2"),
                                        std::string(300, 'g'), std::string("--"), std::string("Ünïcode")}) {
    json job = example_job();
    job["spec"]["taskGroups"][0]["name"] = group_name;
    auto groups = task_groups_of(job);
    ASSERT_TRUE(groups) << group_name;
    const json& group = groups.value()[0];
    const std::string name = group["metadata"]["name"];
    EXPECT_TRUE(valid_name(name)) << group_name << " -> " << name;
    EXPECT_TRUE(valid_label(group["metadata"]["labels"]["groupName"])) << group["metadata"]["labels"];
    EXPECT_TRUE(seen.insert(name).second) << name << " twice";
    EXPECT_EQ(group["spec"]["groupName"], group_name);  // the spec keeps what the Job said
    const auto tasks = tasks_of(group);
    ASSERT_TRUE(tasks) << tasks.error().to_string();
    for (const json& task : tasks.value()) {
      EXPECT_TRUE(valid_name(task["metadata"]["name"])) << task["metadata"]["name"];
      for (const auto& [key, value] : task["metadata"]["labels"].items()) EXPECT_TRUE(valid_label(value)) << value;
    }
  }
}

TEST(Templates, WhatCannotBeMadeIsAnErrorOnTheJob) {
  json job = example_job();
  job["spec"]["taskGroups"].push_back(job["spec"]["taskGroups"][0]);
  auto twice = task_groups_of(job);
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().field, "spec.taskGroups[1].name");
  job = example_job();
  job["spec"]["taskGroups"][0].erase("name");
  EXPECT_FALSE(task_groups_of(job));
  json group = task_groups_of(example_job()).value()[0];
  group["spec"]["count"] = -1;
  EXPECT_EQ(tasks_of(group).error().field, "spec.count");
  group["spec"]["count"] = 1;
  group["spec"]["tasks"][1]["name"] = "greet";
  EXPECT_EQ(tasks_of(group).error().field, "spec.tasks[1].name");
}

TEST(Templates, AReplacementIsTheSameTaskUnderANewNameAndAttempt) {
  const json group = task_groups_of(example_job()).value()[0];
  const json first = replica_tasks(group, Replica::numbered(1)).value()[0];
  const json second = replica_tasks(group, Replica::numbered(1), 2).value()[0];
  EXPECT_EQ(first["metadata"]["name"], "hello-batch-greeters-r1-greet");
  EXPECT_FALSE(first["metadata"]["labels"].contains(kAttemptLabel));
  EXPECT_EQ(second["metadata"]["name"], "hello-batch-greeters-r1-greet-a2");
  EXPECT_EQ(second["metadata"]["labels"][kAttemptLabel], "2");
  EXPECT_EQ(second["metadata"]["labels"]["replica"], "1");
  EXPECT_EQ(second["spec"], first["spec"]);
  // A system job's replica is its robot's.
  const json on_robot = replica_tasks(group, Replica::on_robot("robot-7")).value()[0];
  EXPECT_EQ(on_robot["metadata"]["name"], "hello-batch-greeters-robot-7-greet");
  EXPECT_EQ(on_robot["metadata"]["labels"]["replica"], "robot-7");
}

TEST(Templates, DisconnectSettingsGoFromTheJobToItsGroupsAndTheirTasksTheNearestWinning) {
  json job = example_job();
  job["spec"]["disconnect"] = {{"stopOnRobotAfter", "1m"}, {"replace", false}};
  job["spec"]["taskGroups"][0]["disconnect"] = {{"lostAfter", "10m"}};
  job["spec"]["taskGroups"][0]["tasks"][1]["disconnect"] = {{"stopOnRobotAfter", "0s"}};
  auto groups = task_groups_of(job);
  ASSERT_TRUE(groups);
  const json& group = groups.value()[0];
  EXPECT_EQ(group["spec"]["disconnect"], json({{"stopOnRobotAfter", "1m"}, {"replace", false}, {"lostAfter", "10m"}}));
  auto tasks = replica_tasks(group, Replica::numbered(0));
  ASSERT_TRUE(tasks);
  EXPECT_EQ(tasks.value()[0]["spec"]["disconnect"], group["spec"]["disconnect"]);
  EXPECT_EQ(tasks.value()[1]["spec"]["disconnect"]["stopOnRobotAfter"], "0s");  // the task's own
  EXPECT_EQ(tasks.value()[1]["spec"]["disconnect"]["lostAfter"], "10m");
  // None anywhere: none on the Tasks (the agent's and the manager's defaults apply).
  auto plain = replica_tasks(task_groups_of(example_job()).value()[0], Replica::numbered(0));
  EXPECT_FALSE(plain.value()[0]["spec"].contains("disconnect"));
}

}  // namespace
}  // namespace k8s4r::manager
