#include "k8s4r/agent/restart_tracker.h"

#include "k8s4r/common/duration.h"

namespace k8s4r::agent {

namespace {

// Nomad's defaults for a batch job's policy fields left out.
constexpr std::chrono::nanoseconds kDefaultInterval = std::chrono::hours(24);
constexpr std::chrono::nanoseconds kDefaultDelay = std::chrono::seconds(15);

}  // namespace

RestartTracker::RestartTracker(std::optional<RestartPolicy> policy) {
  if (!policy) return;
  attempts_ = static_cast<int>(policy->attempts.value_or(0));
  interval_ = policy->interval.value_or(kDefaultInterval);
  delay_ = policy->delay.value_or(kDefaultDelay);
  delay_mode_ = policy->mode.value_or("fail") == "delay";
}

RestartDecision RestartTracker::on_exit(SteadyTime now, const ExitStatus& status,
                                        std::optional<StopReason> stopped_by) {
  using Kind = RestartDecision::Kind;
  if (stopped_by) {
    return {Kind::fail,
            {},
            to_string(*stopped_by),
            "stopped by the agent (" + to_string(*stopped_by) + "), " + describe_exit(status)};
  }
  if (status.exit_code == 0 && status.signal == 0) return {Kind::complete, {}, "", "exited with code 0"};

  if (!window_start_ || now - *window_start_ >= interval_) {
    window_start_ = now;
    restarts_in_window_ = 0;
  }
  if (restarts_in_window_ < attempts_) {
    ++restarts_in_window_;
    ++restart_count_;
    return {Kind::restart, delay_, "", describe_exit(status) + "; restarting in " + format_go_duration(delay_)};
  }
  if (delay_mode_ && attempts_ > 0) {
    // Wait out the interval, then start a new one.
    const auto wait = std::max(delay_, *window_start_ + interval_ - now);
    window_start_.reset();
    ++restart_count_;
    return {Kind::restart, wait, "",
            describe_exit(status) + "; " + std::to_string(attempts_) +
                " restarts used in this interval, restarting in " + format_go_duration(wait)};
  }
  std::string message = describe_exit(status);
  if (attempts_ > 0) {
    message += "; exceeded " + std::to_string(attempts_) + " restarts in " + format_go_duration(interval_);
  }
  return {Kind::fail, {}, "Error", message};
}

}  // namespace k8s4r::agent
