// The agent's side of its MQTT session: connect (again after a loss, with a
// jittered backoff up to kMaxReconnectBackoff), subscribe to this robot's
// topics (response, dispatch, and acks unless legacy-topics), announce presence (retained; the broker publishes the
// last will when the agent dies), register until the bridge answers (with backoff up to kMaxRegisterBackoff), and
// heartbeat every heartbeat-interval. What a register and a heartbeat say of the robot's tasks and storage comes from
// the agent (RobotReport).
//
// Threading: the agent's loop thread only; the link's events are posted to
// the loop by the agent.
#pragma once

#include "k8s4r/agent/config.h"
#include "k8s4r/common/messages.h"
#include "k8s4r/daemon/event_loop.h"
#include "k8s4r/mqtt/link.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::agent {

// What the robot tells the bridge about itself, read at each register and heartbeat.
struct RobotReport {
  std::function<std::vector<RunningTask>()> held_tasks;     // register's runningTasks
  std::function<std::vector<std::string>()> running_tasks;  // heartbeat's runningTasks
  // Heartbeat's endedTasks (and whether there were more than it lists).
  std::function<std::vector<RunningTask>(bool& more)> ended_tasks;
  std::function<std::optional<StorageError>()> storage_error;
  // What the robot had seen when it made the list (the newest report seq
  // drawn, the newest dispatch taken), sent beside it.
  std::function<RobotKnowledge()> knowledge;
  // The shortest disconnect window (disconnect.stopOnRobotAfter) of the
  // tasks it runs, if any has one: the heartbeat comes at least four times
  // in it, so the bridge's answers keep the robot in contact.
  std::function<std::optional<std::chrono::nanoseconds>()> shortest_stop_window;
  // What the robot's artifact store holds (ArtifactStore::summary); none
  // without a store. Its list goes in heartbeats until one that carried it
  // is acknowledged, and again when the bridge asks.
  std::function<std::optional<ArtifactsHeld>()> artifacts;
};

struct SessionListener {
  std::function<void()> up;    // connected; subscriptions asked for
  std::function<void()> down;  // the connection is gone
  std::function<void()> registered;
  std::function<void(const std::string& payload)> dispatch;
  // What the robot is to keep in its artifact store ahead of need (a Prefetch).
  std::function<void(const std::string& payload)> prefetch;
  std::function<void(const Ack& ack)> ack;                      // the bridge's acknowledgements
  std::function<void(const std::string& payload)> log_request;  // a bridge follows a task's log
  // The bridge has this robot's heartbeat number `beat` (they are counted
  // from 1 as the agent runs), sent at `sent` (the steady clock's time): an
  // Ack echoes its timestamp; with legacy-topics (no
  // Acks), the broker took it. The robot is in contact as of then
  // (contact_lease.h). Nothing else counts: a dispatch, an Ack of reports or
  // a register response may have waited in the network or the broker for
  // any time, and says nothing of whether the bridge hears this robot now.
  std::function<void(SteadyTime sent, std::uint64_t beat)> contact;
  std::function<void(const std::string&)> notify;  // sd_notify
};

class Session {
 public:
  static constexpr std::chrono::seconds kMaxReconnectBackoff{30};
  static constexpr std::chrono::seconds kMaxRegisterBackoff{60};

  Session(const AgentConfig& config, daemon::EventLoop& loop, mqtt::Link& link, RobotReport report,
          SessionListener listener);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void connect();
  // Link events, on the loop.
  void on_connected();
  void on_connect_failed(const std::string& cause);
  void on_connection_lost(const std::string& cause);
  void on_message(const std::string& topic, const std::string& payload);

  // Tells the bridge at once (heartbeat and presence) that storage changed.
  void tell_storage_state();
  // A task started or ended: heartbeat sooner if a shorter disconnect
  // window now needs it.
  void heartbeat_cadence_changed();
  // heartbeat-interval, or a quarter of the shortest disconnect window of
  // the running tasks when that is shorter (never under 1 s).
  std::chrono::nanoseconds heartbeat_every() const;
  // An answered heartbeat numbered `beat` or later is wanted (a task waits
  // for contact proven after it was held): one is sent in this turn of the
  // loop, unless such a one was sent already.
  void ask_for_contact(std::uint64_t beat);
  // The number the next heartbeat will carry.
  std::uint64_t next_beat() const { return beats_made_ + 1; }
  // No more reconnects, registers or heartbeats.
  void stop();
  // Publishes presence offline (retained), then `done` on the loop.
  void say_offline(std::function<void()> done);

  bool connected() const { return connected_; }

 private:
  void subscribe();
  void schedule_reconnect();
  void publish_presence(bool online, mqtt::Completion done);
  void send_register();
  void send_heartbeat();
  void on_register_response(const std::string& payload);
  std::chrono::milliseconds next_backoff(std::chrono::milliseconds& backoff, std::chrono::milliseconds first,
                                         std::chrono::milliseconds cap);

  const AgentConfig& config_;
  daemon::EventLoop& loop_;
  mqtt::Link& link_;
  RobotReport report_;
  SessionListener listener_;
  bool connected_ = false, registered_ = false, stopped_ = false, ready_notified_ = false;
  bool warned_anonymous_ = false;  // once per process: it connected with no credential
  std::uint64_t generation_ = 0;   // counts connections; stale completions are ignored
  std::chrono::milliseconds reconnect_backoff_{0}, register_backoff_{0};
  daemon::EventLoop::TimerId reconnect_timer_ = 0, register_timer_ = 0, heartbeat_timer_ = 0;
  Timestamp connected_at_{};
  SteadyTime heartbeat_due_{};  // when heartbeat_timer_ fires
  SteadyTime heartbeat_sent_{};
  // The artifacts fingerprint whose list a heartbeat the bridge acknowledged
  // carried; and, for heartbeats that carried one and wait for their Ack,
  // their timestamp and fingerprint (the newest few).
  std::string artifacts_acknowledged_;
  std::map<Timestamp, std::string> artifacts_sent_;
  // The newest heartbeats sent, by number, with their timestamp and when
  // they were sent: an Ack that echoes one proves contact as of then.
  struct BeatSent {
    Timestamp timestamp;
    SteadyTime sent;
  };
  std::map<std::uint64_t, BeatSent> beats_sent_;
  std::uint64_t beats_made_ = 0;
  std::uint64_t asked_beat_ = 0;  // ask_for_contact's newest
  bool ask_posted_ = false;
};

}  // namespace k8s4r::agent
