// The bridge daemon: MQTT on one side, Robot and Task resources on the other.
//
// It starts the Robot and Task informers and connects to the broker only
// once both have synced, so every message is judged against a full cache,
// and no message needs a GET or LIST. Then:
//   on_register     a robot's Register: create or update its Robot, answer;
//   on_heartbeat    coalesced to one write per robot per write interval,
//                   at once when running tasks, capacity or connection change;
//   on_presence     the Connected condition, at once;
//   on_task_status  a report: checked against the Task (assigned robot, seq,
//                   finished), merged into /status, an Event recorded, and
//                   confirmed to its robot once Kubernetes has it (acks);
//   dispatch        a Task that became dispatching is published to its robot,
//                   again after --dispatch-resend-after without a report; a
//                   Task being deleted is stopped on its robot, and released
//                   (finalizer removed) once it stopped, never started, or
//                   its robot is gone;
//   ownership       with --replica-id, only the robots of the slots the
//                   slot table gives this replica are served: their
//                   messages handled, their Tasks dispatched (with the
//                   slot's epoch), the rest left to their owners;
//   own_subscriptions  a replica follows its own robots' heartbeats and
//                   reports only (replica-own-subscriptions, the default);
//   left_cache      a Robot or Task that leaves a replica's cache is deleted,
//                   or relabelled by hand (then labelled back), not at once
//                   taken for deleted;
//   broker_identities  with --dynamic-security, each robot's Secret made its
//                   broker login, confined to its own topics, and removed
//                   (the robot disconnected) when the Secret goes, and
//                   only then.
// Writes go through the KubeWriter. What must be sent after a restart is
// read back from the resources (status.dispatchedAt, the finalizer), not
// from memory.
//
// Time (steady and wall) is the EventLoop's Clock.
//
// Threading: one thread, the EventLoop's, owns all state. MQTT callbacks and
// informer events arrive on other threads and are posted to the loop; MQTT
// messages through a bounded inbox (daemon/inbox.h).
#pragma once

#include "k8s4r/bridge/ack_sender.h"
#include "k8s4r/bridge/config.h"
#include "k8s4r/bridge/dynsec_commands.h"
#include "k8s4r/bridge/kube_writer.h"
#include "k8s4r/bridge/log_follows.h"
#include "k8s4r/bridge/new_robot_gate.h"
#include "k8s4r/bridge/refusal_log.h"
#include "k8s4r/bridge/robot_patches.h"
#include "k8s4r/bridge/robot_subscriptions.h"
#include "k8s4r/bridge/slot_coordinator.h"
#include "k8s4r/bridge/task_patches.h"
#include "k8s4r/bridge/token_bucket.h"
#include "k8s4r/common/messages.h"
#include "k8s4r/common/topics.h"
#include "k8s4r/daemon/event_loop.h"
#include "k8s4r/daemon/inbox.h"
#include "k8s4r/daemon/metrics.h"
#include "k8s4r/kube/informer.h"
#include "k8s4r/mqtt/link.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

namespace k8s4r::bridge {

struct BridgeHooks {
  std::function<void(const std::string&)> notify;  // sd_notify
  std::optional<std::chrono::microseconds> watchdog_interval;
  // A replica that could not renew its Lease: it serves nothing any more, and
  // should end (main exits). Default: shutdown().
  std::function<void()> on_lost_lease;
};

class Bridge {
 public:
  using LinkFactory = std::function<std::unique_ptr<mqtt::Link>(mqtt::LinkEvents)>;

  // `namespace_name` is where Robots and Tasks live.
  Bridge(BridgeConfig config, std::string namespace_name, daemon::EventLoop& loop, kube::Client& client,
         LinkFactory make_link, daemon::Metrics& metrics, BridgeHooks hooks = {});
  ~Bridge();
  Bridge(const Bridge&) = delete;
  Bridge& operator=(const Bridge&) = delete;

  void start();
  // Disconnects cleanly, stops the informers and the writers, stops the loop.
  void shutdown();
  // Empty when ready (both sides connected, informers synced); else why not.
  // Any thread.
  std::string not_ready_reason() const;
  // Followers of tasks' logs wait here for their robots' answers (logs_endpoint.h).
  LogFollows& log_follows() { return log_follows_; }

