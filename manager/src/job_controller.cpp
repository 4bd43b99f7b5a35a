// The Job controller: the TaskGroups a Job asks for (task_groups_of) are
// created when missing, brought in line when the Job's spec changed them,
// and deleted when the Job no longer names them; the Job's status is rolled
// up from theirs, with an Event when the Job completes or fails.
#include "k8s4r/manager/manager.h"

#include "k8s4r/common/rfc3339.h"
#include "k8s4r/crd/resources.h"
#include "k8s4r/manager/status_rollup.h"

#include <spdlog/spdlog.h>

#include <map>

namespace k8s4r::manager {

using nlohmann::json;

namespace {}  // namespace

Manager::Outcome Manager::reconcile_job(const std::string& key) {
  Outcome outcome;
  const ObjectName object_name = split_key(key);
  const std::string &ns = object_name.namespace_, &name = object_name.name;
  const kube::ObjectPtr job = jobs_->get(ns, name);
  if (!job || !crd::value_at(*job, {"metadata", "deletionTimestamp"}).is_null()) return outcome;

  auto wanted = task_groups_of(*job);
  if (!wanted) {
    json status = {{"state", "failed"}, {"statusDescription", "invalid: " + wanted.error().to_string()}};
    add_conditions(status, *job, format_rfc3339(now()));
    if (status_differs(*job, status)) {
      auto written = counted("patch_status", client_.merge_patch(crd::kJobs, ns, name, {{"status", status}}, true));
      if (!written && !written.error().not_found()) outcome.failed = true;
      record(*job, "Warning", "InvalidJob", wanted.error().to_string());
    }
    return outcome;
  }
  std::map<std::string, kube::ObjectPtr> existing;
  for (const auto& group : groups_->by_index("owner", crd::string_at(*job, {"metadata", "uid"})))
    existing[crd::string_at(*group, {"metadata", "name"})] = group;

  std::vector<json> groups;
  for (json& group : wanted.value()) {
    const std::string group_name = crd::string_at(group, {"metadata", "name"});
    auto found = existing.find(group_name);
    if (found == existing.end()) {
      auto created = counted("create", client_.create(crd::kTaskGroups, ns, group));
      if (created) {
        spdlog::info("job {}: task group {} created", key, group_name);
        groups.push_back(std::move(created.value()));
      } else if (!created.error().already_exists()) {
        spdlog::warn("job {}: creating task group {}: {}", key, group_name, created.error().to_string());
        outcome.failed = true;
      }
      continue;
    }
    const json patch = crd::merge_patch_between(crd::value_at(*found->second, {"spec"}), group["spec"]);
    if (!patch.is_null()) {
      auto patched = counted("patch", client_.merge_patch(crd::kTaskGroups, ns, group_name, {{"spec", patch}}));
      if (!patched && !patched.error().not_found()) outcome.failed = true;
      if (patched) spdlog::info("job {}: task group {} updated from the Job's spec", key, group_name);
    }
    groups.push_back(*found->second);
    existing.erase(found);
  }
  // Groups the Job no longer names.
  for (const auto& [group_name, group] : existing) {
    if (!crd::value_at(*group, {"metadata", "deletionTimestamp"}).is_null()) continue;
    auto removed =
        counted("delete", client_.remove(crd::kTaskGroups, ns, group_name, {{"propagationPolicy", "Background"}}));
    if (!removed && !removed.error().not_found()) outcome.failed = true;
    if (removed) spdlog::info("job {}: task group {} deleted: the Job no longer names it", key, group_name);
  }

  json status = job_status(*job, groups);
  add_conditions(status, *job, format_rfc3339(now()));
  if (status_differs(*job, status)) {
    auto written = counted("patch_status", client_.merge_patch(crd::kJobs, ns, name, {{"status", status}}, true));
    if (!written) {
      if (!written.error().not_found()) outcome.failed = true;
      return outcome;
    }
    const std::string before = crd::string_at(*job, {"status", "state"}), after = status["state"];
    if (before != after && (after == "completed" || after == "failed")) {
      spdlog::info("job {} {}: {}", key, after, status["statusDescription"].get<std::string>());
      record(written.value(), after == "failed" ? "Warning" : "Normal", after == "failed" ? "Failed" : "Completed",
             status["statusDescription"].get<std::string>());
    }
  }
  return outcome;
}

}  // namespace k8s4r::manager
