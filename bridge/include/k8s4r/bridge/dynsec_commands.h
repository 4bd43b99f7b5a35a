// Robot identities as Mosquitto dynamic-security commands: pure translation.
//
// With --dynamic-security the bridge keeps one broker client per robot, made
// from the robot's Secret (crd/robot_secret.h): user name = robot id,
// password = its token, and a role of its own, k8s4r-robot-<id>, that lets it
// publish only on its own register, heartbeat, presence and task status
// topics and subscribe only to its own response, dispatch and acks topics.
// Mosquitto 2.0's roles cannot say "the client's own user name" (%u), hence
// one role per robot.
//
// The commands go to $CONTROL/dynamic-security/v1 as
// {"commands": [...]}; the plugin answers on .../response with one entry per
// command, in order, each carrying back our correlationData. A client the
// bridge made is marked by its textname; its textdescription holds the
// token's digest, so a restarted bridge can tell a rotated token from an
// unchanged one without touching (and so disconnecting) the robot. Clients
// it did not make (an admin, the bridge itself) are never changed.
//
// Deleting a client disconnects it at once, without its last will.
#pragma once

#include "k8s4r/common/result.h"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::bridge::dynsec {

inline constexpr std::string_view kCommandTopic = "$CONTROL/dynamic-security/v1";
inline constexpr std::string_view kResponseTopic = "$CONTROL/dynamic-security/v1/response";
// The textname of every client the bridge manages: kManagedMark for those
// whose role has every topic of this version. Older marks: made before
// robots answered log requests (kManagedMarkBeforeLogs), before they received
// artifacts lists too (kManagedMarkBeforeArtifacts), or before they received
// acknowledgements too (kManagedMarkBeforeAcks); their role is given the
// topics it lacks (Action::upgrade) and their mark changed.
inline constexpr std::string_view kManagedMark = "k8s4r robot (acks, artifacts, logs)";
inline constexpr std::string_view kManagedMarkBeforeLogs = "k8s4r robot (acks, artifacts)";
inline constexpr std::string_view kManagedMarkBeforeArtifacts = "k8s4r robot (acks)";
inline constexpr std::string_view kManagedMarkBeforeAcks = "k8s4r robot";

std::string role_name(const std::string& robot_id);

// What the broker should hold for a robot: absent, or a client with this
// token's digest.
struct Desired {
  std::string token;   // the credential itself, never logged
  std::string digest;  // crd::token_digest(token)
};

// A client the bridge manages, as the broker lists it.
struct Managed {
  std::string digest;            // of its token, from its textdescription; "" when unreadable
  std::string previous;          // of the token before the last rotation, "" when none
  bool current = true;           // its role has every topic (kManagedMark)
  bool lacks_acks = false;       // nor the acks topic (kManagedMarkBeforeAcks)
  bool lacks_artifacts = false;  // nor the artifacts topic (kManagedMarkBeforeArtifacts and before)
  bool operator==(const Managed&) const = default;
};

enum class Action { none, create, rotate, remove, upgrade };
const char* to_string(Action action);

// What to do for one robot.
Action decide(const std::optional<Desired>& desired, const std::optional<Managed>& managed);

// The commands of one action; every command carries `correlation`. A
// rotation records the digest it replaces (`managed`'s).
nlohmann::json commands_for(Action action, const std::string& robot_id, const std::optional<Desired>& desired,
                            const std::string& correlation, const std::optional<Managed>& managed = std::nullopt);

// {"commands":[{"command":"listClients","verbose":true,"count":-1,...}]}
nlohmann::json list_clients_command(const std::string& correlation);

struct Response {
  std::string command;
  std::string error;        // "" on success
  std::string correlation;  // our correlationData, "" when absent
  nlohmann::json data;      // listClients' data, else null
};

// Parses a response message. Refuses (with an error naming the problem)
// anything that is not {"responses":[{...}]} of objects with a string
// command; never throws.
Result<std::vector<Response>> parse_responses(const std::string& payload);

// The clients the bridge manages, from listClients (verbose) data, by robot
// id. Clients without our mark are left out; so are user names that are not
// robot ids.
Result<std::map<std::string, Managed>> managed_clients(const nlohmann::json& data);

}  // namespace k8s4r::bridge::dynsec
