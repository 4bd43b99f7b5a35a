// Which robots this bridge serves. A single bridge (no --replica-id) serves
// every robot. A replica serves the robots of the slots the slot table gives
// it (slot_coordinator.h): it handles their messages, dispatches their
// Tasks, and stamps what it sends them with the slot's epoch; every other
// robot's messages it drops unread, for their owner has them too (with
// replica-own-subscriptions=false, or a filter left from before:
// own_subscriptions.cpp).
//
// What a robot sends while its slot changes hands is not lost: a report or
// register unanswered is sent again by its agent until the new owner
// confirms it (docs/protocol.md#ack), and the new owner reads what to
// dispatch from the Tasks themselves (status.dispatchedAt).
#include "k8s4r/bridge/bridge.h"

#include "k8s4r/crd/resources.h"

#include <spdlog/spdlog.h>

#include <future>
#include <thread>

namespace k8s4r::bridge {

bool Bridge::serves(const std::string& robot_id) const {
  // A replica whose Lease is late serves nothing, whatever it was told last:
  // another may be taking its robots over.
  return !coordinator_ || (served_[slot_of(robot_id)] != 0 && coordinator_->serving());
}

std::optional<std::int64_t> Bridge::epoch_for(const std::string& robot_id) const {
  if (!coordinator_ || !coordinator_->serving()) return std::nullopt;
  const std::int64_t epoch = served_[slot_of(robot_id)];
  return epoch != 0 ? std::optional<std::int64_t>(epoch) : std::nullopt;
}

std::optional<Bridge::Fence> Bridge::fence_for(const std::string& robot_id) const {
  if (!coordinator_) return Fence{};
  const auto epoch = epoch_for(robot_id);
  if (!epoch) return std::nullopt;
  return Fence{epoch};
}

bool Bridge::select_caches(const ServedSlots& slots, bool wait) {
  const std::string selector = slot_selector(slots);
  const auto robots = robots_->select(selector), tasks = tasks_->select(selector);
  if (!wait) {
    // Narrower: the caches hold at least these from now on.
    cached_slots_ = slots;
    return true;
  }
  const auto deadline = std::chrono::steady_clock::now() + config_.replica_renew_deadline;
  while (!(robots_->selected(robots) && tasks_->selected(tasks))) {
    if (leaving_ || std::chrono::steady_clock::now() > deadline) return false;  // asked again at the next poll
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  cached_slots_ = slots;  // only once listed
  return true;
}

bool Bridge::serve_from_coordinator(const ServedSlots& slots) {
  // Slots lost are let go first (a hand-over waits on it); slots gained are
  // served only once their Robots and Tasks are cached.
  ServedSlots kept = slots, wider = slots;
  bool gains = false;
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    if (slots[slot] != 0 && cached_slots_[slot] == 0) {
      gains = true;
      kept[slot] = 0;
    }
    if (wider[slot] == 0) wider[slot] = cached_slots_[slot];
  }
  if (gains) {
    if (!serve_in_loop(kept)) return false;
    if (!select_caches(wider, true)) return false;
  }
  if (!serve_in_loop(slots)) return false;
  serving_slots_ = slots;
  return true;
}

void Bridge::narrow_caches() {
  // Slots no longer served leave the caches once no write of this bridge to
  // their objects waits (the writer finds a Task's robot, and the object for
  // a finalizer, in the cache).
  std::vector<bool> extra(kSlots, false);
  bool any = false;
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    extra[slot] = cached_slots_[slot] != 0 && serving_slots_[slot] == 0;
    any = any || extra[slot];
  }
  if (any && drained(extra)) select_caches(serving_slots_, false);
}

bool Bridge::serve_in_loop(const ServedSlots& slots) {
  auto done = std::make_shared<std::promise<void>>();
  auto served = done->get_future();
  loop_.post([this, slots, done] {
    serve_slots(slots);
    done->set_value();
  });
  // The loop may be the one shutting down (and so waiting for the
  // coordinator): a replica leaving waits for nothing.
  while (served.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    if (leaving_) return false;
  }
  try {
    served.get();
    return true;
  } catch (const std::future_error&) {
    return false;  // the loop ended before it ran
  }
}

