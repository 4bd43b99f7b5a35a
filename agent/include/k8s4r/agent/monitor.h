// The one thread that watches every task's process: it waits at once on all
// their pidfds, on a wake-up eventfd, and on the nearest SIGTERM/SIGKILL
// deadline of the KillSchedule (epoll_pwait2, nanosecond timeout), with no
// polling interval. It does all reaping, timeout signalling and exit
// reporting, so the agent's thread count does not grow with its tasks.
//
// Threading: launch(), stop_task() and running() may be called from any
// thread. Callbacks run on the monitor thread and must not block for long.
// Ownership: the monitor owns its children's pidfds. Destroying it SIGKILLs
// and reaps whatever still runs; stop tasks first for a graceful end.
//
// A task launched with a ShimSpec runs under k8s4r-task-shim: the monitor
// watches the shim, signals the task (its cgroup and process group), and
// takes the task's exit status from the shim's exit record, which is there
// whether or not this agent started the shim. Without one (the monitor's own
// tests and benchmarks) the task is the monitor's child.
#pragma once

#include "k8s4r/agent/kill_schedule.h"
#include "k8s4r/agent/process.h"
#include "k8s4r/common/result.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace k8s4r::agent {

struct TaskExit {
  std::string task_uid;
  ExitStatus status;
  std::optional<StopReason> stopped_by;  // the agent signalled it while it ran, or its shim stopped it
  SteadyTime exited_at;
  // False when the exit status could not be learned: a process adopted
  // without a shim (not our child, so the kernel keeps its status from us), or
  // a shim that ended without recording it; `unknown_why` then says which.
  bool status_known = true;
  std::string unknown_why;
  int leftovers = 0;  // processes of the task still alive when it ended, killed by the shim
};

struct MonitorCallbacks {
  std::function<void(const TaskExit&)> on_exit;
  // A signal was sent; `lateness` is how long after its deadline.
  std::function<void(const SignalAction&, std::chrono::nanoseconds lateness)> on_signal;
};

class Monitor {
 public:
  explicit Monitor(MonitorCallbacks callbacks);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // Starts the process of `task_uid` (under `shim` when given) and watches
  // it; its deadline is `timeout` after now. Refuses a uid that is already
  // running.
  Result<TaskProcess> launch(const std::string& task_uid, const ProcessSpec& spec, const std::optional<ShimSpec>& shim,
                             std::optional<std::chrono::nanoseconds> timeout, std::chrono::nanoseconds kill_timeout);
  // Watches a task an earlier run of the agent started, which outlived it
  // (found through the state store): its shim, or, from an agent before
  // shims, its own process, whose exit status is then lost. Its deadline is
  // `timeout` after `started`.
  Result<void> adopt(const std::string& task_uid, const TaskProcess& process, SteadyTime started,
                     std::optional<std::chrono::nanoseconds> timeout, std::chrono::nanoseconds kill_timeout);
  // SIGTERM to the task's process group now, SIGKILL kill_timeout later.
  // False when no such task runs.
  bool stop_task(const std::string& task_uid, StopReason reason);
  std::size_t running() const;
  // Leaves every watched task to whoever adopts it next: no more deadlines,
  // and the destructor neither kills nor reaps them (the agent's hand-over).
  void release_all();

 private:
  struct Child {
    TaskProcess process;
    int pidfd = -1;
    std::optional<StopReason> stopped_by;
    bool adopted = false;  // not our child: its end is seen, not reaped
  };
  struct Ended {
    TaskExit exit;
    TaskProcess process;
  };
  // The task's status, from the shim's record when it has one.
  static void learn_status(Ended& ended);
  void watch(const std::string& task_uid, Child child, SteadyTime started,
             std::optional<std::chrono::nanoseconds> timeout, std::chrono::nanoseconds kill_timeout);
  void loop();
  void wake();

  MonitorCallbacks callbacks_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  mutable std::mutex mutex_;
  KillSchedule schedule_;
  std::map<std::string, Child> children_;
  std::map<int, std::string> task_by_fd_;
  std::atomic<bool> stopping_{false};
  bool released_ = false;   // under mutex_
  bool use_pwait2_ = true;  // monitor thread only
  std::thread thread_;
};

}  // namespace k8s4r::agent
