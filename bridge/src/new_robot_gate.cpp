#include "k8s4r/bridge/new_robot_gate.h"

#include <algorithm>
#include <string>

namespace k8s4r::bridge {

NewRobotGate::NewRobotGate(double per_second, std::size_t max_unapproved)
    : per_second_(per_second), max_unapproved_(max_unapproved), tokens_(std::max(1.0, per_second)) {}

Decision<void> NewRobotGate::admit(std::size_t unapproved, Time now) {
  if (unapproved >= max_unapproved_) {
    return Refusal{"TooManyUnapproved",
                   std::to_string(unapproved) + " Robots wait for approval, the most the bridge creates "
                   "(--max-unapproved-robots " + std::to_string(max_unapproved_) +
                   "); approve or delete them, or enroll this robot with its Secret and try again"};
  }
  const double burst = std::max(1.0, per_second_);
  if (filled_) {
    const std::chrono::duration<double> elapsed = now - *filled_;
    tokens_ = std::min(burst, tokens_ + std::max(0.0, elapsed.count()) * per_second_);
  }
  filled_ = now;
  if (tokens_ < 1.0) {
    return Refusal{"RegisterRateLimited", "more new robots than --new-robots-per-second allows; try again shortly"};
  }
  tokens_ -= 1.0;
  return boost::outcome_v2::success();
}

}  // namespace k8s4r::bridge
