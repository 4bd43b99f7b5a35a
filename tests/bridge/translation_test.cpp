// The bridge's translations, from the protocol's example payloads, with no
// network: register, heartbeat and presence into Robot writes, a status
// report into a Task write, a Task into a dispatch message.
#include "k8s4r/bridge/cached_fields.h"
#include "k8s4r/bridge/dispatch_message.h"
#include "k8s4r/bridge/new_robot_gate.h"
#include "k8s4r/bridge/refusal_log.h"
#include "k8s4r/bridge/robot_patches.h"
#include "k8s4r/bridge/task_patches.h"
#include "k8s4r/crd/resources.h"

#include "k8s4r/common/slots.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace k8s4r::bridge {
namespace {

using nlohmann::json;

std::string example(const std::string& path) {
  std::ifstream file(std::string(K8S4R_SCHEMA_DIR) + "/examples/" + path);
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_FALSE(text.str().empty()) << path;
  return text.str();
}

const Timestamp kNow = parse_rfc3339("2026-11-23T10:00:00Z").value();

// What a parsed document costs in memory is about proportional to this.
std::size_t values_in(const json& value) {
  std::size_t count = 1;
  if (value.is_structured()) {
    for (const json& item : value) count += values_in(item);
  }
  return count;
}

json task_on(const std::string& robot, const std::string& state, std::optional<int> seq = std::nullopt) {
  json task = {
      {"apiVersion", "robot.k8s4r.io/v1alpha1"},
      {"kind", "Task"},
      {"metadata", {{"name", "greet"}, {"namespace", "default"}, {"uid", "5b0e7c1a-3f9d-4e21-9a77-0c2d4b6e8f10"}}},
      {"spec",
       {{"name", "greet"},
        {"driver", "exec"},
        {"targetRobot", robot},
        {"config", {{"execConfig", {{"command", "/bin/true"}}}}}}},
      {"status", {{"state", state}}}};
  if (seq) task["status"]["statusSeq"] = *seq;
  return task;
}

TaskStatus report(const std::string& robot, TaskRunState state, std::optional<std::int64_t> seq) {
  TaskStatus status;
  status.task_uid = "5b0e7c1a-3f9d-4e21-9a77-0c2d4b6e8f10";
  status.robot_id = robot;
  status.state = state;
  status.seq = seq;
  if (state != TaskRunState::running) status.exit_code = state == TaskRunState::completed ? 0 : 1;
  return status;
}

TEST(RobotPatches, ARegisterMakesAPendingRobotWithTheTokensDigestOnly) {
  const Register message = parse_register(example("register/valid-agent-start.json")).value();
  const json robot = new_robot(message, "lab");
  EXPECT_EQ(robot["metadata"]["name"], message.robot_id);
  EXPECT_EQ(robot["metadata"]["namespace"], "lab");
  EXPECT_EQ(robot["spec"]["robotId"], message.robot_id);
  EXPECT_EQ(robot["spec"]["labels"], json(message.labels));
  EXPECT_EQ(robot["metadata"]["labels"]["robot.k8s4r.io/slot"], std::to_string(slot_of(message.robot_id)));
  const json patch = register_status_patch(message, nullptr, kNow);
  EXPECT_EQ(patch["status"]["phase"], "Pending");
  EXPECT_EQ(patch["status"]["tokenDigest"], crd::token_digest(message.token));
  EXPECT_EQ(patch["status"]["lastHeartbeatTime"], "2026-11-23T10:00:00Z");
  EXPECT_EQ(patch["status"]["connected"], true);
  EXPECT_EQ(patch.dump().find(message.token), std::string::npos) << "the token itself must never be written";
}

TEST(RobotPatches, WhatTheRobotHadSeenIsWrittenBesideItsListAndRemovedWhenItSaysNothing) {
  const Heartbeat beat = parse_heartbeat(example("heartbeat/valid-with-tasks.json")).value();
  json robot = {{"status", {{"connected", true}}}};
  robot.merge_patch(heartbeat_status_patch(beat, robot, kNow));
  EXPECT_EQ(robot["status"]["reportSeq"], 1);
  EXPECT_EQ(robot["status"]["newestDispatch"], "2026-11-22T01:30:00.012345Z");  // to the microsecond, as sent
  // A register after an agent's restart says the same, and what it holds
  // ended is written as ended, so no task it holds reads as missing.
  const Register again = parse_register(example("register/valid-after-restart-with-tasks.json")).value();
  robot.merge_patch(register_status_patch(again, &robot, kNow));
  EXPECT_EQ(robot["status"]["reportSeq"], 5);
  EXPECT_FALSE(robot["status"].contains("newestDispatch"));  // none taken since it started
  EXPECT_EQ(robot["status"]["runningTasks"], json::array({"5b0e7c1a-3f9d-4e21-9a77-0c2d4b6e8f10"}));
  EXPECT_EQ(robot["status"]["endedTasks"], json::array({"8c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f"}));
  // A Go K8s4r agent in its place says nothing of the kind: the figures go.
  robot.merge_patch(
      heartbeat_status_patch(parse_heartbeat(example("heartbeat/valid-go-k8s4r-agent.json")).value(), robot, kNow));
  EXPECT_FALSE(robot["status"].contains("reportSeq"));
}

TEST(RobotPatches, ARegisterKeepsThePhaseAndTheOperatorsLabels) {
  const Register message = parse_register(example("register/valid-agent-start.json")).value();
  const std::string slot = std::to_string(slot_of(message.robot_id));
  const json robot = {{"metadata", {{"labels", {{"robot.k8s4r.io/slot", slot}, {"team", "ops"}}}}},
                      {"spec", {{"labels", {{"zone", "operator-set"}}}}},
                      {"status", {{"phase", "Online"}}}};
  EXPECT_FALSE(register_status_patch(message, &robot, kNow)["status"].contains("phase"));
  EXPECT_TRUE(register_robot_patch(message, robot).is_null());
  // A Robot from before slots (or made by hand) gets its slot label and the agent's labels, nothing else.
  const json bare = {{"spec", {{"robotId", message.robot_id}}}};
  EXPECT_EQ(register_robot_patch(message, bare), json({{"spec", {{"labels", message.labels}}},
                                                       {"metadata", {{"labels", {{"robot.k8s4r.io/slot", slot}}}}}}));
  json wrong = robot;
  wrong["metadata"]["labels"]["robot.k8s4r.io/slot"] = "9999";
  EXPECT_EQ(register_robot_patch(message, wrong), json({{"metadata", {{"labels", {{"robot.k8s4r.io/slot", slot}}}}}}));
}

TEST(RobotPatches, ARejectedRobotMayNotRegisterAgainWithTheTokenItWasRejectedFor) {
  Register message = parse_register(example("register/valid-agent-start.json")).value();
  message.token = "old-token";
  const json rejected = {
      {"status",
       {{"phase", "Rejected"}, {"message", "token does not match"}, {"tokenDigest", crd::token_digest("old-token")}}}};
  auto refused = may_register(&rejected, message);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().reason, "RobotRejected");
  EXPECT_NE(refused.error().message.find("token does not match"), std::string::npos);
  EXPECT_TRUE(may_register(nullptr, message));
  // With another token (a rotated Secret's), it is written for the manager to judge.
  message.token = "new-token";
  EXPECT_TRUE(may_register(&rejected, message));
  // Rejected for registering without a token: without one still, refused.
  message.token.clear();
  const json tokenless = {{"status", {{"phase", "Rejected"}}}};
  EXPECT_FALSE(may_register(&tokenless, message));
}

