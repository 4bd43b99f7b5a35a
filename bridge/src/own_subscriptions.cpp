// A replica's subscriptions to its own robots' topics (docs/bridge.md#replicas,
// replica-own-subscriptions, on by default): the broker sends each robot's
// heartbeats and reports to the replica that serves it alone, instead of to
// every replica. Registers and presences still reach every replica (shared
// filters): a new robot has no Robot yet for its owner to follow, and a
// presence is how an owner finds a running robot heard by nobody.
//
// A robot is followed while its slot is served here and its Robot is in the
// cache; a slot gained follows its robots once they are cached, a slot lost
// stops following them, a Robot deleted is let go after a grace (its agent's
// next heartbeat is answered with "register again", as with one bridge).
// What a robot sends before its owner follows it is what arrives in a
// hand-over's gap: its reports are sent again until confirmed
// (docs/protocol.md#ack).
//
// Heard by nobody: a running robot whose Robot is in no replica's cache (it
// was deleted while its slot changed hands, made before slot labels, or
// labelled by hand with a slot that is not its own: its owner lets it go as
// a deleted one, and the register it is told to send labels it back).
// Its owner learns of it from its presence: live, or retained and sent again
// when the owner gains slots (it subscribes to every presence again). Still
// online and without a Robot after a grace (a new robot registers within
// it), the robot is told to register again, which makes or labels its Robot.
#include "k8s4r/bridge/bridge.h"

#include "k8s4r/crd/resources.h"

#include <spdlog/spdlog.h>

