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

#include <chrono>
#include <optional>
#include <string>

namespace k8s4r::agent {

class DispatchIntake {
 public:
  // Epochs are minted from a bridge replica's clock, in milliseconds since
  // 1970 (bridge/src/slot_table.cpp). One more than this far ahead of the
  // robot's own clock is not kept (the message is still taken): on a broker
  // that lets anyone publish to the robot's topics (no per-robot ACL,
  // against docs/security.md) a forged epoch near 2^53 would otherwise fence
  // out every real dispatch for good.
  static constexpr std::chrono::hours kMaxEpochLead{1};

  DispatchIntake(TaskTable& tasks, StateStore& store, TaskLifecycle& lifecycle, Retention& retention,
                 const Clock& clock)
      : tasks_(tasks), store_(store), lifecycle_(lifecycle), retention_(retention), clock_(clock) {}

  void on_dispatch(const std::string& payload);
  // The epoch of the replica serving this robot, from an Ack: dispatches
  // below it are refused from now on.
  void note_epoch(std::optional<std::int64_t> epoch);

  // The timestamp of the newest dispatch taken (created, answered or
  // stopped), which heartbeats echo as newestDispatch: the bridge stamps each
  // one, so a heartbeat says which dispatches it was made after.
  std::optional<Timestamp> newest_dispatch() const { return newest_dispatch_; }

 private:
  // Keeps `epoch` as the newest, unless it is implausibly far ahead.
  void raise_epoch(std::int64_t epoch, const char* from);

  TaskTable& tasks_;
  StateStore& store_;
  TaskLifecycle& lifecycle_;
  Retention& retention_;
  const Clock& clock_;
  std::optional<Timestamp> newest_dispatch_;
  std::optional<SteadyTime> epoch_warned_at_;
};

// task.metadata.uid of a payload that did not parse, when it can be read
// safely (a valid identifier, found without building the payload's tree).
std::optional<std::string> readable_task_uid(const std::string& payload);

}  // namespace k8s4r::agent
