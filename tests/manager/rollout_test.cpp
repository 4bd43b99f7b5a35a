// Rollouts (rollout.h): reading spec.rollout, and how many of a group's
// tasks may start now, from its Tasks and the time.
#include "k8s4r/manager/rollout.h"

#include <gtest/gtest.h>

namespace k8s4r::manager {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const Timestamp kNow = parse_rfc3339("2026-11-22T01:30:00Z").value();

json task(const std::string& state, const std::string& created = "2026-11-22T01:00:00Z",
          const std::string& reason = "") {
  json t = {{"metadata", {{"creationTimestamp", created}}}, {"status", json::object()}};
  if (!state.empty()) t["status"]["state"] = state;
  if (!reason.empty()) t["status"]["reason"] = reason;
  return t;
}

Rollout read(const json& spec) {
  auto rollout = read_rollout(spec);
  EXPECT_TRUE(rollout) << rollout.error().to_string();
  return rollout ? rollout.value() : Rollout{};
}

TEST(ReadRollout, RefusesWhatCannotBeMeantNamingTheField) {
  for (const auto& [spec, field] : std::vector<std::pair<json, std::string>>{
           {{{"maxInFlight", 0}}, "maxInFlight"},
           {{{"maxPerMinute", "ten"}}, "maxPerMinute"},
           {{{"perLabel", {{"maxInFlight", 1}}}}, "perLabel.label"},
           {{{"exponentialRate", {{"incrementFactor", 9}}}}, "exponentialRate.incrementFactor"},
           {{{"abortCriteria", {{{"failureType", "Oops"}, {"thresholdPercentage", 10}}}}},
            "abortCriteria[0].failureType"},
           {{{"abortCriteria", {{{"thresholdPercentage", 0}}}}}, "abortCriteria[0].thresholdPercentage"},
           {{{"paused", "yes"}}, "paused"},
       }) {
    auto rollout = read_rollout(spec);
    ASSERT_FALSE(rollout) << spec;
    EXPECT_EQ(rollout.error().field, field) << spec;
  }
  EXPECT_FALSE(read(nullptr).limits());
}

TEST(JudgeRollout, AtMostMaxInFlightMadeAndNotEnded) {
  const Rollout rollout = read({{"maxInFlight", 2}});
  EXPECT_EQ(judge_rollout(rollout, {task("running"), task("completed")}, kNow).may_start, 1);
  EXPECT_EQ(judge_rollout(rollout, {task("running"), task("")}, kNow).may_start, 0);  // made, not yet placed
  EXPECT_EQ(judge_rollout(rollout, {task("running")}, kNow, 1).may_start, 0);         // made, not yet in the cache
  EXPECT_EQ(judge_rollout(rollout, {task("failed"), task("completed")}, kNow).may_start, 2);
}

// A service's tasks run on: its rollout starts them a few at a time, and
// does not stop at maxInFlight replicas for ever.
TEST(JudgeRollout, ForAServiceInFlightIsWhatHasNotStartedYet) {
  const Rollout rollout = read({{"maxInFlight", 2}});
  EXPECT_EQ(judge_rollout(rollout, {task("running"), task("running")}, kNow, 0, true).may_start, 2);
  EXPECT_EQ(judge_rollout(rollout, {task("running"), task("dispatching")}, kNow, 0, true).may_start, 1);
  EXPECT_EQ(judge_rollout(rollout, {task("running"), task("running")}, kNow).may_start, 0);  // a batch job's
}

TEST(JudgeRollout, AtMostMaxPerMinuteAndLooksAgainWhenTheMinuteHasPassed) {
  const Rollout rollout = read({{"maxPerMinute", 2}});
  const RolloutVerdict full = judge_rollout(
      rollout, {task("completed", "2026-11-22T01:29:20Z"), task("running", "2026-11-22T01:29:50Z")}, kNow);
  EXPECT_EQ(full.may_start, 0);
  ASSERT_TRUE(full.recheck);
  EXPECT_EQ(*full.recheck, 20s + 100ms);  // when the older leaves the window
  EXPECT_EQ(judge_rollout(rollout, {task("completed", "2026-11-22T01:28:59Z")}, kNow).may_start, 2);
}

TEST(JudgeRollout, AnExponentialRateGrowsWithSuccessesUpToMaxPerMinute) {
  const Rollout rollout =
      read({{"maxPerMinute", 10},
            {"exponentialRate", {{"baseRatePerMinute", 1}, {"incrementFactor", 2}, {"succeededPerIncrement", 2}}}});
  EXPECT_EQ(judge_rollout(rollout, {}, kNow).per_minute, 1);
  EXPECT_EQ(judge_rollout(rollout, {task("completed"), task("completed")}, kNow).per_minute, 2);
  std::vector<json> many(8, task("completed"));
  EXPECT_EQ(judge_rollout(rollout, many, kNow).per_minute, 10);  // 16, capped
}

TEST(JudgeRollout, AbortsAtItsThresholdOnceEnoughRanAndStartsNothingThen) {
  const Rollout rollout =
      read({{"abortCriteria", {{{"failureType", "Any"}, {"thresholdPercentage", 50}, {"minExecuted", 3}}}}});
  EXPECT_FALSE(judge_rollout(rollout, {task("failed"), task("failed")}, kNow).aborted);  // 2 < minExecuted
  const RolloutVerdict verdict = judge_rollout(rollout, {task("failed"), task("failed"), task("completed")}, kNow);
  ASSERT_TRUE(verdict.aborted);
  EXPECT_EQ(*verdict.aborted, "2 of 3 executed failed, at least 50% of at least 3");
  EXPECT_EQ(verdict.may_start, 0);
  EXPECT_FALSE(judge_rollout(rollout, {task("failed"), task("completed"), task("completed")}, kNow).aborted);

  // By type: Lost counts only lost ones; a Task stopped by a drain is no failure.
  const Rollout lost = read({{"abortCriteria", {{{"failureType", "Lost"}, {"thresholdPercentage", 50}}}}});
  EXPECT_FALSE(judge_rollout(lost, {task("failed", "2026-11-22T01:00:00Z", "Error")}, kNow).aborted);
  EXPECT_TRUE(judge_rollout(lost, {task("failed", "2026-11-22T01:00:00Z", "Lost")}, kNow).aborted);
  json drained = task("failed", "2026-11-22T01:00:00Z", "Cancelled");
  drained["status"]["conditions"] = {{{"type", "DisruptionTarget"}, {"status", "True"}, {"reason", "Drained"}}};
  const Rollout any = read({{"abortCriteria", {{{"thresholdPercentage", 1}}}}});
  EXPECT_FALSE(judge_rollout(any, {drained}, kNow).aborted);
  EXPECT_EQ(judge_rollout(any, {drained}, kNow).executed, 0);
}

TEST(JudgeRollout, PausedOrAbortedByHandStartsNothing) {
  EXPECT_EQ(judge_rollout(read({{"paused", true}}), {}, kNow).may_start, 0);
  EXPECT_FALSE(judge_rollout(read({{"paused", true}}), {}, kNow).aborted);
  const RolloutVerdict verdict = judge_rollout(read({{"abort", true}}), {}, kNow);
  EXPECT_EQ(verdict.may_start, 0);
  EXPECT_EQ(*verdict.aborted, "aborted by hand (spec.rollout.abort)");
}

}  // namespace
}  // namespace k8s4r::manager
