// Draining a robot (`kubectl k8s4r drain`, Robot spec.drain), as a pure
// function of the Robot, the Tasks placed on it, their Jobs' types and the
// time: the Robot controller's drain step (drain_controller.cpp), tested from
// values.
//
// A drain cordons the robot (placement.h: nothing new is placed there) and
// asks each of its tasks to stop, by the DisruptionTarget condition
// (crd::stop_request), when its Job's type says, as Nomad's node drain does:
//   not started yet   (pending, dispatching) at once, whatever its type
//   service           at once
//   batch, and a Task of its own
//                     left to finish until the deadline, then stopped
//   system            last: once no other task is left on the robot (the
//                     deadline stops the others); never with ignoreSystemJobs
// A Task never sent (pending) the manager ends itself (drain_controller.cpp);
// the bridge stops a dispatching or running one on its robot, and the Task
// ends as the robot reports; its group then
// replaces it elsewhere, at once and not counted against its
// reschedulePolicy's attempts (plan_group.h). A system job's task is not
// replaced while its robot stays cordoned.
//
// spec.drain.deadline is a Go duration from when the manager first saw the
// drain (status.drain.startedAt), 1h when absent; 0s stops every task at
// once. status.drain says how it stands: state Draining, Drained (no task
// left that the drain waits for) or Invalid, startedAt, deadline (a time),
// remaining, message; an Event on the Robot as its state changes. Removing
// spec.drain (`kubectl k8s4r uncordon`) ends the drain: tasks already asked
// to stop still stop, the others go on.
//
// Thread-safety: a pure function.
#pragma once

#include "k8s4r/common/rfc3339.h"
#include "k8s4r/manager/plan_group.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace k8s4r::manager {

inline constexpr std::chrono::nanoseconds kDefaultDrainDeadline = std::chrono::hours(1);

struct DrainTask {
  const nlohmann::json* task = nullptr;
  std::string job_type;  // "batch", "service" or "system"; empty for a Task of its own
};

struct DrainView {
  nlohmann::json robot;
  std::vector<DrainTask> tasks;  // the Tasks whose spec.targetRobot is the robot, in any state
  Timestamp now;
};

struct DrainPlan {
  std::vector<std::pair<nlohmann::json, std::string>> stops;  // Tasks to ask to stop, and why
  // status.drain to write (null: remove it); none when it stands as written.
  std::optional<nlohmann::json> status;
  std::vector<PlannedEvent> events;
  std::optional<std::chrono::nanoseconds> requeue_after;  // the deadline: look again then
};

DrainPlan plan_drain(const DrainView& view);

}  // namespace k8s4r::manager
