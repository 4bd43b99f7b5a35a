// The scheduler's decision from values: which robot fits, which is
// preferred, and why none does, in words an operator reads.
#include "k8s4r/manager/placement.h"

#include <gtest/gtest.h>

namespace k8s4r::manager {
namespace {

using nlohmann::json;

Constraint constraint(const std::string& ltarget, const std::string& operand, const std::string& rtarget) {
  auto made = Constraint::make(ltarget, operand, rtarget);
  EXPECT_TRUE(made) << ltarget << " " << operand << " " << rtarget << ": " << made.error().to_string();
  return made.value();
}

RobotFacts robot(const std::string& name, const std::string& phase = "Online",
                 std::map<std::string, std::string> labels = {}) {
  json resource = {{"metadata", {{"name", name}}},
                   {"spec", {{"labels", labels}}},
                   {"status",
                    {{"phase", phase},
                     {"deviceInfo",
                      {{"platform", {{"os", "linux"}, {"arch", "arm64"}, {"kernelVersion", "6.1.0-18-arm64"}}},
                       {"cpu", {{"logicalCores", 4}}},
                       {"memory", {{"total", 8LL << 30}}}}}}}};
  return robot_facts(resource);
}

TEST(RobotFacts, ComeFromTheRobotResource) {
  const RobotFacts facts = robot("r1", "Online", {{"zone", "lab-a"}});
  EXPECT_EQ(facts.name, "r1");
  EXPECT_EQ(facts.labels.at("zone"), "lab-a");
  EXPECT_EQ(facts.attributes.at("meta.zone"), "lab-a");
  EXPECT_EQ(facts.attributes.at("robot.labels.zone"), "lab-a");
  EXPECT_EQ(facts.attributes.at("attr.arch"), "arm64");
  EXPECT_EQ(facts.attributes.at("attr.cpu.cores"), "4");
  EXPECT_EQ(facts.cpu_milli, 4000);
  EXPECT_EQ(facts.memory_bytes, 8LL << 30);
  EXPECT_FALSE(robot_facts(json::object()).cpu_milli);  // unknown capacity: no limit
}

TEST(Constraints, EveryOperandTheCrdAllows) {
  const std::map<std::string, std::string> robot_attributes = {{"attr.arch", "arm64"},
                                                               {"attr.kernel.version", "6.1.0-18-arm64"},
                                                               {"attr.cpu.cores", "4"},
                                                               {"meta.tools", "camera,lidar,arm"},
                                                               {"meta.class", "b"}};
  struct Case {
    const char *ltarget, *operand, *rtarget;
    bool holds;
  };
  const Case cases[] = {
      {"${attr.arch}", "=", "arm64", true},
      {"${attr.arch}", "=", "amd64", false},
      {"${attr.arch}", "!=", "amd64", true},
      {"${meta.missing}", "!=", "x", true},
      {"${meta.missing}", "=", "x", false},
      {"${attr.cpu.cores}", ">", "2", true},
      {"${attr.cpu.cores}", ">=", "10", false},
      {"${attr.cpu.cores}", "<", "10", true},  // numbers, not text
      {"${meta.class}", "<=", "c", true},
      {"${meta.class}", ">", "c", false},
      {"${attr.arch}", "regexp", "^arm", true},
      {"${attr.arch}", "regexp", "^amd", false},
      {"${meta.tools}", "set_contains", "lidar,camera", true},
      {"${meta.tools}", "set_contains", "lidar,gripper", false},
      {"${attr.kernel.version}", "version", ">= 5.10, < 7", true},
      {"${attr.kernel.version}", "version", "> 6.1.0", false},
      {"${attr.kernel.version}", "version", "6.1", true},
      {"literal", "=", "literal", true},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(constraint(c.ltarget, c.operand, c.rtarget)(robot_attributes), c.holds)
        << c.ltarget << " " << c.operand << " " << c.rtarget;
  }
}

TEST(Constraints, WrongOnesAreRefusedWhenRead) {
  EXPECT_FALSE(Constraint::make("${attr.arch}", "~=", "x"));
  EXPECT_FALSE(Constraint::make("${attr.arch", "=", "x"));
  EXPECT_FALSE(Constraint::make("${attr.arch}", "regexp", "(unclosed"));
  EXPECT_FALSE(Constraint::make("${attr.arch}", "version", ">= banana"));
  auto read = read_constraints(json::parse(R"([{"ltarget":"${attr.arch}","operand":"=","rtarget":"arm64"},
                                                {"ltarget":"${attr.arch}","operand":"regexp","rtarget":"(["}])"));
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().field, "constraints[1].rtarget");
  EXPECT_FALSE(read_constraints(json::parse(R"([{"ltarget":1,"operand":"=","rtarget":"x"}])")));
  EXPECT_EQ(read_constraints(json()).value().size(), 0u);
}

// RE2 takes linear time: a pattern that makes a backtracking engine take
// forever on a short value is answered at once.
TEST(Constraints, ARegexpCannotHangTheScheduler) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(constraint("${meta.x}", "regexp", "^(a+)+$")({{"meta.x", std::string(60, 'a') + "!"}}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(Place, PicksAFittingRobotSpreadingAGroupThenTheLeastLoaded) {
  std::vector<RobotFacts> robots = {robot("a"), robot("b"), robot("c")};
  robots[0].tasks_of_group = 1;
  robots[1].tasks = 3;
  robots[2].tasks = 1;
  EXPECT_EQ(place({}, robots).robot, "c");  // a runs one of the group; c is less loaded than b
  robots[2].tasks_of_group = 1;
  EXPECT_EQ(place({}, robots).robot, "b");  // the only one without a task of the group
  robots = {robot("b"), robot("a")};
  EXPECT_EQ(place({}, robots).robot, "a");  // a tie goes by name
}

TEST(Place, ARobotHoldingTheTasksArtifactsCountsEachAsATaskFewerAfterTheSpread) {
  const std::string model = "sha256:" + std::string(64, 'a'), map = "sha256:" + std::string(64, 'b');
  json resource = {{"metadata", {{"name", "b"}}},
                   {"status", {{"phase", "Online"}, {"artifacts", {{"held", {map, model, 7}}}}}}};
  EXPECT_EQ(robot_facts(resource).artifacts, (std::set<std::string>{model, map}));
  std::vector<RobotFacts> robots = {robot("a"), robot("b"), robot("c")};
  robots[0].tasks = 1;
  robots[1].artifacts = {model};
  robots[1].tasks = 1;  // as loaded as a, and holds the model
  robots[2].artifacts = {model, map};
  robots[2].tasks = 2;  // one task more than b, and holds both
  TaskNeeds needs;
  needs.artifacts = {model, map};
  Placement placed = place(needs, robots);
  EXPECT_EQ(placed.robot, "c");  // 2 - 2 = 0 against b's 1 - 1 = 0: the tie goes to what holds more
  EXPECT_EQ(placed.artifacts_held, 2u);
  EXPECT_EQ(placed.artifacts_wanted, 2u);
  robots[2].tasks = 4;  // not at any load: 4 - 2 = 2
  EXPECT_EQ(place(needs, robots).robot, "b");
  robots[1].tasks_of_group = 1;  // the group's spread comes first
  EXPECT_EQ(place(needs, robots).robot, "a");
  robots[0].phase = "Offline";  // a score, never a requirement
  placed = place(needs, robots);
  EXPECT_EQ(placed.robot, "c");
  EXPECT_EQ(place({}, robots).artifacts_wanted, 0u);
}

TEST(Place, ARobotSilentForTheTasksLostAfterIsNotChosenThoughStillOnline) {
  // The manager takes a robot's tasks for lost after lostAfter without a
  // heartbeat, before it calls the robot Offline: what it placed there in
  // between would be lost at once, and could run when the robot comes back.
  using namespace std::chrono_literals;
  std::vector<RobotFacts> robots = {robot("a"), robot("b")};
  robots[0].silent_for = 7s;  // the least loaded, and silent
  robots[1].tasks = 3;
  robots[1].silent_for = 1s;
  TaskNeeds needs;
  needs.lost_after = 7s;
  EXPECT_EQ(place(needs, robots).robot, "b");
  robots[0].silent_for = 6900ms;
  EXPECT_EQ(place(needs, robots).robot, "a");
  robots[0].silent_for = 10s;
  robots[1].silent_for = 8s;
  const Placement none = place(needs, robots);
  EXPECT_FALSE(none.robot);
  EXPECT_NE(none.why.find("out of contact longer than the tasks' lostAfter"), std::string::npos) << none.why;
  EXPECT_EQ(place({}, robots).robot, "a");  // tasks that wait for their robot (no lostAfter): as before
}

TEST(Place, SaysWhyNothingFits) {
  std::vector<RobotFacts> robots = {robot("a", "Online", {{"zone", "lab-b"}}),
                                    robot("b", "Online", {{"zone", "lab-b"}}),
                                    robot("c", "Offline", {{"zone", "lab-a"}})};
  TaskNeeds needs;
  needs.selector = {{"zone", "lab-a"}};
  Placement placement = place(needs, robots);
  EXPECT_FALSE(placement.robot);
  EXPECT_EQ(placement.why, "3 robots: 2 do not match zone=lab-a, 1 Offline");

  robots = {robot("a", "Pending"), robot("b"), robot("c")};
  robots[2].cpu_milli_used = 3900;
  needs = TaskNeeds{};
  needs.constraints.push_back(constraint("${attr.arch}", "=", "amd64"));
  EXPECT_EQ(place(needs, {robots[0], robots[1]}).why, "2 robots: 1 Pending, 1 does not satisfy ${attr.arch} = amd64");
  needs = TaskNeeds{};
  needs.cpu_milli = 500;
  EXPECT_EQ(place(needs, {robots[2]}).why, "1 robot: 1 lacks cpu (the task needs 500m)");
  EXPECT_EQ(place(needs, robots).robot, "b");
  needs.cpu_milli = 0;
  needs.memory_bytes = 16LL << 30;
  EXPECT_EQ(place(needs, {robots[1], robots[2]}).why, "2 robots: 2 lack memory (the task needs 16Gi)");
  EXPECT_EQ(place(needs, {}).why, "no robots");
}

TEST(Place, ACordonedRobotTakesNothingNewAndSaysSo) {
  std::vector<RobotFacts> robots = {robot("a"), robot("b")};
  robots[1].tasks = 5;
  robots[0].unschedulable = true;  // the least loaded, and cordoned
  EXPECT_EQ(place({}, robots).robot, "b");
  robots[1].unschedulable = true;
  const Placement none = place({}, robots);
  EXPECT_FALSE(none.robot);
  EXPECT_EQ(none.why, "2 robots: 2 are cordoned (spec.unschedulable)");
  EXPECT_EQ(place({}, {robots[0]}).why, "1 robot: 1 is cordoned (spec.unschedulable)");
  // Read from the Robot: only a true value cordons it.
  EXPECT_TRUE(robot_facts(json::parse(R"({"metadata":{"name":"a"},"spec":{"unschedulable":true}})")).unschedulable);
  EXPECT_FALSE(robot_facts(json::parse(R"({"metadata":{"name":"a"},"spec":{"unschedulable":"yes"}})")).unschedulable);
  EXPECT_FALSE(robot_facts(json::parse(R"({"metadata":{"name":"a"},"spec":{}})")).unschedulable);
}

TEST(Place, ARobotOfUnknownCapacityTakesAnyTask) {
  RobotFacts bare;
  bare.name = "bare";
  bare.phase = "Online";
  TaskNeeds needs;
  needs.cpu_milli = 64000;
  needs.memory_bytes = 1LL << 40;
  EXPECT_EQ(place(needs, {bare}).robot, "bare");
}

// A replica's tasks go to one robot together: their resources add up, and
// every constraint of the group and its tasks applies.
TEST(ReplicaNeeds, AddUpTheTasksOfAReplica) {
  const json job = json::parse(R"({"spec": {"robotSelector": {"zone": "lab-a"}}})");
  const json group = json::parse(R"({"spec": {
      "constraints": [{"ltarget": "${attr.arch}", "operand": "=", "rtarget": "arm64"}],
      "tasks": [{"name": "a", "resources": {"cpu": "500m", "memory": "128Mi"},
                 "constraints": [{"ltarget": "${meta.camera}", "operand": "=", "rtarget": "yes"}]},
                {"name": "b", "resources": {"cpu": 1, "memory": 1048576},
                 "artifacts": [{"getterSource": "https://m/x", "getterOptions": {"checksum": "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}},
                               {"getterSource": "https://m/y"}]},
                {"name": "c", "artifacts": [{"getterSource": "https://m/x", "getterOptions": {"checksum": "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}}]}]}})");
  auto needs = replica_needs(job, group);
  ASSERT_TRUE(needs) << needs.error().to_string();
  // Each checksum once, as robots report it; an artifact without one names no content.
  EXPECT_EQ(needs.value().artifacts, std::vector<std::string>{"sha256:" + std::string(64, 'a')});
  EXPECT_EQ(needs.value().selector, (std::map<std::string, std::string>{{"zone", "lab-a"}}));
  EXPECT_EQ(needs.value().cpu_milli, 1500);
  EXPECT_EQ(needs.value().memory_bytes, (128LL << 20) + (1LL << 20));
  ASSERT_EQ(needs.value().constraints.size(), 2u);
  EXPECT_EQ(needs.value().constraints[0].describe(), "${attr.arch} = arm64");

  json bad = group;
  bad["spec"]["tasks"][1]["resources"]["memory"] = "lots";
  auto refused = replica_needs(job, bad);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().field, "spec.tasks[1].resources.memory");
  bad = group;
  bad["spec"]["tasks"][0]["constraints"][0]["operand"] = "~";
  EXPECT_EQ(replica_needs(job, bad).error().field, "spec.tasks[0].constraints[0].operand");
  bad = group;
  bad["spec"]["tasks"][0]["resources"]["cpu"] = "8Ei";
  bad["spec"]["tasks"][1]["resources"]["cpu"] = "8Ei";
  EXPECT_FALSE(replica_needs(job, bad));  // each too large, or too large together
}

}  // namespace
}  // namespace k8s4r::manager
