#include "k8s4r/manager/rollout.h"

#include "k8s4r/common/rfc3339.h"
#include "k8s4r/crd/resources.h"

#include <cmath>
#include <cstdio>

namespace k8s4r::manager {

using nlohmann::json;

namespace {

Result<int> whole(const json& object, const char* key, int low, int high) {
  const json& value = object.at(key);
  if (!value.is_number_integer() || value.get<long long>() < low || value.get<long long>() > high)
    return Error{key, "must be a whole number from " + std::to_string(low) + " to " + std::to_string(high)};
  return static_cast<int>(value.get<long long>());
}

// `object[key]` into `out` when present; an Error named within `parent`.
std::optional<Error> read_whole(const json& object, const char* key, int low, int high, const std::string& parent,
                                int& out) {
  if (!object.contains(key) || object.at(key).is_null()) return std::nullopt;
  auto value = whole(object, key, low, high);
  if (!value) return parent.empty() ? value.error() : value.error().within(parent);
  out = value.value();
  return std::nullopt;
}

std::string percent(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g%%", value);
  return text;
}

}  // namespace

Result<Rollout> read_rollout(const json& rollout) {
  Rollout out;
  if (rollout.is_null()) return out;
  if (!rollout.is_object()) return Error{"", "must be an object"};
  constexpr int kMost = 1'000'000;
  for (const auto& [key, field] :
       {std::pair{"maxInFlight", &out.max_in_flight}, {"maxPerMinute", &out.max_per_minute}}) {
    if (!rollout.contains(key) || rollout.at(key).is_null()) continue;
    int value = 0;
    if (auto error = read_whole(rollout, key, 1, kMost, "", value)) return *error;
    *field = value;
  }
  if (const json& rate = rollout.value("exponentialRate", json()); !rate.is_null()) {
    if (!rate.is_object()) return Error{"exponentialRate", "must be an object"};
    Rollout::Exponential e;
    if (auto error = read_whole(rate, "baseRatePerMinute", 1, kMost, "exponentialRate", e.base_per_minute))
      return *error;
    if (rate.contains("incrementFactor")) {
      const json& factor = rate.at("incrementFactor");
      if (!factor.is_number() || factor.get<double>() < 1 || factor.get<double>() > 5)
        return Error{"exponentialRate.incrementFactor", "must be a number from 1 to 5"};
      e.increment_factor = factor.get<double>();
    }
    if (auto error = read_whole(rate, "succeededPerIncrement", 1, kMost, "exponentialRate", e.succeeded_per_increment))
      return *error;
    out.exponential = e;
  }
  if (const json& per = rollout.value("perLabel", json()); !per.is_null()) {
    if (!per.is_object() || !per.value("label", json()).is_string() || per.at("label").get<std::string>().empty())
      return Error{"perLabel.label", "must name a robot label"};
    Rollout::PerLabel limit{per.at("label").get<std::string>(), 1};
    if (auto error = read_whole(per, "maxInFlight", 1, kMost, "perLabel", limit.max_in_flight)) return *error;
    out.per_label = limit;
  }
  if (const json& criteria = rollout.value("abortCriteria", json()); !criteria.is_null()) {
    if (!criteria.is_array() || criteria.size() > 16) return Error{"abortCriteria", "must be a list of at most 16"};
    for (std::size_t i = 0; i < criteria.size(); ++i) {
      const std::string where = "abortCriteria[" + std::to_string(i) + "]";
      const json& c = criteria[i];
      if (!c.is_object()) return Error{where, "must be an object"};
      Rollout::AbortCriterion criterion;
      criterion.failure_type = c.value("failureType", json("Any")).is_string() ? c.value("failureType", "Any") : "";
      if (criterion.failure_type != "Failed" && criterion.failure_type != "Lost" &&
          criterion.failure_type != "Timeout" && criterion.failure_type != "Any")
        return Error{where + ".failureType", "must be Failed, Lost, Timeout or Any"};
      const json& threshold = c.value("thresholdPercentage", json());
      if (!threshold.is_number() || threshold.get<double>() <= 0 || threshold.get<double>() > 100)
        return Error{where + ".thresholdPercentage", "must be a number above 0 and at most 100"};
      criterion.threshold_percentage = threshold.get<double>();
      if (auto error = read_whole(c, "minExecuted", 1, kMost, where, criterion.min_executed)) return *error;
      out.abort_criteria.push_back(criterion);
    }
  }
  for (const auto& [key, field] : {std::pair{"paused", &out.paused}, {"abort", &out.abort}}) {
    const json& value = rollout.value(key, json());
    if (value.is_null()) continue;
    if (!value.is_boolean()) return Error{key, "must be true or false"};
    *field = value.get<bool>();
  }
  return out;
}

RolloutVerdict judge_rollout(const Rollout& rollout, const std::vector<json>& tasks, Timestamp now, int unseen_creates,
                             bool runs_on) {
  RolloutVerdict verdict;
  verdict.in_flight = verdict.started_last_minute = unseen_creates;
  std::map<std::string, int> failures;  // by failure type
  std::optional<Timestamp> oldest_in_window;
  for (const json& task : tasks) {
    const crd::TaskView view = crd::read_task(task);
    if (auto created = crd::timestamp_at(task, {"metadata", "creationTimestamp"});
        created && elapsed(*created, now) < std::chrono::minutes(1)) {
      ++verdict.started_last_minute;
      if (!oldest_in_window || *created < *oldest_in_window) oldest_in_window = created;
    }
    if (!view.state || !crd::is_terminal(*view.state)) {
      ++verdict.not_ended;
      // A service's (or system job's) running task never ends by itself: in
      // flight is what has not started yet.
      if (!(runs_on && view.state == crd::TaskState::running)) ++verdict.in_flight;
      continue;
    }
    // Stopped by an operator's act (a drain, this rollout's abort): neither
    // a success nor a failure of the work.
    if (crd::stopped_by_operator(task) && *view.state != crd::TaskState::completed) continue;
    ++verdict.executed;
    if (*view.state == crd::TaskState::completed) {
      ++verdict.succeeded;
      continue;
    }
    const std::string reason = crd::string_at(task, {"status", "reason"});
    ++failures["Any"];
    ++failures[reason == "Lost" ? "Lost" : reason == "Timeout" ? "Timeout" : "Failed"];
  }

  if (rollout.abort) verdict.aborted = "aborted by hand (spec.rollout.abort)";
  for (const Rollout::AbortCriterion& criterion : rollout.abort_criteria) {
    if (verdict.aborted || verdict.executed < criterion.min_executed) continue;
    const int failed = failures[criterion.failure_type];
    if (failed * 100.0 >= criterion.threshold_percentage * verdict.executed) {
      verdict.aborted =
          std::to_string(failed) + " of " + std::to_string(verdict.executed) + " executed " +
          (criterion.failure_type == "Any" ? std::string("failed") : "failed (" + criterion.failure_type + ")") +
          ", at least " + percent(criterion.threshold_percentage) + " of at least " +
          std::to_string(criterion.min_executed);
    }
  }
  if (verdict.aborted || rollout.paused) {
    verdict.may_start = 0;
    return verdict;
  }

  std::optional<int> rate = rollout.max_per_minute;
  if (rollout.exponential) {
    const Rollout::Exponential& e = *rollout.exponential;
    const double steps = std::floor(static_cast<double>(verdict.succeeded) / e.succeeded_per_increment);
    const double grown = e.base_per_minute * std::pow(e.increment_factor, std::min(steps, 64.0));
    const int capped = grown >= 1e6 ? 1'000'000 : static_cast<int>(grown);
    rate = rate ? std::min(*rate, capped) : capped;
  }
  verdict.per_minute = rate;
  if (rollout.max_in_flight) verdict.may_start = std::max(0, *rollout.max_in_flight - verdict.in_flight);
  if (rate) {
    verdict.may_start = std::min(verdict.may_start, std::max(0, *rate - verdict.started_last_minute));
    if (verdict.started_last_minute >= *rate && oldest_in_window)
      verdict.recheck =
          elapsed(now, later_by(*oldest_in_window, std::chrono::minutes(1))) + std::chrono::milliseconds(100);
  }
  return verdict;
}

}  // namespace k8s4r::manager
