// The Robot controller: each Robot's phase and message from judge_robot
// (approval by the digest of its Secret's token, liveness by heartbeat and
// the Connected condition), written when it changes, with an Event; looked
// at again when time alone would change the verdict. The groups with Tasks
// on a robot that changed phase are enqueued by the Robot informer's
// handler, so a robot going Offline reaches its Tasks. A drained robot's
// tasks are asked to stop (drain_controller.cpp).
#include "k8s4r/manager/manager.h"

#include "k8s4r/crd/resources.h"
#include "k8s4r/crd/robot_secret.h"

#include <spdlog/spdlog.h>

namespace k8s4r::manager {

using nlohmann::json;

std::optional<std::string> Manager::secret_digest(const std::string& namespace_, const std::string& robot) const {
  const kube::ObjectPtr secret = secrets_->get(namespace_, crd::robot_secret_name(robot));
  if (!secret) return std::nullopt;
  // The Secret must name this robot: a Secret of the right name made for
  // another robot (or by someone who cannot label) approves nothing.
  const auto token = crd::robot_secret_token(*secret, robot);
  if (!token) return std::nullopt;
  return crd::token_digest(*token);
}

Manager::Outcome Manager::reconcile_robot(const std::string& key) {
  Outcome outcome;
  const ObjectName object_name = split_key(key);
  const std::string &ns = object_name.namespace_, &name = object_name.name;
  const kube::ObjectPtr robot = robots_->get(ns, name);
  if (!robot) return outcome;
  const RobotVerdict verdict = judge_robot(*robot, secret_digest(ns, name), robot_policy_, now());
  if (verdict.recheck_after) outcome.after(*verdict.recheck_after + std::chrono::milliseconds(100));
  reconcile_cordon(robot, outcome);  // drain_controller.cpp
  reconcile_drain(robot, outcome);
  const json patch = robot_verdict_patch(*robot, verdict);
  if (patch.is_null()) return outcome;
  auto written = counted("patch_status", client_.merge_patch(crd::kRobots, ns, name, patch, true));
  if (!written) {
    if (written.error().not_found()) return outcome;
    spdlog::warn("robot {}: writing phase {}: {}", key, crd::to_string(verdict.phase), written.error().to_string());
    outcome.failed = true;
    return outcome;
  }
  const auto before = crd::read_robot(*robot).phase;
  if (before != verdict.phase) {
    const std::string phase(crd::to_string(verdict.phase));
    spdlog::info("robot {}: {} ({})", key, phase, verdict.message);
    const bool bad = verdict.phase == crd::RobotPhase::offline || verdict.phase == crd::RobotPhase::rejected;
    record(written.value(), bad ? "Warning" : "Normal", "Robot" + phase, verdict.message);
  }
  return outcome;
}

}  // namespace k8s4r::manager
