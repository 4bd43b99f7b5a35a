#include "k8s4r/manager/status_rollup.h"

#include "k8s4r/crd/resources.h"
#include "k8s4r/manager/rollout.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace k8s4r::manager {

using nlohmann::json;

namespace {

struct Counts {
  int total = 0, pending = 0, dispatching = 0, running = 0, succeeded = 0, failed = 0;
  bool all_ended() const { return total > 0 && succeeded + failed == total; }
};

long long integer(const json& object, std::initializer_list<const char*> path, long long otherwise) {
  const json& value = crd::value_at(object, path);
  return value.is_number_integer() ? value.get<long long>() : otherwise;
}

long long attempt_of(const json& task) {
  const std::string attempt = crd::string_at(task, {"metadata", "labels", kAttemptLabel});
  long long value = 0;
  for (char c : attempt) {
    if (c < '0' || c > '9' || value > 1'000'000) return 0;
    value = value * 10 + (c - '0');
  }
  return value;
}

void count(Counts& counts, const json& task) {
  ++counts.total;
  const std::string state = crd::string_at(task, {"status", "state"});
  if (state == "completed" || (state == "exited" && integer(task, {"status", "exitCode"}, 1) == 0)) {
    ++counts.succeeded;
  } else if (state == "failed" || state == "exited") {
    ++counts.failed;
  } else if (state == "running") {
    ++counts.running;
  } else if (state == "dispatching" || state == "scheduled" || !crd::string_at(task, {"spec", "targetRobot"}).empty()) {
    ++counts.dispatching;
  } else {
    ++counts.pending;
  }
}

std::string sentence(const Counts& counts) {
  if (counts.total == 0) return "no tasks yet";
  std::string out;
  auto add = [&](int n, const char* what) {
    if (n == 0) return;
    out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  };
  add(counts.running, "running");
  add(counts.dispatching, "dispatching");
  add(counts.pending, "pending");
  add(counts.succeeded, "succeeded");
  add(counts.failed, "failed");
  return out + " of " + std::to_string(counts.total) + (counts.total == 1 ? " task" : " tasks");
}

json counts_json(const Counts& counts) {
  return {{"totalTasks", counts.total},
          {"pendingTasks", counts.pending + counts.dispatching},
          {"runningTasks", counts.running},
          {"succeededTasks", counts.succeeded},
          {"failedTasks", counts.failed}};
}

}  // namespace

json task_group_status(const json& task_group, const std::vector<json>& tasks) {
  // The newest Task of each slot (replica, task).
  std::map<std::pair<std::string, std::string>, const json*> slots;
  for (const json& task : tasks) {
    const auto slot = std::pair{crd::string_at(task, {"metadata", "labels", "replica"}),
                                crd::string_at(task, {"metadata", "labels", "task"})};
    auto [at, inserted] = slots.emplace(slot, &task);
    if (!inserted && attempt_of(task) > attempt_of(*at->second)) at->second = &task;
  }
  Counts counts;
  std::map<long long, std::string> robots;  // replica -> robot
  for (const auto& [slot, task] : slots) {
    count(counts, *task);
    const std::string robot = crd::string_at(*task, {"spec", "targetRobot"});
    long long replica = -1;
    if (!slot.first.empty() && slot.first.size() < 7 &&
        std::all_of(slot.first.begin(), slot.first.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      replica = std::stoll(slot.first);
    }
    if (!robot.empty() && replica >= 0) robots.emplace(replica, robot);
  }
  const long long expected = integer(task_group, {"spec", "count"}, 1) *
                             static_cast<long long>(crd::value_at(task_group, {"spec", "tasks"}).is_array()
                                                        ? crd::value_at(task_group, {"spec", "tasks"}).size()
                                                        : 0);
  std::string state = "pending";
  if (counts.total > 0 && counts.total >= expected && counts.succeeded == counts.total) {
    state = "completed";
  } else if (counts.total >= expected && counts.all_ended()) {
    state = "failed";
  } else if (counts.running > 0) {
    state = "running";
  } else if (counts.dispatching > 0) {
    state = "scheduled";
  }
  json status = counts_json(counts);
  status["state"] = state;
  status["statusDescription"] = sentence(counts);
  json assigned = json::array();
  for (const auto& [replica, robot] : robots) assigned.push_back({{"replicaIndex", replica}, {"robotName", robot}});
  status["assignedRobots"] = assigned;
  return status;
}

void with_unplaced(json& status, int waiting, const std::string& why) {
  const std::string state = crd::string_at(status, {"state"});
  if (waiting <= 0 || state == "completed" || state == "failed") return;
  status["statusDescription"] =
      crd::string_at(status, {"statusDescription"}) + "; " + std::to_string(waiting) + " " + kWaitingToBePlaced + why;
}

void add_conditions(json& status, const json& object, const std::string& now) {
  const std::string state = crd::string_at(status, {"state"});
  const std::string sentence_text = crd::string_at(status, {"statusDescription"});
  const bool ended = state == "completed" || state == "failed";
  const json& generation = crd::value_at(object, {"metadata", "generation"});
  const std::int64_t observed = generation.is_number_integer() ? generation.get<std::int64_t>() : 0;
  const json& previous = crd::value_at(object, {"status", "conditions"});
  const auto condition = [&](const char* type, bool true_, const std::string& reason, const std::string& message) {
    const std::string value = true_ ? "True" : "False";
    std::string since = now;
    if (previous.is_array()) {
      for (const json& old : previous) {
        if (crd::string_at(old, {"type"}) == type && crd::string_at(old, {"status"}) == value &&
            !crd::string_at(old, {"lastTransitionTime"}).empty())
          since = crd::string_at(old, {"lastTransitionTime"});
      }
    }
    json made = {{"type", type},
                 {"status", value},
                 {"reason", reason},
                 {"lastTransitionTime", since},
                 {"observedGeneration", observed}};
    if (!message.empty()) made["message"] = message;
    return made;
  };
  std::string progressing = state.empty() ? "Pending" : state;
  progressing[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(progressing[0])));
  if (!ended && sentence_text.find(kWaitingToBePlaced) != std::string::npos) progressing = "Unschedulable";
  if (!ended && sentence_text.find("rollout paused: ") != std::string::npos) progressing = "RolloutPaused";
  const bool aborted = sentence_text.find(kRolloutAborted) != std::string::npos;
  if (!ended && aborted) progressing = "RolloutAborted";
  // The Job's own spec, or a group's ("task group g: invalid: ...").
  const bool invalid = sentence_text.find("invalid:") != std::string::npos;
  status["observedGeneration"] = observed;
  status["conditions"] = json::array({
      condition("Progressing", !ended, progressing, ended ? "" : sentence_text),
      condition("Complete", state == "completed", state == "completed" ? "Completed" : "NotCompleted",
                state == "completed" ? sentence_text : ""),
      condition("Failed", state == "failed",
                state == "failed" ? (invalid   ? "Invalid"
                                     : aborted ? "RolloutAborted"
                                               : "Failed")
                                  : "NotFailed",
                state == "failed" ? sentence_text : ""),
  });
}

