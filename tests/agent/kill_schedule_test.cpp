// The timeout state machine with hand-moved time: no sleeps.
#include "k8s4r/agent/kill_schedule.h"

#include <gtest/gtest.h>

namespace k8s4r::agent {
namespace {

using namespace std::chrono_literals;

const SteadyTime t0{std::chrono::seconds(1000)};

std::vector<std::string> names(const std::vector<SignalAction>& actions) {
  std::vector<std::string> out;
  for (const auto& action : actions) {
    out.push_back(action.task_uid + (action.signal == SIGTERM ? " TERM " : " KILL ") + to_string(action.reason));
  }
  return out;
}

TEST(KillSchedule, TimeoutThenKillTimeout) {
  KillSchedule schedule;
  schedule.track("a", t0, 30s, 5s);
  EXPECT_EQ(schedule.next_deadline(), t0 + 30s);
  EXPECT_TRUE(schedule.take_due(t0 + 29s).empty());
  EXPECT_EQ(names(schedule.take_due(t0 + 30s)), (std::vector<std::string>{"a TERM Timeout"}));
  EXPECT_EQ(schedule.next_deadline(), t0 + 35s);  // killTimeout after the SIGTERM
  EXPECT_TRUE(schedule.take_due(t0 + 34s).empty());
  auto kill = schedule.take_due(t0 + 36s);
  EXPECT_EQ(names(kill), (std::vector<std::string>{"a KILL Timeout"}));
  EXPECT_EQ(kill[0].deadline, t0 + 35s);
  EXPECT_FALSE(schedule.next_deadline());  // nothing more until it exits
  EXPECT_TRUE(schedule.take_due(t0 + 100s).empty());
}

TEST(KillSchedule, NoTimeoutMeansNoDeadlineUntilStopped) {
  KillSchedule schedule;
  schedule.track("a", t0, std::nullopt, 2s);
  EXPECT_FALSE(schedule.next_deadline());
  schedule.stop("a", t0 + 10s, StopReason::cancelled);
  EXPECT_EQ(names(schedule.take_due(t0 + 10s)), (std::vector<std::string>{"a TERM Cancelled"}));
  EXPECT_EQ(schedule.next_deadline(), t0 + 12s);
}

TEST(KillSchedule, AFirstStopKeepsItsReasonAndKillTime) {
  KillSchedule schedule;
  schedule.track("a", t0, 10s, 5s);
  schedule.take_due(t0 + 10s);  // SIGTERM for the timeout
  schedule.stop("a", t0 + 12s, StopReason::cancelled);
  EXPECT_EQ(schedule.next_deadline(), t0 + 15s);
  EXPECT_EQ(names(schedule.take_due(t0 + 15s)), (std::vector<std::string>{"a KILL Timeout"}));
  schedule.stop("a", t0 + 16s, StopReason::shutdown);  // after SIGKILL: nothing more
  EXPECT_TRUE(schedule.take_due(t0 + 30s).empty());
}

TEST(KillSchedule, ACancelBeforeTheTimeoutComesFirst) {
  KillSchedule schedule;
  schedule.track("a", t0, 60s, 5s);
  schedule.stop("a", t0 + 1s, StopReason::cancelled);
  EXPECT_EQ(names(schedule.take_due(t0 + 1s)), (std::vector<std::string>{"a TERM Cancelled"}));
}

TEST(KillSchedule, TheGracePeriodStartsWhenSigtermIsSent) {
  KillSchedule schedule;
  schedule.track("a", t0, 10s, 5s);
  // The loop noticed late (a slow callback): SIGKILL must not follow at once.
  EXPECT_EQ(names(schedule.take_due(t0 + 20s)), (std::vector<std::string>{"a TERM Timeout"}));
  EXPECT_EQ(schedule.next_deadline(), t0 + 25s);
}

TEST(KillSchedule, ADueTimeoutKeepsItsReasonAgainstALaterStop) {
  KillSchedule schedule;
  schedule.track("a", t0, 10s, 5s);
  schedule.stop("a", t0 + 11s, StopReason::cancelled);  // the timeout was due first
  EXPECT_EQ(names(schedule.take_due(t0 + 11s)), (std::vector<std::string>{"a TERM Timeout"}));
}

TEST(KillSchedule, ManyTasksInDeadlineOrderAndForgotten) {
  KillSchedule schedule;
  schedule.track("late", t0, 20s, 1s);
  schedule.track("early", t0, 10s, 1s);
  schedule.track("done", t0, 5s, 1s);
  schedule.forget("done");
  EXPECT_EQ(schedule.next_deadline(), t0 + 10s);
  EXPECT_EQ(names(schedule.take_due(t0 + 25s)), (std::vector<std::string>{"early TERM Timeout", "late TERM Timeout"}));
  EXPECT_EQ(names(schedule.take_due(t0 + 26s)), (std::vector<std::string>{"early KILL Timeout", "late KILL Timeout"}));
  EXPECT_EQ(schedule.size(), 2u);
}

}  // namespace
}  // namespace k8s4r::agent
