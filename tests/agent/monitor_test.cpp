// The monitor with real child processes and real signals, run three ways:
// the task as the monitor's own child, under k8s4r-task-shim (a spare kept
// ready, as the agent keeps one), and under a shim started for it in a cgroup
// of its own (as the agent runs tasks where it can).
#include "k8s4r/agent/monitor.h"

#include "k8s4r/agent/spare_shims.h"
#include "k8s4r/agent/task_cgroups.h"
#include "k8s4r/shim/cgroup.h"

#include <gtest/gtest.h>

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <csignal>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace k8s4r::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

enum class Mode { direct, shim, cgroup };

std::string mode_name(const ::testing::TestParamInfo<Mode>& info) {
  return info.param == Mode::direct ? "Direct" : info.param == Mode::shim ? "Shim" : "ShimInCgroup";
}

class MonitorTest : public ::testing::TestWithParam<Mode> {
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
  ~MonitorTest() override {
    fs::remove_all(dir_);
    if (cgroups_) ::rmdir(cgroups_->parent().c_str());
  }

  void SetUp() override {
    if (GetParam() != Mode::cgroup) return;
    auto parent = TaskCgroups::default_parent(dir_.string());
    auto opened = parent ? TaskCgroups::open(parent.value()) : Result<TaskCgroups>(parent.error());
    if (!opened) GTEST_SKIP() << "no cgroup v2 here: " << opened.error().message;
    cgroups_.emplace(std::move(opened).value());
  }

  // How the agent would start it, in this test's mode.
  std::optional<ShimSpec> shim_for(const std::string& uid) {
    if (GetParam() == Mode::direct) return std::nullopt;
    ShimSpec shim{K8S4R_TASK_SHIM, (dir_ / (uid + ".exit")).string(), ""};
    if (cgroups_) shim.cgroup = cgroups_->create(uid).value();
    if (GetParam() == Mode::shim) {
      EXPECT_TRUE(spares_.prepare());
      shim.spares = &spares_;
    }
    return shim;
  }
  Result<TaskProcess> launch(const std::string& uid, const ProcessSpec& spec,
                             std::optional<std::chrono::nanoseconds> timeout, std::chrono::nanoseconds kill_timeout) {
    return monitor_.launch(uid, spec, shim_for(uid), timeout, kill_timeout);
  }

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
  std::optional<TaskCgroups> cgroups_;
  SpareShims spares_{K8S4R_TASK_SHIM};
  Monitor monitor_;
};

INSTANTIATE_TEST_SUITE_P(Modes, MonitorTest, ::testing::Values(Mode::direct, Mode::shim, Mode::cgroup), mode_name);

pid_t read_pid(const fs::path& file) {
  for (int i = 0; i < 1000 && !(fs::exists(file) && fs::file_size(file) > 0); ++i) std::this_thread::sleep_for(10ms);
  pid_t pid = 0;
  std::ifstream(file) >> pid;
  return pid;
}

// Dead, or dead but not yet reaped by whoever reaps orphans here.
bool dead(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string ignored, state;
  stat >> ignored >> ignored >> state;
  return state == "Z";
}