 private:
  struct RobotMemory {
    HeartbeatFacts written;  // what the last heartbeat write said
    std::chrono::steady_clock::time_point last_write{};
    bool wrote = false;                      // `written` and `last_write` are known
    std::optional<Timestamp> presence_time;  // of the last presence applied
    bool presence_online = false;
    daemon::EventLoop::TimerId flush_timer = 0;
    std::optional<std::pair<Heartbeat, HeartbeatFacts>> unwritten;  // the newest heartbeat not yet written
    Timestamp unwritten_at{};  // when it arrived: its lastHeartbeatTime, whenever it is written
    std::optional<std::chrono::steady_clock::time_point> resynced;         // its running Tasks last sent again
    daemon::EventLoop::TimerId resync_timer = 0;                           // a register's resync, deferred
    bool resend_dispatches_at_heartbeat = false;                           // a Go K8s4r agent just registered
    std::optional<std::chrono::steady_clock::time_point> heartbeat_acked;  // last Ack of a heartbeat
    std::optional<std::string> prefetch_sent;  // the artifacts list last published to it (its JSON)
    // Since when a register's answer is on its way (its write, then its
    // publish until the broker has it): a robot that asks again meanwhile is
    // written but not answered again (on_register.cpp).
    std::optional<std::chrono::steady_clock::time_point> register_answer_since;
  };
  struct TaskMemory {
    AppliedStatus applied;
    std::optional<std::chrono::steady_clock::time_point> dispatched;  // published in this run
    daemon::EventLoop::TimerId resend_timer = 0;
    int delete_sends = 0;
    bool released = false;
    bool lost_stop_sent = false;                                          // a stop for a Task the manager marked Lost
    std::optional<std::chrono::steady_clock::time_point> orphan_stop_at;  // a stop for an ended Task it listed
    daemon::EventLoop::TimerId delete_timer = 0;
  };
  struct InFlightIdentity {
    std::string robot_id;
    dynsec::Action action = dynsec::Action::none;
    std::string digest;    // the token digest it makes the broker hold
    std::string replaced;  // the digest it replaces (a rotation)
  };
  struct Identities {
    std::string prefix;  // of our correlationData: others share the response topic
    std::uint64_t next = 1;
    bool listed = false;                                // `managed` is what the broker holds
    std::map<std::string, dynsec::Managed> managed;     // by robot id
    std::map<std::string, InFlightIdentity> in_flight;  // by correlationData
    std::set<std::string> busy;                         // robots with commands in flight
    std::set<std::string> again;   // robots to look at again: changed while busy, or waiting for a slot
    std::string list_correlation;  // of the listClients awaited
    daemon::EventLoop::TimerId list_timer = 0, relist_timer = 0;
  };

  // A batch of robot logins on its way to the broker's k8s4r-auth plugin.
  struct LoginBatch {
    std::vector<std::uint32_t> slots;  // its sections' slots: in no other batch meanwhile
    std::vector<std::uint32_t> whole;  // those sent whole (replace)
    std::vector<std::string> removed;  // robots whose login it removes
    daemon::EventLoop::TimerId timer = 0;
  };
  struct Logins {
    std::string prefix;  // of our correlations
    std::uint64_t next = 1;
    // A single bridge's epoch per slot: its start time in ms, or one past
    // what the plugin held when it answered `stale` (another copy was newer).
    std::vector<std::uint64_t> epochs;
    std::set<std::string> changed;  // robots whose Secret changed, not sent yet
    std::set<std::uint32_t> whole;  // slots to send whole: on connecting, gaining, after trouble
    // Their robots (the Secrets'), read once from the cache when a slot is
    // to be sent whole; a Secret that changes meanwhile is in `changed` too.
    std::map<std::uint32_t, std::vector<std::string>> robots_of_whole;
    std::set<std::uint32_t> unsynced;             // slots not answered `ok` whole since connecting
    std::vector<bool> busy;                       // by slot: in a batch in flight
    std::map<std::string, LoginBatch> in_flight;  // by correlation
    daemon::EventLoop::TimerId flush_timer = 0, retry_timer = 0;
  };

