// The TaskGroup controller's plan, from the fixtures in plan_group/: each
// gives a Job, the group's Tasks and Robots in a short form, the time and
// the manager's settings, and what the plan must say. Tasks are made with
// replica_tasks (so their names are the controller's own) and given a uid
// of "<name>-uid".
#include "k8s4r/manager/plan_group.h"

#include "k8s4r/common/duration.h"
#include "k8s4r/manager/status_rollup.h"
#include "k8s4r/manager/templates.h"
#include "k8s4r/testing/kube_sim_process.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>

namespace k8s4r::manager {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

Timestamp time_of(const json& text) { return parse_rfc3339(text.get<std::string>()).value(); }

std::vector<std::string> names(const std::vector<json>& objects) {
  std::vector<std::string> out;
  for (const json& object : objects) out.push_back(object["metadata"]["name"]);
  return out;
}

json task_of(const json& group, const json& entry) {
  const std::string replica = entry["replica"];
  const Replica which = std::all_of(replica.begin(), replica.end(), ::isdigit) ? Replica::numbered(std::stoll(replica))
                                                                               : Replica::on_robot(replica);
  auto tasks = replica_tasks(group, which, entry.value("attempt", 0));
  EXPECT_TRUE(tasks) << tasks.error().to_string();
  for (json task : tasks.value()) {
    if (task["metadata"]["labels"]["task"] != entry["task"]) continue;
    task["metadata"]["uid"] = task["metadata"]["name"].get<std::string>() + "-uid";
    task["metadata"]["resourceVersion"] = "7";
    task["metadata"]["creationTimestamp"] = entry.value("created", "2026-11-22T01:00:00Z");
    if (entry.contains("robot")) task["spec"]["targetRobot"] = entry["robot"];
    if (entry.contains("scheduledAt"))
      task["metadata"]["annotations"]["robot.k8s4r.io/scheduled-at"] = entry["scheduledAt"];
    json status = json::object();
    if (entry.contains("state")) status["state"] = entry["state"];
    for (const char* field : {"dispatchedAt", "finishedAt", "reason", "statusSeq"}) {
      if (entry.contains(field)) status[field] = entry[field];
    }
    // Asked to stop: its robot drained (robot_drain.h), or its rollout aborted (rollout.h).
    if (entry.value("drained", false) || entry.contains("stopReason")) {
      status["conditions"] = json::array({{{"type", "DisruptionTarget"},
                                           {"status", "True"},
                                           {"reason", entry.value("stopReason", "Drained")},
                                           {"message", "asked to stop"}}});
    }
    task["status"] = status;
    return task;
  }
  ADD_FAILURE() << "no task " << entry["task"] << " in the group";
  return nullptr;
}

json robot_of(const std::string& name, const json& entry) {
  json robot = {{"apiVersion", "robot.k8s4r.io/v1alpha1"},
                {"kind", "Robot"},
                {"metadata", {{"name", name}, {"namespace", "default"}}},
                {"spec", {{"labels", entry.value("labels", json::object())}}},
                {"status", {{"phase", entry["phase"]}, {"runningTasks", entry.value("running", json::array())}}}};
  if (entry.contains("heartbeat")) robot["status"]["lastHeartbeatTime"] = entry["heartbeat"];
  if (entry.contains("unschedulable")) robot["spec"]["unschedulable"] = entry["unschedulable"];
  if (entry.contains("ended")) robot["status"]["endedTasks"] = entry["ended"];
  if (entry.contains("endedTruncated")) robot["status"]["endedTasksTruncated"] = entry["endedTruncated"];
  if (entry.contains("reportSeq")) robot["status"]["reportSeq"] = entry["reportSeq"];
  if (entry.contains("newestDispatch")) robot["status"]["newestDispatch"] = entry["newestDispatch"];
  if (entry.contains("message")) robot["status"]["message"] = entry["message"];
  return robot;
}

class PlanGroup : public ::testing::TestWithParam<fs::path> {};

TEST_P(PlanGroup, SaysWhatTheFixtureExpects) {
  const json fixture = testing::yaml_to_json(YAML::LoadFile(GetParam().string()));
  SCOPED_TRACE(fixture["description"].get<std::string>());
  GroupView view;
  view.job = fixture["job"];
  auto groups = task_groups_of(view.job);
  ASSERT_TRUE(groups) << groups.error().to_string();
  view.group = groups.value().at(0);
  view.group["metadata"]["uid"] = "group-uid";
  view.group["metadata"]["generation"] = fixture.value("groupGeneration", 1);
  if (fixture.contains("groupStatus")) view.group["status"] = fixture["groupStatus"];
  view.now = time_of(fixture.value("now", json("2026-11-22T01:30:00Z")));
  view.dispatch_timeout = parse_go_duration(fixture.value("dispatchTimeout", "60s")).value();
  view.disconnect_grace = parse_go_duration(fixture.value("disconnectGrace", "30s")).value();
  for (const json& entry : fixture["tasks"]) view.tasks.push_back(task_of(view.group, entry));
  const json robots = fixture.value("robots", json::object());
  for (const auto& [name, entry] : robots.items()) {
    view.robots[name] = robot_of(name, entry);
    if (view.job["spec"].value("type", "") == "system") view.robot_facts.push_back(robot_facts(view.robots[name]));
  }
  const json missing = fixture.value("missingSince", json::object());
  for (const auto& [uid, since] : missing.items()) view.missing_since[uid] = time_of(since);
  for (const json& key : fixture.value("expectedCreates", json::array())) view.expected_creates.insert(key);
  for (const json& key : fixture.value("expectedDispatches", json::array())) view.expected_dispatches.insert(key);
  const json producers = fixture.value("producers", json::object());
  for (const auto& [name, entry] : producers.items()) {
    ProducerOutputs& producer = view.producers[name];
    const std::string state = entry["state"];
    producer.state = state == "completed" ? ProducerOutputs::State::completed
                     : state == "failed"  ? ProducerOutputs::State::failed
                                          : ProducerOutputs::State::waiting;
    producer.why = entry.value("why", "");
    const json outputs = entry.value("outputs", json::object());
    for (const auto& [task, declared] : outputs.items()) producer.outputs[task] = declared;
  }

  const GroupPlan plan = plan_group(view);
  const json& expect = fixture["expect"];
  EXPECT_EQ(plan.gone, expect.value("gone", false));
  if (expect.contains("invalid")) {
    ASSERT_TRUE(plan.invalid_status);
    EXPECT_NE((*plan.invalid_status)["statusDescription"].get<std::string>().find(expect["invalid"].get<std::string>()),
              std::string::npos)
        << *plan.invalid_status;
  } else {
    EXPECT_FALSE(plan.invalid_status);
  }
  if (expect.contains("creates")) {
    std::vector<std::string> created;
    for (const ReplicaPlan& replica : plan.placements) {
      for (const Unplaced& item : replica.tasks) {
        EXPECT_FALSE(item.exists);
        created.push_back(item.task["metadata"]["name"]);
      }
    }
    EXPECT_EQ(created, expect["creates"].get<std::vector<std::string>>());
  }
  if (expect.contains("createdEnv")) {
    ASSERT_FALSE(plan.placements.empty());
    ASSERT_FALSE(plan.placements[0].tasks.empty());
    EXPECT_EQ(plan.placements[0].tasks[0].task["spec"]["env"], expect["createdEnv"]);
  }
  if (expect.contains("siblingRobot")) {
    ASSERT_EQ(plan.placements.size(), 1u);
    EXPECT_EQ(plan.placements[0].sibling_robot, expect["siblingRobot"]);
  }
  if (expect.contains("onlyRobot")) {
    ASSERT_EQ(plan.placements.size(), 1u);
    EXPECT_EQ(plan.placements[0].only_robot, expect["onlyRobot"]);
  }
  if (expect.contains("lost")) {
    std::map<std::string, std::string> lost;
    for (const auto& [task, why] : plan.lost) lost[task["metadata"]["name"]] = why;
    ASSERT_EQ(lost.size(), expect["lost"].size()) << json(lost);
    for (const auto& [name, why] : expect["lost"].items()) {
      ASSERT_TRUE(lost.count(name)) << name;
      EXPECT_NE(lost[name].find(why.get<std::string>()), std::string::npos) << lost[name];
    }
  }
  EXPECT_EQ(names(plan.dispatches), expect.value("dispatches", json::array()).get<std::vector<std::string>>());
  EXPECT_EQ(names(plan.deletes), expect.value("deletes", json::array()).get<std::vector<std::string>>());
  if (expect.contains("placed")) {  // Tasks already made, placed by this plan
    std::vector<std::string> placed;
    for (const ReplicaPlan& replica : plan.placements)
      for (const Unplaced& item : replica.tasks)
        if (item.exists) placed.push_back(item.task["metadata"]["name"]);
    EXPECT_EQ(placed, expect["placed"].get<std::vector<std::string>>());
  }
  std::vector<std::string> stopped;
  for (const auto& [task, why] : plan.stops) stopped.push_back(task["metadata"]["name"]);
  EXPECT_EQ(stopped, expect.value("stops", json::array()).get<std::vector<std::string>>());
  if (expect.contains("events")) {
    json events = json::array();
    for (const PlannedEvent& event : plan.events)
      events.push_back({{"name", event.object["metadata"]["name"]}, {"reason", event.reason}});
    EXPECT_EQ(events, expect["events"]);
  }
  if (expect.contains("missingSince")) {
    json changes = json::object();
    for (const auto& [uid, since] : plan.missing_since)
      changes[uid] = since ? json(format_rfc3339(*since)) : json(nullptr);
    EXPECT_EQ(changes, expect["missingSince"]);
  }
  if (expect.contains("requeueAfter")) {
    ASSERT_TRUE(plan.requeue_after);
    EXPECT_EQ(*plan.requeue_after, parse_go_duration(expect["requeueAfter"].get<std::string>()).value());
  }
  EXPECT_EQ(plan.awaiting, expect.value("awaiting", 0));
  if (expect.contains("status")) {
    EXPECT_EQ(plan.status["state"], expect["status"]) << plan.status;
  }
  if (expect.contains("statusDescription")) {
    EXPECT_EQ(plan.status["statusDescription"], expect["statusDescription"]);
  }
}

std::vector<fs::path> fixtures() {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(K8S4R_PLAN_GROUP_FIXTURES)) out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PlanGroup, ::testing::ValuesIn(fixtures()),
                         [](const ::testing::TestParamInfo<fs::path>& fixture) {
                           std::string name = fixture.param.stem().string();
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

}  // namespace
}  // namespace k8s4r::manager
