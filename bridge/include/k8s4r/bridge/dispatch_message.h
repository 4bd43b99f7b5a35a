// A Task as the dispatch message its robot receives on
// k8s4r/robots/{robot}/tasks/dispatch: {"action":"create","task":{...}}
// with the Task's apiVersion, kind, identity and whole spec, checked with the
// agent's own codec first, so a Task the agent would refuse is refused here
// with the same words; and {"action":"delete"} naming only the Task.
#pragma once

#include "k8s4r/bridge/refusal.h"
#include "k8s4r/common/rfc3339.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace k8s4r::bridge {

// Refused with reason InvalidTask (no targetRobot, a spec the agent cannot
// run, a message over the payload limit). `sent_at` becomes its timestamp,
// the Task's status.dispatchedAt, which the robot's heartbeats echo as
// newestDispatch once it has taken it. A Task with a statusSeq (its robot
// reported on it: a resync after a register) carries it as reportedSeq, or
// `reported_seq` when that is higher (a report the cache does not show yet).
Decision<std::string> dispatch_create_payload(const nlohmann::json& task,
                                              std::optional<Timestamp> sent_at = std::nullopt,
                                              std::optional<std::int64_t> reported_seq = std::nullopt,
                                              std::optional<std::int64_t> epoch = std::nullopt);
// `epoch` (both): the sending replica's epoch for the robot's slot, which the
// agent checks (docs/protocol.md#dispatch); none from a single bridge.
std::string dispatch_delete_payload(const nlohmann::json& task, std::optional<std::int64_t> epoch = std::nullopt);

}  // namespace k8s4r::bridge
