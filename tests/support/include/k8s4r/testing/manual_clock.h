// A Clock that moves only when a test moves it: component tests advance time
// by hand (a heartbeat interval, a retention, a backoff) and never sleep.
//
// Its steady time starts at an arbitrary point, its wall time at
// 2026-11-22T01:30:00Z; advance() moves both, set_wall() the wall clock
// alone (a robot whose clock is set late, or jumps).
//
// Threads waiting in wait_until() (a work queue's worker) are woken by every
// advance(); a wake that races with one is caught within a millisecond of
// real time, so a waiter never misses a deadline the clock has passed.
//
// Threading: every method may be called from any thread.
#pragma once

#include "k8s4r/common/clock.h"
#include "k8s4r/daemon/event_loop.h"

#include <algorithm>
#include <mutex>
#include <set>

namespace k8s4r::testing {

class ManualClock final : public Clock {
 public:
  SteadyTime steady() const override {
    std::lock_guard lock(mutex_);
    return steady_;
  }
  Timestamp wall() const override {
    std::lock_guard lock(mutex_);
    return wall_;
  }
  void wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, SteadyTime deadline) const override {
    {
      std::lock_guard guard(mutex_);
      if (steady_ >= deadline) return;
      waiters_.insert(&cv);
    }
    cv.wait_for(lock, std::chrono::milliseconds(1));
    std::lock_guard guard(mutex_);
    waiters_.erase(&cv);
  }

  void advance(std::chrono::nanoseconds by) {
    std::lock_guard lock(mutex_);
    steady_ += std::chrono::duration_cast<SteadyTime::duration>(by);
    wall_ += by;
    for (std::condition_variable* cv : waiters_) cv->notify_all();
  }
  void set_wall(Timestamp wall) {
    std::lock_guard lock(mutex_);
    wall_ = wall;
  }

 private:
  mutable std::mutex mutex_;
  SteadyTime steady_{std::chrono::hours(1000)};
  Timestamp wall_{std::chrono::seconds(1795311000)};  // 2026-11-22T01:30:00Z
  mutable std::set<std::condition_variable*> waiters_;
};

// Moves `clock` forward by `by`, one timer of `loop` at a time: each timer
// runs at its own time, with what it posts and the timers it sets in turn,
// as if that much time had passed. Runs on the calling thread, which must be
// the loop's (the loop is never run()).
inline void advance(ManualClock& clock, daemon::EventLoop& loop, std::chrono::nanoseconds by) {
  const SteadyTime until = clock.steady() + std::chrono::duration_cast<SteadyTime::duration>(by);
  loop.run_ready();
  while (auto next = loop.next_timer()) {
    if (*next > until) break;
    if (*next > clock.steady()) clock.advance(*next - clock.steady());
    loop.run_ready();
  }
  if (until > clock.steady()) clock.advance(until - clock.steady());
  loop.run_ready();
}

}  // namespace k8s4r::testing