bool gone_within(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!dead(pid)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

TEST_P(MonitorTest, ReportsExitCodesAndOutput) {
  ASSERT_TRUE(launch("ok", shell("echo hello; exit 0"), std::nullopt, 5s));
  ASSERT_TRUE(launch("three", shell("exit 3"), std::nullopt, 5s));
  EXPECT_EQ(wait_exit("ok").status.exit_code, 0);
  const TaskExit three = wait_exit("three");
  EXPECT_EQ(three.status.exit_code, 3);
  EXPECT_EQ(three.status.signal, 0);
  EXPECT_FALSE(three.stopped_by);
  EXPECT_EQ(monitor_.running(), 0u);
}

TEST_P(MonitorTest, TimeoutSendsSigtermToTheGroup) {
  ASSERT_TRUE(launch("slow", shell("sleep 100"), 200ms, 5s));
  const TaskExit exit = wait_exit("slow");
  EXPECT_EQ(exit.status.exit_code, 143);
  EXPECT_EQ(exit.status.signal, SIGTERM);
  EXPECT_EQ(exit.stopped_by, StopReason::timeout);
}

TEST_P(MonitorTest, IgnoredSigtermIsFollowedBySigkill) {
  ASSERT_TRUE(launch("stubborn", shell("trap '' TERM; sleep 100"), 100ms, 300ms));
  const TaskExit exit = wait_exit("stubborn");
  EXPECT_EQ(exit.status.exit_code, 137);
  EXPECT_EQ(exit.status.signal, SIGKILL);
  EXPECT_EQ(exit.stopped_by, StopReason::timeout);
  std::lock_guard lock(mutex_);
  EXPECT_EQ(signals_, (std::vector<std::string>{"stubborn TERM", "stubborn KILL"}));
}

TEST_P(MonitorTest, StoppingATaskLeavesNothingBehind) {
  const fs::path grandchild = dir_ / "grandchild.pid";
  ASSERT_TRUE(launch("tree", shell("sleep 1000 & echo $! > " + grandchild.string() + "; wait"), std::nullopt, 2s));
  const pid_t pid = read_pid(grandchild);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(monitor_.stop_task("tree", StopReason::cancelled));
  const TaskExit exit = wait_exit("tree");
  EXPECT_EQ(exit.stopped_by, StopReason::cancelled);
  // The background sleep got the group's SIGTERM too.
  EXPECT_TRUE(gone_within(pid, 5s)) << "grandchild " << pid << " survived";
  EXPECT_FALSE(monitor_.stop_task("tree", StopReason::cancelled));  // gone
}

TEST_P(MonitorTest, RefusesACommandThatDoesNotExistAndADuplicateUid) {
  ProcessSpec missing = shell("");
  missing.command = "/no/such/program";
  auto refused = launch("missing", missing, std::nullopt, 1s);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("cannot start '/no/such/program'"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("No such file or directory"), std::string::npos) << refused.error().message;
  ASSERT_TRUE(launch("once", shell("sleep 100"), std::nullopt, 1s));
  EXPECT_FALSE(monitor_.launch("once", shell("true"), std::nullopt, std::nullopt, 1s));
  monitor_.stop_task("once", StopReason::shutdown);
  EXPECT_EQ(wait_exit("once").stopped_by, StopReason::shutdown);
}

std::size_t thread_count() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/task")) ++count;
  return count;
}

TEST_P(MonitorTest, OneThreadWatchesEveryTask) {
  const std::size_t before = thread_count();
  // No timeout: on a loaded machine launching 50 can take longer than any
  // short one, and the count below must see all of them running.
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(launch("t" + std::to_string(i), shell("sleep 100"), std::nullopt, 1s));
  }
  EXPECT_EQ(monitor_.running(), 50u);
  EXPECT_EQ(thread_count(), before);
  for (int i = 0; i < 50; ++i) monitor_.stop_task("t" + std::to_string(i), StopReason::shutdown);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(wait_exit("t" + std::to_string(i)).status.signal, SIGTERM);
}

// What a task starts in a new session (setsid) or after a double fork is not
// in its process group. Under the shim it is killed when the task ends: by
// cgroup, or (no cgroup) as an orphan reparented to the shim. The monitor's
// own child (no shim) cannot do this, which is why the agent always uses one.
TEST_P(MonitorTest, WhatATaskStartsInANewSessionDiesWithIt) {
  if (GetParam() == Mode::direct) GTEST_SKIP() << "without a shim a new session escapes (documented)";
  const fs::path escaped = dir_ / "escaped.pid";
  ASSERT_TRUE(launch("escape",
                     shell("setsid sh -c 'sleep 1000 & echo $! > " + escaped.string() + "; wait' & while [ ! -s " +
                           escaped.string() + " ]; do sleep 0.01; done; exit 4"),
                     std::nullopt, 1s));
  const pid_t pid = read_pid(escaped);
  ASSERT_GT(pid, 0);
  const TaskExit exit = wait_exit("escape");
  EXPECT_EQ(exit.status.exit_code, 4);
  EXPECT_TRUE(gone_within(pid, 5s)) << "pid " << pid << " outlived its task";
  if (cgroups_) {
    EXPECT_FALSE(fs::exists(cgroups_->path_of("escape"))) << "the task's cgroup stayed";
  }
}

std::string contents(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

// The line of /proc/PID/cgroup of the cgroup v2 hierarchy, as a task printed it.
std::string unified_line(const std::string& printed) {
  std::istringstream lines(printed);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("0::", 0) == 0) return line;
  }
  return "";
}

