// Where the agent keeps its tasks' cgroups (cgroup v2): one directory per
// work dir, below the agent's own cgroup, holding one cgroup per running
// task named by its uid:
//
//   <agent's cgroup>/k8s4r-tasks.<8 hex digits of the work dir's hash>/<task uid>
//
// Under systemd that is /sys/fs/cgroup/system.slice/k8s4r-agent.service/...,
// which the unit's Delegate=yes gives to the agent. Naming the directory
// after the work dir keeps two agents in one cgroup (tests, a bench) from
// sweeping each other's tasks. What is in it and belongs to no task the agent
// holds was left by an earlier run and is killed (sweep), however its
// processes changed their sessions, groups or environment.
//
// Threading: not thread-safe; the agent's loop owns it.
#pragma once

#include "k8s4r/common/result.h"

#include <chrono>
#include <string>
#include <vector>

namespace k8s4r::agent {

class TaskCgroups {
 public:
  // The default parent for an agent on `work_dir`.
  static Result<std::string> default_parent(const std::string& work_dir);
  // Creates `parent` when missing and checks a task cgroup can be made in it
  // (by making and removing one). An Error says why cgroups cannot be used.
  static Result<TaskCgroups> open(const std::string& parent);

  const std::string& parent() const { return parent_; }
  std::string path_of(const std::string& uid) const { return parent_ + "/" + uid; }
  // An empty cgroup for the task; one left over with its name is killed and
  // removed first.
  Result<std::string> create(const std::string& uid);
  // The names of the task cgroups present.
  std::vector<std::string> list() const;
  // Kills every process in the task's cgroup and removes it, waiting at most
  // `wait` for them to be gone.
  Result<void> destroy(const std::string& uid, std::chrono::milliseconds wait);
  // True when `pid` is in one of these task cgroups (or below).
  bool holds(int pid) const;

 private:
  explicit TaskCgroups(std::string parent) : parent_(std::move(parent)) {}
  std::string parent_;
};

}  // namespace k8s4r::agent
