// Where a Task may run, and where it should: the scheduler's decision as a
// pure function of the robots' facts and the task's needs, so every rule is
// tested from values, with no API server.
//
// A robot fits a task when it is Online, its labels match the Job's
// robotSelector, it satisfies every constraint of the task and its group,
// and it has room for the task's resources next to what its running tasks
// take. Among those, the one running fewest of the task's group (spreading a
// group), then fewest tasks, then the most free CPU, then by name. When none
// fits, the reason counts why each robot did not ("3 robots: 2 do not match
// zone=lab-a, 1 Offline"), so an operator reads it in the Task's status.
//
// Constraints are Nomad's (a Job's `constraints`: ltarget, operand, rtarget),
// over these attributes of a robot:
//   ${robot.name} ${node.unique.name}      the Robot's name
//   ${robot.labels.KEY} ${meta.KEY}        spec.labels[KEY]
//   ${attr.os} ${attr.arch} ${attr.platform} ${attr.platform.version}
//   ${attr.kernel.version} ${attr.cpu.cores} ${attr.memory.total}
//                                          from status.deviceInfo
// An ltarget without ${...} is a literal. Operands: = != (strings; != holds
// for a missing attribute), < <= > >= (numbers when both are, else strings),
// regexp (RE2 syntax, as Nomad's Go regexp; unanchored), set_contains (every
// comma-separated item of rtarget is in the attribute's comma-separated
// list), version (rtarget a comma-separated list of "OP VERSION" all of
// which the attribute's dotted version satisfies).
//
// Thread-safety: pure functions; Constraint objects are immutable once made.
#pragma once

#include "k8s4r/common/result.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace k8s4r::manager {

// One constraint, checked when it is read (a bad operand or regexp is an
// error on the Job, not a Task that never fits).
class Constraint {
 public:
  static Result<Constraint> make(std::string ltarget, std::string operand, std::string rtarget);
  bool operator()(const std::map<std::string, std::string>& attributes) const;
  // "${attr.arch} = arm64", for a reason an operator reads.
  std::string describe() const;

 private:
  struct Compiled;
  std::string ltarget_, operand_, rtarget_;
  std::shared_ptr<const Compiled> compiled_;
};

// A constraints array of a Job, a TaskGroup or a Task spec.
Result<std::vector<Constraint>> read_constraints(const nlohmann::json& constraints);

// What the scheduler knows of one robot.
struct RobotFacts {
  std::string name;
  std::string phase;                                    // status.phase: "Online" fits
  bool unschedulable = false;                           // spec.unschedulable or spec.drain: cordoned, nothing new fits
  std::map<std::string, std::string> labels;            // spec.labels
  std::map<std::string, std::string> attributes;        // the ${...} above, filled by robot_attributes
  std::optional<std::int64_t> cpu_milli, memory_bytes;  // capacity; unknown: no limit
  std::int64_t cpu_milli_used = 0, memory_bytes_used = 0;  // by its tasks not yet ended
  int tasks = 0;                                           // tasks not yet ended
  int tasks_of_group = 0;                                  // of the group being placed
  // Its value of the rollout's perLabel label already has the rollout's
  // most in flight (rollout.h): the caller's, as it counts the group's tasks.
  bool rollout_full = false;
  std::set<std::string> artifacts;  // checksums its store holds (status.artifacts.held)
  // How long since its last heartbeat (status.lastHeartbeatTime), as of the
  // decision; none without one. The caller's, as it knows the time.
  std::optional<std::chrono::nanoseconds> silent_for;
};
// The attributes and capacity of a Robot resource (its labels, name and
// deviceInfo); usage and counts are the caller's.
RobotFacts robot_facts(const nlohmann::json& robot);

struct TaskNeeds {
  std::map<std::string, std::string> selector;  // the Job's robotSelector
  std::vector<Constraint> constraints;          // the Job's, the group's and the task's
  std::int64_t cpu_milli = 0, memory_bytes = 0;
  // The checksums of the tasks' artifacts (lower-cased), each once: among
  // robots that fit, after the group's spread, each one a robot holds counts
  // as one task fewer in its load (and breaks a tie); never a requirement.
  std::vector<std::string> artifacts;
  // The shortest lostAfter of the tasks (task_liveness.h): a robot silent
  // that long is not chosen, as they would be lost there at once, and what
  // was sent to it could run when it comes back beside their replacements.
  std::optional<std::chrono::nanoseconds> lost_after;
  std::string rollout_label;  // the rollout's perLabel label (none: no such limit) and its most in flight
  int rollout_max = 0;
};

struct Placement {
  std::optional<std::string> robot;  // none: nothing fits, `why` says why
  std::string why;
  std::size_t artifacts_held = 0;    // of needs.artifacts, on the robot chosen
  std::size_t artifacts_wanted = 0;  // needs.artifacts.size()
};

Placement place(const TaskNeeds& needs, const std::vector<RobotFacts>& robots);

// What one task asks for: spec.resources cpu (milli-cores) and memory
// (bytes), 0 when not set. An Error names the field that cannot be read.
struct Resources {
  std::int64_t cpu_milli = 0, memory_bytes = 0;
};
Result<Resources> task_resources(const nlohmann::json& task_spec);

// What one replica of a TaskGroup needs, its tasks placed together on one
// robot as Nomad places an allocation (and Go K8s4r assigned a robot per
// replica): the Job's robotSelector, the group's constraints and every
// task's, and the sum of the tasks' cpu and memory. An Error names the field
// that cannot be read (a bad quantity, constraint or selector).
Result<TaskNeeds> replica_needs(const nlohmann::json& job, const nlohmann::json& task_group);

}  // namespace k8s4r::manager