// A task is in its cgroup before it executes: born there (clone3 with
// CLONE_INTO_CGROUP, which spares the kernel's cgroup migration), or, where
// the kernel or a seccomp filter (a container's) refuses clone3, moved there
// by its process before the exec.
TEST_P(MonitorTest, ATaskIsInItsCgroupBeforeItExecutesWhetherBornThereOrMoved) {
  if (GetParam() != Mode::cgroup) GTEST_SKIP() << "tasks get a cgroup only in this mode";
  ASSERT_TRUE(launch("born", shell("cat /proc/self/cgroup"), std::nullopt, 1s));
  EXPECT_EQ(wait_exit("born").status.exit_code, 0);
  const std::string born = unified_line(contents(dir_ / "stdout"));
  EXPECT_TRUE(born.size() > 10 && born.substr(born.size() - 5) == "/born") << born;

  // The shim itself under a filter that answers clone3 with ENOSYS, as
  // Docker's default profile does.
  const std::string cgroup = cgroups_->create("moved").value();
  const std::string out = (dir_ / "moved.out").string(), exit_file = (dir_ / "moved.exit").string();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    sock_filter filter[] = {
        {BPF_LD | BPF_W | BPF_ABS, 0, 0, static_cast<__u32>(offsetof(seccomp_data, nr))},
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 1, static_cast<__u32>(SYS_clone3)},
        {BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS},
        {BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ALLOW},
    };
    sock_fprog program{4, filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0)
      _exit(90);
    execl(K8S4R_TASK_SHIM, K8S4R_TASK_SHIM, "--exit-file", exit_file.c_str(), "--cgroup", cgroup.c_str(), "--stdout",
          out.c_str(), "--", "/bin/sh", "-c", "cat /proc/self/cgroup", static_cast<char*>(nullptr));
    _exit(91);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const std::string moved = unified_line(contents(out));
  EXPECT_TRUE(moved.size() > 10 && moved.substr(moved.size() - 6) == "/moved") << moved;
}

TEST_P(MonitorTest, ATimeoutReachesWhatLeftTheProcessGroup) {
  if (GetParam() != Mode::cgroup) GTEST_SKIP() << "only a cgroup finds a process in another session";
  const fs::path escaped = dir_ / "escaped.pid";
  // The escaped process traps TERM to say it got it; it must get the timeout's SIGTERM.
  const fs::path got_term = dir_ / "got-term";
  ASSERT_TRUE(launch(
      "escape-timeout",
      // The main process ignores SIGTERM, so the task ends only at the
      // SIGKILL 2 s later and the escaped one has time to answer.
      shell("setsid sh -c 'trap \"echo yes > " + got_term.string() + "; exit 0\" TERM; echo $$ > " + escaped.string() +
            "; while :; do sleep 0.05; done' & trap '' TERM; " + "while :; do sleep 0.05; done"),
      300ms, 2s));
  const pid_t pid = read_pid(escaped);
  ASSERT_GT(pid, 0);
  const TaskExit exit = wait_exit("escape-timeout");
  EXPECT_EQ(exit.stopped_by, StopReason::timeout);
  EXPECT_EQ(exit.status.signal, SIGKILL);
  EXPECT_TRUE(gone_within(pid, 5s));
  EXPECT_TRUE(fs::exists(got_term)) << "the escaped process never saw SIGTERM";
}

// The agent's hand-over: a released task outlives its monitor, and its
// deadline, passed meanwhile, sends nothing: the next agent watches it.
TEST_P(MonitorTest, AReleasedTaskOutlivesItsMonitorUnsignalled) {
  if (GetParam() == Mode::direct) GTEST_SKIP() << "the agent hands over only tasks under their shims";
  const fs::path got_term = dir_ / "released-term";
  const fs::path pid_file = dir_ / "released.pid";
  std::optional<TaskProcess> task;
  {
    Monitor own(MonitorCallbacks{[](const TaskExit&) {}, [](const SignalAction&, std::chrono::nanoseconds) {}});
    auto launched = own.launch("released",
                               shell("trap 'echo TERM > " + got_term.string() + "' TERM; echo $$ > " +
                                     pid_file.string() + "; while :; do sleep 0.05; done"),
                               shim_for("released"), 100ms, 1s);
    ASSERT_TRUE(launched) << launched.error().message;
    task = launched.value();
    ASSERT_GT(read_pid(pid_file), 0);
    own.release_all();
    EXPECT_FALSE(own.stop_task("released", StopReason::cancelled));  // no stop either
    std::this_thread::sleep_for(400ms);                              // past the 100 ms timeout
  }
  const pid_t pid = read_pid(pid_file);
  EXPECT_FALSE(dead(pid)) << "the monitor killed a task it had released";
  EXPECT_FALSE(dead(task->pid)) << "the monitor killed the shim of a task it had released";
  EXPECT_FALSE(fs::exists(got_term)) << "the released task got its timeout's SIGTERM";
  kill(-pid, SIGKILL);
  EXPECT_TRUE(gone_within(pid, 5s));
  EXPECT_TRUE(gone_within(task->pid, 5s));  // the shim follows its task
}

