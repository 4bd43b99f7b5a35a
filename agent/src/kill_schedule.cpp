#include "k8s4r/agent/kill_schedule.h"

#include <algorithm>

namespace k8s4r::agent {

std::string to_string(StopReason reason) {
  switch (reason) {
    case StopReason::timeout:
      return "Timeout";
    case StopReason::cancelled:
      return "Cancelled";
    case StopReason::shutdown:
      return "AgentShutdown";
    case StopReason::disconnected:
      return "Disconnected";
  }
  return "Unknown";
}

void KillSchedule::track(const std::string& task_uid, SteadyTime started,
                         std::optional<std::chrono::nanoseconds> timeout, std::chrono::nanoseconds kill_timeout) {
  Entry entry;
  entry.kill_timeout = kill_timeout;
  if (timeout) entry.terminate_at = started + *timeout;
  tasks_[task_uid] = entry;
}

void KillSchedule::stop(const std::string& task_uid, SteadyTime now, StopReason reason) {
  auto it = tasks_.find(task_uid);
  if (it == tasks_.end()) return;
  Entry& entry = it->second;
  // Already terminating, or a SIGTERM already due: the first reason stands.
  if (entry.terminated || (entry.terminate_at && *entry.terminate_at <= now)) return;
  entry.reason = reason;
  entry.terminate_at = now;
}

void KillSchedule::forget(const std::string& task_uid) { tasks_.erase(task_uid); }

std::optional<SteadyTime> KillSchedule::next_deadline() const {
  std::optional<SteadyTime> nearest;
  for (const auto& [uid, entry] : tasks_) {
    for (const auto& at : {entry.terminate_at, entry.kill_at}) {
      if (at && (!nearest || *at < *nearest)) nearest = at;
    }
  }
  return nearest;
}

std::vector<SignalAction> KillSchedule::take_due(SteadyTime now) {
  std::vector<SignalAction> due;
  for (auto& [uid, entry] : tasks_) {
    if (entry.terminate_at && *entry.terminate_at <= now) {
      due.push_back({uid, SIGTERM, entry.reason, *entry.terminate_at});
      // The grace period runs from when SIGTERM is really sent.
      entry.kill_at = now + entry.kill_timeout;
      entry.terminate_at.reset();
      entry.terminated = true;
    }
    if (entry.kill_at && *entry.kill_at <= now) {
      due.push_back({uid, SIGKILL, entry.reason, *entry.kill_at});
      entry.kill_at.reset();  // once; the exit will come
    }
  }
  std::stable_sort(due.begin(), due.end(),
                   [](const SignalAction& a, const SignalAction& b) { return a.deadline < b.deadline; });
  return due;
}

}  // namespace k8s4r::agent
