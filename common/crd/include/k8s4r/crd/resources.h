// The custom resources of robot.k8s4r.io/v1alpha1 (proto-schemas/crds/) and
// the core resources the daemons write, named once, with typed reads of the
// fields the bridge and the manager act on and the pure patch builders they
// share. Reads never throw: a field of the wrong type reads as absent, since
// an object in the cache came from an API server that validated it, and one
// that did not must not stop a daemon.
//
// Thread-safety: pure functions over values.
#pragma once

#include "k8s4r/common/rfc3339.h"
#include "k8s4r/kube/client.h"
#include "k8s4r/kube/event_recorder.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace k8s4r::crd {

inline constexpr std::string_view kGroup = "robot.k8s4r.io";
inline constexpr std::string_view kVersion = "v1alpha1";
inline constexpr std::string_view kApiVersion = "robot.k8s4r.io/v1alpha1";

inline const kube::Resource kRobots{"robot.k8s4r.io", "v1alpha1", "robots", true};
inline const kube::Resource kTasks{"robot.k8s4r.io", "v1alpha1", "tasks", true};
inline const kube::Resource kTaskGroups{"robot.k8s4r.io", "v1alpha1", "taskgroups", true};
inline const kube::Resource kJobs{"robot.k8s4r.io", "v1alpha1", "jobs", true};
inline const kube::Resource kTaskCacheEntries{"robot.k8s4r.io", "v1alpha1", "taskcacheentries", true};
inline const kube::Resource kArtifactCaches{"robot.k8s4r.io", "v1alpha1", "artifactcaches", true};
using kube::kEvents;  // k8s4r/kube/event_recorder.h

// The bridge's finalizer on a Task it dispatched: the Task stays until the
// robot has stopped it (or never had it, or is gone).
inline constexpr std::string_view kBridgeFinalizer = "robot.k8s4r.io/bridge";

// The value at `path` (object keys, outermost first), or a null value when
// any step is missing or not an object. The one path walker of the daemons.
const nlohmann::json& value_at(const nlohmann::json& object, std::initializer_list<const char*> path);
// The string at `path`, or "" when it is missing or not a string.
std::string string_at(const nlohmann::json& object, std::initializer_list<const char*> path);
// The RFC 3339 time at `path`, or none when it is missing or not one.
std::optional<Timestamp> timestamp_at(const nlohmann::json& object, std::initializer_list<const char*> path);

// ---- Task ----------------------------------------------------------------------

// Task.status.state, as the CRD's enum spells it.
enum class TaskState { pending, dispatching, scheduled, running, exited, completed, failed };
std::string_view to_string(TaskState state);
std::optional<TaskState> parse_task_state(std::string_view text);
inline bool is_terminal(TaskState state) { return state == TaskState::completed || state == TaskState::failed; }

// What the daemons read of a Task.
struct TaskView {
  std::string namespace_, name, uid;
  std::string target_robot;                // spec.targetRobot
  std::optional<TaskState> state;          // status.state; absent: never set
  std::optional<std::int64_t> status_seq;  // status.statusSeq
  std::optional<Timestamp> dispatched_at;  // status.dispatchedAt
  bool deleting = false;                   // metadata.deletionTimestamp set
  bool has_bridge_finalizer = false;
};
TaskView read_task(const nlohmann::json& task);

// ---- Robot ---------------------------------------------------------------------

// Robot.status.phase. Rejected: the manager refused the robot's token.
enum class RobotPhase { pending, online, offline, unknown, rejected };
std::string_view to_string(RobotPhase phase);
std::optional<RobotPhase> parse_robot_phase(std::string_view text);

struct RobotView {
  std::string namespace_, name;
  std::optional<RobotPhase> phase;
  bool has_spec_labels = false;   // spec.labels has at least one entry
  std::optional<bool> connected;  // status.connected
};
RobotView read_robot(const nlohmann::json& robot);

// ---- Conditions ----------------------------------------------------------------

struct Condition {
  std::string type, status, reason, message;  // status: "True", "False", "Unknown"
};
// status.conditions with `condition` set: lastTransitionTime moves only when
// its status changes, as meta.SetStatusCondition does. The whole list, for a
// merge patch (which replaces lists).
nlohmann::json set_condition(const nlohmann::json& object, const Condition& condition, Timestamp now);
// The condition of `type` in status.conditions; none when absent or not an object.
std::optional<Condition> find_condition(const nlohmann::json& object, std::string_view type);

// A Task asked to stop without being deleted (its robot drained): the
// manager sets the condition, as Kubernetes sets a Pod's before evicting it;
// the bridge stops the task on its robot (or ends it, if never sent) and
// sends it no more; the manager then replaces it elsewhere.
inline constexpr std::string_view kDisruptionTarget = "DisruptionTarget";
// The DisruptionTarget condition when its status is True; none otherwise.
std::optional<Condition> stop_request(const nlohmann::json& task);
// Its reasons: the Task's robot is drained, or its rollout was aborted.
inline constexpr std::string_view kStopDrained = "Drained";
inline constexpr std::string_view kStopRolloutAborted = "RolloutAborted";
// Asked to stop by an operator's act (a drain, a rollout's abort): when such
// a Task ends, that is neither a success nor a failure of its work.
bool stopped_by_operator(const nlohmann::json& task);

// ---- Patches -------------------------------------------------------------------

// RFC 7386 merge patches composed: applying the result equals applying
// `older`, then `newer`. How a pending write takes in newer data.
nlohmann::json compose_merge_patches(nlohmann::json older, const nlohmann::json& newer);

// The merge patch that turns `current` into `wanted` (null when equal):
// objects field by field at every depth, a field `wanted` lacks as null,
// anything else whole. How a controller brings an object it owns in line.
nlohmann::json merge_patch_between(const nlohmann::json& current, const nlohmann::json& wanted);

// A JSON patch that adds `finalizer` to metadata.finalizers, guarded by a
// test of the list the cache saw, so a concurrent change fails with 422 (and
// is retried from a fresh cache) instead of being overwritten.
nlohmann::json add_finalizer_patch(const nlohmann::json& object, std::string_view finalizer);
// The same for removal; null when the object does not carry it.
nlohmann::json remove_finalizer_patch(const nlohmann::json& object, std::string_view finalizer);

// ---- Credentials ---------------------------------------------------------------

// "sha256:<64 lowercase hex digits>" of a robot's token: what the bridge
// records in Robot.status.tokenDigest and the manager compares with the
// digest of the robot's Secret. The token itself is never stored.
std::string token_digest(std::string_view token);
// "sha256:" and the lowercase hex SHA-256 of `bytes`.
std::string sha256_digest(std::string_view bytes);

}  // namespace k8s4r::crd