// Whoever can publish on a robot's topic (anyone, on an anonymous broker)
// cannot change a Robot its token proved: not its token, so not its phase,
// so not its login; nor, by heartbeat, the tasks it says it runs.
TEST(RobotPatches, AnApprovedRobotsTokenIsChangedByItsSecretNotByAMessage) {
  Register message;
  message.robot_id = "r1";
  message.token = "forged";
  for (const char* phase : {"Online", "Offline"}) {
    const json approved = {{"status", {{"phase", phase}, {"tokenDigest", crd::token_digest("real")}}}};
    auto refused = may_register(&approved, message);
    ASSERT_FALSE(refused) << phase;
    EXPECT_EQ(refused.error().reason, "TokenMismatch");
    message.token.clear();
    EXPECT_FALSE(may_register(&approved, message)) << "without a token: " << phase;
    message.token = "real";
    EXPECT_TRUE(may_register(&approved, message)) << phase;
    message.token = "forged";
  }
  // Not yet approved (waiting for its Secret): the next register's token counts, and the manager judges it.
  const json pending = {{"status", {{"phase", "Pending"}, {"tokenDigest", crd::token_digest("real")}}}};
  EXPECT_TRUE(may_register(&pending, message));
  // Rejected for the old token after its Secret rotated: the new token is taken.
  const json rotated = {{"status", {{"phase", "Rejected"}, {"tokenDigest", crd::token_digest("old")}}}};
  message.token = "new";
  EXPECT_TRUE(may_register(&rotated, message));

  Heartbeat beat;
  beat.robot_id = "r1";
  beat.token = "real";
  const json robot = {{"status", {{"phase", "Online"}, {"tokenDigest", crd::token_digest("real")}}}};
  for (bool own_topic : {true, false}) {
    beat.token = "real";
    EXPECT_TRUE(may_heartbeat(robot, beat, own_topic));
    beat.token = "forged";
    auto refused = may_heartbeat(robot, beat, own_topic);
    ASSERT_FALSE(refused) << own_topic;
    EXPECT_EQ(refused.error().reason, "TokenMismatch");
  }
  // Without a token: k8s4r-agent's heartbeat on its own topic (its login is its proof); on the shared topic,
  // where anyone can name any robot, refused.
  beat.token.clear();
  EXPECT_TRUE(may_heartbeat(robot, beat, true));
  EXPECT_FALSE(may_heartbeat(robot, beat, false));
  // Registered without a token (--require-robot-token=false): nothing to match.
  EXPECT_TRUE(may_heartbeat(json{{"status", {{"phase", "Online"}}}}, beat, false));
}

