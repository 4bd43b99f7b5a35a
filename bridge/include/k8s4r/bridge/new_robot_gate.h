// Whether a register from a robot that has no Robot may create one: at most
// `per_second` new Robots a second (a token bucket holding one second's
// worth), and none while `max_unapproved` Robots wait for approval (phase
// Pending or Rejected, or none yet). A robot its operator enrolled is
// approved within moments by the manager, so honest onboarding stays under
// both; a flood of made-up robots from an anonymous client stops at them,
// and its robots get no work (the manager approves by Secret).
//
// Pure logic over the times and counts it is given; the bridge counts the
// unapproved Robots in its informer at most once a second and adds the ones
// it created since.
#pragma once

#include "k8s4r/bridge/refusal.h"
#include "k8s4r/bridge/token_bucket.h"

#include <chrono>
#include <cstddef>
#include <optional>

namespace k8s4r::bridge {

class NewRobotGate {
 public:
  using Time = std::chrono::steady_clock::time_point;

  NewRobotGate(double per_second, std::size_t max_unapproved);

  // May one more Robot be created now, with `unapproved` Robots waiting for
  // approval? Takes a token from the bucket when it may.
  Decision<void> admit(std::size_t unapproved, Time now);

 private:
  std::size_t max_unapproved_;
  TokenBucket bucket_;
};

}  // namespace k8s4r::bridge
