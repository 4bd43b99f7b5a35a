#include "k8s4r/manager/templates.h"

#include "k8s4r/common/hashing.h"
#include "k8s4r/crd/resources.h"
#include "k8s4r/manager/status_rollup.h"

#include <cctype>
#include <cstdio>
#include <set>

namespace k8s4r::manager {

using nlohmann::json;

namespace {

std::string short_hash(const std::string& text) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(Fnv1a64().update(text).value()));
  return std::string(hex, 8);
}

bool is_alnum_lower(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// Lower-cased, every character outside [a-z0-9-] a '-', no '-' at either end.
std::string tidy(const std::string& text, std::size_t limit) {
  std::string out;
  for (char c : text) {
    const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out += is_alnum_lower(lower) ? lower : '-';
  }
  if (out.size() > limit) out.resize(limit);
  while (!out.empty() && out.back() == '-') out.pop_back();
  std::size_t start = 0;
  while (start < out.size() && out[start] == '-') ++start;
  return out.substr(start);
}

json owner_reference(const json& owner, const char* kind) {
  return {{"apiVersion", std::string(crd::kApiVersion)},
          {"kind", kind},
          {"name", crd::value_at(owner, {"metadata", "name"})},
          {"uid", crd::value_at(owner, {"metadata", "uid"})},
          {"controller", true},
          {"blockOwnerDeletion", true}};
}

}  // namespace

std::string object_name(const std::vector<std::string>& parts) {
  std::string joined;
  for (const std::string& part : parts) joined += (joined.empty() ? "" : "-") + part;
  const std::string tidied = tidy(joined, 253);
  if (tidied == joined && !tidied.empty()) return joined;
  return tidy(joined, 253 - 9) + (tidy(joined, 244).empty() ? "" : "-") + short_hash(joined);
}

std::string label_value(const std::string& text) {
  const bool valid = text.size() <= 63 && (text.empty() || (std::isalnum(static_cast<unsigned char>(text.front())) &&
                                                            std::isalnum(static_cast<unsigned char>(text.back()))));
  bool characters = true;
  for (char c : text) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') characters = false;
  }
  if (valid && characters) return text;
  const std::string tidied = tidy(text, 63 - 9);
  return tidied + (tidied.empty() ? "" : "-") + short_hash(text);
}

Result<std::vector<json>> task_groups_of(const json& job) {
  const std::string job_name = crd::string_at(job, {"metadata", "name"});
  const std::string ns = crd::string_at(job, {"metadata", "namespace"});
  const json& groups = crd::value_at(job, {"spec", "taskGroups"});
  if (!groups.is_array()) return Error{"spec.taskGroups", "must be a list"};
  std::vector<json> out;
  std::set<std::string> names;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const json& group = groups[i];
    const std::string where = "spec.taskGroups[" + std::to_string(i) + "]";
    const std::string group_name = crd::string_at(group, {"name"});
    if (group_name.empty()) return Error{where + ".name", "is required"};
    const std::string name = object_name({job_name, group_name});
    if (!names.insert(name).second) return Error{where + ".name", "'" + group_name + "' names two task groups"};
    json spec = {{"jobName", job_name}, {"groupName", group_name}};
    for (const char* key : {"count", "initTasks", "tasks", "constraints", "restartPolicy", "reschedulePolicy",
                            "disconnect", "ephemeralDisk", "meta", "rollout"}) {
      if (group.is_object() && group.contains(key)) spec[key] = group[key];
    }
    // The Job's disconnect and rollout settings are its groups' defaults,
    // field by field.
    for (const char* key : {"disconnect", "rollout"}) {
      const json& defaults = crd::value_at(job, {"spec", key});
      if (!defaults.is_object()) continue;
      json merged = defaults;
      if (spec.contains(key) && spec[key].is_object()) merged.update(spec[key]);
      spec[key] = std::move(merged);
    }
    if (!spec.contains("count")) spec["count"] = 1;
    if (!spec.contains("tasks")) return Error{where + ".tasks", "is required"};
    out.push_back({{"apiVersion", std::string(crd::kApiVersion)},
                   {"kind", "TaskGroup"},
                   {"metadata",
                    {{"name", name},
                     {"namespace", ns},
                     {"labels", {{"job", label_value(job_name)}, {"groupName", label_value(group_name)}}},
                     {"ownerReferences", json::array({owner_reference(job, "Job")})}}},
                   {"spec", spec}});
  }
  return out;
}

Replica Replica::numbered(long long index) { return {std::to_string(index), "r" + std::to_string(index)}; }
Replica Replica::on_robot(const std::string& robot) { return {label_value(robot), robot}; }