TEST(NewRobotGateTest, AFloodOfNewRobotsStopsAtTheRateAndAtTheCap) {
  using namespace std::chrono_literals;
  NewRobotGate gate(10, 100);
  const NewRobotGate::Time t0{};
  int admitted = 0;
  for (int i = 0; i < 1000; ++i) admitted += bool(gate.admit(0, t0));
  EXPECT_EQ(admitted, 10);  // one second's worth at once
  auto refused = gate.admit(0, t0);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().reason, "RegisterRateLimited");
  EXPECT_TRUE(gate.admit(0, t0 + 100ms));  // refilled at 10 a second
  EXPECT_FALSE(gate.admit(0, t0 + 100ms));
  refused = gate.admit(100, t0 + 10s);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().reason, "TooManyUnapproved");
  EXPECT_NE(refused.error().message.find("--max-unapproved-robots 100"), std::string::npos) << refused.error().message;
  EXPECT_TRUE(gate.admit(99, t0 + 10s));
}

TEST(RefusalLogTest, TheFirstOfAReasonAtOnceThenOneSummaryPerIntervalWhateverTheFlood) {
  using namespace std::chrono_literals;
  RefusalLog log(10s);
  const RefusalLog::Time t0{};
  EXPECT_EQ(log.record("UnknownRobot", "refused a heartbeat from robot f0", t0), "refused a heartbeat from robot f0");
  EXPECT_EQ(log.record("InvalidPayload", "refused a register: bad", t0 + 1s), "refused a register: bad");
  EXPECT_FALSE(log.next_due());
  for (int i = 1; i <= 5000; ++i) {
    EXPECT_FALSE(log.record("UnknownRobot", "refused a heartbeat from robot f" + std::to_string(i), t0 + 2s));
  }
  EXPECT_EQ(log.next_due(), t0 + 10s);
  EXPECT_TRUE(log.due(t0 + 9s).empty());
  const auto lines = log.due(t0 + 10s);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(
      lines[0],
      "refused 5000 more messages (UnknownRobot) in the last 10s; the last: refused a heartbeat from robot f5000");
  EXPECT_FALSE(log.next_due());
  // Within the interval after a summary: into the next summary.
  EXPECT_FALSE(log.record("UnknownRobot", "again", t0 + 15s));
  EXPECT_EQ(log.next_due(), t0 + 20s);
  EXPECT_EQ(log.due(t0 + 20s).size(), 1u);
  // A quiet reason logs its next refusal at once again.
  EXPECT_EQ(log.record("UnknownRobot", "later", t0 + 40s), "later");
}

TEST(RobotPatches, OnlyRunningTasksCapacityAndConnectionAreUrgentInAHeartbeat) {
  Heartbeat beat = parse_heartbeat(example("heartbeat/valid-go-k8s4r-agent.json")).value();
  ASSERT_TRUE(beat.device_info);
  const HeartbeatFacts first = facts_of(beat);
  Heartbeat busier = beat;
  busier.device_info->cpu.usage_percent = 99.0;
  busier.device_info->memory.available = 1;
  busier.timestamp = kNow;
  EXPECT_EQ(facts_of(busier), first) << "usage and time are volatile: coalesced";
  Heartbeat bigger = beat;
  bigger.device_info->memory.total = 1;
  EXPECT_NE(facts_of(bigger), first) << "capacity changed: written at once";
  // A Go K8s4r agent does not list its tasks: unknown, written as no field
  // (the manager then never takes a missing task for a lost one).
  EXPECT_FALSE(beat.lists_running_tasks);
  EXPECT_TRUE(heartbeat_status_patch(beat, json::object(), kNow)["status"]["runningTasks"].is_null());
  Heartbeat working = beat;
  working.lists_running_tasks = true;  // as our agent does
  working.running_tasks = {"b", "a"};
  EXPECT_EQ(facts_of(working).running_tasks, (std::vector<std::string>{"a", "b"}));
  EXPECT_NE(facts_of(working), first);
  // The Robot written from a heartbeat reads back as the same facts.
  json robot = {{"status", {{"connected", true}}}};
  robot.merge_patch(heartbeat_status_patch(working, robot, kNow));
  EXPECT_EQ(facts_of_robot(robot), facts_of(working));
}

