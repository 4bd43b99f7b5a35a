// ArtifactCaches (artifact_caches.h): what each Robot is to keep ahead of
// need, written into its status.prefetch when it changes (the bridge tells
// the robot), and each ArtifactCache's status, rolled up from what its
// robots say they hold, with an Event when it becomes Ready or a robot fails.
#include "k8s4r/manager/manager.h"

#include "k8s4r/crd/resources.h"
#include "k8s4r/manager/artifact_caches.h"
#include "k8s4r/manager/status_rollup.h"

#include <spdlog/spdlog.h>

namespace k8s4r::manager {

using nlohmann::json;

std::vector<json> Manager::artifact_caches_of(const std::string& namespace_) const {
  std::vector<json> caches;
  for (const auto& cache : artifact_caches_->list())
    if (crd::string_at(*cache, {"metadata", "namespace"}) == namespace_) caches.push_back(*cache);
  return caches;
}

void Manager::enqueue_artifact_caches_of(const std::string& namespace_) {
  for (const auto& cache : artifact_caches_->list())
    if (crd::string_at(*cache, {"metadata", "namespace"}) == namespace_)
      artifact_cache_controller_.queue->add(key_of(*cache));
}

Manager::Outcome Manager::reconcile_prefetch(const std::string& robot_key) {
  Outcome outcome;
  const ObjectName object_name = split_key(robot_key);
  const std::string &ns = object_name.namespace_, &name = object_name.name;
  const kube::ObjectPtr robot = robots_->get(ns, name);
  if (!robot) return outcome;
  // Not from a cache that has not listed yet: every robot's list would be
  // emptied and written again (and robots let go of what they keep).
  if (!artifact_caches_->has_synced()) {
    outcome.after(std::chrono::seconds(10));
    return outcome;
  }
  const json wanted = prefetch_for_robot(*robot, artifact_caches_of(ns));
  const json& told = crd::value_at(*robot, {"status", "prefetch"});
  if (told == wanted || (told.is_null() && wanted.empty())) return outcome;
  const json patch = {{"status", {{"prefetch", wanted.empty() ? json(nullptr) : wanted}}}};
  auto written = counted("patch_status", client_.merge_patch(crd::kRobots, ns, name, patch, true));
  if (!written && !written.error().not_found()) {
    spdlog::warn("robot {}: writing what it keeps ahead of need: {}", robot_key, written.error().to_string());
    outcome.failed = true;
  } else if (written) {
    spdlog::info("robot {}: to keep {} artifact(s) ahead of need", robot_key, wanted.size());
  }
  return outcome;
}

Manager::Outcome Manager::reconcile_artifact_cache(const std::string& key) {
  Outcome outcome;
  const ObjectName object_name = split_key(key);
  const std::string &ns = object_name.namespace_, &name = object_name.name;
  const kube::ObjectPtr cache = artifact_caches_->get(ns, name);
  if (!cache) return outcome;
  std::vector<json> robots;
  for (const auto& robot : robots_->list())
    if (crd::string_at(*robot, {"metadata", "namespace"}) == ns) robots.push_back(*robot);
  const json status = artifact_cache_status(*cache, robots, now());
  if (!status_differs(*cache, status)) return outcome;
  auto written =
      counted("patch_status", client_.merge_patch(crd::kArtifactCaches, ns, name, {{"status", status}}, true));
  if (!written) {
    if (written.error().not_found()) return outcome;
    spdlog::warn("artifact cache {}: writing its status: {}", key, written.error().to_string());
    outcome.failed = true;
    return outcome;
  }
  const auto ready_before = crd::find_condition(*cache, "Ready");
  const auto ready = crd::find_condition(status.is_object() ? json{{"status", status}} : json(), "Ready");
  if (ready && ready->status == "True" && (!ready_before || ready_before->status != "True"))
    record(written.value(), "Normal", "Ready", ready->message);
  const int failed_before = crd::value_at(*cache, {"status", "failed"}).is_number_integer()
                                ? crd::value_at(*cache, {"status", "failed"}).get<int>()
                                : 0;
  if (status["failed"].get<int>() > failed_before && ready)
    record(written.value(), "Warning", "RobotFailed", ready->message);
  return outcome;
}

}  // namespace k8s4r::manager
