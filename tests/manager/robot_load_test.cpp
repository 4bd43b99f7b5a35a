// RobotLoad: a robot's load as the scheduler reads it, from Task events and
// the scheduler's own assumptions, with no API server.
#include "k8s4r/manager/robot_load.h"

#include <gtest/gtest.h>

namespace k8s4r::manager {
namespace {

using nlohmann::json;

json task(const std::string& name, const std::string& robot, const std::string& state, const std::string& cpu = "") {
  json spec = {{"name", name}};
  if (!robot.empty()) spec["targetRobot"] = robot;
  if (!cpu.empty()) spec["resources"] = {{"cpu", cpu}, {"memory", "64Mi"}};
  json object = {{"metadata",
                  {{"name", name},
                   {"namespace", "default"},
                   {"uid", "uid-" + name},
                   {"ownerReferences", {{{"kind", "TaskGroup"}, {"name", "job-g"}, {"controller", true}}}}}},
                 {"spec", spec}};
  if (!state.empty()) object["status"] = {{"state", state}};
  return object;
}

RobotFacts facts_of(const RobotLoad& load, const std::string& robot, const std::string& group = "default/job-g") {
  RobotFacts facts;
  facts.name = robot;
  load.fill(facts, "default/" + robot, group);
  return facts;
}

TEST(RobotLoad, CountsTasksNotYetEndedOnTheirRobot) {
  RobotLoad load;
  load.observe(task("a", "robot-1", "running", "500m"));
  load.observe(task("b", "robot-1", "dispatching", "250m"));
  load.observe(task("c", "robot-2", "completed", "1"));
  load.observe(task("d", "", "pending", "1"));
  const RobotFacts one = facts_of(load, "robot-1");
  EXPECT_EQ(one.tasks, 2);
  EXPECT_EQ(one.tasks_of_group, 2);
  EXPECT_EQ(one.cpu_milli_used, 750);
  EXPECT_EQ(one.memory_bytes_used, 2 * 64 * 1024 * 1024);
  EXPECT_EQ(facts_of(load, "robot-1", "default/other").tasks_of_group, 0);
  EXPECT_EQ(facts_of(load, "robot-2").tasks, 0);  // ended: no load
  // A task that ends frees its robot; a deleted one too.
  load.observe(task("a", "robot-1", "failed", "500m"));
  load.forget("default/b");
  EXPECT_EQ(facts_of(load, "robot-1").tasks, 0);
  EXPECT_EQ(load.claims(), 0u);
}

TEST(RobotLoad, AnAssumptionCountsUntilTheInformerShowsThePlacement) {
  RobotLoad load;
  load.assume("default/a", Claim{"default/robot-1", "default/job-g", 100, 0});
  EXPECT_EQ(load.robot_of("default/a"), "default/robot-1");
  // The informer still shows the Task unplaced (its event predates the patch): the assumption stays.
  load.observe(task("a", "", "pending"));
  EXPECT_EQ(facts_of(load, "robot-1").tasks, 1);
  // The informer's view replaces it, counted once.
  load.observe(task("a", "robot-1", "dispatching", "100m"));
  EXPECT_EQ(facts_of(load, "robot-1").tasks, 1);
  EXPECT_EQ(facts_of(load, "robot-1").cpu_milli_used, 100);
  // Once observed, an unplaced view (say a replaced object) removes the claim.
  load.observe(task("a", "", "pending"));
  EXPECT_EQ(facts_of(load, "robot-1").tasks, 0);
}

}  // namespace
}  // namespace k8s4r::manager
