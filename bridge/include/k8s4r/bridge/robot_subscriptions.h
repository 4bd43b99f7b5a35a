// A replica's subscriptions to its own robots' topics (docs/bridge.md#replicas):
// each robot it serves and has a Robot for is two filters (its heartbeat at
// QoS 0, its task reports at QoS 1), so the broker sends a robot's
// heartbeats and reports to its owner only, not to every replica.
// (Registers and presences, a robot's rare messages, reach every replica.)
//
// Pure bookkeeping, no I/O: the bridge says which robots it wants, sends what
// next() returns as one SUBSCRIBE and one UNSUBSCRIBE, and says when the
// connection was made again. What the broker holds is known only for this
// connection: a persistent session may keep filters of an earlier process,
// and their robots' messages arrive unwanted (stray()); each such robot is
// unsubscribed once per connection.
//
// Thread-safety: none; the bridge's loop owns it.
#pragma once

#include "k8s4r/mqtt/link.h"

#include <cstddef>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

namespace k8s4r::bridge {

class RobotSubscriptions {
 public:
  // The filters of one robot; empty for an id no topic can carry.
  static std::vector<mqtt::Subscription> filters(const std::string& robot_id);

  // An id no topic can carry (a Robot named by hand) is never wanted.
  void want(const std::string& robot_id);
  void unwant(const std::string& robot_id);
  bool wanted(const std::string& robot_id) const { return wanted_.contains(robot_id); }
  // Every wanted robot `gone` says yes for is unwanted.
  void unwant_if(const std::function<bool(const std::string&)>& gone);
  // A message of a robot not wanted arrived on its own topic: a filter left
  // from before is unsubscribed, once per connection.
  void stray(const std::string& robot_id);
  // A new connection: every wanted robot is subscribed again (the broker may
  // have kept them, or not).
  void reconnected();

  struct Batch {
    std::vector<std::string> subscribe, unsubscribe;  // robot ids
    bool empty() const { return subscribe.empty() && unsubscribe.empty(); }
  };
  // At most `max_robots` robots whose subscription must change, taken as sent.
  Batch next(std::size_t max_robots);
  bool pending() const { return !dirty_.empty() || !stray_queue_.empty(); }
  // Robots the broker was asked, on this connection, to send this bridge.
  std::size_t held() const { return held_.size(); }

 private:
  void touch(const std::string& robot_id);

  std::unordered_set<std::string> wanted_, held_;
  std::unordered_set<std::string> dirty_;  // wanted and not held, or held and not wanted
  // Strays seen on this connection, and those not yet unsubscribed: never
  // held, so a robot wanted after it strayed is subscribed all the same.
  std::unordered_set<std::string> strays_, stray_queue_;
};

}  // namespace k8s4r::bridge