TEST(RobotPatches, AListOfArtifactsIsWrittenAndAFingerprintAloneChangesNothing) {
  const Heartbeat listed = parse_heartbeat(example("heartbeat/valid-artifacts.json")).value();
  json robot = {{"metadata", {{"name", "robot-001"}}}, {"status", {{"connected", true}}}};
  robot.merge_patch(heartbeat_status_patch(listed, robot, kNow));
  EXPECT_EQ(robot["status"]["artifacts"]["held"], json(*listed.artifacts->held));
  EXPECT_EQ(robot["status"]["artifacts"]["count"], 2);
  EXPECT_EQ(facts_of_robot(robot), facts_of(listed));
  EXPECT_EQ(facts_of(listed).artifacts_fingerprint, "3f1c9a0b7d2e4c58");

  const Heartbeat unchanged = parse_heartbeat(example("heartbeat/valid-artifacts-unchanged.json")).value();
  EXPECT_FALSE(heartbeat_status_patch(unchanged, robot, kNow)["status"].contains("artifacts"));
  EXPECT_EQ(facts_of(unchanged).artifacts_fingerprint, "");  // not listed: the caller keeps what it wrote

  // The bridge's cache keeps only what tells a list unchanged.
  json cached = robot;
  keep_cached_robot_fields(cached);
  EXPECT_EQ(cached["status"]["artifacts"], json({{"fingerprint", "3f1c9a0b7d2e4c58"}}));
  EXPECT_EQ(facts_of_robot(cached).artifacts_fingerprint, "3f1c9a0b7d2e4c58");
}

TEST(RobotPatches, AnAgentThatCannotStoreItsStateIsWrittenAtOnceAsStorageReadyFalseAndTrueOnceItCanAgain) {
  const Heartbeat healthy = parse_heartbeat(example("heartbeat/valid-with-tasks.json")).value();
  const Heartbeat full = parse_heartbeat(example("heartbeat/valid-storage-full.json")).value();
  ASSERT_TRUE(full.storage_error);
  EXPECT_NE(facts_of(full), facts_of(healthy)) << "urgent, not coalesced";

  json robot = {{"status", {{"connected", true}}}};
  // Healthy from the start: no condition is added.
  EXPECT_FALSE(heartbeat_status_patch(healthy, robot, kNow)["status"].contains("conditions"));
  robot.merge_patch(heartbeat_status_patch(full, robot, kNow));
  const auto failing = crd::find_condition(robot, "StorageReady");
  ASSERT_TRUE(failing);
  EXPECT_EQ(failing->status, "False");
  EXPECT_EQ(failing->reason, "StorageFull");
  EXPECT_EQ(failing->message, "cannot write /var/lib/k8s4r/state.log: No space left on device");
  EXPECT_EQ(facts_of_robot(robot), facts_of(full));

  robot.merge_patch(heartbeat_status_patch(healthy, robot, kNow + std::chrono::minutes(1)));
  const auto recovered = crd::find_condition(robot, "StorageReady");
  ASSERT_TRUE(recovered);
  EXPECT_EQ(recovered->status, "True");
  EXPECT_EQ(facts_of_robot(robot), facts_of(healthy));
  EXPECT_FALSE(heartbeat_status_patch(healthy, robot, kNow)["status"].contains("conditions"));

  // With the Connected condition to set too, both land in the one list.
  json disconnected = {{"status", {{"connected", false}}}};
  disconnected.merge_patch(heartbeat_status_patch(full, disconnected, kNow));
  EXPECT_EQ(crd::find_condition(disconnected, "Connected")->status, "True");
  EXPECT_EQ(crd::find_condition(disconnected, "StorageReady")->status, "False");
}

TEST(RobotPatches, PresenceSetsConnectedAndItsCondition) {
  const Presence offline = parse_presence(example("presence/valid-last-will.json")).value();
  json robot = {{"status", {{"connected", true}}}};
  robot.merge_patch(presence_status_patch(offline, robot, kNow));
  EXPECT_EQ(robot["status"]["connected"], false);
  ASSERT_EQ(robot["status"]["conditions"].size(), 1u);
  EXPECT_EQ(robot["status"]["conditions"][0]["type"], "Connected");
  EXPECT_EQ(robot["status"]["conditions"][0]["status"], "False");
}

using Kind = ReportVerdict::Kind;

