// Whether a task that ended runs again, after Nomad's client restart
// tracker: within each `interval`, at most `attempts` restarts, each after
// `delay`; when they are used up, mode "fail" fails the task and mode "delay"
// waits for the interval to end and starts counting again.
//
// Only failures restart: exit code 0 completes the task, and a task the agent
// stopped (timeout, cancel, shutdown) ends with that reason. Without a
// restartPolicy a task is not restarted.
//
// Threading: not thread-safe; one per task, used by the task's owner.
#pragma once

#include "k8s4r/agent/kill_schedule.h"
#include "k8s4r/agent/process.h"
#include "k8s4r/common/messages.h"

#include <chrono>
#include <optional>
#include <string>

namespace k8s4r::agent {

struct RestartDecision {
  enum class Kind { complete, restart, fail } kind;
  std::chrono::nanoseconds delay{0};  // for restart: how long to wait before starting again
  std::string reason;                 // for fail: Timeout, Cancelled, AgentShutdown, Error
  std::string message;                // for people
};

class RestartTracker {
 public:
  explicit RestartTracker(std::optional<RestartPolicy> policy);

  RestartDecision on_exit(SteadyTime now, const ExitStatus& status, std::optional<StopReason> stopped_by);
  // Restarts made so far (TaskStatus.restartCount).
  int restart_count() const { return restart_count_; }

 private:
  int attempts_ = 0;
  std::chrono::nanoseconds interval_{0}, delay_{0};
  bool delay_mode_ = false;
  std::optional<SteadyTime> window_start_;
  int restarts_in_window_ = 0;
  int restart_count_ = 0;
};

}  // namespace k8s4r::agent
