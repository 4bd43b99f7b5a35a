// What leaves a replica's cache: a Robot or Task deleted, its slot let go,
// or its slot label changed by hand (docs/bridge.md#replicas, "A slot label
// changed by hand"). An informer cannot tell the last from a deletion: an
// object that leaves a watch's label selection arrives as deleted, with its
// content from before. So a replica
// - labels back any object it holds whose label is not its robot's slot,
//   whichever replica's cache it came into (correct_slot_label);
// - judges a Robot that left its cache, while its slot is still served
//   here, gone only after a grace: within it a relabelled Robot comes back
//   (labelled back by its holder, or by the register its robot is told to
//   send), and its Tasks being deleted wait for their robot's word instead
//   of being released unconfirmed;
// - takes a Task that left still carrying the finalizer for not deleted (a
//   deletion completes only once no finalizer is left, and its watch event
//   then shows none): its robot is not told to stop it, and its reports are
//   left unanswered meanwhile, so its agent sends them again once the Task
//   is back, instead of refused for good.
// A single bridge selects nothing: what leaves its cache was deleted.
#include "k8s4r/bridge/bridge.h"

#include "k8s4r/crd/resources.h"

#include <spdlog/spdlog.h>

namespace k8s4r::bridge {

namespace {
// A Robot gone from the cache this long is gone; its robot's topics are
// followed as long (its next heartbeat is told to register again).
constexpr std::chrono::minutes kRobotLeftGrace{2};
// A Task that left still carrying the finalizer: its reports are left
// unanswered this long, for at most this many Tasks (then refused, as for
// a Task unknown).
constexpr std::chrono::minutes kTaskLeftMemory{10};
constexpr std::size_t kMaxTasksLeft = 10'000;
}  // namespace

void Bridge::correct_slot_label(bool robot, const kube::ObjectPtr& object) {
  if (!coordinator_ || !object) return;
  const std::string name = crd::string_at(*object, {"metadata", "name"});
  const std::string robot_id = robot ? name : crd::read_task(*object).target_robot;
  if (name.empty() || robot_id.empty()) return;  // a Task not placed yet: the scheduler labels it
  const std::string wanted = std::to_string(slot_of(robot_id));
  const std::string label = crd::string_at(*object, {"metadata", "labels", kSlotLabel.data()});
  if (label == wanted) return;
  // Every writer writes the same label, so two replicas (or the manager)
  // agree; the writer merges the writes of one object's events.
  spdlog::info("{} {}: slot label {} is not its robot's slot {}: labelling it back", robot ? "Robot" : "Task", name,
               label.empty() ? "(none)" : label, wanted);
  metrics_.add("k8s4r_bridge_slot_labels_corrected_total");
  WriteRequest request;
  request.main_patch = {{"metadata", {{"labels", {{std::string(kSlotLabel), wanted}}}}}};
  writer_->write(robot ? robot_ref(name) : task_ref(name), std::move(request));
}

void Bridge::robot_left_cache(const std::string& robot_id, const std::string& uid) {
  if (!coordinator_) return on_robot_changed(robot_id, true);
  if (served_[slot_of(robot_id)] == 0) return;  // its slot let go: no longer this replica's
  robots_left_[robot_id] = {loop_.clock().steady(), uid};
  loop_.after(kRobotLeftGrace, [this, robot_id] {
    auto left = robots_left_.find(robot_id);
    // Back, or left again since (that departure's timer judges it).
    if (stopping_ || left == robots_left_.end() || loop_.clock().steady() - left->second.at < kRobotLeftGrace) return;
    robots_left_.erase(left);
    follow_robot(robot_id);            // its topics let go
    on_robot_changed(robot_id, true);  // its memory and Tasks being deleted
  });
}

void Bridge::robot_in_cache(const std::string& robot_id, const std::string& uid) {
  auto left = robots_left_.find(robot_id);
  if (left == robots_left_.end()) return;
  // Another Robot of the same name (deleted and made again within the
  // grace): what was remembered of the one deleted goes, as at a deletion
  // (a heartbeat taken as written, the artifacts list it was sent).
  if (left->second.uid != uid) robot_memory_.erase(robot_id);
  robots_left_.erase(left);
}

bool Bridge::robot_left_lately(const std::string& robot_id) const { return robots_left_.contains(robot_id); }

bool Bridge::task_left_not_deleted(const crd::TaskView& task, bool final_state_unknown) {
  // A relist that no longer finds it hands over the last copy seen, which
  // may be older than the finalizer's removal: taken for deleted.
  if (!coordinator_ || !task.has_bridge_finalizer || final_state_unknown) return false;
  if (task.target_robot.empty() || served_[slot_of(task.target_robot)] == 0) return false;  // its slot let go
  const auto steady_now = loop_.clock().steady();
  if (tasks_left_.size() >= kMaxTasksLeft)
    std::erase_if(tasks_left_, [&](const auto& left) { return steady_now - left.second >= kTaskLeftMemory; });
  if (tasks_left_.size() < kMaxTasksLeft) tasks_left_[task.uid] = steady_now;
  spdlog::info(
      "Task {} left this replica's cache still carrying the finalizer (its slot label changed?): not "
      "taken for deleted",
      task.name);
  return true;
}

bool Bridge::task_left_lately(const std::string& uid) const {
  auto left = tasks_left_.find(uid);
  return left != tasks_left_.end() && loop_.clock().steady() - left->second < kTaskLeftMemory;
}

void Bridge::task_back_in_cache(const std::string& uid) {
  if (!tasks_left_.empty()) tasks_left_.erase(uid);
}

}  // namespace k8s4r::bridge
