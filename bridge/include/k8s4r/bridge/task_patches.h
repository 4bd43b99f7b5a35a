// A task status report as a write on its Task: a pure function from the
// report, the cached Task and what the bridge itself applied last (its
// writes may not be in the cache yet) to the /status merge patch and the
// Kubernetes Event that tells the story in `kubectl describe`.
#pragma once

#include "k8s4r/bridge/refusal.h"
#include "k8s4r/common/messages.h"
#include "k8s4r/crd/resources.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace k8s4r::bridge {

// What the bridge applied to a Task in this run, newer than its cache.
struct AppliedStatus {
  std::optional<std::int64_t> seq;
  std::optional<crd::TaskState> state;

  // The Task's state as the bridge knows it: what it applied, until the
  // cache has caught up with it (its statusSeq as high); then the cache's,
  // which also holds what others wrote since (the manager marking it lost).
  std::optional<crd::TaskState> state_or(const crd::TaskView& cached) const {
    if (!state) return cached.state;
    if (seq && cached.status_seq && *cached.status_seq >= *seq) return cached.state;
    return state;
  }
};

struct TaskEvent {
  std::string type;    // Normal or Warning
  std::string reason;  // Started, Restarted, Completed, Failed, Timeout, Cancelled, EndedOnRobot
  std::string message;
};

struct StatusWrite {
  nlohmann::json status_patch;    // {"status": {...}}
  std::vector<TaskEvent> events;  // in the order they happened
  crd::TaskState state;
  std::optional<std::int64_t> seq;
};

// What a report comes to, and when its robot is told (docs/protocol.md#ack).
struct ReportVerdict {
  enum class Kind {
    write,         // write `write` into the Task; confirmed once the write is in
    recorded,      // the Task already holds it (a seq as high, or the same end): confirmed now
    after_writes,  // this bridge is writing a seq as high: confirmed once that write is in
    refused,       // never to be recorded: `refusal` says why, and the robot is told so
  };
  Kind kind = Kind::write;
  StatusWrite write;
  Refusal refusal;  // refused; for recorded and after_writes, why nothing is written (for the log)
};

// Refused: from a robot the Task is not assigned to (WrongRobot); a
// running report for a Task already completed or failed (TaskFinished).
// Not written, but recorded: a seq not above the last applied (StaleSeq),
// and an end reported again for a Task that ended. The true end of a Task
// the manager marked Lost (its robot was out of contact) is written beside
// its state, in status.endOnRobot, with an EndedOnRobot Event: the Task
// stays failed (Lost) and its replacement is not disturbed.
ReportVerdict judge_report(const TaskStatus& report, const nlohmann::json& task, const AppliedStatus& applied);

// A core/v1 Event on the Task. Its name is derived from the Task, the
// report's seq (or time) and the reason, so a retried create is the same
// Event (409 AlreadyExists), never a second one.
nlohmann::json task_event(const nlohmann::json& task, const TaskEvent& event, const TaskStatus& report, Timestamp now);

}  // namespace k8s4r::bridge
