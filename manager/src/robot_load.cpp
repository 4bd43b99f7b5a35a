#include "k8s4r/manager/robot_load.h"

#include "k8s4r/crd/resources.h"

namespace k8s4r::manager {

using nlohmann::json;

void RobotLoad::observe(const json& task) {
  const crd::TaskView view = crd::read_task(task);
  const std::string key = view.namespace_ + "/" + view.name;
  std::lock_guard lock(mutex_);
  const bool ended = view.state && crd::is_terminal(*view.state);
  if (view.target_robot.empty() && !ended) {
    // Not placed as the informer sees it; an assumption made since stays.
    auto found = claims_.find(key);
    if (found != claims_.end() && !found->second.assumed) remove_locked(key);
    return;
  }
  if (ended) {
    remove_locked(key);
    return;
  }
  Claim claim;
  claim.robot = view.namespace_ + "/" + view.target_robot;
  for (const auto& owner : crd::value_at(task, {"metadata", "ownerReferences"})) {
    if (owner.is_object() && owner.value("kind", "") == "TaskGroup" && owner.value("controller", false))
      claim.group = view.namespace_ + "/" + owner.value("name", "");
  }
  if (auto resources = task_resources(crd::value_at(task, {"spec"}))) {
    claim.cpu_milli = resources.value().cpu_milli;
    claim.memory_bytes = resources.value().memory_bytes;
  }
  remove_locked(key);
  add_locked(key, Entry{std::move(claim), false});
}

void RobotLoad::forget(const std::string& task_key) {
  std::lock_guard lock(mutex_);
  remove_locked(task_key);
}

void RobotLoad::assume(const std::string& task_key, Claim claim) {
  std::lock_guard lock(mutex_);
  remove_locked(task_key);
  add_locked(task_key, Entry{std::move(claim), true});
}

std::string RobotLoad::robot_of(const std::string& task_key) const {
  std::lock_guard lock(mutex_);
  auto found = claims_.find(task_key);
  return found == claims_.end() ? "" : found->second.claim.robot;
}

void RobotLoad::fill(RobotFacts& facts, const std::string& robot_key, const std::string& group) const {
  facts.tasks = facts.tasks_of_group = 0;
  facts.cpu_milli_used = facts.memory_bytes_used = 0;
  std::lock_guard lock(mutex_);
  auto found = usage_.find(robot_key);
  if (found == usage_.end()) return;
  const Usage& usage = found->second;
  facts.tasks = usage.tasks;
  facts.cpu_milli_used = usage.cpu_milli;
  facts.memory_bytes_used = usage.memory_bytes;
  auto in_group = usage.by_group.find(group);
  facts.tasks_of_group = in_group == usage.by_group.end() ? 0 : in_group->second;
}

std::size_t RobotLoad::claims() const {
  std::lock_guard lock(mutex_);
  return claims_.size();
}

void RobotLoad::add_locked(const std::string& key, Entry entry) {
  Usage& usage = usage_[entry.claim.robot];
  ++usage.tasks;
  usage.cpu_milli += entry.claim.cpu_milli;
  usage.memory_bytes += entry.claim.memory_bytes;
  ++usage.by_group[entry.claim.group];
  claims_[key] = std::move(entry);
}

void RobotLoad::remove_locked(const std::string& key) {
  auto found = claims_.find(key);
  if (found == claims_.end()) return;
  const Claim& claim = found->second.claim;
  auto usage = usage_.find(claim.robot);
  if (usage != usage_.end()) {
    --usage->second.tasks;
    usage->second.cpu_milli -= claim.cpu_milli;
    usage->second.memory_bytes -= claim.memory_bytes;
    if (--usage->second.by_group[claim.group] == 0) usage->second.by_group.erase(claim.group);
    if (usage->second.tasks == 0) usage_.erase(usage);
  }
  claims_.erase(found);
}

}  // namespace k8s4r::manager
