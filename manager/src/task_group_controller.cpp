// The TaskGroup controller. A group's slots are its replicas times its
// tasks; each slot has Tasks, oldest attempt first, and acts by its newest:
//   none             create it (placed at once when a robot fits: scheduler)
//   not yet ended    lost when its robot is gone, Offline or Rejected, or
//                    did not start it within --dispatch-timeout: marked
//                    failed (reason Lost), so its history stays
//   failed           (and, for a service job, completed) replaced by attempt
//                    n+1 after the reschedulePolicy's delay, or left failed
//                    when the policy allows no more
// Replicas: spec.count of them, numbered; for a system job one per robot
// that matches (robotSelector and constraints), created while it is Online,
// deleted when it stops matching or is deleted. Then the group's status,
// rolled up from its Tasks, is written when it changed.
#include "k8s4r/manager/manager.h"

#include "k8s4r/common/duration.h"
#include "k8s4r/crd/resources.h"
#include "k8s4r/manager/status_rollup.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

namespace k8s4r::manager {

using nlohmann::json;
using std::chrono::nanoseconds;

namespace {

int attempt_of(const json& task) {
  const std::string text = crd::string_at(task, {"metadata", "labels", kAttemptLabel});
  if (text.empty() || text.size() > 6 || !std::all_of(text.begin(), text.end(), ::isdigit)) return 0;
  return std::stoi(text);
}

// to - from, saturating: resource times span the years 1678 to 2262, whose
// distance does not fit in 64-bit nanoseconds. Never negative.
nanoseconds elapsed(Timestamp from, Timestamp to) {
  if (to <= from) return nanoseconds(0);
  std::int64_t out = 0;
  if (__builtin_sub_overflow(to.time_since_epoch().count(), from.time_since_epoch().count(), &out))
    return nanoseconds::max();
  return nanoseconds(out);
}

// time + delay, saturating (a user's "2000000h" must not wrap around).
Timestamp later_by(Timestamp time, nanoseconds delay) {
  std::int64_t out = 0;
  if (__builtin_add_overflow(time.time_since_epoch().count(), delay.count(), &out)) return Timestamp::max();
  return Timestamp(nanoseconds(out));
}

bool lists(const json& robot, const std::string& uid) {
  for (const json& running : crd::value_at(robot, {"status", "runningTasks"})) {
    if (running.is_string() && running.get<std::string>() == uid) return true;
  }
  return false;
}

}  // namespace

std::vector<Manager::Slot> Manager::slots_of(const json& task_group) const {
  std::map<std::pair<std::string, std::string>, Slot> slots;
  for (const auto& task : tasks_->by_index("owner", crd::string_at(task_group, {"metadata", "uid"}))) {
    const std::string replica = crd::string_at(*task, {"metadata", "labels", "replica"});
    const std::string name = crd::string_at(*task, {"metadata", "labels", "task"});
    Slot& slot = slots[{replica, name}];
    slot.replica = replica;
    slot.task = name;
    slot.attempts.push_back(task);
  }
  std::vector<Slot> out;
  for (auto& [key, slot] : slots) {
    std::sort(slot.attempts.begin(), slot.attempts.end(),
              [](const kube::ObjectPtr& a, const kube::ObjectPtr& b) { return attempt_of(*a) < attempt_of(*b); });
    out.push_back(std::move(slot));
  }
  return out;
}

std::optional<std::string> Manager::lost_reason(const json& task, Timestamp now, Outcome& outcome) {
  const crd::TaskView view = crd::read_task(task);
  if (view.target_robot.empty()) return std::nullopt;
  const kube::ObjectPtr robot = robots_->get(view.namespace_, view.target_robot);
  if (!robot) return "its robot " + view.target_robot + " no longer exists";
  const auto phase = crd::read_robot(*robot).phase;
  if (phase == crd::RobotPhase::offline) {
    return "its robot " + view.target_robot + " went Offline (" + crd::string_at(*robot, {"status", "message"}) + ")";
  }
  if (phase == crd::RobotPhase::rejected) return "its robot " + view.target_robot + " was rejected";
  if (view.state == crd::TaskState::running) {
    // Running, as the robot last reported; lost once the robot's own list of
    // running tasks has left it out for the grace (a list only our agent
    // sends: Go K8s4r agents send none, and are never judged by it).
    const json& listed = crd::value_at(*robot, {"status", "runningTasks"});
    const auto heartbeat = crd::timestamp_at(*robot, {"status", "lastHeartbeatTime"});
    std::lock_guard lock(mutex_);
    if (!listed.is_array() || !heartbeat || lists(*robot, view.uid)) {
      missing_since_.erase(view.uid);
      return std::nullopt;
    }
    const Timestamp first = missing_since_.emplace(view.uid, *heartbeat).first->second;
    if (elapsed(first, *heartbeat) >= config_.disconnect_grace) {
      return "its robot " + view.target_robot + " no longer runs it: its heartbeats since " + format_rfc3339(first) +
             " do not list it";
    }
    outcome.after(config_.disconnect_grace);
    return std::nullopt;
  }
  if (view.state && *view.state != crd::TaskState::dispatching && *view.state != crd::TaskState::pending)
    return std::nullopt;
  // Dispatched (or about to be) and never reported: lost only once the
  // robot has shown it does not have it, by a heartbeat after the dispatch
  // that does not list it. A robot that has it is never given a twin.
  std::optional<Timestamp> since = view.dispatched_at;
  if (!since) {
    const std::string at = crd::string_at(task, {"metadata", "annotations", kScheduledAtAnnotation});
    if (auto parsed = parse_rfc3339(at)) since = parsed.value();
  }
  if (!since) {
    outcome.after(config_.dispatch_timeout);
    return std::nullopt;
  }
  const nanoseconds waited = elapsed(*since, now);
  if (waited < config_.dispatch_timeout) {
    outcome.after(config_.dispatch_timeout - waited + std::chrono::milliseconds(100));
    return std::nullopt;
  }
  // A robot that does not list its tasks (Go K8s4r) cannot show it never
  // started one: its Tasks are lost only when it goes Offline.
  const auto heartbeat = crd::timestamp_at(*robot, {"status", "lastHeartbeatTime"});
  const bool lists_tasks = crd::value_at(*robot, {"status", "runningTasks"}).is_array();
  if (lists_tasks && heartbeat && *heartbeat > *since && !lists(*robot, view.uid)) {
    return "its robot " + view.target_robot + " did not start it within " +
           format_go_duration(config_.dispatch_timeout) + " of its dispatch at " + format_rfc3339(*since) +
           " (its heartbeat at " + format_rfc3339(*heartbeat) + " does not list it)";
  }
  outcome.after(std::chrono::seconds(10));
  return std::nullopt;
}

bool Manager::mark_lost(const json& task, const std::string& why) {
  const crd::TaskView view = crd::read_task(task);
  // Conditional on the version judged: a report that came in meanwhile wins,
  // and the Task is judged again from it.
  const json patch = {
      {"metadata", {{"resourceVersion", crd::string_at(task, {"metadata", "resourceVersion"})}}},
      {"status", {{"state", "failed"}, {"reason", "Lost"}, {"message", why}, {"finishedAt", format_rfc3339(now())}}}};
  auto written = counted("patch_status", client_.merge_patch(crd::kTasks, view.namespace_, view.name, patch, true));
  if (!written) {
    if (written.error().not_found() || written.error().conflict()) return true;  // judged again from the event
    spdlog::warn("task {}/{}: marking it lost: {}", view.namespace_, view.name, written.error().to_string());
    return false;
  }
  spdlog::warn("task {}/{} lost: {}", view.namespace_, view.name, why);
  metrics_.add("k8s4r_manager_lost_tasks_total");
  record(written.value(), "Warning", "Lost", why);
  return true;
}

Manager::Outcome Manager::reconcile_group(const std::string& key) {
  Outcome outcome;
  const auto slash = key.find('/');
  const std::string ns = key.substr(0, slash), name = key.substr(slash + 1);
  const kube::ObjectPtr group = groups_->get(ns, name);
  const auto forget_group = [&] {
    std::lock_guard lock(mutex_);
    waiting_.erase(key);
    system_groups_.erase(key);
  };
  if (!group || !crd::value_at(*group, {"metadata", "deletionTimestamp"}).is_null()) {
    forget_group();
    return outcome;
  }
  const kube::ObjectPtr job = jobs_->get(ns, crd::string_at(*group, {"spec", "jobName"}));
  bool owned = false;
  if (job) {
    for (const json& owner : crd::value_at(*group, {"metadata", "ownerReferences"}))
      owned |= owner.is_object() && owner.value("uid", "") == crd::string_at(*job, {"metadata", "uid"});
  }
  if (!job || !owned || !crd::value_at(*job, {"metadata", "deletionTimestamp"}).is_null()) {
    forget_group();
    return outcome;
  }
  std::string type = crd::string_at(*job, {"spec", "type"});
  if (type.empty()) type = "batch";
  const bool system = type == "system";
  {
    std::lock_guard lock(mutex_);
    if (system)
      system_groups_.insert(key);
    else
      system_groups_.erase(key);
  }

  auto policy = read_reschedule_policy(crd::value_at(*group, {"spec", "reschedulePolicy"}), type);
  // A system job keeps one replica on each matching robot for as long as it
  // matches: a robot that went away and came back gets its replica again,
  // however often (Nomad places system allocations whenever a node is
  // eligible); the policy's delay still applies.
  if (policy && system) policy.value().unlimited = true;
  auto needs = replica_needs(*job, *group);
  auto checked = check_task_group(*group);  // not tasks_of: a pass must not build every Task of a big group
  std::optional<Error> invalid;
  if (!policy) invalid = policy.error().within("spec.reschedulePolicy");
  if (!needs) invalid = needs.error();
  if (!checked) invalid = checked.error();
  if (invalid) {
    const json status = {{"state", "failed"}, {"statusDescription", "invalid: " + invalid->to_string()}};
    if (status_differs(*group, status)) {
      auto written =
          counted("patch_status", client_.merge_patch(crd::kTaskGroups, ns, name, {{"status", status}}, true));
      if (!written && !written.error().not_found()) outcome.failed = true;
      record(*group, "Warning", "InvalidTaskGroup", invalid->to_string());
    }
    forget_group();
    return outcome;
  }

  const Timestamp t = now();
  std::vector<Slot> slots = slots_of(*group);
  std::map<std::string, std::vector<const Slot*>> by_replica;
  for (const Slot& slot : slots) by_replica[slot.replica].push_back(&slot);

  // The replicas wanted now.
  std::vector<Replica> wanted;
  std::map<std::string, bool> may_create;  // a system replica's robot is Online and has room
  if (system) {
    TaskNeeds matching = needs.value();
    matching.cpu_milli = matching.memory_bytes = 0;
    for (RobotFacts facts : robot_facts_for(ns, key)) {
      facts.phase = "Online";  // matching ignores phase: an Offline robot keeps its replica
      if (!place(matching, {facts}).robot) continue;
      wanted.push_back(Replica::on_robot(facts.name));
    }
    for (RobotFacts& facts : robot_facts_for(ns, key)) {
      may_create[Replica::on_robot(facts.name).label] = place(needs.value(), {facts}).robot.has_value();
    }
  } else {
    const long long count = crd::value_at(*group, {"spec", "count"}).get<long long>();
    for (long long i = 0; i < count; ++i) wanted.push_back(Replica::numbered(i));
  }

  // Replicas no longer wanted (scaled down, a system robot that stopped
  // matching): their Tasks are deleted, and the bridge stops them.
  std::set<std::string> wanted_labels;
  for (const Replica& replica : wanted) wanted_labels.insert(replica.label);
  for (const auto& [replica, replica_slots] : by_replica) {
    if (wanted_labels.count(replica)) continue;
    for (const Slot* slot : replica_slots) {
      for (const kube::ObjectPtr& task : slot->attempts) {
        const crd::TaskView view = crd::read_task(*task);
        if (view.deleting) continue;
        const json options = {{"preconditions", {{"uid", view.uid}}}, {"propagationPolicy", "Background"}};
        auto removed = counted("delete", client_.remove(crd::kTasks, ns, view.name, options));
        if (!removed && !removed.error().not_found() && !removed.error().conflict()) outcome.failed = true;
        if (removed) spdlog::info("task {}/{} deleted: replica {} is no longer wanted", ns, view.name, replica);
      }
    }
  }

  int awaiting = 0, unschedulable = 0;
  std::vector<std::pair<Unplaced, std::shared_ptr<const Placement>>> writes;
  std::optional<std::vector<RobotFacts>> robots_seen;
  for (const Replica& replica : wanted) {
    auto templates = replica_tasks(*group, replica, 0);
    if (!templates) continue;  // checked above
    std::vector<Unplaced> unplaced;
    std::vector<kube::ObjectPtr> to_dispatch;
    std::string sibling_robot;
    const auto find_slot = [&](const std::string& task_name) -> const Slot* {
      auto found = by_replica.find(replica.label);
      if (found == by_replica.end()) return nullptr;
      for (const Slot* slot : found->second)
        if (slot->task == task_name) return slot;
      return nullptr;
    };
    for (std::size_t t_index = 0; t_index < templates.value().size(); ++t_index) {
      json& wanted_task = templates.value()[t_index];
      const std::string task_label = crd::string_at(wanted_task, {"metadata", "labels", "task"});
      const Slot* slot = find_slot(task_label);
      const auto add_unplaced = [&](json task, const std::string& task_key) {
        {
          std::lock_guard lock(mutex_);
          auto expected = expected_.find(task_key);
          if (expected != expected_.end()) {
            if (std::chrono::steady_clock::now() - expected->second < kExpectationTimeout) return;  // cache behind
            expected_.erase(expected);
          }
        }
        Unplaced item{task_key, std::move(task), false};
        if (auto resources = task_resources(crd::value_at(item.task, {"spec"}))) {
          item.cpu_milli = resources.value().cpu_milli;
          item.memory_bytes = resources.value().memory_bytes;
        }
        unplaced.push_back(std::move(item));
      };
      if (!slot || slot->attempts.empty()) {
        if (system && !may_create[replica.label]) continue;
        add_unplaced(wanted_task, key_of(wanted_task));
        continue;
      }
      const kube::ObjectPtr& newest = slot->attempts.back();
      const crd::TaskView view = crd::read_task(*newest);
      if (view.deleting) continue;
      if (!view.state || !crd::is_terminal(*view.state)) {
        if (auto why = lost_reason(*newest, t, outcome)) {
          if (!mark_lost(*newest, *why)) outcome.failed = true;
          continue;
        }
        const std::string robot = !view.target_robot.empty() ? view.target_robot : [&] {
          const std::string assumed = load_.robot_of(key_of(*newest));
          return assumed.empty() ? assumed : assumed.substr(assumed.find('/') + 1);
        }();
        if (robot.empty()) {
          Unplaced item{key_of(*newest), *newest, true};
          if (auto resources = task_resources(crd::value_at(*newest, {"spec"}))) {
            item.cpu_milli = resources.value().cpu_milli;
            item.memory_bytes = resources.value().memory_bytes;
          }
          unplaced.push_back(std::move(item));
        } else {
          sibling_robot = robot;
          if (!view.target_robot.empty() && (!view.state || *view.state == crd::TaskState::pending)) {
            std::lock_guard lock(mutex_);
            // Unless this manager has just written it and the cache is behind.
            if (!dispatch_expected_.count(key_of(*newest))) to_dispatch.push_back(newest);
          }
        }
        continue;
      }
      // Ended. A batch or system slot that completed is done.
      if (*view.state == crd::TaskState::completed && type != "service") continue;
      std::vector<Timestamp> earlier;
      for (const kube::ObjectPtr& attempt : slot->attempts) {
        if (attempt_of(*attempt) == 0) continue;
        if (auto created = crd::timestamp_at(*attempt, {"metadata", "creationTimestamp"})) earlier.push_back(*created);
      }
      const RescheduleDecision decision = decide_reschedule(policy.value(), earlier, t);
      if (!decision.reschedule) {
        record(*newest, "Warning", "NotRescheduled", decision.why);
        continue;
      }
      if (system && !may_create[replica.label]) {  // its robot must come back (or fit) first
        ++awaiting;
        continue;
      }
      const Timestamp ended = crd::timestamp_at(*newest, {"status", "finishedAt"})
                                  .value_or(crd::timestamp_at(*newest, {"metadata", "creationTimestamp"}).value_or(t));
      const Timestamp due = later_by(ended, decision.delay);
      if (t < due) {
        ++awaiting;
        outcome.after(std::min<nanoseconds>(elapsed(t, due), std::chrono::hours(24)) + std::chrono::milliseconds(50));
        continue;
      }
      auto replacement = replica_tasks(*group, replica, attempt_of(*newest) + 1);
      if (!replacement) continue;
      json next = replacement.value()[t_index];
      const std::string next_key = key_of(next);
      const bool already = std::any_of(slot->attempts.begin(), slot->attempts.end(),
                                       [&](const kube::ObjectPtr& a) { return key_of(*a) == next_key; });
      if (already) continue;
      ++awaiting;
      const std::string reason = crd::string_at(*newest, {"status", "reason"});
      metrics_.add("k8s4r_manager_reschedules_total",
                   {{"reason", reason == "Lost"                           ? "lost"
                               : *view.state == crd::TaskState::completed ? "completed"
                                                                          : "failed"}});
      record(*newest, "Normal", "Rescheduled",
             "replaced by " + crd::string_at(next, {"metadata", "name"}) + ": " + decision.why);
      add_unplaced(std::move(next), next_key);
    }
    if (!unplaced.empty()) {
      const std::string only_robot = system ? replica.name_part : "";
      auto placement = std::make_shared<const Placement>(
          plan_replica(*group, needs.value(), only_robot, sibling_robot, unplaced, robots_seen));
      if (!placement->robot) ++unschedulable;
      for (Unplaced& item : unplaced) writes.emplace_back(std::move(item), placement);
    }
    for (const kube::ObjectPtr& task : to_dispatch) {
      const crd::TaskView view = crd::read_task(*task);
      // Conditional on the version judged: a cache behind a report must not
      // set a running Task back to dispatching.
      const json patch = {{"metadata", {{"resourceVersion", crd::string_at(*task, {"metadata", "resourceVersion"})}}},
                          {"status", {{"state", "dispatching"}, {"message", "placed on robot " + view.target_robot}}}};
      auto written = counted("patch_status", client_.merge_patch(crd::kTasks, ns, view.name, patch, true));
      if (!written && !written.error().not_found() && !written.error().conflict()) outcome.failed = true;
    }
  }
  write_placements(writes, outcome);
  {
    std::lock_guard lock(mutex_);
    if (unschedulable)
      waiting_.insert(key);
    else
      waiting_.erase(key);
  }

  // The group's status, from its Tasks as the cache has them.
  std::vector<json> tasks;
  for (const auto& task : tasks_->by_index("owner", crd::string_at(*group, {"metadata", "uid"})))
    tasks.push_back(*task);
  json counted_group = *group;
  if (system) counted_group["spec"]["count"] = static_cast<long long>(wanted.size());
  json status = task_group_status(counted_group, tasks);
  if (awaiting > 0 && status["state"] == "failed") {
    status["state"] = "pending";
    status["statusDescription"] =
        status["statusDescription"].get<std::string>() + "; " + std::to_string(awaiting) + " being rescheduled";
  }
  if (status_differs(*group, status)) {
    auto written = counted("patch_status", client_.merge_patch(crd::kTaskGroups, ns, name, {{"status", status}}, true));
    if (!written && !written.error().not_found()) outcome.failed = true;
  }
  return outcome;
}

}  // namespace k8s4r::manager
