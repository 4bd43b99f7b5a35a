#include "k8s4r/kube/work_queue.h"

#include <algorithm>

namespace k8s4r::kube {

std::chrono::milliseconds backoff_delay(int failures, const WorkQueueOptions& options) {
  if (failures <= 0) return std::chrono::milliseconds(0);
  const int doublings = std::min(failures - 1, 40);  // 2^40 x any base is past every max
  const double delay = static_cast<double>(options.base_delay.count()) * static_cast<double>(1ULL << doublings);
  return std::chrono::milliseconds(
      static_cast<std::int64_t>(std::min(delay, static_cast<double>(options.max_delay.count()))));
}

WorkQueue::WorkQueue(WorkQueueOptions options, const Clock& clock) : options_(options), clock_(clock) {}

void WorkQueue::enqueue_locked(const std::string& key, SteadyTime now) {
  if (processing_.count(key)) {
    dirty_.insert(key);
    return;
  }
  if (queued_.insert(key).second) {
    (options_.urgent && options_.urgent(key) ? urgent_ : ready_).push_back(key);
    first_added_.emplace(key, now);
    ready_changed_.notify_one();
  }
}

void WorkQueue::add(const std::string& key) {
  std::lock_guard lock(mutex_);
  if (shutting_down_) return;
  ++metrics_.adds;
  if (auto delayed = delayed_at_.find(key); delayed != delayed_at_.end()) {
    // Added now: the delayed entry has nothing left to do.
    auto [begin, end] = delayed_.equal_range(delayed->second);
    for (auto it = begin; it != end; ++it) {
      if (it->second == key) {
        delayed_.erase(it);
        break;
      }
    }
    delayed_at_.erase(delayed);
  }
  enqueue_locked(key, clock_.steady());
}

void WorkQueue::add_after(const std::string& key, std::chrono::nanoseconds delay) {
  if (delay <= std::chrono::nanoseconds::zero()) {
    add(key);
    return;
  }
  std::lock_guard lock(mutex_);
  if (shutting_down_) return;
  ++metrics_.adds;
  const SteadyTime when = clock_.steady() + std::chrono::duration_cast<SteadyTime::duration>(delay);
  if (auto existing = delayed_at_.find(key); existing != delayed_at_.end()) {
    if (existing->second <= when) return;
    auto [begin, end] = delayed_.equal_range(existing->second);
    for (auto it = begin; it != end; ++it) {
      if (it->second == key) {
        delayed_.erase(it);
        break;
      }
    }
  }
  delayed_.emplace(when, key);
  delayed_at_[key] = when;
  ready_changed_.notify_all();  // a waiting get() may need to wake earlier
}

void WorkQueue::add_rate_limited(const std::string& key) {
  std::chrono::nanoseconds delay;
  {
    std::lock_guard lock(mutex_);
    if (shutting_down_) return;
    ++metrics_.retries;
    const int failures = ++failures_[key];
    const auto base = backoff_delay(failures, options_);
    std::uniform_real_distribution<double> factor(1.0 - options_.jitter / 2, 1.0 + options_.jitter / 2);
    delay = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double, std::milli>(static_cast<double>(base.count()) * factor(random_)));
  }
  add_after(key, delay);
}

void WorkQueue::forget(const std::string& key) {
  std::lock_guard lock(mutex_);
  failures_.erase(key);
}

int WorkQueue::failures(const std::string& key) const {
  std::lock_guard lock(mutex_);
  auto found = failures_.find(key);
  return found == failures_.end() ? 0 : found->second;
}

void WorkQueue::promote_due_locked(SteadyTime now) {
  while (!delayed_.empty() && delayed_.begin()->first <= now) {
    const std::string key = delayed_.begin()->second;
    delayed_.erase(delayed_.begin());
    delayed_at_.erase(key);
    enqueue_locked(key, now);
  }
}

std::optional<std::string> WorkQueue::get() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (shutting_down_) return std::nullopt;
    const SteadyTime now = clock_.steady();
    promote_due_locked(now);
    if (auto& next = urgent_.empty() ? ready_ : urgent_; !next.empty()) {
      std::string key = std::move(next.front());
      next.pop_front();
      queued_.erase(key);
      processing_.insert(key);
      if (auto added = first_added_.find(key); added != first_added_.end()) {
        const auto waited = std::chrono::duration_cast<std::chrono::nanoseconds>(now - added->second);
        metrics_.wait_total += waited;
        metrics_.longest_wait = std::max(metrics_.longest_wait, waited);
        first_added_.erase(added);
      }
      return key;
    }
    if (delayed_.empty()) {
      ready_changed_.wait(lock);
    } else {
      clock_.wait_until(ready_changed_, lock, delayed_.begin()->first);
    }
  }
}

void WorkQueue::done(const std::string& key) {
  std::lock_guard lock(mutex_);
  processing_.erase(key);
  ++metrics_.processed;
  if (dirty_.erase(key) && !shutting_down_) enqueue_locked(key, clock_.steady());
}

void WorkQueue::shut_down() {
  std::lock_guard lock(mutex_);
  shutting_down_ = true;
  ready_changed_.notify_all();
}

bool WorkQueue::shutting_down() const {
  std::lock_guard lock(mutex_);
  return shutting_down_;
}

WorkQueueMetrics WorkQueue::metrics() const {
  std::lock_guard lock(mutex_);
  WorkQueueMetrics metrics = metrics_;
  metrics.depth = urgent_.size() + ready_.size() + delayed_.size() + dirty_.size();
  const SteadyTime now = clock_.steady();
  metrics.delayed = static_cast<std::size_t>(
      std::count_if(delayed_.begin(), delayed_.end(), [&](const auto& entry) { return entry.first > now; }));
  metrics.in_progress = processing_.size();
  return metrics;
}

}  // namespace k8s4r::kube
