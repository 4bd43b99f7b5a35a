// The agent's run clock: how long agents have run on this work dir, summed
// over restarts (StateStore::clock() at start, plus the steady time since).
// Retention is measured on it, not on the wall clock, which a robot may set
// late or change; time the agent was down does not count, so nothing is
// ever forgotten early.
#pragma once

#include "k8s4r/common/clock.h"

#include <chrono>

namespace k8s4r::agent {

class RunClock {
 public:
  RunClock(std::chrono::nanoseconds at_start, const Clock& clock)
      : at_start_(at_start), clock_(clock), started_(clock.steady()) {}
  std::chrono::nanoseconds now() const { return at_start_ + (clock_.steady() - started_); }

 private:
  std::chrono::nanoseconds at_start_;
  const Clock& clock_;
  SteadyTime started_;
};

}  // namespace k8s4r::agent
