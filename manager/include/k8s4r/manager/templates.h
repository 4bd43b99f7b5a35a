// What a Job asks to exist, as pure functions: one TaskGroup per entry of
// spec.taskGroups, and `count` replicas of each of a TaskGroup's tasks. The
// controllers create what is missing; because every name is a function of
// the Job alone, a manager killed at any moment and started again creates
// nothing twice (a create that finds the name taken is already done).
//
// Names and labels keep the Go K8s4r manager's: a TaskGroup is
// "<job>-<group>" (Go appended a random suffix, which is what made its
// restarts create duplicates) labelled job=<job>, groupName=<group>; a Task
// is "<taskgroup>-r<replica>-<task>" labelled job, taskgroup, replica, task.
// A name part that is not valid in an object name or a label value (capital
// letters, '_', too long) is lower-cased and cut, and a short hash of the
// whole original is added, so two different Jobs never map to one name.
// Each object is owned by its parent (a controller ownerReference that
// blocks the owner's deletion), so deleting a Job removes its TaskGroups and
// their Tasks through the garbage collector.
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/common/result.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace k8s4r::manager {

// `parts` joined by '-' as a valid object name (RFC 1123 subdomain, at most
// 253 characters), as described above.
std::string object_name(const std::vector<std::string>& parts);
// `text` as a valid label value (at most 63 characters).
std::string label_value(const std::string& text);

// The TaskGroups a Job asks for. An Error names the field of the Job that
// makes them impossible (a group without a name, two with the same name).
Result<std::vector<nlohmann::json>> task_groups_of(const nlohmann::json& job);

// One replica of a TaskGroup: its label value and the part of its Tasks'
// names. A counted replica is numbered ("3", "r3"); a system job's replica
// is a robot's (its name, in both).
struct Replica {
  std::string label, name_part;
  static Replica numbered(long long index);
  static Replica on_robot(const std::string& robot);
};

// The Tasks of one replica: every field of the task template, the group's
// restartPolicy where the task has none, the group's constraints after the
// task's, jobName and taskGroupName. Attempt n > 0 is the slot's n-th
// replacement: "-a<n>" added to the name and the attempt label
// (status_rollup's kAttemptLabel) set.
Result<std::vector<nlohmann::json>> replica_tasks(const nlohmann::json& task_group, const Replica& replica,
                                                  int attempt = 0);

// Whether a TaskGroup's Tasks can be made (its count, its task templates),
// without making them all.
Result<void> check_task_group(const nlohmann::json& task_group);

// "namespace/name" of an object.
std::string key_of(const nlohmann::json& object);
// A work queue's key split back into its namespace and name.
struct ObjectName {
  std::string namespace_, name;
};
ObjectName split_key(const std::string& key);

// The Tasks a TaskGroup asks for, replica by replica (spec.count of them).
Result<std::vector<nlohmann::json>> tasks_of(const nlohmann::json& task_group);

}  // namespace k8s4r::manager