  // bridge.cpp: the MQTT side, routing, readiness; refusals.cpp: refusals.
  void connect();
  void on_connected();
  void on_disconnected(const std::string& cause);
  void on_message(const std::string& topic, const std::string& payload);
  void on_log_chunk(const topics::ParsedTopic& where, const std::string& payload);
  void refuse(const std::string& what, const Refusal& refusal, const std::string& robot_id = "",
              const std::string& task_uid = "");
  void arm_refusal_summaries();
  void publish(const std::string& topic, const std::string& payload, std::function<void(bool)> done = {});
  // A refusal's answer (a register refused, a robot told to register): at
  // QoS 0, since the robot asks again if it is lost, so a flood of them never
  // holds a dispatch behind the broker's window of unacknowledged publishes.
  void answer_refusal(const std::string& topic, const std::string& payload);
  void check_synced();
  ObjectRef robot_ref(const std::string& robot_id) const;
  ObjectRef task_ref(const std::string& name) const;
  Timestamp now() const;

  // Acknowledgements wait in the AckSender while this many publishes or more
  // are queued in the MQTT link.
  static constexpr std::size_t kAcksWaitWhileQueued = 1000;
  // on_register.cpp
  // How long an answer to a register may be on its way before a robot that
  // asks again is answered again (one lost without a word, a link replaced).
  static constexpr std::chrono::seconds kRegisterAnswerPatience{30};
  void on_register(const Register& message);
  void answer_register(const std::string& robot_id, const std::string& response_topic, bool created, bool ok,
                       const std::string& error);
  std::size_t unapproved_robots();
  // on_heartbeat.cpp
  // `acknowledge`: on the robot's own topic (our agent); Go K8s4r agents
  // heartbeat on the shared topic and await no acknowledgement.
  void on_heartbeat(const Heartbeat& message, bool acknowledge);
  // Ended tasks a heartbeat lists whose end the Task already holds: the
  // acknowledgement was lost, and is sent again.
  void confirm_recorded_ends(const Heartbeat& message);
  void write_heartbeat(const std::string& robot_id, const char* reason);
  // on_presence.cpp
  void on_presence(const Presence& message);
  // on_task_status.cpp
  void on_task_status(const TaskStatus& report);
  void confirm_report(const TaskStatus& report, ReportResult result, const Refusal& why = {});
  // dispatch.cpp
  void reconcile_task(const kube::ObjectPtr& task);
  void on_task_deleted(const kube::ObjectPtr& task, bool final_state_unknown);
  void on_robot_changed(const std::string& robot_id, bool deleted);
  // Publishes (retained) what the Robot's status.prefetch lists, when it
  // differs from what was published to it last, or always (`again`: the
  // broker may not hold it, or the robot registers and none was sent yet).
  void send_prefetch(const std::string& robot_id, bool again);
  // A Robot deleted: an empty list, then no retained message left for it.
  void forget_prefetch(const std::string& robot_id);
  void dispatch(const kube::ObjectPtr& task, bool resend);
  void schedule_resend(const std::string& uid, const std::string& name, std::chrono::nanoseconds delay);
  void resync_robot(const std::string& robot_id);
  // The timestamp for a dispatch to this robot (docs/protocol.md#dispatch).
  Timestamp dispatch_stamp(const std::string& robot_id);
  // Its Tasks still dispatching, sent again (a robot that subscribed late).
  void resend_dispatching(const std::string& robot_id);
  // A heartbeat from a robot the bridge has no Robot for: told (at most once
  // per --dispatch-resend-after) to register again.
  void tell_to_register(const std::string& robot_id);
  // A heartbeat on the own topic of a robot with no Robot: refused
  // (UnknownRobot) and the robot told to register.
  void refuse_unknown_heartbeat(const std::string& robot_id);
  // True when a heartbeat's running tasks hold one still dispatching: the
  // robot holds it unstarted, and may be waiting for the heartbeat's Ack to
  // start it (docs/agent.md#partitions).
  bool lists_unstarted(const std::string& robot_id, const std::vector<std::string>& running) const;
  // A heartbeat's running tasks: each that has ended in the API, or is no
  // longer there at all, is stopped on the robot; every time when the
  // heartbeat is to be `answering`, else once per resend interval. False
  // when it lists more gone uids than one heartbeat gets deletes for: it
  // is not to be answered then.
  bool stop_ended_tasks_listed(const std::string& robot_id, const std::vector<std::string>& running, bool answering);
  void stop_on_robot(const kube::ObjectPtr& task);
  // A Task asked to stop (crd::stop_request) not yet ended: stopped on its
  // robot once dispatching or running; a pending one is the manager's.
  void stop_requested(const kube::ObjectPtr& task, std::optional<crd::TaskState> state);
  // False for a robot that never reports a stopped task's end (Go K8s4r).
  bool confirms_stops(const std::string& robot_id) const;
  // A Task asked to stop whose robot never confirms: written failed, saying so.
  void end_unconfirmed_stop(const kube::ObjectPtr& task, const crd::Condition& stop, int sends);
  bool robot_gone(const std::string& robot_id) const;
  void release(const kube::ObjectPtr& task, const std::string& why);
  // ownership.cpp: the robots this bridge serves (docs/bridge.md#replicas).
  struct Fence {
    std::optional<std::int64_t> epoch;  // none from a single bridge
  };
  // A single bridge serves every robot; a replica, the robots of its slots.
  bool serves(const std::string& robot_id) const;
  // What its messages to the robot carry; nothing when it does not serve it.
  std::optional<Fence> fence_for(const std::string& robot_id) const;
  std::optional<std::int64_t> epoch_for(const std::string& robot_id) const;
  // The coordinator's thread: returns once the caches hold the slots' Robots
  // and Tasks and the loop serves exactly `slots`.
  bool serve_from_coordinator(const ServedSlots& slots);
  // The Robot and Task informers select these slots' objects; with `wait`,
  // returns once they are listed (false: not within the renew deadline).
  bool select_caches(const ServedSlots& slots, bool wait);
  bool serve_in_loop(const ServedSlots& slots);
  // The coordinator's thread, after each poll: caches of slots let go are
  // narrowed once this bridge's writes to them are in.
  void narrow_caches();
  // The coordinator's thread: no write to these slots' Robots and Tasks is
  // waiting or under way (a hand-over waits for it).
  bool drained(const std::vector<bool>& slots) const;
  // Slots lost: heartbeats waiting for their slot written now, memory and
  // timers dropped. Slots gained: their Tasks reconciled (dispatched under
  // the new epoch), their robots' artifact lists published.
  void serve_slots(const ServedSlots& slots);
  // bridge_metrics.cpp
  void declare_metrics();
  void collect_metrics(daemon::Metrics& m) const;
  // own_subscriptions.cpp (a replica with replica-own-subscriptions)
  bool own_subscriptions() const;
  // left_cache.cpp: a Robot or Task that leaves a replica's cache, deleted or
  // relabelled by hand.
  void correct_slot_label(bool robot, const kube::ObjectPtr& object);
  void robot_left_cache(const std::string& robot_id, const std::string& uid);
  void robot_in_cache(const std::string& robot_id, const std::string& uid);
  bool robot_left_lately(const std::string& robot_id) const;
  // True (and remembered) for a Task not deleted but relabelled.
  bool task_left_not_deleted(const crd::TaskView& task, bool final_state_unknown);
  bool task_left_lately(const std::string& uid) const;
  void task_back_in_cache(const std::string& uid);
  // Follows the robot's topics if its slot is served here and its Robot
  // cached, and lets them go if not.
  void follow_robot(const std::string& robot_id);
  // After the served slots changed: their cached robots followed, the rest
  // let go; with slots gained, every robot's retained presence asked for
  // again, to find the gained slots' robots heard by nobody.
  void follow_served_slots(bool gained);
  // A presence of a robot served here with no Robot cached: online, and
  // still without a Robot after a grace, it is told to register again.
  void note_unfollowed_presence(const Presence& message);
  void check_unfollowed();
  void ask_presences_again();
  void subscriptions_on_connected();
  void subscribe_soon();
  void pump_subscriptions();
  // broker_identities.cpp
  std::optional<dynsec::Desired> desired_identity(const std::string& robot_id) const;
  void identities_on_connected();
  void request_identity_list();
  void relist_identities_later();
  void reconcile_identity(const std::string& robot_id);
  void on_dynsec_response(const std::string& payload);
  void on_identity_list(const dynsec::Response& response);
  void identity_answered(const std::string& correlation, const std::string& error);
  void pump_identities();
  // The broker's offline presence for a robot whose login was removed: the
  // broker skips the will of a client it disconnects itself.
  void say_offline(const std::string& robot_id);
  // broker_logins.cpp (--login-plugin)
  std::optional<std::uint64_t> login_epoch(std::uint32_t slot) const;
  void logins_on_connected();
  void logins_on_slots_gained(const std::vector<std::uint32_t>& slots);
  bool login_id_usable(const std::string& robot_id);
  void queue_login(const std::string& robot_id);
  void pump_logins();
  void on_login_response(const std::string& payload);
  void login_batch_done(const std::string& correlation, const std::string& trouble);
  void send_whole_later(const std::vector<std::uint32_t>& slots);

