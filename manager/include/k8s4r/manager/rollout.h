// Rollouts: how fast a TaskGroup's tasks start, and when it stops starting
// them (spec.rollout; a Job's spec.rollout is each of its groups' default,
// field by field). As pure functions of the spec, the group's Tasks and the
// time; plan_group applies the verdict, the scheduler the per-label limit.
//
//   maxInFlight        at most N of the group's tasks started and not ended
//                      (a Task made counts from its creation: pending,
//                      dispatching, running; for a service or system job,
//                      whose tasks run on, only those not yet running)
//   maxPerMinute       at most M started in any minute (Tasks made, by their
//                      creationTimestamp; replacements count)
//   exponentialRate    {baseRatePerMinute, incrementFactor,
//                      succeededPerIncrement}: the rate starts at the base
//                      and is multiplied by the factor for every
//                      succeededPerIncrement tasks that succeeded, up to
//                      maxPerMinute (AWS IoT Jobs' exponentialRate)
//   perLabel           {label, maxInFlight}: at most K in flight on robots
//                      sharing one value of a robot label (a site); robots
//                      without it share one value; a replica of several
//                      tasks is placed whole or waits
//   abortCriteria[]    {failureType: Failed | Lost | Timeout | Any,
//                      thresholdPercentage, minExecuted}: once at least
//                      minExecuted of its Tasks ended and that percentage of
//                      them failed so, the rollout aborts
//   paused             no new task starts; those started go on
//   abort              aborted by hand (kubectl k8s4r rollout abort)
//
// Aborted: no task starts again, the Tasks made and not started (pending,
// dispatching) are asked to stop (the DisruptionTarget condition, reason
// RolloutAborted, as a drain does), those running go on; the group fails
// once none is left, saying why (unless every task had succeeded). An abort
// by the criteria stands until the rollout's spec changes, whatever ends
// after it. The criteria count Tasks, every attempt: a slot rescheduled
// after failing counts each failure.
// Paused or aborted, Tasks made and not yet placed or sent are neither.
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/common/result.h"
#include "k8s4r/common/rfc3339.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <climits>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::manager {

struct Rollout {
  std::optional<int> max_in_flight, max_per_minute;
  struct Exponential {
    int base_per_minute = 1;
    double increment_factor = 2.0;
    int succeeded_per_increment = 1;
  };
  std::optional<Exponential> exponential;
  struct PerLabel {
    std::string label;
    int max_in_flight = 1;
  };
  std::optional<PerLabel> per_label;
  struct AbortCriterion {
    std::string failure_type;  // Failed, Lost, Timeout or Any
    double threshold_percentage = 100;
    int min_executed = 1;
  };
  std::vector<AbortCriterion> abort_criteria;
  bool paused = false, abort = false;
  // Any limit at all: a group without one starts every task at once.
  bool limits() const {
    return max_in_flight || max_per_minute || exponential || per_label || paused || abort || !abort_criteria.empty();
  }
};

// spec.rollout (null: none); an Error names the field.
Result<Rollout> read_rollout(const nlohmann::json& rollout);

inline constexpr const char* kRolloutAborted = "rollout aborted: ";

struct RolloutVerdict {
  int may_start = INT_MAX;                          // how many tasks may start now
  std::optional<std::string> aborted;               // why, once it aborted
  std::optional<std::chrono::nanoseconds> recheck;  // the per-minute window opens again then
  int in_flight = 0, started_last_minute = 0, succeeded = 0, executed = 0;
  int not_ended = 0;              // Tasks not ended, running ones included whatever the job's type
  std::optional<int> per_minute;  // the rate now, when limited
};

// The verdict on a group's Tasks (every attempt) at `now`; `unseen_creates`:
// Tasks made that the cache does not show yet (counted in flight and as
// started now).
// `runs_on`: a service's or system job's, whose running tasks never end by
// themselves: maxInFlight counts only the tasks not yet running (a rolling
// start), not the running ones. (perLabel counts every task not ended: for
// a service, at most K replicas per value.)
RolloutVerdict judge_rollout(const Rollout& rollout, const std::vector<nlohmann::json>& tasks, Timestamp now,
                             int unseen_creates = 0, bool runs_on = false);

}  // namespace k8s4r::manager
