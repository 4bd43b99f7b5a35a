#include "k8s4r/manager/robot_lifecycle.h"

#include "k8s4r/crd/robot_secret.h"

#include "k8s4r/common/duration.h"
#include "k8s4r/common/rfc3339.h"

namespace k8s4r::manager {

using nlohmann::json;
using std::chrono::nanoseconds;

namespace {

// When the Connected condition turned False, if it is False.
std::optional<Timestamp> disconnected_since(const json& robot) {
  const json& conditions = crd::value_at(robot, {"status", "conditions"});
  if (!conditions.is_array()) return std::nullopt;
  for (const json& condition : conditions) {
    if (!condition.is_object() || condition.value("type", json()) != "Connected") continue;
    if (condition.value("status", json()) != "False") return std::nullopt;
    auto since = crd::timestamp_at(condition, {"lastTransitionTime"});
    return since ? since : std::optional<Timestamp>(Timestamp{});  // False since we know not when: long ago
  }
  return std::nullopt;
}

}  // namespace

RobotVerdict judge_robot(const json& robot, const std::optional<std::string>& secret_digest, const RobotPolicy& policy,
                         Timestamp now) {
  const crd::RobotView view = crd::read_robot(robot);
  const std::string secret = crd::robot_secret_name(view.name);
  const auto heartbeat = crd::timestamp_at(robot, {"status", "lastHeartbeatTime"});
  if (policy.require_token) {
    const json& presented = crd::value_at(robot, {"status", "tokenDigest"});
    // Created, its registration (token digest and first heartbeat time, one
    // status write) not yet recorded: nothing to judge, no phase to flap through.
    if (!heartbeat && !presented.is_string()) {
      return {crd::RobotPhase::pending, "waiting for its agent to register", std::nullopt};
    }
    if (!secret_digest) {
      return {crd::RobotPhase::pending,
              "waiting for Secret " + secret + " (key token) to approve it: kubectl create secret generic " + secret +
                  " --from-literal=token=<its token>",
              std::nullopt};
    }
    if (!presented.is_string() || presented.get<std::string>().empty()) {
      return {crd::RobotPhase::rejected, "it registered without a token; Secret " + secret + " holds one",
              std::nullopt};
    }
    if (presented.get<std::string>() != *secret_digest) {
      return {crd::RobotPhase::rejected, "the token it registered with is not the one in Secret " + secret,
              std::nullopt};
    }
  }
  // Registered, not yet heard from: nothing to place on it, nothing lost.
  if (!heartbeat) return {crd::RobotPhase::pending, "approved; waiting for its first heartbeat", std::nullopt};
  // Saturating: a time written in a Robot may be centuries off (1706), whose
  // distance to now does not fit in 64-bit nanoseconds.
  const nanoseconds age = elapsed(*heartbeat, now);
  if (age >= policy.offline_after) {
    return {crd::RobotPhase::offline,
            "no heartbeat since " + format_rfc3339(*heartbeat) + " (offline after " +
                format_go_duration(policy.offline_after) + ")",
            std::nullopt};
  }
  nanoseconds recheck = policy.offline_after - age;
  if (const auto since = disconnected_since(robot)) {
    const nanoseconds gone = elapsed(*since, now);
    if (gone >= policy.disconnect_grace) {
      return {crd::RobotPhase::offline,
              "its agent has been disconnected from the broker since " +
                  (since->time_since_epoch().count() == 0 ? std::string("an unknown time") : format_rfc3339(*since)) +
                  " (grace " + format_go_duration(policy.disconnect_grace) + ")",
              std::nullopt};
    }
    recheck = std::min(recheck, policy.disconnect_grace - gone);
  }
  return {crd::RobotPhase::online, policy.require_token ? "approved: its token matches Secret " + secret : "approved",
          recheck};
}

json robot_verdict_patch(const json& robot, const RobotVerdict& verdict) {
  const std::string phase(crd::to_string(verdict.phase));
  const json& current_phase = crd::value_at(robot, {"status", "phase"});
  const json& current_message = crd::value_at(robot, {"status", "message"});
  // Messages name times, never ages, so judging again writes nothing new.
  if (current_phase.is_string() && current_phase.get<std::string>() == phase && current_message.is_string() &&
      current_message.get<std::string>() == verdict.message) {
    return nullptr;
  }
  return {{"status", {{"phase", phase}, {"message", verdict.message}}}};
}

}  // namespace k8s4r::manager
