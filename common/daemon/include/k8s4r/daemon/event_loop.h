// A daemon's main loop (the agent's; the bridge's next): one thread that
// owns the daemon's state and runs, in order, the work other threads post to
// it (MQTT callbacks, process exits, finished downloads), timers (heartbeat,
// register retry, restart delays, watchdog), and handlers of readable file
// descriptors (a signalfd for SIGTERM). It sleeps in poll() until the nearest
// timer or a wake-up, so an idle daemon uses no CPU between heartbeats.
//
// Time is the Clock's it was given: real_clock() in a daemon; in a component
// test a ManualClock that the test moves, running what became due with
// run_ready() instead of run() (k8s4r/testing/manual_clock.h), so the test
// never sleeps.
//
// Threading: post() and stop() may be called from any thread; everything else
// only from the loop's own thread (from inside posted work or handlers), or
// before run().
#pragma once

#include "k8s4r/common/clock.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

namespace k8s4r::daemon {

class EventLoop {
 public:
  using TimerId = std::uint64_t;

  explicit EventLoop(const Clock& clock = real_clock());
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  void post(std::function<void()> work);
  TimerId at(SteadyTime when, std::function<void()> work);
  TimerId after(std::chrono::nanoseconds delay, std::function<void()> work) {
    return at(clock_.steady() + std::chrono::duration_cast<SteadyTime::duration>(delay), std::move(work));
  }
  // Cancelling a timer that already ran, or 0, does nothing.
  void cancel(TimerId timer);
  // Calls `on_readable` whenever `fd` is readable; the caller owns the fd.
  void watch(int fd, std::function<void()> on_readable);

  // Runs until stop(); returns at once if stop() was called before. Each
  // stop() ends one run(), so the loop can be run again (tests do).
  void run();
  void stop();

  // Runs what is ready now, without waiting: posted work (and what it posts
  // in turn) and the timers due on the clock, until none is left. For tests
  // that move a ManualClock; a daemon calls run().
  void run_ready();
  // When the nearest timer is due, if any.
  std::optional<SteadyTime> next_timer() const;

  const Clock& clock() const { return clock_; }
  // Work posted and not yet taken by the loop (any thread; for metrics).
  std::size_t posted_depth();

 private:
  void wake();
  // Posted work, then the timers due; true when anything ran.
  bool run_once();

  const Clock& clock_;
  int wake_fd_ = -1;
  std::mutex mutex_;
  std::deque<std::function<void()>> posted_;
  bool stopping_ = false;
  // Loop-thread state.
  TimerId next_timer_ = 1;
  std::multimap<SteadyTime, TimerId> timer_order_;
  std::map<TimerId, std::pair<SteadyTime, std::function<void()>>> timers_;
  std::vector<std::pair<int, std::function<void()>>> watched_;
};

}  // namespace k8s4r::daemon
