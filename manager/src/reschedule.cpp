#include "k8s4r/manager/reschedule.h"

#include "k8s4r/common/duration.h"
#include "k8s4r/common/rfc3339.h"
#include "k8s4r/crd/resources.h"

#include <algorithm>

namespace k8s4r::manager {

using nlohmann::json;
using std::chrono::nanoseconds;

Result<ReschedulePolicy> read_reschedule_policy(const json& policy, const std::string& job_type) {
  ReschedulePolicy out;
  if (job_type == "service") {
    out.unlimited = true;
    out.delay = std::chrono::seconds(30);
    out.delay_function = "exponential";
    out.max_delay = std::chrono::hours(1);
  }
  if (policy.is_null()) return out;
  if (!policy.is_object()) return Error{"reschedulePolicy", "must be an object"};
  if (auto attempts = policy.find("attempts"); attempts != policy.end()) {
    if (!attempts->is_number_integer() || attempts->get<long long>() < 0 || attempts->get<long long>() > 1'000'000) {
      return Error{"reschedulePolicy.attempts", "must be a whole number from 0 to 1000000"};
    }
    out.attempts = static_cast<int>(attempts->get<long long>());
  }
  for (const auto& [key, field] :
       {std::pair{"interval", &out.interval}, std::pair{"delay", &out.delay}, std::pair{"maxDelay", &out.max_delay}}) {
    auto found = policy.find(key);
    if (found == policy.end()) continue;
    if (!found->is_string()) return Error{std::string("reschedulePolicy.") + key, "must be a duration"};
    auto parsed = parse_non_negative_go_duration(found->get<std::string>());
    if (!parsed) return parsed.error().within(std::string("reschedulePolicy.") + key);
    *field = parsed.value();
  }
  if (auto function = policy.find("delayFunction"); function != policy.end()) {
    if (!function->is_string() || (*function != "constant" && *function != "exponential" && *function != "fibonacci")) {
      return Error{"reschedulePolicy.delayFunction", "must be constant, exponential or fibonacci"};
    }
    out.delay_function = function->get<std::string>();
  }
  if (auto unlimited = policy.find("unlimited"); unlimited != policy.end()) {
    if (!unlimited->is_boolean()) return Error{"reschedulePolicy.unlimited", "must be true or false"};
    out.unlimited = unlimited->get<bool>();
  }
  return out;
}

std::optional<std::string> fails_on_any_robot(const json& task) {
  const std::string reason = crd::string_at(task, {"status", "reason"});
  if (reason != "InvalidTask" && reason != "UnsupportedDriver") return std::nullopt;
  const std::string message = crd::string_at(task, {"status", "message"});
  return "not rescheduled: it failed with " + reason + (message.empty() ? "" : " (" + message + ")") +
         ", which it would on any robot";
}

RescheduleDecision decide_reschedule(const ReschedulePolicy& policy, const std::vector<Timestamp>& earlier,
                                     Timestamp now) {
  // One in the future (a clock that was ahead) counts as recent.
  const auto within = static_cast<int>(
      std::count_if(earlier.begin(), earlier.end(), [&](Timestamp at) { return elapsed(at, now) < policy.interval; }));
  if (!policy.unlimited && within >= policy.attempts) {
    return {false, nanoseconds(0),
            "rescheduled " + std::to_string(within) + " time(s) in the last " + format_go_duration(policy.interval) +
                ", the most its reschedulePolicy allows (attempts " + std::to_string(policy.attempts) + ")"};
  }
  // The wait grows with every earlier reschedule of the slot, whenever it was.
  const std::size_t n = earlier.size();
  const nanoseconds cap = policy.max_delay > nanoseconds(0) ? policy.max_delay : nanoseconds::max();
  nanoseconds delay = std::min(policy.delay, cap);
  if (policy.delay_function == "exponential") {
    for (std::size_t i = 0; i < n && delay < cap; ++i) delay = delay > cap / 2 ? cap : std::min(delay * 2, cap);
  } else if (policy.delay_function == "fibonacci") {
    // delay times 1, 1, 2, 3, 5, ...
    nanoseconds current = delay, next = delay;
    for (std::size_t i = 0; i < n && current < cap; ++i) {
      const nanoseconds sum = next > cap - current ? cap : std::min(current + next, cap);
      current = next;
      next = sum;
    }
    delay = std::min(current, cap);
  }
  return {true, delay,
          "rescheduled after " + format_go_duration(delay) +
              (policy.unlimited ? std::string(" (unlimited)")
                                : " (attempt " + std::to_string(within + 1) + " of " + std::to_string(policy.attempts) +
                                      " in " + format_go_duration(policy.interval) + ")")};
}

}  // namespace k8s4r::manager