bool status_differs(const json& object, const json& status) {
  const json& current = crd::value_at(object, {"status"});
  for (const auto& [field, value] : status.items()) {
    if (!current.is_object() || !current.contains(field) || current[field] != value) return true;
  }
  return false;
}

json job_status(const json& job, const std::vector<json>& task_groups) {
  Counts counts;
  json summary = json::object();
  json names = json::array();
  int completed = 0, failed = 0, active = 0;
  // Why a group made no Task (invalid, nothing fits): said on the Job too,
  // not only on the group, so `kubectl get rjob` and the Job's Event tell.
  std::vector<std::string> stuck, waiting;  // waiting: groups whose Tasks wait for a robot
  for (const json& group : task_groups) {
    names.push_back(crd::string_at(group, {"metadata", "name"}));
    const json& status = crd::value_at(group, {"status"});
    const std::string description = crd::string_at(status, {"statusDescription"});
    const std::string group_name = crd::string_at(group, {"spec", "groupName"});
    const std::string said =
        "task group " + (group_name.empty() ? crd::string_at(group, {"metadata", "name"}) : group_name) + ": ";
    // What holds it (Tasks waiting for a robot, its rollout): those clauses
    // of its sentence, not its counts (the Job's own sentence has those).
    bool held = false;
    for (std::size_t from = 0; from < description.size();) {
      std::size_t to = description.find("; ", from);
      if (to == std::string::npos) to = description.size();
      const std::string clause = description.substr(from, to - from);
      if (from > 0 && (clause.find(kWaitingToBePlaced) != std::string::npos || clause.rfind("rollout", 0) == 0)) {
        waiting.push_back(said + clause);
        held = true;
      }
      from = to + 2;
    }
    if (!held && integer(status, {"totalTasks"}, 0) == 0 && !description.empty() && description != sentence(Counts{})) {
      stuck.push_back(said + description);
    }
    Counts each;
    each.total = static_cast<int>(integer(status, {"totalTasks"}, 0));
    each.running = static_cast<int>(integer(status, {"runningTasks"}, 0));
    each.succeeded = static_cast<int>(integer(status, {"succeededTasks"}, 0));
    each.failed = static_cast<int>(integer(status, {"failedTasks"}, 0));
    each.pending = static_cast<int>(integer(status, {"pendingTasks"}, 0));
    counts.total += each.total;
    counts.running += each.running;
    counts.succeeded += each.succeeded;
    counts.failed += each.failed;
    counts.pending += each.pending;
    const std::string state = crd::string_at(status, {"state"});
    completed += state == "completed";
    failed += state == "failed";
    active += state == "running" || state == "scheduled";
    summary[group_name.empty() ? crd::string_at(group, {"metadata", "name"}) : group_name] = {
        {"queued", state == "scheduled" ? 0 : each.pending},
        {"starting", state == "scheduled" ? each.pending : 0},
        {"running", each.running},
        {"complete", each.succeeded},
        {"failed", each.failed},
        {"lost", 0}};
  }
  const json& wanted = crd::value_at(job, {"spec", "taskGroups"});
  const int expected = wanted.is_array() ? static_cast<int>(wanted.size()) : 0;
  const int groups = static_cast<int>(task_groups.size());
  std::string state = "pending";
  if (groups >= expected && groups > 0 && completed == groups) {
    state = "completed";
  } else if (groups >= expected && groups > 0 && completed + failed == groups && failed > 0) {
    state = "failed";
  } else if (active > 0) {
    state = "running";
  }
  json status = counts_json(counts);
  status["state"] = state;
  std::string description = sentence(counts);
  if (groups < expected) {
    description = "creating task groups (" + std::to_string(groups) + " of " + std::to_string(expected) + ")";
  } else if (!stuck.empty() && (counts.total == 0 || state == "failed")) {
    description.clear();
    for (const std::string& why : stuck) description += (description.empty() ? "" : "; ") + why;
  }
  if (state != "completed" && groups >= expected)
    for (const std::string& why : waiting) description += "; " + why;
  status["statusDescription"] = description;
  status["taskGroups"] = names;
  status["taskGroupSummary"] = summary;
  return status;
}

}  // namespace k8s4r::manager