  BridgeConfig config_;
  std::string namespace_;
  daemon::EventLoop& loop_;
  kube::Client& client_;
  LinkFactory make_link_;
  daemon::Metrics& metrics_;
  LogFollows log_follows_;
  BridgeHooks hooks_;

  std::unique_ptr<kube::Informer> robots_, tasks_;
  std::unique_ptr<kube::Informer> secrets_;  // robot Secrets, only with --dynamic-security
  Identities identities_;
  Logins logins_;
  std::atomic<bool> logins_synced_{false};  // logins_.unsynced empty, for readiness from any thread
  std::unique_ptr<KubeWriter> writer_;
  std::unique_ptr<mqtt::Link> link_;
  std::atomic<const mqtt::Link*> link_for_metrics_{nullptr};  // link_, read by the metrics thread
  std::unique_ptr<AckSender> acks_;
  // With --replica-id: the coordinator, its own client (one attempt per
  // request), and the slots served now (the loop's; epoch per slot, 0: not).
  std::unique_ptr<kube::Client> lease_client_;
  std::unique_ptr<SlotCoordinator> coordinator_;
  ServedSlots served_ = ServedSlots(kSlots, 0);
  // What the informers hold (at least), and what the loop was last told to
  // serve: the coordinator's calls only, which it makes one at a time.
  ServedSlots cached_slots_ = ServedSlots(kSlots, 0), serving_slots_ = ServedSlots(kSlots, 0);
  std::atomic<bool> leaving_{false};  // shutting down: the coordinator waits for the loop no more
  RobotSubscriptions subscriptions_;
  std::uint64_t subscriptions_batches_ = 0;  // batches sent so far
  std::uint64_t subscriptions_batch_ = 0;    // the one in flight, 0: none
  daemon::EventLoop::TimerId subscriptions_timer_ = 0;
  // Robots served here, online by their presence and with no Robot cached,
  // and since when (bounded).
  std::map<std::string, std::chrono::steady_clock::time_point> unfollowed_online_;
  daemon::EventLoop::TimerId unfollowed_timer_ = 0, presences_timer_ = 0;