bool Bridge::drained(const std::vector<bool>& slots) const {
  // The coordinator's thread: the writer and the informers' caches are safe
  // to read from any thread.
  return !writer_->any_pending([&](const ObjectRef& ref) {
    if (ref.resource.plural == crd::kRobots.plural) return static_cast<bool>(slots[slot_of(ref.name)]);
    if (ref.resource.plural != crd::kTasks.plural) return false;
    const kube::ObjectPtr task = tasks_->get(ref.namespace_, ref.name);
    const std::string robot = task ? crd::read_task(*task).target_robot : "";
    return !robot.empty() && slots[slot_of(robot)];
  });
}

void Bridge::serve_slots(const ServedSlots& slots) {
  if (stopping_) return;
  ServedSlots before = std::exchange(served_, slots);
  std::size_t gained = 0, lost = 0;
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    gained += before[slot] == 0 && slots[slot] != 0;
    lost += before[slot] != 0 && slots[slot] == 0;
  }
  metrics_.set("k8s4r_bridge_slots_served", {},
               static_cast<double>(std::count_if(slots.begin(), slots.end(), [](auto e) { return e != 0; })));
  if (lost > 0) {
    // What waits for a robot's next write slot is written now: its new owner
    // starts with no memory of it.
    for (auto robot = robot_memory_.begin(); robot != robot_memory_.end();) {
      if (served_[slot_of(robot->first)] != 0) {
        ++robot;
        continue;
      }
      if (robot->second.unwritten) write_heartbeat(robot->first, "handover");
      for (auto timer : {robot->second.flush_timer, robot->second.resync_timer})
        if (timer) loop_.cancel(timer);
      robot = robot_memory_.erase(robot);
    }
    for (auto task = task_memory_.begin(); task != task_memory_.end();) {
      const kube::ObjectPtr cached = tasks_->get_by_uid(task->first);
      const std::string robot = cached ? crd::read_task(*cached).target_robot : "";
      if (robot.empty() || served_[slot_of(robot)] != 0) {
        ++task;
        continue;
      }
      for (auto timer : {task->second.resend_timer, task->second.delete_timer})
        if (timer) loop_.cancel(timer);
      task = task_memory_.erase(task);
    }
  }
  if (gained > 0 && mqtt_connected_) {
    // Dispatches due in the gained slots go out under the new epoch; what the
    // last owner sent and recorded (status.dispatchedAt) is resent only when due.
    for (const auto& task : tasks_->list()) {
      const std::string robot = crd::read_task(*task).target_robot;
      const std::uint32_t slot = robot.empty() ? 0 : slot_of(robot);
      if (!robot.empty() && before[slot] == 0 && slots[slot] != 0) reconcile_task(task);
    }
    for (const auto& robot : robots_->list()) {
      const std::string name = crd::read_robot(*robot).name;
      const std::uint32_t slot = slot_of(name);
      if (before[slot] == 0 && slots[slot] != 0) send_prefetch(name, false);
    }
    // The broker's logins of the gained slots, whole, under the new epoch:
    // the last owner's can no longer change them.
    std::vector<std::uint32_t> gained_slots;
    for (std::uint32_t slot = 0; slot < kSlots; ++slot)
      if (before[slot] == 0 && slots[slot] != 0) gained_slots.push_back(slot);
    logins_on_slots_gained(gained_slots);
  }
  // The broker sends this replica what its robots send, and no more.
  if (gained > 0 || lost > 0) follow_served_slots(gained > 0);
  // Epochs that changed for slots kept (a reclaim): nothing to redo; the
  // next message to each robot carries the new one.
  spdlog::info("replica {}: now serves {} more and {} fewer slot(s)", config_.replica_id, gained, lost);
}

}  // namespace k8s4r::bridge