TEST(TaskPatches, AReportFromTheAssignedRobotIsMergedIntoStatusWithAnEvent) {
  auto running = judge_report(report("robot-001", TaskRunState::running, 1), task_on("robot-001", "dispatching"), {});
  ASSERT_EQ(running.kind, Kind::write) << running.refusal.message;
  EXPECT_EQ(running.write.status_patch["status"]["state"], "running");
  EXPECT_EQ(running.write.status_patch["status"]["statusSeq"], 1);
  ASSERT_EQ(running.write.events.size(), 1u);
  EXPECT_EQ(running.write.events[0].reason, "Started");

  TaskStatus timeout = report("robot-001", TaskRunState::failed, 2);
  timeout.reason = "Timeout";
  timeout.exit_code = 137;
  timeout.signal = 9;
  auto failed = judge_report(timeout, task_on("robot-001", "running", 1), {});
  ASSERT_EQ(failed.kind, Kind::write);
  EXPECT_EQ(failed.write.status_patch["status"]["exitCode"], 137);
  EXPECT_EQ(failed.write.status_patch["status"]["reason"], "Timeout");
  ASSERT_EQ(failed.write.events.size(), 1u);
  EXPECT_EQ(failed.write.events[0].reason, "Timeout");
  EXPECT_EQ(failed.write.events[0].type, "Warning");
}

TEST(TaskPatches, AnEndWhoseRunningReportNeverCameStillTellsThatItStarted) {
  // The agent does not send a task's first `running` once a later report is
  // queued: a short task in a burst can go from dispatching to completed in
  // one report.
  TaskStatus ended = report("robot-001", TaskRunState::completed, 2);
  ended.started_at = parse_rfc3339("2026-11-27T10:00:00Z").value();
  auto verdict = judge_report(ended, task_on("robot-001", "dispatching"), {});
  ASSERT_EQ(verdict.kind, Kind::write) << verdict.refusal.message;
  EXPECT_EQ(verdict.write.status_patch["status"]["startedAt"], "2026-11-27T10:00:00Z");
  ASSERT_EQ(verdict.write.events.size(), 2u);
  EXPECT_EQ(verdict.write.events[0].reason, "Started");
  EXPECT_EQ(verdict.write.events[1].reason, "Completed");
  // A restart the first time it is heard of: it started, then restarted.
  TaskStatus restarting = report("robot-001", TaskRunState::running, 2);
  restarting.event = "Restarting";
  restarting.started_at = ended.started_at;
  auto restarted = judge_report(restarting, task_on("robot-001", "dispatching"), {});
  ASSERT_EQ(restarted.write.events.size(), 2u);
  EXPECT_EQ(restarted.write.events[0].reason, "Started");
  EXPECT_EQ(restarted.write.events[1].reason, "Restarted");
  // Seen running before: only its end.
  auto after_running = judge_report(ended, task_on("robot-001", "running", 1), {});
  ASSERT_EQ(after_running.write.events.size(), 1u);
  EXPECT_EQ(after_running.write.events[0].reason, "Completed");
}

TEST(TaskPatches, TheOutputsOfACompletedRunAreItsStatusOutputsAndNothingElseCarriesThem) {
  auto verdict = judge_report(parse_task_status(example("task-status/valid-completed-with-outputs.json")).value(),
                              task_on("robot-001", "running", 1), {});
  ASSERT_EQ(verdict.kind, Kind::write) << verdict.refusal.message;
  EXPECT_EQ(verdict.write.status_patch["status"]["outputs"],
            json::parse(R"({"mapDigest": "sha256:9f2c0b7e4a1d3c5b6e8f0a2b4c6d8e0f1a3b5c7d9e1f3a5b7c9d1e3f5a7b9c1d",
                            "cells": 1412, "bounds": {"x": [0, 41.5], "y": [-3, 18]}})"));
  // Not a success: what a failed run declared is nobody's result.
  TaskStatus failed = report("robot-001", TaskRunState::failed, 2);
  failed.outputs = json{{"mapDigest", "sha256:00"}};
  auto refused = judge_report(failed, task_on("robot-001", "running", 1), {});
  ASSERT_EQ(refused.kind, Kind::write);
  EXPECT_FALSE(refused.write.status_patch["status"].contains("outputs"));
}

TEST(TaskPatches, WrongRobotsAndLateRunningReportsAreRefusedForGood) {
  auto wrong = judge_report(report("robot-002", TaskRunState::completed, 9), task_on("robot-001", "running", 1), {});
  EXPECT_EQ(wrong.kind, Kind::refused);
  EXPECT_EQ(wrong.refusal.reason, "WrongRobot");
  // Go K8s4r agents send no seq and a late running after the end.
  auto late =
      judge_report(report("robot-001", TaskRunState::running, std::nullopt), task_on("robot-001", "completed"), {});
  EXPECT_EQ(late.kind, Kind::refused);
  EXPECT_EQ(late.refusal.reason, "TaskFinished");
  auto after_own = judge_report(report("robot-001", TaskRunState::running, std::nullopt),
                                task_on("robot-001", "running"), AppliedStatus{std::nullopt, crd::TaskState::failed});
  EXPECT_EQ(after_own.refusal.reason, "TaskFinished");
  EXPECT_EQ(judge_report(report("robot-001", TaskRunState::running, 5), task_on("robot-001", "completed", 4), {}).kind,
            Kind::refused);
}

