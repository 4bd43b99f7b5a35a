// A keyed, rate-limited work queue, as client-go's workqueue: a key is in
// the queue at most once however often it is added, and is handed to at
// most one worker at a time; a key added while a worker holds it is handed
// out again once the worker calls done(). So a daemon keeps one pending
// write per object and merges newer data into it, and a slow or failing API
// server makes writes coalesce instead of piling up: memory is bounded by
// the number of keys, not the number of events.
//
// add_rate_limited() re-adds a key after its own exponential backoff
// (base_delay doubling per failure up to max_delay), with jitter so a fleet
// of failed writes does not retry in lockstep; forget() clears the count
// once the key's work succeeds.
//
// Time is the Clock's it was given (real_clock() in a daemon, a
// ManualClock in tests, which move it instead of waiting for delays).
//
// Threading: every method may be called from any thread; get() blocks.
#pragma once

#include "k8s4r/common/clock.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>

namespace k8s4r::kube {

struct WorkQueueOptions {
  std::chrono::milliseconds base_delay{100};
  std::chrono::milliseconds max_delay{30'000};
  double jitter = 0.5;  // the delay is scaled by a random factor in [1 - jitter/2, 1 + jitter/2]
  // Ready keys for which this is true are handed out before any other, each
  // kind in the order it became ready: the bridge's Task writes (a robot
  // waits on them) go before the heartbeat writes of 10,000 Robots. Empty:
  // one order for all.
  std::function<bool(const std::string& key)> urgent;
};

// The backoff for a key that failed `failures` times (1 for the first
// failure), before jitter: base_delay * 2^(failures-1), at most max_delay.
std::chrono::milliseconds backoff_delay(int failures, const WorkQueueOptions& options);

struct WorkQueueMetrics {
  std::uint64_t adds = 0, retries = 0, processed = 0;
  std::size_t depth = 0;        // keys waiting now (ready or delayed)
  std::size_t delayed = 0;      // of those, keys whose delay (or backoff) has not passed yet
  std::size_t in_progress = 0;  // keys a worker holds now
  // Time from a key's first add to a worker taking it, summed over processed keys.
  std::chrono::nanoseconds wait_total{0};
  std::chrono::nanoseconds longest_wait{0};
};

class WorkQueue {
 public:
  explicit WorkQueue(WorkQueueOptions options = {}, const Clock& clock = real_clock());
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void add(const std::string& key);
  // Adds `key` once `delay` has passed (at once for a delay of 0); an earlier
  // pending time for the same key wins.
  void add_after(const std::string& key, std::chrono::nanoseconds delay);
  // After the key's backoff; counts a failure.
  void add_rate_limited(const std::string& key);
  void forget(const std::string& key);
  int failures(const std::string& key) const;

  // The next ready key, blocking until there is one; nullopt once shut down.
  std::optional<std::string> get();
  // The worker is finished with `key` (whether it succeeded or not).
  void done(const std::string& key);

  // Wakes every get() with nullopt; later adds are ignored.
  void shut_down();
  bool shutting_down() const;

  WorkQueueMetrics metrics() const;

 private:
  void enqueue_locked(const std::string& key, SteadyTime now);
  void promote_due_locked(SteadyTime now);

  WorkQueueOptions options_;
  const Clock& clock_;
  mutable std::mutex mutex_;
  std::condition_variable ready_changed_;
  std::deque<std::string> urgent_, ready_;
  std::set<std::string> queued_;      // in urgent_ or ready_
  std::set<std::string> processing_;  // held by a worker
  std::set<std::string> dirty_;       // added while processing: re-queued by done()
  std::map<std::string, SteadyTime> first_added_;
  std::multimap<SteadyTime, std::string> delayed_;
  std::map<std::string, SteadyTime> delayed_at_;  // key -> its time in delayed_
  std::map<std::string, int> failures_;
  std::mt19937_64 random_{std::random_device{}()};
  bool shutting_down_ = false;
  WorkQueueMetrics metrics_;
};

}  // namespace k8s4r::kube
