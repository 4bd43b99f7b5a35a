// A token bucket: at most `per_second` a second on average, and a second's
// worth (at least one) at once. Pure logic over the times it is given.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>

namespace k8s4r::bridge {

class TokenBucket {
 public:
  using Time = std::chrono::steady_clock::time_point;

  explicit TokenBucket(double per_second) : per_second_(per_second), tokens_(burst()) {}

  // Takes a token when there is one.
  bool take(Time now) {
    if (filled_) {
      const std::chrono::duration<double> elapsed = now - *filled_;
      tokens_ = std::min(burst(), tokens_ + std::max(0.0, elapsed.count()) * per_second_);
    }
    filled_ = now;
    if (tokens_ < 1.0) return false;
    tokens_ -= 1.0;
    return true;
  }

 private:
  double burst() const { return std::max(1.0, per_second_); }
  double per_second_;
  double tokens_;
  std::optional<Time> filled_;
};

}  // namespace k8s4r::bridge
