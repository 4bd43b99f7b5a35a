// Whether a lost Task's slot gets a replacement, and when: a TaskGroup's
// reschedulePolicy applied as Nomad applies it, as a pure function of the
// policy, the job type and the times the slot was rescheduled before.
//
//   attempts, interval  at most `attempts` reschedules in any `interval`
//   unlimited           no limit (attempts and interval unused)
//   delay, delayFunction, maxDelay
//                       the wait before the n-th reschedule (n from 0):
//                       constant: delay; exponential: delay * 2^n;
//                       fibonacci: delay * 1, 1, 2, 3, 5, ...; never above
//                       maxDelay when it is set
// A field the policy leaves out takes Nomad's default for the job type:
// batch (and system) attempts 1 in 24h, delay 5s constant; service
// unlimited, delay 30s exponential up to 1h.
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/common/result.h"
#include "k8s4r/common/rfc3339.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::manager {

struct ReschedulePolicy {
  int attempts = 1;
  std::chrono::nanoseconds interval = std::chrono::hours(24);
  std::chrono::nanoseconds delay = std::chrono::seconds(5);
  std::string delay_function = "constant";
  std::chrono::nanoseconds max_delay{0};  // 0: no cap
  bool unlimited = false;
};

// The policy of a TaskGroup's spec.reschedulePolicy over the defaults of
// `job_type` ("batch", "service", "system"); an Error names a bad field.
Result<ReschedulePolicy> read_reschedule_policy(const nlohmann::json& policy, const std::string& job_type);

struct RescheduleDecision {
  bool reschedule = false;
  std::chrono::nanoseconds delay{0};  // after the loss, when reschedule
  std::string why;                    // for the Event and, when not rescheduled, the Task's failure message
};

// Why a failed Task would fail the same way on any robot, so replacing it
// only repeats the failure: its status.reason is InvalidTask (a spec the
// agent's codec refuses, a dispatch over the payload limit, an argument list
// longer than execve takes) or UnsupportedDriver. None for any other end
// (NotRunnableHere, StartFailed, Error, Lost, ...), which another robot or
// another try may not repeat.
std::optional<std::string> fails_on_any_robot(const nlohmann::json& task);

// `earlier`: when the slot was rescheduled before (any order).
RescheduleDecision decide_reschedule(const ReschedulePolicy& policy, const std::vector<Timestamp>& earlier,
                                     Timestamp now);

}  // namespace k8s4r::manager
