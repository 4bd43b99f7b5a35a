// Leader election on a coordination.k8s.io/v1 Lease, with client-go's
// semantics (tools/leaderelection), so two copies of a daemon can run and
// only one acts:
//
// - A candidate tries to take the Lease every retry_period (jittered by up to
//   a fifth). It may take it when the Lease does not exist, has no holder, or
//   its record (holder, renewTime, ...) has not changed for lease_duration as
//   measured on this machine's monotonic clock since the candidate first saw
//   that record. Clocks of different machines are never compared.
// - Every write is an update conditional on the resourceVersion read, so two
//   candidates cannot both take the Lease: one gets 409 Conflict.
// - The leader renews every retry_period; when it has not renewed for
//   renew_deadline (counted from before each request), it stops leading
//   (on_stopped_leading) and never leads again in this process: like
//   controller-runtime, the daemon exits and its supervisor starts it
//   afresh, with empty caches and no half-done work.
// - The client given should make one attempt per request, with a timeout
//   below the renew deadline (lease_client_config), so an API server that
//   stalls cannot hold the elector past it.
// - stop() then release() (on a clean shutdown) gives the Lease up at once (holder
//   emptied, leaseDurationSeconds 1), so a follower takes over within a
//   retry_period instead of a lease_duration.
//
// Threading: start() runs the elector on its own thread; the callbacks run
// on it. Every method may be called from any thread.
#pragma once

#include "k8s4r/kube/client.h"

#include "k8s4r/common/clock.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace k8s4r::kube {

inline const Resource kLeases{"coordination.k8s.io", "v1", "leases", true};

struct LeaderElectionConfig {
  std::string namespace_, name, identity;
  std::chrono::nanoseconds lease_duration = std::chrono::seconds(15);
  std::chrono::nanoseconds renew_deadline = std::chrono::seconds(10);
  std::chrono::nanoseconds retry_period = std::chrono::seconds(2);
  std::function<void()> on_started_leading;
  std::function<void()> on_stopped_leading;
  // Each time another identity is seen holding the Lease (and at first sight).
  std::function<void(const std::string& holder)> on_new_leader;
};

// `base` for the elector's own client: one attempt per request, and a
// request timeout of the retry period (at least a second), as client-go's
// elector bounds each try by its renew deadline.
ClientConfig lease_client_config(ClientConfig base, std::chrono::nanoseconds retry_period);

// client-go's checks (leaderelection.NewLeaderElector), so a holder stops
// acting before another may take its Lease over: lease duration > renew
// deadline > 1.2 x retry period. Each error names the settings as
// `prefix` + "lease-duration", "renew-deadline", "retry-period".
std::vector<std::string> lease_timing_errors(const std::string& prefix, std::chrono::nanoseconds lease_duration,
                                             std::chrono::nanoseconds renew_deadline,
                                             std::chrono::nanoseconds retry_period);

class LeaderElector {
 public:
  // Times (renew deadline, lease expiry, the Lease's own times) come from `clock`.
  LeaderElector(Client& client, LeaderElectionConfig config, const Clock& clock = real_clock());
  ~LeaderElector();
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  void start();
  // Stops campaigning and renewing; the Lease stays as it is (a leader
  // stops its own work before it lets another start).
  void stop();
  // stop(), then, when leading, gives the Lease up.
  void release();
  bool leading() const { return leading_; }
  // Leading, and the Lease renewed (counted from before its request) less
  // than `deadline` ago, by this clock now: what a holder checks before each
  // act, so it stops acting at its renew deadline even while a renewal
  // request is still under way (the elector notices only once it returns).
  bool renewed_within(std::chrono::nanoseconds deadline) const;
  // Leases this elector took (0 or 1) and renewals that failed: for metrics.
  std::uint64_t failed_renewals() const { return failed_renewals_; }

 private:
  enum class Attempt { acquired, held_by_other, failed };
  void run();
  Attempt try_acquire_or_renew();
  bool wait(std::chrono::nanoseconds delay);  // false once stopping

  Client& client_;
  LeaderElectionConfig config_;
  const Clock& clock_;
  std::atomic<bool> leading_{false}, stopping_{false};
  std::atomic<std::uint64_t> failed_renewals_{0};
  // What this candidate last saw of the Lease, and when (monotonic).
  std::string observed_record_, observed_version_, observed_holder_;
  SteadyTime observed_at_{};
  SteadyTime last_renewed_{}, acquired_at_{};
  std::atomic<SteadyTime::rep> renewed_at_{0};  // last_renewed_, for renewed_within() from any thread
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace k8s4r::kube
