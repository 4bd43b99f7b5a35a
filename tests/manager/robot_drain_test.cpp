// Draining a robot (robot_drain.h): which of its tasks are asked to stop and
// when, by their Jobs' types and the deadline, and what status.drain says.
#include "k8s4r/manager/robot_drain.h"

#include <gtest/gtest.h>

#include <deque>

namespace k8s4r::manager {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const Timestamp kNow = parse_rfc3339("2026-11-22T01:30:00Z").value();

json robot(json drain, json status_drain = nullptr) {
  json r = {{"metadata", {{"name", "r1"}, {"namespace", "default"}}},
            {"spec", {{"unschedulable", true}}},
            {"status", {{"phase", "Online"}}}};
  if (!drain.is_null()) r["spec"]["drain"] = std::move(drain);
  if (!status_drain.is_null()) r["status"]["drain"] = std::move(status_drain);
  return r;
}

// status.drain as the API server keeps it after a merge patch: without the nulls.
json stored(json status) {
  for (auto it = status.begin(); it != status.end();) it = it->is_null() ? status.erase(it) : std::next(it);
  return status;
}

class Drain : public ::testing::Test {
 protected:
  // A Task on r1 of a Job of `type` ("" for a Task of its own).
  void add(const std::string& name, const std::string& type, const std::string& state, bool asked = false) {
    json task = {{"metadata", {{"name", name}, {"namespace", "default"}, {"uid", name + "-uid"}}},
                 {"spec", {{"targetRobot", "r1"}}},
                 {"status", {{"state", state}}}};
    if (asked) {
      task["status"]["conditions"] = json::array(
          {{{"type", "DisruptionTarget"}, {"status", "True"}, {"reason", "Drained"}, {"message", "drained"}}});
    }
    tasks_.push_back(std::move(task));
    view_.tasks.push_back({&tasks_.back(), type});
  }
  DrainPlan plan(json r, Timestamp now = kNow) {
    view_.robot = std::move(r);
    view_.now = now;
    return plan_drain(view_);
  }
  static std::vector<std::string> stopped(const DrainPlan& p) {
    std::vector<std::string> out;
    for (const auto& [task, why] : p.stops) out.push_back(task["metadata"]["name"]);
    return out;
  }
  static std::vector<std::string> events(const DrainPlan& p) {
    std::vector<std::string> out;
    for (const PlannedEvent& e : p.events) out.push_back(e.reason);
    return out;
  }

