// What phase a Robot should be in, as a pure function of the Robot, the
// digest of the token in its Secret, the policy and the time: the Robot
// controller's whole decision, tested from values.
//
// Approval. With `require_token` (the default), a robot is approved when
// the SHA-256 digest of the token in its Secret (k8s4r-robot-<robot id>,
// key `token`) equals status.tokenDigest, which the bridge recorded from the
// robot's registration; no token is ever stored in a resource. A robot
// without a Secret stays Pending (and says which Secret it waits for); one
// that registered without a token, or with another one, is Rejected, and
// approved again once its Secret and its registration agree (a rotated
// Secret, a robot that registers again). A Robot whose registration is not
// recorded yet (the bridge creates it, then writes its status) stays
// Pending: it is judged on its token once it has presented one or none.
// Without `require_token` every robot is approved (the manager warns at
// start).
//
// Liveness, for an approved robot: Online while its lastHeartbeatTime is
// younger than `offline_after` and its Connected condition has not been
// False for `disconnect_grace`; Offline otherwise, and Online again on the
// next heartbeat. A Go K8s4r agent sends no presence: no Connected
// condition, heartbeats alone.
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/common/rfc3339.h"
#include "k8s4r/crd/resources.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <string>

namespace k8s4r::manager {

struct RobotPolicy {
  bool require_token = true;
  std::chrono::nanoseconds offline_after = std::chrono::seconds(90);
  std::chrono::nanoseconds disconnect_grace = std::chrono::seconds(30);
};

struct RobotVerdict {
  crd::RobotPhase phase = crd::RobotPhase::pending;
  std::string message;  // for status.message and the Event; names times, never ages (stable)
  // When the verdict changes with time alone (a heartbeat growing old, a
  // disconnection outlasting its grace): look again then. None: only a
  // change of the Robot or its Secret changes it.
  std::optional<std::chrono::nanoseconds> recheck_after;
};

// `secret_digest`: crd::token_digest of the token in the robot's Secret;
// none when it has no Secret (or one without a `token`).
RobotVerdict judge_robot(const nlohmann::json& robot, const std::optional<std::string>& secret_digest,
                         const RobotPolicy& policy, Timestamp now);

// The merge patch that records `verdict` (phase and message), or null when
// the Robot already says it.
nlohmann::json robot_verdict_patch(const nlohmann::json& robot, const RobotVerdict& verdict);

}  // namespace k8s4r::manager
