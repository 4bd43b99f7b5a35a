// One bridge replica's part in sharing the fleet (docs/bridge.md#replicas).
//
// - Membership: the replica holds its own Lease, k8s4r-bridge-replica-<id>,
//   renewed as the manager's leader Lease is (kube/leader_election.h), held
//   as `<id>/<incarnation>` (random per process): a second process of the
//   same id waits for the first's Lease to run out, and one restarted after a
//   crash waits out its predecessor's, so no two processes serve as one
//   replica. It serves only while its Lease was renewed less than the renew
//   deadline ago (serving(), checked before each act, any thread); past
//   that, `on_lost_lease` runs (the daemon exits: its supervisor starts it
//   afresh) and it serves nothing. Another replica is live while its
//   Lease's record keeps changing: one not seen to change for its
//   leaseDurationSeconds, on this machine's monotonic clock, or with no
//   holder (it left), is gone. One seen only once so far may be either: no
//   table is written until each such is seen to renew or runs out.
// - The slot table (slot_table.h), the ConfigMap k8s4r-bridge-slots: every
//   poll (a quarter of the retry period, at least 100 ms) the coordinator reads
//   the Leases and the table, serves exactly the slots the table gives it,
//   and writes the table as it should be: its own slots under a new epoch
//   once after starting; the slots of replicas that are gone taken over;
//   slots that should move marked `-> next`; and the slots it was asked to
//   hand over (which it stopped serving in an earlier poll) given to their
//   next owner. Every write is conditional on the resourceVersion read, so
//   replicas deciding at once cannot both win; the loser decides again.
// - `serve` is told the slots to serve (their epochs) and returns only once
//   the bridge serves exactly those, and `drained` says whether the bridge's
//   own writes to a set of slots' objects are all in: a slot is given away
//   only after its owner stopped serving it and its writes landed (the
//   drain), so it never has two owners that both know it, and no write of
//   the old owner lands after one of the new.
// - A slot with no owner (a table made afresh, or damaged and written anew)
//   is given out only once it has been ownerless for the renew deadline (or
//   no other replica is live): every replica serving it under the old table
//   has read the new one and stopped by then, or lost its Lease.
// - Labels: a replica caches only its slots' Robots and Tasks (by their
//   slot label), so one made before slot labels would be seen by none. The
//   replica serving slot 0 lists those without the label every 15 retry
//   periods (30 s) and labels them (conditionally), a page of 500 at a time.
// - leave() (a clean shutdown) gives its slots to the other live replicas at
//   once and releases the Lease, so a rolling restart moves slots within a
//   poll instead of a lease duration.
//
// The client given should make one attempt per request with a short
// timeout (kube::lease_client_config): a stalled API server must not hold a
// poll past the renew deadline.
//
// Threading: start() runs the coordinator on its own thread; `serve` and
// `on_lost_lease` are called on it. Other methods: any thread.
#pragma once

#include "k8s4r/bridge/slot_table.h"
#include "k8s4r/common/clock.h"
#include "k8s4r/kube/client.h"
#include "k8s4r/kube/leader_election.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace k8s4r::bridge {

inline const kube::Resource kConfigMaps{"", "v1", "configmaps", true};

struct SlotCoordinatorConfig {
  std::string namespace_, replica_id;
  std::chrono::nanoseconds lease_duration = std::chrono::seconds(15);
  std::chrono::nanoseconds renew_deadline = std::chrono::seconds(10);
  std::chrono::nanoseconds retry_period = std::chrono::seconds(2);
  // Returns once the bridge serves exactly these slots; false when it could
  // not (it is stopping).
  std::function<bool(const ServedSlots&)> serve;
  // True when no write of the bridge to an object of these slots (true:
  // handed over) is waiting or under way.
  std::function<bool(const std::vector<bool>&)> drained;
  // Called after each poll (the bridge narrows its caches).
  std::function<void()> after_poll;
  std::function<void()> on_lost_lease;
};

class SlotCoordinator {
 public:
  SlotCoordinator(kube::Client& client, SlotCoordinatorConfig config, const Clock& clock = real_clock());
  ~SlotCoordinator();
  SlotCoordinator(const SlotCoordinator&) = delete;
  SlotCoordinator& operator=(const SlotCoordinator&) = delete;

  void start();
  // Stops polling; serves on as last told (the bridge is stopping).
  void stop();
  // stop(), then hands every slot it owns to the other live replicas and
  // releases its Lease.
  void leave();

  // Empty once it has written the table after starting (and so serves what
  // the table gives it); else why not.
  std::string not_ready_reason() const;
  // The replica may act on its slots now: its Lease renewed within the renew
  // deadline, and not lost. Any thread.
  bool serving() const { return !lost_ && elector_->renewed_within(config_.renew_deadline); }
  std::size_t served_slots() const { return served_count_; }
  std::int64_t table_epoch() const { return table_epoch_; }
  std::size_t live_replicas() const { return live_count_; }

 private:
  struct Observed {
    std::string record;   // the Lease's spec as last seen
    SteadyTime at{};      // when it last changed
    bool proven = false;  // seen to change: it was live then, not a leftover
  };
  struct Members {
    std::vector<std::string> live;  // this one, and those seen to renew
    bool unsure = false;            // another Lease seen once, not yet renewed nor run out
  };
  void run();
  void poll();
  // The live replicas by their Leases (this one included), or none when the
  // Leases cannot be read.
  std::optional<Members> live_members();
  // False when the bridge could not be told (stopping, or its caches not
  // listed in time): the poll then writes nothing.
  bool serve(const ServedSlots& slots);
  void label_unlabelled();
  void after_poll();
  std::int64_t now_ms() const;

  kube::Client& client_;
  SlotCoordinatorConfig config_;
  const Clock& clock_;
  std::unique_ptr<kube::LeaderElector> elector_;
  std::map<std::string, Observed> observed_;  // by replica id
  std::mutex serve_mutex_;
  ServedSlots served_;                         // under serve_mutex_
  bool reclaimed_ = false;                     // its own slots taken under a new epoch since it started
  std::optional<SteadyTime> ownerless_since_;  // the table read has had a slot with no owner since
  std::int64_t high_water_ = 0;                // the newest epoch of any table read or written
  std::string holder_;                         // <id>/<incarnation>
  std::optional<SteadyTime> labelled_at_;      // the last label_unlabelled()
  std::string last_error_;                     // logged once until it changes
  std::atomic<bool> stopping_{false}, ready_{false}, lost_{false};
  std::atomic<std::size_t> served_count_{0}, live_count_{0};
  std::atomic<std::int64_t> table_epoch_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace k8s4r::bridge
