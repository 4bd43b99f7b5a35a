// Time, as every daemon reads it: the steady clock (for intervals, timeouts
// and timers: it never jumps) and the wall clock (for times written into
// messages and resources), behind one narrow interface. Daemons, their event
// loops, the work queue and leader election take a `const Clock&`; main()
// passes real_clock(), and component tests a ManualClock they move by hand
// (k8s4r/testing/manual_clock.h), so no test waits for time to pass.
//
// Threading: every method may be called from any thread.
#pragma once

#include "k8s4r/common/rfc3339.h"

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace k8s4r {

using SteadyTime = std::chrono::steady_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual SteadyTime steady() const = 0;
  virtual Timestamp wall() const = 0;
  // Waits on `cv` (with `lock` held on entry and on return) until it is
  // notified or this clock reaches `deadline`; it may also return early
  // (spuriously), so callers check their condition again, as with any
  // condition variable.
  virtual void wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                          SteadyTime deadline) const = 0;
};

// The machine's clocks: std::chrono::steady_clock and system_clock.
const Clock& real_clock();

}  // namespace k8s4r