TEST(TaskPatches, AReportSentAgainIsRecordedWithoutAWriteOnceItsSeqIsInTheTask) {
  // The Task holds seq 1: a report up to it is confirmed at once.
  EXPECT_EQ(judge_report(report("robot-001", TaskRunState::running, 1), task_on("robot-001", "running", 1), {}).kind,
            Kind::recorded);
  // What this bridge is still writing (seq 3) covers seq 2, but only once it is in.
  auto pending = judge_report(report("robot-001", TaskRunState::running, 2), task_on("robot-001", "running", 1),
                              AppliedStatus{3, crd::TaskState::running});
  EXPECT_EQ(pending.kind, Kind::after_writes);
  EXPECT_EQ(pending.refusal.reason, "StaleSeq");
  // The end it holds, reported again with a new seq (a dispatch sent again is answered so).
  EXPECT_EQ(
      judge_report(report("robot-001", TaskRunState::completed, 5), task_on("robot-001", "completed", 4), {}).kind,
      Kind::recorded);
}

TEST(TaskPatches, TheTrueEndOfATaskMarkedLostIsRecordedBesideItsStateWithAnEvent) {
  json lost = task_on("robot-001", "failed", 1);
  lost["status"]["reason"] = "Lost";
  TaskStatus end = report("robot-001", TaskRunState::completed, 2);
  end.exit_code = 0;
  end.finished_at = kNow;
  auto verdict = judge_report(end, lost, {});
  ASSERT_EQ(verdict.kind, Kind::write);
  const json& status = verdict.write.status_patch["status"];
  EXPECT_FALSE(status.contains("state"));  // stays failed (Lost): its replacement stands
  EXPECT_EQ(status["statusSeq"], 2);
  EXPECT_EQ(status["endOnRobot"]["state"], "completed");
  EXPECT_EQ(status["endOnRobot"]["exitCode"], 0);
  EXPECT_EQ(status["endOnRobot"]["finishedAt"], format_rfc3339(kNow, TimePrecision::as_needed));
  ASSERT_EQ(verdict.write.events.size(), 1u);
  EXPECT_EQ(verdict.write.events[0].reason, "EndedOnRobot");
  EXPECT_EQ(verdict.write.events[0].type, "Normal");
  EXPECT_NE(verdict.write.events[0].message.find("stays Lost"), std::string::npos);
  // Once recorded, the same end sent again changes nothing.
  lost.merge_patch(verdict.write.status_patch);
  EXPECT_EQ(judge_report(report("robot-001", TaskRunState::completed, 3), lost, {}).kind, Kind::recorded);
}

TEST(TaskPatches, WhatTheBridgeAppliedCountsUntilTheCacheCatchesUpThenTheCacheWins) {
  AppliedStatus applied;
  applied.state = crd::TaskState::running;
  applied.seq = 2;
  crd::TaskView cached;
  cached.state = crd::TaskState::dispatching;
  cached.status_seq = 1;  // behind the bridge's own write
  EXPECT_EQ(applied.state_or(cached), crd::TaskState::running);
  // Caught up, and someone else (the manager marking it lost) wrote since.
  cached.state = crd::TaskState::failed;
  cached.status_seq = 2;
  EXPECT_EQ(applied.state_or(cached), crd::TaskState::failed);
  EXPECT_EQ(AppliedStatus{}.state_or(cached), crd::TaskState::failed);
}

TEST(TaskPatches, AnEventsNameIsTheSameForTheSameReport) {
  const json task = task_on("robot-001", "running", 1);
  const TaskStatus done = report("robot-001", TaskRunState::completed, 2);
  const TaskEvent event{"Normal", "Completed", "exited with code 0"};
  const json first = task_event(task, event, done, kNow);
  EXPECT_EQ(first["metadata"]["name"],
            task_event(task, event, done, kNow + std::chrono::seconds(5))["metadata"]["name"]);
  EXPECT_NE(first["metadata"]["name"],
            task_event(task, event, report("robot-001", TaskRunState::completed, 3), kNow)["metadata"]["name"]);
  EXPECT_EQ(first["involvedObject"]["kind"], "Task");
  EXPECT_EQ(first["involvedObject"]["uid"], task["metadata"]["uid"]);
  EXPECT_EQ(first["reason"], "Completed");
  // A robot's long message is cut, at a character boundary.
  const TaskEvent wordy{"Warning", "Failed", std::string(1023, 'x') + "\u00e9" + std::string(100000, 'y')};
  const std::string message = task_event(task, wordy, done, kNow)["message"];
  EXPECT_EQ(message, std::string(1023, 'x'));
}

