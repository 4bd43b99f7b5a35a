// The monitor with real child processes and real signals.
#include "k8s4r/agent/monitor.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <fstream>

namespace k8s4r::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class MonitorTest : public ::testing::Test {
 protected:
  MonitorTest()
      : monitor_({[this](const TaskExit& exit) {
                    std::lock_guard lock(mutex_);
                    exits_[exit.task_uid] = exit;
                    changed_.notify_all();
                  },
                  [this](const SignalAction& action, std::chrono::nanoseconds) {
                    std::lock_guard lock(mutex_);
                    signals_.push_back(action.task_uid + (action.signal == SIGTERM ? " TERM" : " KILL"));
                  }}) {
    dir_ = fs::temp_directory_path() / ("k8s4r-monitor-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  ~MonitorTest() override { fs::remove_all(dir_); }

  ProcessSpec shell(const std::string& script) {
    ProcessSpec spec;
    spec.command = "/bin/sh";
    spec.args = {"-c", script};
    spec.env = {{"PATH", "/usr/bin:/bin"}};
    spec.working_dir = dir_.string();
    spec.stdout_path = (dir_ / "stdout").string();
    spec.stderr_path = (dir_ / "stderr").string();
    return spec;
  }

  TaskExit wait_exit(const std::string& uid, std::chrono::seconds timeout = 10s) {
    std::unique_lock lock(mutex_);
    EXPECT_TRUE(changed_.wait_for(lock, timeout, [&] { return exits_.count(uid) > 0; })) << uid << " did not exit";
    return exits_.count(uid) ? exits_[uid] : TaskExit{};
  }

  fs::path dir_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, TaskExit> exits_;
  std::vector<std::string> signals_;
  Monitor monitor_;
};

TEST_F(MonitorTest, ReportsExitCodesAndOutput) {
  ASSERT_TRUE(monitor_.launch("ok", shell("echo hello; exit 0"), std::nullopt, 5s));
  ASSERT_TRUE(monitor_.launch("three", shell("exit 3"), std::nullopt, 5s));
  EXPECT_EQ(wait_exit("ok").status.exit_code, 0);
  const TaskExit three = wait_exit("three");
  EXPECT_EQ(three.status.exit_code, 3);
  EXPECT_EQ(three.status.signal, 0);
  EXPECT_FALSE(three.stopped_by);
  EXPECT_EQ(monitor_.running(), 0u);
}

TEST_F(MonitorTest, TimeoutSendsSigtermToTheGroup) {
  ASSERT_TRUE(monitor_.launch("slow", shell("sleep 100"), 200ms, 5s));
  const TaskExit exit = wait_exit("slow");
  EXPECT_EQ(exit.status.exit_code, 143);
  EXPECT_EQ(exit.status.signal, SIGTERM);
  EXPECT_EQ(exit.stopped_by, StopReason::timeout);
}

TEST_F(MonitorTest, IgnoredSigtermIsFollowedBySigkill) {
  ASSERT_TRUE(monitor_.launch("stubborn", shell("trap '' TERM; sleep 100"), 100ms, 300ms));
  const TaskExit exit = wait_exit("stubborn");
  EXPECT_EQ(exit.status.exit_code, 137);
  EXPECT_EQ(exit.status.signal, SIGKILL);
  EXPECT_EQ(exit.stopped_by, StopReason::timeout);
  std::lock_guard lock(mutex_);
  EXPECT_EQ(signals_, (std::vector<std::string>{"stubborn TERM", "stubborn KILL"}));
}

TEST_F(MonitorTest, StoppingATaskLeavesNothingBehind) {
  const fs::path grandchild = dir_ / "grandchild.pid";
  ASSERT_TRUE(
      monitor_.launch("tree", shell("sleep 1000 & echo $! > " + grandchild.string() + "; wait"), std::nullopt, 2s));
  for (int i = 0; i < 500 && !(fs::exists(grandchild) && fs::file_size(grandchild) > 0); ++i)
    std::this_thread::sleep_for(10ms);
  pid_t pid = 0;
  std::ifstream(grandchild) >> pid;
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(monitor_.stop_task("tree", StopReason::cancelled));
  const TaskExit exit = wait_exit("tree");
  EXPECT_EQ(exit.stopped_by, StopReason::cancelled);
  // The background sleep got the group's SIGTERM too. It is not our child, so
  // whoever reaps orphans here reaps it; dead but unreaped (a zombie) is gone.
  const auto dead = [pid] {
    if (kill(pid, 0) != 0) return true;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string ignored, state;
    stat >> ignored >> ignored >> state;
    return state == "Z";
  };
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = dead();
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone) << "grandchild " << pid << " survived";
  EXPECT_FALSE(monitor_.stop_task("tree", StopReason::cancelled));  // gone
}

TEST_F(MonitorTest, RefusesACommandThatDoesNotExistAndADuplicateUid) {
  ProcessSpec missing = shell("");
  missing.command = "/no/such/program";
  auto refused = monitor_.launch("missing", missing, std::nullopt, 1s);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("cannot start '/no/such/program'"), std::string::npos);
  ASSERT_TRUE(monitor_.launch("once", shell("sleep 100"), std::nullopt, 1s));
  EXPECT_FALSE(monitor_.launch("once", shell("true"), std::nullopt, 1s));
  monitor_.stop_task("once", StopReason::shutdown);
  EXPECT_EQ(wait_exit("once").stopped_by, StopReason::shutdown);
}

std::size_t thread_count() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/task")) ++count;
  return count;
}

TEST_F(MonitorTest, OneThreadWatchesEveryTask) {
  const std::size_t before = thread_count();
  // No timeout: on a loaded machine launching 50 can take longer than any
  // short one, and the count below must see all of them running.
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(monitor_.launch("t" + std::to_string(i), shell("sleep 100"), std::nullopt, 1s));
  }
  EXPECT_EQ(monitor_.running(), 50u);
  EXPECT_EQ(thread_count(), before);
  for (int i = 0; i < 50; ++i) monitor_.stop_task("t" + std::to_string(i), StopReason::shutdown);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(wait_exit("t" + std::to_string(i)).status.signal, SIGTERM);
}

}  // namespace
}  // namespace k8s4r::agent
