// Whether a Task that has not ended is lost, from what its robot last said
// (its Robot's phase, and the tasks its last heartbeat listed as held:
// runningTasks, or endedTasks with an end not yet recorded), as a pure
// function. Used for a TaskGroup's Tasks (plan_group) and for standalone
// Tasks (plan_task).
//
// Lost: its robot does not exist or is Rejected; its robot has been out of
// contact (no heartbeat) for the Task's lostAfter (docs/manager.md#partitions:
// by default its stop window, killTimeout and a margin, so its robot has
// stopped it by then; never while the Task waits for its robot, with
// disconnect.replace false or a stop window of 0 and no lostAfter); it is
// running and its robot's heartbeats have not listed it for the disconnect
// grace; or it was dispatched (by whoever) longer than the dispatch timeout
// ago, never reported, and a heartbeat since does not list it. A robot that lists
// nothing (Go K8s4r) cannot show it never started one: its Tasks are lost
// only when it goes Offline.
//
// Thread-safety: a pure function.
#pragma once

#include "k8s4r/common/rfc3339.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <string>

namespace k8s4r::manager {

// The annotation that records when the manager placed a Task (RFC 3339):
// the start of its dispatch timeout when the bridge has not sent it yet.
inline constexpr const char* kScheduledAtAnnotation = "robot.k8s4r.io/scheduled-at";

struct LivenessInputs {
  const nlohmann::json* robot = nullptr;  // its Robot; null when there is none
  Timestamp now;
  std::chrono::nanoseconds dispatch_timeout{0};
  std::chrono::nanoseconds disconnect_grace{0};
  // For a Task whose spec.disconnect says nothing: its stop window, and the
  // margin added to it and killTimeout for its lostAfter.
  std::chrono::nanoseconds disconnect_stop_after = std::chrono::minutes(2);
  std::chrono::nanoseconds disconnect_margin = std::chrono::seconds(90);
  // Since when its robot's heartbeats have not listed it (running Tasks).
  std::optional<Timestamp> missing_since;
  // When this manager first saw it dispatching: the start of its dispatch
  // timeout when nothing on the Task says when it was dispatched.
  std::optional<Timestamp> seen_dispatching;
};

struct Liveness {
  std::optional<std::string> lost;  // why it is lost
  // When time alone may change the verdict.
  std::optional<std::chrono::nanoseconds> recheck;
  // What to remember of missing_since: a time, or none to forget.
  std::optional<std::optional<Timestamp>> missing_since;
  // What to remember of seen_dispatching (the first sight of it).
  std::optional<Timestamp> seen_dispatching;
};

Liveness judge_liveness(const nlohmann::json& task, const LivenessInputs& inputs);

// Whether the robot's last heartbeat says it holds the Task.
bool robot_holds(const nlohmann::json& robot, const std::string& task_uid);

// How long after its robot's last heartbeat the Task is taken for lost; none
// while it waits for its robot however long that is.
std::optional<std::chrono::nanoseconds> lost_after(const nlohmann::json& task, const LivenessInputs& inputs);

}  // namespace k8s4r::manager
