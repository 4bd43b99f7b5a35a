// The per-robot Secret: one robot's credential, and the one place robot
// identities are managed (docs/security.md). Named k8s4r-robot-<robot id>,
// labelled robot.k8s4r.io/robot-id=<robot id>, its key `token` is the
// robot's MQTT password and the registration token the manager checks.
// The manager approves robots by its digest; the bridge makes it the
// broker's credential for the robot (dynamic security).
//
// Pure functions over JSON values.
#pragma once

#include "k8s4r/kube/client.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace k8s4r::crd {

inline constexpr const char* kRobotIdLabel = "robot.k8s4r.io/robot-id";
inline const kube::Resource kSecrets{"", "v1", "secrets", true};

std::string robot_secret_name(const std::string& robot_id);

// An informer transform: a Secret reduced to its metadata and `data.token`,
// so no other key of it is ever held in memory.
void keep_robot_secret_fields(nlohmann::json& secret);

// The robot a Secret is for: its label, when the Secret's name matches
// (k8s4r-robot-<that id>); "" otherwise. A Secret of the right name made for
// another robot, or by someone who cannot label, names no robot.
std::string robot_of_secret(const nlohmann::json& secret);

// The token of `robot_id`'s Secret (decoded), when the Secret names that
// robot and holds a non-empty token.
std::optional<std::string> robot_secret_token(const nlohmann::json& secret, const std::string& robot_id);

}  // namespace k8s4r::crd