TEST(DispatchMessage, ATaskBecomesTheCreateTheAgentReads) {
  json task = task_on("robot-001", "dispatching");
  task["metadata"]["managedFields"] = json::array({{{"manager", "kubectl"}}});
  task["spec"]["resources"] = {{"cpu", "500m"}};
  auto payload = dispatch_create_payload(task);
  ASSERT_TRUE(payload) << payload.error().message;
  const Dispatch parsed = parse_dispatch(payload.value()).value();
  EXPECT_EQ(parsed.action, DispatchAction::create);
  EXPECT_EQ(parsed.task.metadata.uid, "5b0e7c1a-3f9d-4e21-9a77-0c2d4b6e8f10");
  EXPECT_EQ(parsed.task.spec->raw["resources"]["cpu"], "500m");  // relayed untouched
  EXPECT_EQ(payload.value().find("managedFields"), std::string::npos);
  EXPECT_EQ(json::parse(dispatch_delete_payload(task))["action"], "delete");
}

TEST(DispatchMessage, ATaskItsRobotReportedOnCarriesThatSeqAndEverySendItsTime) {
  const Timestamp sent = parse_rfc3339("2026-11-22T01:30:00.012345Z").value();
  const Dispatch first =
      parse_dispatch(dispatch_create_payload(task_on("robot-001", "dispatching"), sent).value()).value();
  EXPECT_EQ(first.timestamp, sent);
  EXPECT_EQ(first.reported_seq, std::nullopt);  // never reported on: a first send, or a resend
  const Dispatch resync = parse_dispatch(dispatch_create_payload(task_on("robot-001", "running", 41)).value()).value();
  EXPECT_EQ(resync.reported_seq, 41);  // an agent with no record of it lost its state
}

TEST(DispatchMessage, ATaskTheAgentWouldRefuseIsRefusedInItsWords) {
  json task = task_on("robot-001", "dispatching");
  task["spec"]["config"]["execConfig"].erase("command");
  auto refused = dispatch_create_payload(task);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().reason, "InvalidTask");
  EXPECT_NE(refused.error().message.find("command"), std::string::npos) << refused.error().message;
  json unplaced = task_on("", "dispatching");
  EXPECT_EQ(dispatch_create_payload(unplaced).error().reason, "InvalidTask");
  json huge = task_on("robot-001", "dispatching");
  huge["spec"]["env"]["BIG"] = std::string(300 * 1024, 'x');
  EXPECT_EQ(dispatch_create_payload(huge).error().reason, "InvalidTask");
}

}  // namespace
TEST(CachedFields, TheCacheKeepsEverythingTheBridgeReadsAndDropsTheBulk) {
  json task = task_on("robot-001", "dispatching", 3);
  task["metadata"]["resourceVersion"] = "42";
  task["metadata"]["generation"] = 2;
  task["metadata"]["deletionTimestamp"] = "2026-11-23T10:00:00Z";
  task["metadata"]["finalizers"] = json::array({"robot.k8s4r.io/bridge"});
  task["metadata"]["labels"] = {{"app", "greeter"}};
  task["metadata"]["ownerReferences"] = json::array({{{"kind", "TaskGroup"}, {"name", "g"}}});
  task["metadata"]["annotations"] = {{"kubectl.kubernetes.io/last-applied-configuration", task.dump()}};
  task["metadata"]["managedFields"] = json::array({{{"manager", "kubectl"}, {"fieldsV1", task["spec"]}}});
  json cached = task;
  keep_cached_fields(cached);

  EXPECT_LT(cached.dump().size() * 2, task.dump().size());
  for (const char* gone : {"labels", "ownerReferences", "annotations", "managedFields"})
    EXPECT_FALSE(cached["metadata"].contains(gone)) << gone;
  // What the bridge decides from the cached copy is what it would decide from the whole object.
  const auto whole_view = crd::read_task(task), cached_view = crd::read_task(cached);
  EXPECT_EQ(cached_view.uid, whole_view.uid);
  EXPECT_EQ(cached_view.deleting, whole_view.deleting);
  EXPECT_EQ(cached_view.has_bridge_finalizer, whole_view.has_bridge_finalizer);
  EXPECT_EQ(cached_view.status_seq, whole_view.status_seq);
  EXPECT_EQ(cached_view.target_robot, whole_view.target_robot);
  EXPECT_EQ(dispatch_create_payload(cached).value(), dispatch_create_payload(task).value());
  EXPECT_EQ(crd::add_finalizer_patch(cached, crd::kBridgeFinalizer),
            crd::add_finalizer_patch(task, crd::kBridgeFinalizer));
  EXPECT_EQ(cached["metadata"]["resourceVersion"], "42");
}

