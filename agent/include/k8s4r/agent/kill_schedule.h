// When the agent signals each task's process group: SIGTERM at the task's
// deadline (spec.timeout after start) or when it is cancelled, then SIGKILL
// killTimeout later if it has not exited. Pure bookkeeping over a clock the
// caller reads, so the monitor thread can sleep exactly until the nearest
// deadline and unit tests can move time by hand.
//
// Threading: not thread-safe; the monitor guards it.
#pragma once

#include "k8s4r/common/clock.h"

#include <chrono>
#include <csignal>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::agent {

// Why a task is being stopped; it becomes the final status' reason.
// disconnected: the task's shim stopped it, its robot cut off from the
// bridge for its disconnect.stopOnRobotAfter.
enum class StopReason { timeout, cancelled, shutdown, disconnected };

struct SignalAction {
  std::string task_uid;
  int signal;  // SIGTERM or SIGKILL
  StopReason reason;
  SteadyTime deadline;  // when it was due, to measure lateness
};

class KillSchedule {
 public:
  // Starts tracking a task that started at `started`. Without a timeout it has
  // no deadline until stopped.
  void track(const std::string& task_uid, SteadyTime started, std::optional<std::chrono::nanoseconds> timeout,
             std::chrono::nanoseconds kill_timeout);
  // Asks for SIGTERM now and SIGKILL kill_timeout after it (cancel,
  // shutdown). An earlier stop, or a timeout already due, keeps its reason.
  void stop(const std::string& task_uid, SteadyTime now, StopReason reason);
  // The task exited: nothing more to do for it.
  void forget(const std::string& task_uid);

  // The nearest time anything is due; nullopt when nothing is pending.
  std::optional<SteadyTime> next_deadline() const;
  // Every action due at `now`, in deadline order; each is returned once.
  std::vector<SignalAction> take_due(SteadyTime now);

  bool tracking(const std::string& task_uid) const { return tasks_.count(task_uid) > 0; }
  std::size_t size() const { return tasks_.size(); }

 private:
  struct Entry {
    std::optional<SteadyTime> terminate_at;  // SIGTERM not yet sent
    std::optional<SteadyTime> kill_at;       // set once SIGTERM is sent, cleared once SIGKILL is
    bool terminated = false;                 // SIGTERM sent
    std::chrono::nanoseconds kill_timeout{0};
    StopReason reason = StopReason::timeout;
  };
  std::map<std::string, Entry> tasks_;
};

std::string to_string(StopReason reason);  // "Timeout", "Cancelled", "AgentShutdown", "Disconnected"

}  // namespace k8s4r::agent
