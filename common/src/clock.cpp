#include "k8s4r/common/clock.h"

namespace k8s4r {

namespace {

class RealClock final : public Clock {
 public:
  SteadyTime steady() const override { return std::chrono::steady_clock::now(); }
  Timestamp wall() const override {
    return std::chrono::time_point_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now());
  }
  void wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, SteadyTime deadline) const override {
    cv.wait_until(lock, deadline);
  }
};

}  // namespace

const Clock& real_clock() {
  static const RealClock clock;
  return clock;
}

}  // namespace k8s4r
