// A daemon's main loop (the agent's; the bridge's next): one thread that
// owns the daemon's state and runs, in order, the work other threads post to
// it (MQTT callbacks, process exits, finished downloads), timers (heartbeat,
// register retry, restart delays, watchdog), and handlers of readable file
// descriptors (a signalfd for SIGTERM). It sleeps in poll() until the nearest
// timer or a wake-up, so an idle daemon uses no CPU between heartbeats.
//
// Threading: post() and stop() may be called from any thread; everything else
// only from the loop's own thread (from inside posted work or handlers), or
// before run().
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

namespace k8s4r::daemon {

class EventLoop {
 public:
  using Clock = std::chrono::steady_clock;
  using TimerId = std::uint64_t;

  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  void post(std::function<void()> work);
  TimerId at(Clock::time_point when, std::function<void()> work);
  TimerId after(Clock::duration delay, std::function<void()> work) { return at(Clock::now() + delay, std::move(work)); }
  // Cancelling a timer that already ran, or 0, does nothing.
  void cancel(TimerId timer);
  // Calls `on_readable` whenever `fd` is readable; the caller owns the fd.
  void watch(int fd, std::function<void()> on_readable);

  // Runs until stop(); returns at once if stop() was called before. Each
  // stop() ends one run(), so the loop can be run again (tests do).
  void run();
  void stop();

 private:
  void wake();

  int wake_fd_ = -1;
  std::mutex mutex_;
  std::deque<std::function<void()>> posted_;
  bool stopping_ = false;
  // Loop-thread state.
  TimerId next_timer_ = 1;
  std::multimap<Clock::time_point, TimerId> timer_order_;
  std::map<TimerId, std::pair<Clock::time_point, std::function<void()>>> timers_;
  std::vector<std::pair<int, std::function<void()>>> watched_;
};

}  // namespace k8s4r::daemon