Result<std::vector<json>> replica_tasks(const json& task_group, const Replica& replica, int attempt) {
  const std::string group_object = crd::string_at(task_group, {"metadata", "name"});
  const std::string ns = crd::string_at(task_group, {"metadata", "namespace"});
  const json& spec = crd::value_at(task_group, {"spec"});
  const json& templates = crd::value_at(spec, {"tasks"});
  if (!templates.is_array()) return Error{"spec.tasks", "must be a list"};
  std::set<std::string> task_names;
  for (std::size_t t = 0; t < templates.size(); ++t) {
    const std::string task_name = crd::string_at(templates[t], {"name"});
    if (task_name.empty()) return Error{"spec.tasks[" + std::to_string(t) + "].name", "is required"};
    if (!task_names.insert(task_name).second) {
      return Error{"spec.tasks[" + std::to_string(t) + "].name", "'" + task_name + "' names two tasks"};
    }
  }
  const std::string job_name = crd::string_at(spec, {"jobName"});
  std::vector<json> out;
  for (const json& task : templates) {
    const std::string task_name = crd::string_at(task, {"name"});
    json task_spec = task;
    task_spec["jobName"] = job_name;
    task_spec["taskGroupName"] = group_object;
    if (!task_spec.contains("restartPolicy") && spec.contains("restartPolicy")) {
      task_spec["restartPolicy"] = spec["restartPolicy"];
    }
    // What the group says of partitions, as each of its Tasks: the agent
    // reads it from the dispatch, the manager from the Task.
    if (spec.contains("disconnect") && spec["disconnect"].is_object()) {
      json merged = spec["disconnect"];
      if (task.contains("disconnect") && task["disconnect"].is_object()) merged.update(task["disconnect"]);
      task_spec["disconnect"] = std::move(merged);
    }
    json constraints =
        task.contains("constraints") && task["constraints"].is_array() ? task["constraints"] : json::array();
    if (const json& group = crd::value_at(spec, {"constraints"}); group.is_array()) {
      // A group's constraints spell lTarget and rTarget (Go K8s4r's
      // TaskGroup type); a Task's, ltarget and rtarget.
      for (const json& constraint : group) {
        json item = json::object();
        for (const auto& [field, value] : constraint.items())
          item[field == "lTarget" ? "ltarget" : field == "rTarget" ? "rtarget" : field] = value;
        constraints.push_back(std::move(item));
      }
    }
    if (!constraints.empty()) task_spec["constraints"] = constraints;
    std::vector<std::string> name_parts{group_object, replica.name_part, task_name};
    json labels = {{"job", label_value(job_name)},
                   {"taskgroup", label_value(group_object)},
                   {"replica", replica.label},
                   {"task", label_value(task_name)}};
    if (attempt > 0) {
      name_parts.push_back("a" + std::to_string(attempt));
      labels[kAttemptLabel] = std::to_string(attempt);
    }
    out.push_back({{"apiVersion", std::string(crd::kApiVersion)},
                   {"kind", "Task"},
                   {"metadata",
                    {{"name", object_name(name_parts)},
                     {"namespace", ns},
                     {"labels", labels},
                     {"ownerReferences", json::array({owner_reference(task_group, "TaskGroup")})}}},
                   {"spec", task_spec}});
  }
  return out;
}

Result<void> check_task_group(const json& task_group) {
  const json& count = crd::value_at(task_group, {"spec", "count"});
  if (!count.is_number_integer() || count.get<long long>() < 0 || count.get<long long>() > 10000) {
    return Error{"spec.count", "must be a whole number from 0 to 10000"};
  }
  // Every replica is made from the same templates: one tells for all.
  if (auto checked = replica_tasks(task_group, Replica::numbered(0)); !checked) return checked.error();
  return ok();
}

Result<std::vector<json>> tasks_of(const json& task_group) {
  if (auto checked = check_task_group(task_group); !checked) return checked.error();
  const json& count = crd::value_at(task_group, {"spec", "count"});
  std::vector<json> out;
  for (long long replica = 0; replica < count.get<long long>(); ++replica) {
    auto tasks = replica_tasks(task_group, Replica::numbered(replica));
    if (!tasks) return tasks.error();
    for (json& task : tasks.value()) out.push_back(std::move(task));
  }
  return out;
}

std::string key_of(const json& object) {
  return crd::string_at(object, {"metadata", "namespace"}) + "/" + crd::string_at(object, {"metadata", "name"});
}

ObjectName split_key(const std::string& key) {
  const auto slash = key.find('/');
  if (slash == std::string::npos) return {"", key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}

}  // namespace k8s4r::manager
