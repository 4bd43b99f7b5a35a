#include "k8s4r/bridge/new_robot_gate.h"

#include <algorithm>
#include <string>

namespace k8s4r::bridge {

NewRobotGate::NewRobotGate(double per_second, std::size_t max_unapproved)
    : max_unapproved_(max_unapproved), bucket_(per_second) {}

Decision<void> NewRobotGate::admit(std::size_t unapproved, Time now) {
  if (unapproved >= max_unapproved_) {
    return Refusal{"TooManyUnapproved",
                   std::to_string(unapproved) +
                       " Robots wait for approval, the most the bridge creates "
                       "(--max-unapproved-robots " +
                       std::to_string(max_unapproved_) +
                       "); approve or delete them, or enroll this robot with its Secret and try again"};
  }
  if (!bucket_.take(now)) {
    return Refusal{"RegisterRateLimited", "more new robots than --new-robots-per-second allows; try again shortly"};
  }
  return boost::outcome_v2::success();
}

}  // namespace k8s4r::bridge