// How many times a process got SIGRTMIN: a real-time signal queues where
// SIGTERM would merge into one pending signal, so a second delivery shows.
// The child blocks it, joins `cgroup` (and a process group of its own, or a
// new session), says ready, and exits with the count once told to.
struct Counter {
  pid_t pid = -1;
  int go = -1;
};
Counter count_rtmin(const std::string& cgroup, bool new_session) {
  int ready[2], go[2];
  if (pipe(ready) != 0 || pipe(go) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGRTMIN);
    sigprocmask(SIG_BLOCK, &set, nullptr);
    if (new_session)
      setsid();
    else
      setpgid(0, 0);
    std::ofstream(cgroup + "/cgroup.procs") << getpid() << std::flush;
    char byte = 1;
    if (write(ready[1], &byte, 1) != 1 || read(go[0], &byte, 1) != 1) _exit(100);
    const timespec none{};
    int count = 0;
    while (sigtimedwait(&set, nullptr, &none) == SIGRTMIN) ++count;
    _exit(count);
  }
  close(ready[1]);
  close(go[0]);
  char byte = 0;
  if (read(ready[0], &byte, 1) != 1) return {};
  close(ready[0]);
  return {pid, go[1]};
}
int counted(Counter counter) {
  char byte = 1;
  if (write(counter.go, &byte, 1) != 1) return -1;
  close(counter.go);
  int status = 0;
  waitpid(counter.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A task's processes are in its process group and its cgroup at once: a
// signal to the task reaches each of them once (a second SIGTERM means "quit
// now" to many programs), and reaches what left the group through the cgroup.
TEST_P(MonitorTest, EachProcessOfATaskGetsItsSignalOnce) {
  if (GetParam() != Mode::cgroup) GTEST_SKIP() << "the cgroup is what a process could be signalled through twice";
  const std::string cgroup = cgroups_->create("once").value();
  const Counter leader = count_rtmin(cgroup, false);
  const Counter escaped = count_rtmin(cgroup, true);
  ASSERT_GT(leader.pid, 0);
  ASSERT_GT(escaped.pid, 0);
  ASSERT_TRUE(shim::signal_task_processes(cgroup, leader.pid, SIGRTMIN));
  EXPECT_EQ(counted(leader), 1);
  EXPECT_EQ(counted(escaped), 1);
  ::rmdir(cgroup.c_str());
}

// An agent that restarts is not the shim's parent; the shim's exit record
// still gives the task's true exit code.
TEST_P(MonitorTest, AnAdoptedTaskUnderItsShimEndsWithItsTrueExitCode) {
  if (GetParam() == Mode::direct) GTEST_SKIP() << "without a shim an adopted task's exit code is lost (documented)";
  int pidfd = -1;
  auto shim = shim_for("adopted");
  auto started = spawn_task(shell("sleep 0.3; exit 7"), *shim, pidfd);
  ASSERT_TRUE(started) << started.error().message;
  ASSERT_TRUE(monitor_.adopt("adopted", started.value(), std::chrono::steady_clock::now(), std::nullopt, 1s));
  const TaskExit exit = wait_exit("adopted");
  EXPECT_TRUE(exit.status_known);
  EXPECT_EQ(exit.status.exit_code, 7);
  siginfo_t info{};
  waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED);  // it was ours after all
  ::close(pidfd);
}

// A shim killed from outside records nothing: the task is killed with it and
// its end is reported as unknown, never as a success.
TEST_P(MonitorTest, AKilledShimTakesItsTaskAlongAndSaysTheStatusIsUnknown) {
  if (GetParam() == Mode::direct) GTEST_SKIP() << "no shim";
  auto started = launch("orphaned", shell("sleep 1000"), std::nullopt, 1s);
  ASSERT_TRUE(started);
  ASSERT_EQ(::kill(started.value().pid, SIGKILL), 0);
  const TaskExit exit = wait_exit("orphaned");
  EXPECT_FALSE(exit.status_known);
  EXPECT_NE(exit.unknown_why.find("ended without recording it"), std::string::npos) << exit.unknown_why;
  EXPECT_TRUE(gone_within(started.value().pgid, 5s)) << "the task outlived its killed shim";
}

}  // namespace
}  // namespace k8s4r::agent
