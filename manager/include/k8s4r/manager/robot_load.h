// What each robot has been given and not yet finished, kept up to date from
// the Task informer's events, as kube-scheduler's cache: the scheduler reads
// a robot's load in O(1) instead of scanning Tasks per decision. A placement
// this manager has just written is "assumed" at once, so the next decision
// counts it before the informer shows it; the informer's view replaces the
// assumption when it arrives.
//
// Threading: every method may be called from any thread.
#pragma once

#include "k8s4r/manager/placement.h"
#include "k8s4r/manager/templates.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace k8s4r::manager {

struct Claim {
  std::string robot;  // namespace/name of the Robot
  std::string group;  // namespace/name of the TaskGroup
  std::int64_t cpu_milli = 0, memory_bytes = 0;
};

class RobotLoad {
 public:
  // A Task as the informer has it: its claim when it has a targetRobot and
  // has not ended, none otherwise. An assumed claim stays while the informer
  // still shows the Task without a robot (the placement not yet seen).
  void observe(const nlohmann::json& task);
  void forget(const std::string& task_key);
  void assume(const std::string& task_key, Claim claim);
  // The robot a Task is claimed on (informer or assumed); "" when none.
  std::string robot_of(const std::string& task_key) const;
  // Sets usage, task counts and tasks_of_group (for `group`) of `facts`,
  // for the robot `robot_key` (zero when it has nothing).
  void fill(RobotFacts& facts, const std::string& robot_key, const std::string& group) const;
  std::size_t claims() const;

 private:
  struct Entry {
    Claim claim;
    bool assumed = false;
  };
  struct Usage {
    int tasks = 0;
    std::int64_t cpu_milli = 0, memory_bytes = 0;
    std::map<std::string, int> by_group;
  };
  void add_locked(const std::string& key, Entry entry);
  void remove_locked(const std::string& key);

  mutable std::mutex mutex_;
  std::map<std::string, Entry> claims_;  // by Task namespace/name
  std::map<std::string, Usage> usage_;   // by Robot namespace/name
};

}  // namespace k8s4r::manager
