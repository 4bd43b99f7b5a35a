// What one TaskGroup needs done, as a pure function of what the caches show
// (the GroupView): the TaskGroup controller reads the view, plans, then
// applies the plan (task_group_controller.cpp). A group's slots are its
// replicas times its tasks; each slot has Tasks, oldest attempt first, and
// acts by its newest:
//   none             create it (placed by the scheduler when applied)
//   not yet ended    lost when its robot is gone, Offline or Rejected, did
//                    not start it within the dispatch timeout, or no longer
//                    lists it: marked failed (reason Lost), so its history
//                    stays; placed but still pending: set dispatching
//   failed           (and, for a service job, completed) replaced by attempt
//                    n+1 after the reschedulePolicy's delay, or left failed
//                    when the policy allows no more
// A group whose tasks use another group's outputs (output_references.h)
// makes its Tasks only once that group has completed, with the values
// filled in; it fails, making none, when that group failed or did not
// declare what it uses.
// Replicas: spec.count of them, numbered; for a system job one per robot
// that matches (robotSelector and constraints), created while it is Online
// and has room, deleted when it stops matching or is deleted. A rollout
// (rollout.h) bounds how many Tasks are made, first or replacement; once it
// aborts, none is, and those not started are asked to stop. Then the
// group's status, rolled up from its Tasks.
//
// Thread-safety: a pure function.
#pragma once

#include "k8s4r/common/rfc3339.h"
#include "k8s4r/manager/output_references.h"
#include "k8s4r/manager/placement.h"
#include "k8s4r/manager/rollout.h"
#include "k8s4r/manager/task_liveness.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace k8s4r::manager {

// What one reconcile of a TaskGroup sees.
struct GroupView {
  nlohmann::json group;
  nlohmann::json job;                 // null when there is none
  std::vector<nlohmann::json> tasks;  // the group's Tasks (its controller-owned ones), any order
  // The Robots the Tasks are assigned to, by name; one that is not here does not exist.
  std::map<std::string, nlohmann::json> robots;
  // Every robot of the namespace with its load (a system job's replicas follow them).
  std::vector<RobotFacts> robot_facts;
  Timestamp now;
  std::chrono::nanoseconds dispatch_timeout{0};
  std::chrono::nanoseconds disconnect_grace{0};
  std::chrono::nanoseconds disconnect_stop_after = std::chrono::minutes(2);  // task_liveness.h
  std::chrono::nanoseconds disconnect_margin = std::chrono::seconds(90);
  // Running Tasks (by uid) their robot's heartbeats have stopped listing: since when.
  std::map<std::string, Timestamp> missing_since;
  // Tasks (by uid) seen dispatching with nothing on them saying since when: first seen then.
  std::map<std::string, Timestamp> seen_dispatching;
  // Tasks (namespace/name) this manager created, or set dispatching, that
  // the cache does not show so yet: never made again from a stale cache.
  std::set<std::string> expected_creates, expected_dispatches;
  // Where the scheduler counts a Task placed but not yet shown with its
  // targetRobot (namespace/name of the Robot), by Task namespace/name.
  std::map<std::string, std::string> assumed_robots;
  // The groups of the Job whose outputs this group's tasks use, by group
  // name (spec.groupName), as they stand; one not here has not completed.
  std::map<std::string, ProducerOutputs> producers;
};

// A Task for the scheduler to place.
struct Unplaced {
  std::string key;      // namespace/name of the Task
  nlohmann::json task;  // to create (no uid), or the cached Task
  bool exists = false;  // in the cache: patched, not created
  std::int64_t cpu_milli = 0, memory_bytes = 0;
  // Its Job's type: only a batch Job's tasks use the result cache (a
  // service's or a system job's work is to run, on each robot).
  std::string job_type = "batch";
};

// One replica's unplaced Tasks, placed together.
struct ReplicaPlan {
  std::string only_robot;     // a system job's replica: its robot, or none
  std::string sibling_robot;  // where its Tasks already run, preferred while it fits
  std::vector<Unplaced> tasks;
};

struct PlannedEvent {
  nlohmann::json object;
  std::string type, reason, message;
  bool operator==(const PlannedEvent&) const = default;
};

struct GroupPlan {
  // The group, or its Job, is gone or being deleted: nothing to do, and
  // nothing of it to remember.
  bool gone = false;
  bool system = false;
  // Set when the group cannot be made: the status to write (when it
  // differs) and its InvalidTaskGroup Event; nothing else is done.
  std::optional<nlohmann::json> invalid_status;
  std::vector<nlohmann::json> deletes;                       // Tasks of replicas no longer wanted
  std::vector<std::pair<nlohmann::json, std::string>> lost;  // Tasks to mark lost, and why
  std::vector<ReplicaPlan> placements;
  std::vector<nlohmann::json> dispatches;  // placed Tasks still pending: to set dispatching
  // Tasks not started to ask to stop (the rollout aborted, rollout.h), and why.
  std::vector<std::pair<nlohmann::json, std::string>> stops;
  std::optional<Rollout::PerLabel> per_label;  // the rollout's, for the scheduler
  std::vector<PlannedEvent> events;
  std::vector<std::string> reschedules;  // why each replaced Task ended: lost, failed or completed
  // Changes to GroupView::missing_since: a time to remember, or none to forget.
  std::map<std::string, std::optional<Timestamp>> missing_since;
  // Tasks first seen dispatching now (GroupView::seen_dispatching).
  std::map<std::string, Timestamp> seen_dispatching;
  std::optional<std::chrono::nanoseconds> requeue_after;  // look again then: time alone changes the verdict
  // The group's status as its Tasks say, with the replicas being
  // rescheduled counted as pending.
  nlohmann::json status;
  int awaiting = 0;  // replacements waiting for their delay, or for their robot
};

GroupPlan plan_group(const GroupView& view);

}  // namespace k8s4r::manager