TEST(CachedFields, ACachedRobotKeepsWhatRegisterHeartbeatAndPresenceReadAndLittleElse) {
  // A Robot as a Go K8s4r agent leaves it: registered, then written by a heartbeat.
  const Register registration = parse_register(example("register/valid-go-k8s4r-agent.json")).value();
  json robot = new_robot(registration, "default");
  robot["metadata"]["uid"] = "0f3c";
  robot["metadata"]["resourceVersion"] = "7";
  robot["metadata"]["managedFields"] = json::array({{{"manager", "k8s4r-bridge"}}});
  robot["status"] = {{"phase", "Online"}};
  robot["status"]["conditions"] =
      json::array({{{"type", "Approved"}, {"status", "True"}, {"lastTransitionTime", "2026-11-23T09:00:00Z"}}});
  robot.merge_patch(register_status_patch(registration, &robot, kNow));
  Heartbeat beat = parse_heartbeat(example("heartbeat/valid-go-k8s4r-agent.json")).value();
  beat.running_tasks = {"b", "a"};
  robot.merge_patch(heartbeat_status_patch(beat, robot, kNow));
  ASSERT_TRUE(robot["status"]["deviceInfo"].is_object());
  json cached = robot;
  keep_cached_robot_fields(cached);

  EXPECT_LE((values_in(cached) - 1) * 2, values_in(robot)) << "half the values, or fewer, besides the slot label";
  EXPECT_EQ(cached["metadata"]["labels"], robot["metadata"]["labels"]);  // the slot: register reads it
  EXPECT_FALSE(cached["status"].contains("agentVersion"));
  EXPECT_EQ(cached["status"]["tokenDigest"], robot["status"]["tokenDigest"]);  // a digest: rejections are told apart
  EXPECT_FALSE(cached["spec"].contains("description"));
  // Every decision and patch made from the cached copy is the one the whole Robot gives.
  const Timestamp later = kNow + std::chrono::minutes(1);
  EXPECT_EQ(facts_of_robot(cached), facts_of_robot(robot));
  EXPECT_EQ(bool(may_register(&cached, registration)), bool(may_register(&robot, registration)));
  EXPECT_EQ(register_robot_patch(registration, cached), register_robot_patch(registration, robot));
  EXPECT_EQ(register_status_patch(registration, &cached, later), register_status_patch(registration, &robot, later));
  EXPECT_EQ(heartbeat_status_patch(beat, cached, later), heartbeat_status_patch(beat, robot, later));
  for (bool online : {true, false}) {
    const Presence presence{.robot_id = registration.robot_id, .online = online, .timestamp = later};
    EXPECT_EQ(presence_status_patch(presence, cached, later), presence_status_patch(presence, robot, later));
  }
  const auto whole_view = crd::read_robot(robot), cached_view = crd::read_robot(cached);
  EXPECT_EQ(cached_view.name, whole_view.name);
  EXPECT_EQ(cached_view.phase, whole_view.phase);
  EXPECT_EQ(cached_view.has_spec_labels, whole_view.has_spec_labels);
  EXPECT_EQ(cached_view.connected, whole_view.connected);
  // A capacity change still shows against the cached copy.
  Heartbeat upgraded = beat;
  upgraded.device_info->memory.total = 16'000'000'000;
  EXPECT_NE(facts_of(upgraded), facts_of_robot(cached));
}

TEST(RobotPatches, OddRobotsAndTasksFromTheApiAreReadWithoutThrowing) {
  // Found by fuzz_bridge_translations: fields of the wrong type, and a Robot just created, with no status yet.
  EXPECT_FALSE(last_heartbeat_of(json::parse(R"({"metadata":{"name":"r"}})")));
  EXPECT_FALSE(last_heartbeat_of(json::parse(R"({"status":{"lastHeartbeatTime":5}})")));
  EXPECT_EQ(last_heartbeat_of(json::parse(R"({"status":{"lastHeartbeatTime":"2026-11-23T10:00:00Z"}})")), kNow);
  const json odd_conditions = json::parse(R"({"status":{"conditions":[{"type":5,"status":{}},"x",
      {"type":"Connected","status":true}]}})");
  const json patch = presence_status_patch(Presence{"r", true, kNow}, odd_conditions, kNow);
  ASSERT_EQ(patch["status"]["conditions"].size(), 2u) << "an entry that is no object is dropped: " << patch.dump();
  EXPECT_EQ(patch["status"]["conditions"][1]["status"], "True");
  json task = task_on("robot-001", "dispatching");
  task["apiVersion"] = json::object();
  task["kind"] = 7;
  auto payload = dispatch_create_payload(task);
  ASSERT_TRUE(payload) << payload.error().message;
  EXPECT_EQ(json::parse(payload.value())["task"]["apiVersion"], "robot.k8s4r.io/v1alpha1");
}

}  // namespace k8s4r::bridge
