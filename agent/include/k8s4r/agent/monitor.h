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
  std::optional<StopReason> stopped_by;  // set when the agent signalled it
  SteadyTime exited_at;
  // False for an adopted process: it is not our child, so the kernel keeps
  // its exit status from us and `status` is meaningless.
  bool status_known = true;
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

  // Starts the process of `task_uid` and watches it; its deadline is
  // `timeout` after now. Refuses a uid that is already running.
  Result<pid_t> launch(const std::string& task_uid, const ProcessSpec& spec,
                       std::optional<std::chrono::nanoseconds> timeout, std::chrono::nanoseconds kill_timeout);
  // Watches a process an earlier run of the agent started, which outlived it
  // (found through the journal). It is not our child: its end is seen, its
  // exit status is not. Its deadline is `timeout` after `started`.
  Result<void> adopt(const std::string& task_uid, pid_t pid, SteadyTime started,
                     std::optional<std::chrono::nanoseconds> timeout, std::chrono::nanoseconds kill_timeout);
  // SIGTERM to the task's process group now, SIGKILL kill_timeout later.
  // False when no such task runs.
  bool stop_task(const std::string& task_uid, StopReason reason);
  std::size_t running() const;

 private:
  struct Child {
    pid_t pid;
    int pidfd;
    std::optional<StopReason> stopped_by;
    bool adopted = false;
  };
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
  bool use_pwait2_ = true;  // monitor thread only
  std::thread thread_;
};

}  // namespace k8s4r::agent