  std::deque<json> tasks_;  // stable addresses
  DrainView view_;
};

TEST_F(Drain, ARobotNeverDrainedCostsNothing) {
  add("a", "service", "running");
  const DrainPlan p = plan(robot(nullptr));
  EXPECT_TRUE(p.stops.empty());
  EXPECT_FALSE(p.status);
  EXPECT_TRUE(p.events.empty());
}

TEST_F(Drain, StopsServicesAndWhatHasNotStartedAtOnceBatchAtTheDeadlineSystemLast) {
  add("svc", "service", "running");
  add("batch", "batch", "running");
  add("own", "", "running");
  add("sys", "system", "running");
  add("queued", "batch", "dispatching");
  add("done", "batch", "completed");
  const DrainPlan p = plan(robot(json::object()));
  EXPECT_EQ(stopped(p), (std::vector<std::string>{"svc", "queued"}));
  ASSERT_TRUE(p.status);
  EXPECT_EQ((*p.status)["state"], "Draining");
  EXPECT_EQ((*p.status)["startedAt"], "2026-11-22T01:30:00Z");
  EXPECT_EQ((*p.status)["deadline"], "2026-11-22T02:30:00Z");  // 1h by default
  EXPECT_EQ((*p.status)["remaining"], 5);
  EXPECT_EQ((*p.status)["message"],
            "5 tasks left: 2 tasks stopping, 2 tasks may run until the deadline, 1 system job's task to stop last");
  EXPECT_EQ(events(p), std::vector<std::string>{"Draining"});
  ASSERT_TRUE(p.requeue_after);
  EXPECT_EQ(*p.requeue_after, 1h + 100ms);
}

TEST_F(Drain, AtTheDeadlineWhatIsLeftIsStoppedAndSystemJobsStillLast) {
  add("batch", "batch", "running");
  add("sys", "system", "running");
  add("svc", "service", "running", true);  // asked already: not again
  const json status = {{"state", "Draining"}, {"startedAt", "2026-11-22T00:00:00Z"}};
  const DrainPlan p = plan(robot({{"deadline", "90m"}}, status));
  EXPECT_EQ(stopped(p), (std::vector<std::string>{"batch"}));
  EXPECT_NE(p.stops[0].second.find("its deadline 2026-11-22T01:30:00Z has passed"), std::string::npos)
      << p.stops[0].second;
  EXPECT_EQ((*p.status)["message"], "3 tasks left: 2 tasks stopping, 1 system job's task to stop last");
  EXPECT_TRUE(p.events.empty());  // still Draining
  EXPECT_FALSE(p.requeue_after);  // the Tasks' ends bring it back
}

TEST_F(Drain, ASystemJobsTaskStopsOnceNothingElseIsLeft) {
  add("sys", "system", "running");
  add("batch", "batch", "failed");
  const DrainPlan p = plan(robot(json::object()));
  EXPECT_EQ(stopped(p), std::vector<std::string>{"sys"});
  EXPECT_NE(p.stops[0].second.find("stops last"), std::string::npos);
}

TEST_F(Drain, IgnoreSystemJobsLeavesThemRunningAndTheRobotDrained) {
  add("sys", "system", "running");
  const DrainPlan p = plan(robot({{"ignoreSystemJobs", true}}));
  EXPECT_TRUE(p.stops.empty());
  EXPECT_EQ((*p.status)["state"], "Drained");
  EXPECT_EQ((*p.status)["remaining"], 0);
  EXPECT_EQ((*p.status)["message"], "no task left on it (system jobs' tasks go on)");
  EXPECT_EQ(events(p), std::vector<std::string>{"Drained"});
}

TEST_F(Drain, AZeroDeadlineStopsRunningBatchTasksAtOnce) {
  add("batch", "batch", "running");
  const DrainPlan p = plan(robot({{"deadline", "0s"}}));
  EXPECT_EQ(stopped(p), std::vector<std::string>{"batch"});
}

TEST_F(Drain, WritesNothingWhenItsStatusStandsAndSaysDrainedOnce) {
  add("batch", "batch", "running");
  const DrainPlan first = plan(robot(json::object()));
  ASSERT_TRUE(first.status);
  const DrainPlan again = plan(robot(json::object(), stored(*first.status)), kNow + 1min);
  EXPECT_FALSE(again.status);  // the same: no write, no Event
  EXPECT_TRUE(again.events.empty());
  EXPECT_EQ(*again.requeue_after, 59min + 100ms);

  tasks_.back()["status"]["state"] = "completed";
  const DrainPlan done = plan(robot(json::object(), stored(*first.status)), kNow + 2min);
  ASSERT_TRUE(done.status);
  EXPECT_EQ((*done.status)["state"], "Drained");
  EXPECT_EQ((*done.status)["startedAt"], "2026-11-22T01:30:00Z");  // kept from the first write
  EXPECT_EQ(events(done), std::vector<std::string>{"Drained"});
}

TEST_F(Drain, RemovingTheDrainClearsItsStatusAndSaysSo) {
  add("batch", "batch", "running");
  const DrainPlan p = plan(robot(nullptr, {{"state", "Draining"}, {"startedAt", "2026-11-22T01:00:00Z"}}));
  ASSERT_TRUE(p.status);
  EXPECT_TRUE(p.status->is_null());
  EXPECT_TRUE(p.stops.empty());
  EXPECT_EQ(events(p), std::vector<std::string>{"DrainStopped"});
}

TEST_F(Drain, AnInvalidDeadlineStopsNothingAndSaysWhy) {
  add("svc", "service", "running");
  for (const json& deadline : {json("soon"), json(-5), json("-1h")}) {
    const DrainPlan p = plan(robot({{"deadline", deadline}}));
    EXPECT_TRUE(p.stops.empty()) << deadline;
    ASSERT_TRUE(p.status);
    EXPECT_EQ((*p.status)["state"], "Invalid");
    EXPECT_NE((*p.status)["message"].get<std::string>().find("spec.drain.deadline"), std::string::npos);
    EXPECT_EQ(events(p), std::vector<std::string>{"InvalidDrain"});
  }
  const DrainPlan p = plan(robot({{"ignoreSystemJobs", "yes"}}));
  EXPECT_TRUE(p.stops.empty());
  EXPECT_EQ((*p.status)["state"], "Invalid");
}

// Draining, then made invalid: the Invalid status removes what the Draining
// one said (a merge patch keeps keys it does not name), so judging it again
// writes nothing, heartbeat after heartbeat.
TEST_F(Drain, AStatusReplacedByAnotherLeavesNothingBehindAndIsNotWrittenAgain) {
  add("batch", "batch", "running");
  const DrainPlan draining = plan(robot(json::object()));
  ASSERT_TRUE(draining.status);
  const DrainPlan invalid = plan(robot({{"deadline", "soon"}}, stored(*draining.status)), kNow + 1min);
  ASSERT_TRUE(invalid.status);
  EXPECT_TRUE((*invalid.status)["deadline"].is_null());
  EXPECT_TRUE((*invalid.status)["remaining"].is_null());
  json kept = stored(*draining.status);
  for (const auto& [key, value] : invalid.status->items()) {  // the merge patch, applied
    if (value.is_null()) {
      kept.erase(key);
    } else {
      kept[key] = value;
    }
  }
  EXPECT_FALSE(plan(robot({{"deadline", "soon"}}, kept), kNow + 2min).status);
}

// The spec a status answers: a drain asked again (spec changed: a new
// generation) is judged again before the plugin takes it for drained.
TEST_F(Drain, SaysWhichGenerationOfTheSpecItJudged) {
  json r = robot({{"ignoreSystemJobs", true}});
  r["metadata"]["generation"] = 4;
  const DrainPlan p = plan(r);
  EXPECT_EQ((*p.status)["observedGeneration"], 4);
  r["status"]["drain"] = stored(*p.status);
  r["metadata"]["generation"] = 5;
  const DrainPlan again = plan(r, kNow + 1s);
  ASSERT_TRUE(again.status);
  EXPECT_EQ((*again.status)["observedGeneration"], 5);
}

}  // namespace
}  // namespace k8s4r::manager