  // Messages between Paho's thread and the loop: at most this many wait, so
  // a burst waits in the broker, not in the bridge's heap.
  daemon::Inbox inbox_{8192};
  std::map<std::string, RobotMemory> robot_memory_;
  std::map<std::string, TaskMemory> task_memory_;  // by uid
  // left_cache.cpp: Robots (by name) and Tasks (by uid) that left a
  // replica's cache lately, and when.
  struct RobotLeft {
    std::chrono::steady_clock::time_point at;
    std::string uid;
  };
  std::map<std::string, RobotLeft> robots_left_;
  std::map<std::string, std::chrono::steady_clock::time_point> tasks_left_;
  // Robots without a Robot told to register again, and when (bounded: a
  // flood of made-up ids cannot grow it without limit).
  std::map<std::string, std::chrono::steady_clock::time_point> told_to_register_;
  // Refusals in the log: the first of each reason, then a summary at most
  // every 10 s (counted one by one in the metrics).
  RefusalLog refusal_log_{std::chrono::seconds(10)};
  // Robots created for robots that register for the first time: rate and
  // cap (on_register.cpp). The unapproved count is read from the informer at
  // most once a second, plus the Robots created since.
  std::unique_ptr<NewRobotGate> new_robots_;
  // Answers to refusals, at most 200 a second: a robot that misses one asks
  // again, and a flood of refused messages must not become a flood of
  // publishes the bridge spends its time on.
  TokenBucket refusal_answers_{200};
  std::size_t unapproved_counted_ = 0, unapproved_created_since_ = 0;
  std::optional<std::chrono::steady_clock::time_point> unapproved_counted_at_;
  daemon::EventLoop::TimerId refusal_summary_timer_ = 0;
  std::chrono::milliseconds reconnect_delay_{500};
  bool started_link_ = false;
  bool warned_anonymous_ = false;  // once per process: it connected with no credential
  bool stopping_ = false;
  std::atomic<bool> mqtt_connected_{false}, synced_{false};
  std::atomic<bool> identities_listed_{false};  // identities_.listed, for readiness from any thread
  std::shared_ptr<std::function<void()>> watchdog_;
};

}  // namespace k8s4r::bridge
