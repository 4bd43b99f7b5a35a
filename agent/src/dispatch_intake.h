// Dispatches, as they arrive on k8s4r/robots/{robotId}/tasks/dispatch: a
// create for a task the agent does not hold starts it (TaskLifecycle); one
// for a task it holds, running or finished within its retention (QoS 1
// redelivery, the bridge's resend), is answered with the task's latest
// report and never runs a second process; a delete stops the task. A
// payload that does not parse is refused, and reported failed (InvalidTask)
// when its task uid can be read safely.
//
// Threading: the agent's loop thread only.
#pragma once

#include "agent_task.h"
#include "k8s4r/agent/state_store.h"
#include "retention.h"
#include "task_lifecycle.h"

#include <optional>
#include <string>

namespace k8s4r::agent {

class DispatchIntake {
 public:
  DispatchIntake(TaskTable& tasks, StateStore& store, TaskLifecycle& lifecycle, Retention& retention)
      : tasks_(tasks), store_(store), lifecycle_(lifecycle), retention_(retention) {}

  void on_dispatch(const std::string& payload);
  // The epoch of the replica serving this robot, from an Ack: dispatches
  // below it are refused from now on.
  void note_epoch(std::optional<std::int64_t> epoch);

  // The timestamp of the newest dispatch taken (created, answered or
  // stopped), which heartbeats echo as newestDispatch: the bridge stamps each
  // one, so a heartbeat says which dispatches it was made after.
  std::optional<Timestamp> newest_dispatch() const { return newest_dispatch_; }

 private:
  TaskTable& tasks_;
  StateStore& store_;
  TaskLifecycle& lifecycle_;
  Retention& retention_;
  std::optional<Timestamp> newest_dispatch_;
};

// task.metadata.uid of a payload that did not parse, when it can be read
// safely (a valid identifier, found without building the payload's tree).
std::optional<std::string> readable_task_uid(const std::string& payload);

}  // namespace k8s4r::agent
