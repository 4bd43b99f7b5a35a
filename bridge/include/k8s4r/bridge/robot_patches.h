// Register, heartbeat and presence messages as writes on a Robot: pure
// functions from a message, the cached Robot (null when there is none) and
// the bridge's clock to the object to create and the merge patches to send.
// Nothing here reads a token back out: only its digest is written.
#pragma once

#include "k8s4r/bridge/refusal.h"
#include "k8s4r/common/messages.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace k8s4r::bridge {

// A robot may register unless its Robot is Rejected and it presents the
// token it was rejected for (RobotRejected), or its Robot is approved
// (Online or Offline) with another token (TokenMismatch): no register, from
// whoever can publish on its topic, changes a Robot its token proved, makes
// it Rejected or costs it its login. A Rejected robot with another token (a
// rotated Secret's) is written, so the manager judges the new token; it is
// still answered as Rejected until then.
Decision<void> may_register(const nlohmann::json* robot, const Register& message);

// A heartbeat that carries a token counts only with the one the Robot
// registered with (its digest in status.tokenDigest); on the shared legacy
// topic, where any client can name any robot, it must carry it. Otherwise
// TokenMismatch, and nothing changes: a forged heartbeat cannot say the
// robot's tasks are gone. k8s4r-agent sends no token in heartbeats, on its
// own topic, which the broker's ACL binds to its login.
Decision<void> may_heartbeat(const nlohmann::json& robot, const Heartbeat& message, bool own_topic);

// The Robot to create for a robot that has none: name and spec.robotId the
// robot id, the agent's labels as spec.labels, its slot as the label
// robot.k8s4r.io/slot (common/slots.h).
nlohmann::json new_robot(const Register& message, const std::string& namespace_);

// What a register changes on an existing Robot: spec.labels from the agent
// when the Robot's spec has none (an operator's labels are never
// overwritten), and the slot label when it is missing or wrong; null when
// nothing.
nlohmann::json register_robot_patch(const Register& message, const nlohmann::json& robot);

// status: phase Pending when the Robot has none yet (the manager approves),
// lastHeartbeatTime, agentVersion, deviceInfo, runningTasks, tokenDigest
// (sha256 of the token; never the token), connected and its condition.
nlohmann::json register_status_patch(const Register& message, const nlohmann::json* robot, Timestamp now);

// What of a heartbeat the manager or an operator acts on: a change in any of
// these is written at once; the rest (the time, usage figures) waits for
// the robot's next write slot.
inline constexpr std::string_view kNoArtifacts = "-";
struct HeartbeatFacts {
  std::vector<std::string> running_tasks;  // sorted
  std::vector<std::string> ended_tasks;    // sorted: ended, their end not yet confirmed to the robot
  bool ended_tasks_truncated = false;
  std::string capacity;       // capacity_text of the device info; "" when none was sent
  bool connected = false;     // the Robot says connected
  std::string storage_error;  // "REASON: message" while the agent cannot store its state
  // The fingerprint of the artifacts the Robot lists (status.artifacts);
  // kNoArtifacts when it lists none (an agent without a store, a Go K8s4r
  // agent); "" from a heartbeat that names a fingerprint without its list:
  // the caller knows whether that is what the Robot holds.
  std::string artifacts_fingerprint;
  bool operator==(const HeartbeatFacts&) const = default;
};
HeartbeatFacts facts_of(const Heartbeat& message);
// From a Robot as the API holds it, or as the bridge caches it (where
// status.deviceInfo is already its capacity_text).
HeartbeatFacts facts_of_robot(const nlohmann::json& robot);

// What a Robot's status.prefetch (written by the manager from the
// ArtifactCache resources that match it) asks the robot to keep, as the
// message the robot reads; entries that are not valid are left out.
Prefetch prefetch_of_robot(const nlohmann::json& robot, Timestamp now);

// status.lastHeartbeatTime; none when absent or not a time (a Robot just
// created has no status until its first status write lands).
std::optional<Timestamp> last_heartbeat_of(const nlohmann::json& robot);

// The device facts a scheduler and an operator act on (hostname, platform,
// cores, CPU model, memory total; not usage, uptime or timestamps) as
// canonical JSON text, so two are compared as strings and kept in a few
// hundred bytes; "" when `device_info` is not an object.
std::string capacity_text(const nlohmann::json& device_info);

// status: lastHeartbeatTime, runningTasks, endedTasks (and
// endedTasksTruncated), deviceInfo when sent, the
// Connected condition when the Robot does not say connected (Go K8s4r
// agents send no presence), and the StorageReady condition: False with the
// agent's reason while its heartbeats carry storageError, True once they
// stop (never added while storage has not failed).
nlohmann::json heartbeat_status_patch(const Heartbeat& message, const nlohmann::json& robot, Timestamp now);

// status.connected and the Connected condition (reason Online, or LastWill
// when the broker published the agent's will).
nlohmann::json presence_status_patch(const Presence& message, const nlohmann::json& robot, Timestamp now);

// The answer on k8s4r/robots/{id}/response.
RegisterResponse register_response(const std::string& robot_id, bool success, const std::string& message,
                                   const nlohmann::json* robot);

}  // namespace k8s4r::bridge