namespace k8s4r::bridge {

namespace {
// Robots per SUBSCRIBE (two filters each, about 90 KiB): a replica's 8,000
// robots in 8 packets on connecting.
constexpr std::size_t kRobotsPerPacket = 1000;
// Changes within this long go out together.
constexpr std::chrono::milliseconds kGather{20};
// A robot online with no Robot this long is told to register again: a new
// one has usually registered by then (one told anyway registers as it would).
// Checked this often, at most this many remembered, and at most this many
// told a check: half the refusal answers' 200 a second.
constexpr std::chrono::seconds kUnfollowedGrace{10};
constexpr std::chrono::seconds kUnfollowedCheck{1};
constexpr std::size_t kMaxUnfollowed = 10'000;
constexpr std::size_t kToldPerCheck = 100;
// Slots gained within this long share one request for every presence (a
// hand-over that moves slots in steps).
constexpr std::chrono::seconds kPresencesGather{2};
}  // namespace

bool Bridge::own_subscriptions() const { return !config_.replica_id.empty() && config_.replica_own_subscriptions; }

void Bridge::follow_robot(const std::string& robot_id) {
  if (!own_subscriptions()) return;
  // The slot, not serves(): a late Lease serves nothing for a moment, and the
  // subscriptions stay for when it is renewed.
  if (served_[slot_of(robot_id)] != 0 && robots_->get(namespace_, robot_id)) {
    subscriptions_.want(robot_id);
  } else {
    subscriptions_.unwant(robot_id);
  }
  subscribe_soon();
}

void Bridge::follow_served_slots(bool gained) {
  if (!own_subscriptions()) return;
  subscriptions_.unwant_if([this](const std::string& robot_id) { return served_[slot_of(robot_id)] == 0; });
  for (const auto& robot : robots_->list()) {
    const std::string name = crd::read_robot(*robot).name;
    if (served_[slot_of(name)] != 0) subscriptions_.want(name);
  }
  subscribe_soon();
  if (gained && !presences_timer_) presences_timer_ = loop_.after(kPresencesGather, [this] { ask_presences_again(); });
}

void Bridge::ask_presences_again() {
  presences_timer_ = 0;
  if (stopping_ || !mqtt_connected_ || !link_) return;  // on_connected subscribes to them
  // The broker sends every robot's retained presence again (a whole fleet's:
  // once per gain, gathered); the gained slots' robots with no Robot cached
  // are looked at (note_unfollowed_presence).
  link_->subscribe({{std::string(topics::kAllPresenceFilter), 1}}, [](bool ok, const std::string& error) {
    if (!ok) spdlog::warn("asking again for robots' presences failed: {}", error);
  });
}

void Bridge::note_unfollowed_presence(const Presence& message) {
  if (!own_subscriptions()) return;
  if (!message.online) {
    unfollowed_online_.erase(message.robot_id);
    return;
  }
  if (unfollowed_online_.size() >= kMaxUnfollowed) return;  // the rest at the next slot gain or connection
  unfollowed_online_.emplace(message.robot_id, loop_.clock().steady());
  if (!unfollowed_timer_) unfollowed_timer_ = loop_.after(kUnfollowedCheck, [this] { check_unfollowed(); });
}

void Bridge::check_unfollowed() {
  unfollowed_timer_ = 0;
  if (stopping_) return;
  const auto steady_now = loop_.clock().steady();
  std::size_t told = 0;
  for (auto robot = unfollowed_online_.begin(); robot != unfollowed_online_.end() && told < kToldPerCheck;) {
    // Too soon, or a late Lease that may be renewed: looked at again.
    const bool lease_late = served_[slot_of(robot->first)] != 0 && !serves(robot->first);
    if (steady_now - robot->second < kUnfollowedGrace || lease_late) {
      ++robot;
      continue;
    }
    if (serves(robot->first) && !robots_->get(namespace_, robot->first)) {
      spdlog::info("robot {} is online with no Robot this replica holds: telling it to register again", robot->first);
      tell_to_register(robot->first);
      ++told;
    }
    robot = unfollowed_online_.erase(robot);
  }
  if (!unfollowed_online_.empty()) unfollowed_timer_ = loop_.after(kUnfollowedCheck, [this] { check_unfollowed(); });
}

void Bridge::subscriptions_on_connected() {
  if (!own_subscriptions()) return;
  // A session of this replica from before may hold the shared filters (an
  // earlier version, or replica-own-subscriptions=false): they would bring the
  // whole fleet's messages still.
  link_->unsubscribe({std::string(topics::kAllHeartbeatFilter), std::string(topics::kAllTaskStatusFilter)},
                     [](bool, const std::string&) {});
  subscriptions_.reconnected();
  subscriptions_batch_ = 0;  // what was in flight went with the last connection
  pump_subscriptions();
}

void Bridge::subscribe_soon() {
  if (subscriptions_timer_ || subscriptions_batch_ != 0 || !subscriptions_.pending()) return;
  subscriptions_timer_ = loop_.after(kGather, [this] {
    subscriptions_timer_ = 0;
    pump_subscriptions();
  });
}

void Bridge::pump_subscriptions() {
  if (stopping_ || subscriptions_batch_ != 0 || !mqtt_connected_ || !link_) return;
  const RobotSubscriptions::Batch batch = subscriptions_.next(kRobotsPerPacket);
  metrics_.set("k8s4r_bridge_robots_subscribed", {}, static_cast<double>(subscriptions_.held()));
  if (batch.empty()) return;
  std::vector<mqtt::Subscription> subscribe;
  for (const std::string& robot_id : batch.subscribe)
    for (auto& filter : RobotSubscriptions::filters(robot_id)) subscribe.push_back(std::move(filter));
  std::vector<std::string> unsubscribe;
  for (const std::string& robot_id : batch.unsubscribe)
    for (auto& filter : RobotSubscriptions::filters(robot_id)) unsubscribe.push_back(std::move(filter.filter));
  if (subscribe.empty() && unsubscribe.empty()) return;  // never: want() and stray() take only ids with filters
  // One packet of each at a time; the next once both are answered. A
  // refusal is a broker that will not let the bridge read a robot's topics:
  // the connection is made again, as for the shared filters.
  const std::uint64_t id = subscriptions_batch_ = ++subscriptions_batches_;
  auto waiting = std::make_shared<int>(static_cast<int>(!subscribe.empty()) + static_cast<int>(!unsubscribe.empty()));
  const auto answered = [this, id, waiting](bool ok, const std::string& error) {
    loop_.post([this, id, waiting, ok, error] {
      // An answer of a connection gone (on_disconnected let its batch go):
      // on_connected sends everything again.
      if (id != subscriptions_batch_ || !mqtt_connected_) return;
      if (!ok) {
        spdlog::error("following robots' topics failed: {}; reconnecting", error);
        subscriptions_batch_ = 0;
        on_disconnected("subscribe failed");
        return;
      }
      if (--*waiting > 0) return;
      subscriptions_batch_ = 0;
      pump_subscriptions();
    });
  };
  if (!subscribe.empty()) link_->subscribe(subscribe, answered);
  if (!unsubscribe.empty()) link_->unsubscribe(unsubscribe, answered);
}

}  // namespace k8s4r::bridge
