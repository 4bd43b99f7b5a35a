// What a TaskGroup's and a Job's status say, as pure functions of their
// Tasks and TaskGroups: the counts `kubectl get rjob,rtg` shows, the state,
// and a sentence.
//
// A task group's slots are its replicas times its tasks; each slot counts
// once, by its newest Task (a rescheduled slot's replacement carries a
// higher `robot.k8s4r.io/attempt` label; the lost one keeps its history and
// no longer counts). A slot is pending (no robot yet), dispatching (a robot
// chosen, not yet running: counted in pendingTasks, as the CRD has no field
// for it, and named in the sentence), running, succeeded (completed, or
// exited 0) or failed.
//
// TaskGroup state: completed when every slot succeeded; failed when every
// slot ended and one failed; running while one runs; scheduled while one is
// dispatching; pending otherwise. Job state: completed when every group
// completed; failed when every group ended and one failed; running while a
// group runs or is scheduled; pending otherwise. A group that made no Task
// says why (invalid, nothing fits) on the Job's statusDescription too, while
// the Job has no Task or has failed. A Job's taskGroupSummary
// is Nomad's (queued, starting, running, complete, failed, lost) per group.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace k8s4r::manager {

// The label that numbers a slot's Tasks: the first has none (attempt 0).
inline constexpr const char* kAttemptLabel = "robot.k8s4r.io/attempt";

// The status of `task_group` given its Tasks (owned by it; any order).
nlohmann::json task_group_status(const nlohmann::json& task_group, const std::vector<nlohmann::json>& tasks);

// The status of `job` given its TaskGroups (with their statuses).
nlohmann::json job_status(const nlohmann::json& job, const std::vector<nlohmann::json>& task_groups);

// Whether writing `status` (a status rollup) would change `object`: some
// field of it is missing or different in object.status.
bool status_differs(const nlohmann::json& object, const nlohmann::json& status);

}  // namespace k8s4r::manager
