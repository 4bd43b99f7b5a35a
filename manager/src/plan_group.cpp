#include "k8s4r/manager/plan_group.h"

#include "k8s4r/common/duration.h"
#include "k8s4r/crd/resources.h"
#include "k8s4r/manager/reschedule.h"
#include "k8s4r/manager/status_rollup.h"
#include "k8s4r/manager/task_liveness.h"
#include "k8s4r/manager/templates.h"

#include <algorithm>

namespace k8s4r::manager {

using nlohmann::json;
using std::chrono::nanoseconds;

namespace {

int attempt_of(const json& task) {
  const std::string text = crd::string_at(task, {"metadata", "labels", kAttemptLabel});
  if (text.empty() || text.size() > 6 || !std::all_of(text.begin(), text.end(), ::isdigit)) return 0;
  return std::stoi(text);
}

void requeue(GroupPlan& plan, nanoseconds delay) {
  if (!plan.requeue_after || delay < *plan.requeue_after) plan.requeue_after = delay;
}

// One slot of the group (a replica's task) and its Tasks, oldest attempt first.
struct Slot {
  std::string replica, task;
  std::vector<const json*> attempts;
};

std::map<std::string, std::vector<Slot>> slots_by_replica(const std::vector<json>& tasks) {
  std::map<std::pair<std::string, std::string>, Slot> slots;
  for (const json& task : tasks) {
    const std::string replica = crd::string_at(task, {"metadata", "labels", "replica"});
    const std::string name = crd::string_at(task, {"metadata", "labels", "task"});
    Slot& slot = slots[{replica, name}];
    slot.replica = replica;
    slot.task = name;
    slot.attempts.push_back(&task);
  }
  std::map<std::string, std::vector<Slot>> out;
  for (auto& [key, slot] : slots) {
    std::sort(slot.attempts.begin(), slot.attempts.end(),
              [](const json* a, const json* b) { return attempt_of(*a) < attempt_of(*b); });
    out[slot.replica].push_back(std::move(slot));
  }
  return out;
}

// Why a Task not yet ended is lost, or none (then perhaps a time to look again).
std::optional<std::string> lost_reason(const GroupView& view, const json& task, GroupPlan& plan) {
  const crd::TaskView t = crd::read_task(task);
  LivenessInputs inputs;
  if (auto robot = view.robots.find(t.target_robot); robot != view.robots.end()) inputs.robot = &robot->second;
  inputs.now = view.now;
  inputs.dispatch_timeout = view.dispatch_timeout;
  inputs.disconnect_grace = view.disconnect_grace;
  inputs.disconnect_stop_after = view.disconnect_stop_after;
  inputs.disconnect_margin = view.disconnect_margin;
  if (auto since = view.missing_since.find(t.uid); since != view.missing_since.end())
    inputs.missing_since = since->second;
  if (auto seen = view.seen_dispatching.find(t.uid); seen != view.seen_dispatching.end())
    inputs.seen_dispatching = seen->second;
  Liveness verdict = judge_liveness(task, inputs);
  if (verdict.missing_since) plan.missing_since[t.uid] = *verdict.missing_since;
  if (verdict.seen_dispatching) plan.seen_dispatching[t.uid] = *verdict.seen_dispatching;
  if (verdict.recheck) requeue(plan, *verdict.recheck);
  return verdict.lost;
}

Unplaced unplaced(std::string key, json task, bool exists, const std::string& job_type) {
  Unplaced item{std::move(key), std::move(task), exists};
  item.job_type = job_type;
  if (auto resources = task_resources(crd::value_at(item.task, {"spec"}))) {
    item.cpu_milli = resources.value().cpu_milli;
    item.memory_bytes = resources.value().memory_bytes;
  }
  return item;
}

// What the rollout adds to the group's status: `status.rollout`, and a
// clause of the sentence; an aborted group with nothing in flight has failed.
void rollout_status(GroupPlan& plan, const json& group, const Rollout& rollout, const RolloutVerdict& verdict,
                    int held) {
  json& status = plan.status;
  if (!rollout.limits()) {
    // A rollout removed (resumed, with nothing else set): its status goes too.
    if (!crd::value_at(group, {"status", "rollout"}).is_null()) status["rollout"] = nullptr;
    return;
  }
  std::string clause;
  std::string state = "Progressing";
  if (verdict.aborted) {
    state = "Aborted";
    clause = kRolloutAborted + *verdict.aborted;
    if (verdict.not_ended > 0) clause += " (" + std::to_string(verdict.not_ended) + " not ended yet)";
    // Nothing left running (a service's replicas included): it has failed,
    // unless every task had succeeded.
    if (verdict.not_ended == 0 && status["state"] != "completed") status["state"] = "failed";
  } else if (rollout.paused) {
    state = "Paused";
    clause = "rollout paused: " + std::to_string(held) + " waiting";
  } else if (held > 0) {
    clause = "rollout: " + std::to_string(held) + " waiting";
    std::vector<std::string> limits;
    if (rollout.max_in_flight) limits.push_back("at most " + std::to_string(*rollout.max_in_flight) + " in flight");
    if (verdict.per_minute) limits.push_back(std::to_string(*verdict.per_minute) + " a minute");
    for (std::size_t i = 0; i < limits.size(); ++i) clause += (i ? ", " : " (") + limits[i];
    if (!limits.empty()) clause += ")";
  }
  if (!clause.empty()) status["statusDescription"] = status["statusDescription"].get<std::string>() + "; " + clause;
  // Every key every time (none is null): a merge patch leaves nothing stale,
  // and a status that stands is not written again.
  status["rollout"] = {{"state", state},
                       {"inFlight", verdict.in_flight},
                       {"waiting", held},
                       {"startedLastMinute", verdict.started_last_minute},
                       {"executed", verdict.executed},
                       {"succeeded", verdict.succeeded},
                       {"ratePerMinute", verdict.per_minute.value_or(0)},
                       {"message", verdict.aborted.value_or("")}};
  if (held > 0 && verdict.recheck) requeue(plan, *verdict.recheck);
}

}  // namespace

GroupPlan plan_group(const GroupView& view) {
  GroupPlan plan;
  const json& group = view.group;
  const json& job = view.job;
  if (group.is_null() || !crd::value_at(group, {"metadata", "deletionTimestamp"}).is_null()) {
    plan.gone = true;
    return plan;
  }
  bool owned = false;
  if (!job.is_null()) {
    for (const json& owner : crd::value_at(group, {"metadata", "ownerReferences"}))
      owned |= owner.is_object() && owner.value("uid", "") == crd::string_at(job, {"metadata", "uid"});
  }
  if (job.is_null() || !owned || !crd::value_at(job, {"metadata", "deletionTimestamp"}).is_null()) {
    plan.gone = true;
    return plan;
  }
  std::string type = crd::string_at(job, {"spec", "type"});
  if (type.empty()) type = "batch";
  plan.system = type == "system";

  auto policy = read_reschedule_policy(crd::value_at(group, {"spec", "reschedulePolicy"}), type);
  // A system job keeps one replica on each matching robot for as long as it
  // matches: a robot that went away and came back gets its replica again,
  // however often (Nomad places system allocations whenever a node is
  // eligible); the policy's delay still applies.
  if (policy && plan.system) policy.value().unlimited = true;
  auto needs = replica_needs(job, group);
  auto checked = check_task_group(group);  // not tasks_of: a pass must not build every Task of a big group
  auto rollout = read_rollout(crd::value_at(group, {"spec", "rollout"}));
  std::optional<Error> invalid;
  if (!rollout) invalid = rollout.error().within("spec.rollout");
  if (!policy) invalid = policy.error().within("spec.reschedulePolicy");
  if (!needs) invalid = needs.error();
  if (!checked) invalid = checked.error();
  auto references =
      checked_output_references(job, crd::value_at(group, {"spec"}), crd::string_at(group, {"spec", "groupName"}));
  if (!references) invalid = references.error();
  if (invalid) {
    plan.invalid_status = json{{"state", "failed"}, {"statusDescription", "invalid: " + invalid->to_string()}};
    plan.events.push_back({group, "Warning", "InvalidTaskGroup", invalid->to_string()});
    return plan;
  }

  // Outputs this group's tasks use: made only once their groups completed.
  std::string waiting_for;  // a group that has not completed yet
  if (!references.value().empty()) {
    std::optional<std::string> unavailable;
    for (const OutputReference& reference : references.value()) {
      const auto producer = view.producers.find(reference.group);
      if (producer == view.producers.end() || producer->second.state == ProducerOutputs::State::waiting) {
        if (waiting_for.empty()) waiting_for = reference.group;
      } else if (producer->second.state == ProducerOutputs::State::failed && !unavailable) {
        unavailable = "group " + reference.group + " failed (" + producer->second.why + ")";
      }
    }
    if (!unavailable && waiting_for.empty()) {
      // Every replica is made from the same templates: one tells for all.
      auto first = replica_tasks(group, Replica::numbered(0));
      for (json& task : first.value()) {
        if (auto whole = with_outputs(std::move(task), view.producers); !whole) {
          unavailable = whole.error().message;
          break;
        }
      }
    }
    if (unavailable && view.tasks.empty()) {
      const std::string why = "its tasks use outputs it cannot have: " + *unavailable;
      plan.invalid_status = json{{"state", "failed"}, {"statusDescription", why}};
      plan.events.push_back({group, "Warning", "OutputsUnavailable", why});
      return plan;
    }
  }

  const Timestamp t = view.now;
  const auto by_replica = slots_by_replica(view.tasks);

  // The rollout: how many Tasks may be made now (Tasks made that the cache
  // does not show yet count as in flight), or none once it aborted.
  int unseen = 0;
  const std::string prefix = key_of(group) + "-";
  for (const std::string& key : view.expected_creates) unseen += key.rfind(prefix, 0) == 0;
  const bool service_like = type == "service" || type == "system";
  RolloutVerdict verdict = judge_rollout(rollout.value(), view.tasks, t, unseen, service_like);
  // An abort stands until the rollout's spec changes (a new generation):
  // tasks that succeed after it must not lift it and start the rest.
  const json& before = crd::value_at(group, {"status"});
  if (!verdict.aborted && crd::string_at(before, {"rollout", "state"}) == "Aborted" &&
      crd::value_at(before, {"observedGeneration"}) == crd::value_at(group, {"metadata", "generation"})) {
    verdict.aborted = crd::string_at(before, {"rollout", "message"});
    verdict.may_start = 0;
  }
  int budget = verdict.may_start, held = 0;
  plan.per_label = rollout.value().per_label;
  if (verdict.aborted) {
    const std::string why = kRolloutAborted + *verdict.aborted;
    for (const json& task : view.tasks) {
      const crd::TaskView each = crd::read_task(task);
      const bool started = each.state && (*each.state == crd::TaskState::running || crd::is_terminal(*each.state));
      if (!started && !each.deleting && !crd::stop_request(task)) plan.stops.emplace_back(task, why);
    }
    if (crd::string_at(group, {"status", "statusDescription"}).find(kRolloutAborted) == std::string::npos)
      plan.events.push_back({group, "Warning", std::string(crd::kStopRolloutAborted), why});
  }

  // The replicas wanted now.
  std::vector<Replica> wanted;
  std::map<std::string, bool> may_create;  // a system replica's robot is Online and has room
  if (plan.system) {
    TaskNeeds matching = needs.value();
    matching.cpu_milli = matching.memory_bytes = 0;
    for (RobotFacts facts : view.robot_facts) {
      facts.phase = "Online";       // matching ignores phase: an Offline robot keeps its replica,
      facts.unschedulable = false;  // and cordoning: a cordoned one too (may_create makes none new there)
      if (!place(matching, {facts}).robot) continue;
      wanted.push_back(Replica::on_robot(facts.name));
    }
    for (const RobotFacts& facts : view.robot_facts) {
      may_create[Replica::on_robot(facts.name).label] = place(needs.value(), {facts}).robot.has_value();
    }
  } else {
    const long long count = crd::value_at(group, {"spec", "count"}).get<long long>();
    for (long long i = 0; i < count; ++i) wanted.push_back(Replica::numbered(i));
  }

  // Replicas no longer wanted (scaled down, a system robot that stopped
  // matching): their Tasks are deleted, and the bridge stops them.
  std::set<std::string> wanted_labels;
  for (const Replica& replica : wanted) wanted_labels.insert(replica.label);
  for (const auto& [replica, slots] : by_replica) {
    if (wanted_labels.count(replica)) continue;
    for (const Slot& slot : slots) {
      for (const json* task : slot.attempts) {
        if (!crd::read_task(*task).deleting) plan.deletes.push_back(*task);
      }
    }
  }

  for (const Replica& replica : wanted) {
    auto templates = replica_tasks(group, replica, 0);
    if (!templates) continue;  // checked above
    ReplicaPlan work;
    if (plan.system) work.only_robot = replica.name_part;
    const auto find_slot = [&](const std::string& task_name) -> const Slot* {
      auto found = by_replica.find(replica.label);
      if (found == by_replica.end()) return nullptr;
      for (const Slot& slot : found->second)
        if (slot.task == task_name) return &slot;
      return nullptr;
    };
    // Whether it is made now (or was, and the cache is behind).
    const auto add_new = [&](json task) {
      if (!references.value().empty()) {
        if (!waiting_for.empty()) return false;  // made when that group completes
        auto whole = with_outputs(std::move(task), view.producers);
        if (!whole) return false;  // said above, when the group had no Task yet
        task = std::move(whole.value());
      }
      std::string key = key_of(task);
      if (view.expected_creates.count(key)) return true;  // made already; the cache is behind
      if (budget <= 0) {                                  // the rollout's: made when it allows
        ++held;
        return false;
      }
      --budget;
      work.tasks.push_back(unplaced(std::move(key), std::move(task), false, type));
      return true;
    };
    for (std::size_t index = 0; index < templates.value().size(); ++index) {
      json& wanted_task = templates.value()[index];
      const Slot* slot = find_slot(crd::string_at(wanted_task, {"metadata", "labels", "task"}));
      if (!slot || slot->attempts.empty()) {
        if (plan.system && !may_create[replica.label]) continue;
        add_new(std::move(wanted_task));
        continue;
      }
      const json& newest = *slot->attempts.back();
      const crd::TaskView current = crd::read_task(newest);
      if (current.deleting) continue;
      if (!current.state || !crd::is_terminal(*current.state)) {
        if (auto why = lost_reason(view, newest, plan)) {
          plan.lost.emplace_back(newest, *why);
          continue;
        }
        // Not started, and the rollout aborted (they are asked to stop) or
        // paused: neither placed nor sent.
        if ((verdict.aborted || rollout.value().paused) &&
            (!current.state || *current.state == crd::TaskState::pending)) {
          if (!verdict.aborted) ++held;  // waits for the resume
          continue;
        }
        std::string robot = current.target_robot;
        if (robot.empty()) {
          auto assumed = view.assumed_robots.find(key_of(newest));
          if (assumed != view.assumed_robots.end()) robot = assumed->second.substr(assumed->second.find('/') + 1);
        }
        if (robot.empty()) {
          work.tasks.push_back(unplaced(key_of(newest), newest, true, type));
          continue;
        }
        work.sibling_robot = robot;
        // Unless this manager has just set it dispatching and the cache is behind.
        // Nor one asked to stop (its robot drained): the bridge ends it.
        if (!current.target_robot.empty() && (!current.state || *current.state == crd::TaskState::pending) &&
            !view.expected_dispatches.count(key_of(newest)) && !crd::stop_request(newest)) {
          plan.dispatches.push_back(newest);
        }
        continue;
      }
      // Ended. A batch or system slot that completed is done; after an
      // aborted rollout, every slot is.
      if (*current.state == crd::TaskState::completed && type != "service") continue;
      if (verdict.aborted) continue;
      if (auto why = fails_on_any_robot(newest)) {
        plan.events.push_back({newest, "Warning", "NotRescheduled", *why});
        continue;
      }
      // Stopped because its robot was drained (robot_drain.h): moved at once,
      // and no attempt of the policy's (an operator's act, not a failure);
      // unless the policy allows none. Nor is a move counted later.
      // So is one a rollout's abort cancelled, once the abort is undone: it
      // never failed either.
      const bool drained = crd::stopped_by_operator(newest);
      const bool cancelled = drained && crd::stop_request(newest)->reason == crd::kStopRolloutAborted;
      std::vector<Timestamp> earlier;
      for (std::size_t i = 0; i < slot->attempts.size(); ++i) {
        const json* attempt = slot->attempts[i];
        if (attempt_of(*attempt) == 0 || (i > 0 && crd::stopped_by_operator(*slot->attempts[i - 1]))) continue;
        if (auto created = crd::timestamp_at(*attempt, {"metadata", "creationTimestamp"})) earlier.push_back(*created);
      }
      RescheduleDecision decision = decide_reschedule(policy.value(), earlier, t);
      if (cancelled) {
        decision = {true, nanoseconds(0), "made again: its rollout's abort was undone (not counted)"};
      } else if (drained) {
        const bool none = !policy.value().unlimited && policy.value().attempts == 0;
        decision = {!none, nanoseconds(0),
                    none ? "not moved off its drained robot: its reschedulePolicy allows no reschedule (attempts 0)"
                         : "moved off its drained robot (not counted against its reschedulePolicy)"};
      }
      if (!decision.reschedule) {
        plan.events.push_back({newest, "Warning", "NotRescheduled", decision.why});
        continue;
      }
      if (plan.system && !may_create[replica.label]) {  // its robot must come back (or fit) first
        ++plan.awaiting;
        continue;
      }
      const Timestamp ended = crd::timestamp_at(newest, {"status", "finishedAt"})
                                  .value_or(crd::timestamp_at(newest, {"metadata", "creationTimestamp"}).value_or(t));
      const Timestamp due = later_by(ended, decision.delay);
      if (t < due) {
        ++plan.awaiting;
        requeue(plan, std::min<nanoseconds>(elapsed(t, due), std::chrono::hours(24)) + std::chrono::milliseconds(50));
        continue;
      }
      auto replacement = replica_tasks(group, replica, attempt_of(newest) + 1);
      if (!replacement) continue;
      json next = replacement.value()[index];
      const std::string next_key = key_of(next);
      const bool already = std::any_of(slot->attempts.begin(), slot->attempts.end(),
                                       [&](const json* a) { return key_of(*a) == next_key; });
      if (already) continue;
      ++plan.awaiting;
      const std::string reason = crd::string_at(newest, {"status", "reason"});
      const std::string next_name = crd::string_at(next, {"metadata", "name"});
      if (!add_new(std::move(next))) continue;  // held by the rollout: said when it is made
      plan.reschedules.push_back(cancelled                                     ? "cancelled"
                                 : drained                                     ? "drained"
                                 : reason == "Lost"                            ? "lost"
                                 : *current.state == crd::TaskState::completed ? "completed"
                                                                               : "failed");
      plan.events.push_back({newest, "Normal", "Rescheduled", "replaced by " + next_name + ": " + decision.why});
    }
    if (!work.tasks.empty()) plan.placements.push_back(std::move(work));
  }

  // The group's status, from its Tasks as the cache has them.
  json counted_group = group;
  if (plan.system) counted_group["spec"]["count"] = static_cast<long long>(wanted.size());
  plan.status = task_group_status(counted_group, view.tasks);
  if (!waiting_for.empty() && plan.status["state"] == "pending") {
    plan.status["statusDescription"] =
        "waiting for group " + waiting_for + " to complete: its tasks use that group's outputs";
  }
  if (plan.awaiting > 0 && plan.status["state"] == "failed") {
    plan.status["state"] = "pending";
    plan.status["statusDescription"] = plan.status["statusDescription"].get<std::string>() + "; " +
                                       std::to_string(plan.awaiting) + " being rescheduled";
  }
  rollout_status(plan, group, rollout.value(), verdict, held);
  return plan;
}

}  // namespace k8s4r::manager
