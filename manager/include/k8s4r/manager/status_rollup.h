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
// the Job has no Task or has failed; so does a group whose Tasks wait for a
// robot (with_unplaced: its sentence goes on with kWaitingToBePlaced and the
// scheduler's reason), while the Job has not ended. A Job's taskGroupSummary
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

// Said of a group whose Tasks no robot fits: `status` (not ended) gets
// "; N waiting to be placed: <why>" on its sentence, and its Progressing
// condition the reason Unschedulable.
inline constexpr const char* kWaitingToBePlaced = "waiting to be placed: ";
void with_unplaced(nlohmann::json& status, int waiting, const std::string& why);

// The status of `job` given its TaskGroups (with their statuses).
nlohmann::json job_status(const nlohmann::json& job, const std::vector<nlohmann::json>& task_groups);

// Adds to `status` (a rollup of `object`, with its state and sentence) the
// conditions `kubectl wait --for=condition=...` reads, as a Kubernetes Job
// states them, and observedGeneration (metadata.generation):
//   Progressing  True while pending, scheduled or running (reason the state
//                capitalised: Pending, Scheduled, Running; message the
//                sentence); False once ended (Completed, Failed);
//   Complete     True once completed;
//   Failed       True once failed (reason Invalid for a spec, the Job's or
//                a group's, that cannot run, else Failed; message the
//                sentence).
// Each carries observedGeneration and the time its status last changed:
// kept from `object`'s condition of that type while its status is the
// same, else `now` (RFC 3339), so a rollup that changes nothing else
// writes nothing.
void add_conditions(nlohmann::json& status, const nlohmann::json& object, const std::string& now);

// Whether writing `status` (a status rollup) would change `object`: some
// field of it is missing or different in object.status.
bool status_differs(const nlohmann::json& object, const nlohmann::json& status);

}  // namespace k8s4r::manager
