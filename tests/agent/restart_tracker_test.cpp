// Restart decisions with hand-moved time: no sleeps.
#include "k8s4r/agent/restart_tracker.h"

#include <gtest/gtest.h>

namespace k8s4r::agent {
namespace {

using namespace std::chrono_literals;
using Kind = RestartDecision::Kind;

const SteadyTime t0{std::chrono::seconds(1000)};
const ExitStatus kFailed{1, 0};
const ExitStatus kOk{0, 0};

RestartPolicy policy(int attempts, std::chrono::nanoseconds interval, std::chrono::nanoseconds delay,
                     std::string mode) {
  RestartPolicy p;
  p.attempts = attempts;
  p.interval = interval;
  p.delay = delay;
  p.mode = mode;
  return p;
}

TEST(RestartTracker, WithoutAPolicyAFailureIsFinal) {
  RestartTracker tracker(std::nullopt);
  const auto decision = tracker.on_exit(t0, kFailed, std::nullopt);
  EXPECT_EQ(decision.kind, Kind::fail);
  EXPECT_EQ(decision.reason, "Error");
  EXPECT_EQ(decision.message, "exited with code 1");
  EXPECT_EQ(tracker.on_exit(t0, kOk, std::nullopt).kind, Kind::complete);
}

TEST(RestartTracker, ModeFailStopsAfterTheAttempts) {
  RestartTracker tracker(policy(2, 1min, 5s, "fail"));
  auto first = tracker.on_exit(t0, kFailed, std::nullopt);
  EXPECT_EQ(first.kind, Kind::restart);
  EXPECT_EQ(first.delay, 5s);
  EXPECT_EQ(tracker.on_exit(t0 + 10s, kFailed, std::nullopt).kind, Kind::restart);
  auto third = tracker.on_exit(t0 + 20s, ExitStatus{137, 9}, std::nullopt);
  EXPECT_EQ(third.kind, Kind::fail);
  EXPECT_EQ(third.message, "killed by SIGKILL; exceeded 2 restarts in 1m0s");
  EXPECT_EQ(tracker.restart_count(), 2);
}

TEST(RestartTracker, ANewIntervalGivesNewAttempts) {
  RestartTracker tracker(policy(1, 1min, 1s, "fail"));
  EXPECT_EQ(tracker.on_exit(t0, kFailed, std::nullopt).kind, Kind::restart);
  EXPECT_EQ(tracker.on_exit(t0 + 61s, kFailed, std::nullopt).kind, Kind::restart);
  EXPECT_EQ(tracker.on_exit(t0 + 62s, kFailed, std::nullopt).kind, Kind::fail);
}

TEST(RestartTracker, ModeDelayWaitsForTheIntervalToEnd) {
  RestartTracker tracker(policy(1, 10min, 2s, "delay"));
  EXPECT_EQ(tracker.on_exit(t0, kFailed, std::nullopt).delay, 2s);
  auto waits = tracker.on_exit(t0 + 1min, kFailed, std::nullopt);
  EXPECT_EQ(waits.kind, Kind::restart);
  EXPECT_EQ(waits.delay, 9min);                                             // until the interval that began at t0 ends
  EXPECT_EQ(tracker.on_exit(t0 + 11min, kFailed, std::nullopt).delay, 2s);  // a fresh interval
  EXPECT_EQ(tracker.restart_count(), 3);
}

TEST(RestartTracker, StoppedTasksEndWithTheirReason) {
  RestartTracker tracker(policy(5, 1min, 1s, "fail"));
  auto timeout = tracker.on_exit(t0, ExitStatus{143, 15}, StopReason::timeout);
  EXPECT_EQ(timeout.kind, Kind::fail);
  EXPECT_EQ(timeout.reason, "Timeout");
  EXPECT_EQ(tracker.on_exit(t0, ExitStatus{137, 9}, StopReason::cancelled).reason, "Cancelled");
  EXPECT_EQ(tracker.restart_count(), 0);
}

}  // namespace
}  // namespace k8s4r::agent
