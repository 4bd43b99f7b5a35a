// The Bridge's wiring: informers, writers, the MQTT link, routing each
// message to its handler, refusals and readiness (its metrics:
// bridge_metrics.cpp).
#include "k8s4r/bridge/bridge.h"

#include "k8s4r/bridge/cached_fields.h"

#include "k8s4r/common/login_records.h"
#include "k8s4r/crd/resources.h"
#include "k8s4r/crd/robot_secret.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <utility>

namespace k8s4r::bridge {

using nlohmann::json;

Bridge::Bridge(BridgeConfig config, std::string namespace_name, daemon::EventLoop& loop, kube::Client& client,
               LinkFactory make_link, daemon::Metrics& metrics, BridgeHooks hooks)
    : config_(std::move(config)),
      namespace_(std::move(namespace_name)),
      loop_(loop),
      client_(client),
      make_link_(std::move(make_link)),
      metrics_(metrics),
      log_follows_(config_.log_reply_to(),
                   [this](const std::string& topic, const std::string& payload) {
                     // A follower's request, from its thread: the link is the loop's. At
                     // QoS 0: never queued for a robot that is away (its answer would
                     // reach nobody); a lost one is asked again.
                     loop_.post([this, topic, payload] {
                       if (link_ && !stopping_) link_->publish(topic, payload, 0, false, {});
                     });
                   }),
      hooks_(std::move(hooks)) {
  declare_metrics();

  kube::InformerOptions robot_options{crd::kRobots, namespace_};
  kube::InformerOptions task_options{crd::kTasks, namespace_};
  task_options.consistency_check_interval = std::chrono::minutes(5);
  robot_options.transform = keep_cached_robot_fields;
  if (!config_.replica_id.empty()) {
    // A replica caches only its slots' Robots and Tasks (ownership.cpp):
    // none until the slot table gives it some.
    robot_options.label_selector = task_options.label_selector = slot_selector(ServedSlots(kSlots, 0));
  }
  // A fleet's Robots are the bridge's largest cache, each read about once per
  // heartbeat: packed, 10,000 of them take a few MiB instead of some 40.
  robot_options.packed = true;
  task_options.transform = keep_cached_fields;
  robots_ = std::make_unique<kube::Informer>(client_, robot_options);
  tasks_ = std::make_unique<kube::Informer>(client_, task_options);
  if (config_.dynamic_security || config_.login_plugin) {
    kube::InformerOptions secret_options{crd::kSecrets, namespace_};
    secret_options.label_selector = crd::kRobotIdLabel;
    secret_options.transform = crd::keep_robot_secret_fields;  // the token, and nothing else of a Secret
    secrets_ = std::make_unique<kube::Informer>(client_, secret_options);
    const auto changed = [this](const kube::ObjectPtr& secret) {
      loop_.post([this, robot = crd::robot_of_secret(*secret)] {
        if (config_.dynamic_security) reconcile_identity(robot);
        if (config_.login_plugin) queue_login(robot);
      });
    };
    secrets_->add_handler(
        kube::EventHandler{changed,
                           [changed](const kube::ObjectPtr&, const kube::ObjectPtr& secret) { changed(secret); },
                           [changed](const kube::ObjectPtr& secret, bool) { changed(secret); },
                           {}});
    std::random_device random;
    identities_.prefix = "k8s4r-bridge-" + std::to_string(random()) + "-";
    logins_.prefix = "bridge-" + std::to_string(random()) + ".";
    // A single bridge's epoch: its start, in ms. Not a fence: a single
    // bridge has no lease, and one that meets a newer epoch takes the slot
    // over (broker_logins.cpp); two copies send the same Secrets.
    logins_.epochs.assign(kSlots,
                          static_cast<std::uint64_t>(
                              std::chrono::duration_cast<std::chrono::milliseconds>(now().time_since_epoch()).count()));
    logins_.busy.assign(kSlots, false);
  }
  tasks_->add_index("robot", [](const json& task) -> std::vector<std::string> {
    const std::string robot = crd::read_task(task).target_robot;
    if (robot.empty()) return {};
    return {robot};
  });
  tasks_->add_handler(kube::EventHandler{[this](const kube::ObjectPtr& task) {
                                           loop_.post([this, task] {
                                             correct_slot_label(false, task);
                                             reconcile_task(task);
                                           });
                                         },
                                         [this](const kube::ObjectPtr&, const kube::ObjectPtr& task) {
                                           loop_.post([this, task] {
                                             correct_slot_label(false, task);
                                             reconcile_task(task);
                                           });
                                         },
                                         [this](const kube::ObjectPtr& task, bool final_state_unknown) {
                                           loop_.post([this, task, final_state_unknown] {
                                             on_task_deleted(task, final_state_unknown);
                                           });
                                         },
                                         {}});
  // A robot that goes away releases the Tasks being deleted on it.
  robots_->add_handler(kube::EventHandler{
      [this](const kube::ObjectPtr& robot) {
        // First sight: its list to keep is published (retained) once, an empty one too (the broker may
        // hold one from before that is no longer wanted).
        loop_.post([this, robot] {
          const std::string name = crd::read_robot(*robot).name;
          robot_in_cache(name, crd::string_at(*robot, {"metadata", "uid"}));
          correct_slot_label(true, robot);
          follow_robot(name);
          send_prefetch(name, false);
        });
      },
      [this](const kube::ObjectPtr&, const kube::ObjectPtr& robot) {
        loop_.post([this, robot] {
          correct_slot_label(true, robot);
          on_robot_changed(crd::read_robot(*robot).name, false);
        });
      },
      [this](const kube::ObjectPtr& robot, bool) {
        loop_.post([this, name = crd::read_robot(*robot).name, uid = crd::string_at(*robot, {"metadata", "uid"})] {
          robot_left_cache(name, uid);
        });
      },
      [connected = kube::field_changed("/status/connected"), phase = kube::field_changed("/status/phase"),
       prefetch = kube::field_changed("/status/prefetch"),
       slot = kube::field_changed("/metadata/labels/robot.k8s4r.io~1slot")](const json& old_robot, const json& robot) {
        return connected(old_robot, robot) || phase(old_robot, robot) || prefetch(old_robot, robot) ||
               slot(old_robot, robot);
      }});

  new_robots_ =
      std::make_unique<NewRobotGate>(static_cast<double>(config_.new_robots_per_second), config_.max_unapproved_robots);
  if (!config_.replica_id.empty()) {
    lease_client_ =
        std::make_unique<kube::Client>(kube::lease_client_config(client_.config(), config_.replica_retry_period));
    SlotCoordinatorConfig slots{
        namespace_,
        config_.replica_id,
        config_.replica_lease_duration,
        config_.replica_renew_deadline,
        config_.replica_retry_period,
        [this](const ServedSlots& served) { return serve_from_coordinator(served); },
        [this](const std::vector<bool>& handing) { return drained(handing); },
        [this] { narrow_caches(); },
        hooks_.on_lost_lease ? hooks_.on_lost_lease : [this] { loop_.post([this] { shutdown(); }); }};
    coordinator_ = std::make_unique<SlotCoordinator>(*lease_client_, std::move(slots), loop_.clock());
  }
  acks_ = std::make_unique<AckSender>(
      loop_,
      [this](const std::string& topic, const std::string& payload) {
        // At QoS 0: an acknowledgement lost costs the robot a resend, which is
        // answered again; at QoS 1 every heartbeat's would wait in the window of
        // 20 unacknowledged publishes the broker allows, and a fleet's pile up
        // in the bridge's memory. Not connected: the robot sends again, and is
        // answered then.
        if (mqtt_connected_ && link_) {
          link_->publish(topic, payload, 0, false, [topic](bool ok, const std::string& error) {
            if (!ok) spdlog::debug("acknowledgement to {} not sent: {}", topic, error);
          });
        }
      },
      [this](const std::string& robot_id) { return epoch_for(robot_id); },
      // Room while fewer publishes than one flush of a replica's robots wait
      // for the MQTT library: beyond, they would only queue in memory and
      // arrive stale.
      [this] { return !link_ || link_->backlog().queued < kAcksWaitWhileQueued; });
  writer_ = std::make_unique<KubeWriter>(
      client_,
      [this](const ObjectRef& ref) -> kube::ObjectPtr {
        if (ref.resource.plural == crd::kTasks.plural) return tasks_->get(ref.namespace_, ref.name);
        if (ref.resource.plural == crd::kRobots.plural) return robots_->get(ref.namespace_, ref.name);
        return nullptr;
      },
      metrics_, config_.kube_writers);

  metrics_.add_collector([this](daemon::Metrics& m) { collect_metrics(m); });
}

Bridge::~Bridge() {
  leaving_ = true;
  if (coordinator_) coordinator_->stop();
  inbox_.close();  // a callback waiting for room would hold up the link's teardown
  acks_.reset();
  link_for_metrics_ = nullptr;
  if (link_) link_.reset();
  if (writer_) writer_->stop();
  if (robots_) robots_->stop();
  if (tasks_) tasks_->stop();
  if (secrets_) secrets_->stop();
}

Timestamp Bridge::now() const { return loop_.clock().wall(); }

ObjectRef Bridge::robot_ref(const std::string& robot_id) const { return {crd::kRobots, namespace_, robot_id}; }
ObjectRef Bridge::task_ref(const std::string& name) const { return {crd::kTasks, namespace_, name}; }

void Bridge::start() {
  spdlog::info("k8s4r-bridge: watching Robots and Tasks in namespace {}, broker {}", namespace_, config_.broker_url);
  robots_->start();
  tasks_->start();
  if (secrets_) secrets_->start();
  if (coordinator_) coordinator_->start();
  if (hooks_.watchdog_interval && hooks_.notify) {
    const auto interval = *hooks_.watchdog_interval;
    std::shared_ptr<std::function<void()>> feed = std::make_shared<std::function<void()>>();
    *feed = [this, interval, weak = std::weak_ptr<std::function<void()>>(feed)] {
      hooks_.notify("WATCHDOG=1");
      if (auto again = weak.lock(); again && !stopping_) loop_.after(interval, *again);
    };
    watchdog_ = feed;
    loop_.post(*feed);
  }
  check_synced();
}

void Bridge::check_synced() {
  if (stopping_) return;
  if (robots_->has_synced() && tasks_->has_synced() && (!secrets_ || secrets_->has_synced())) {
    synced_ = true;
    spdlog::info("informers synced: {} robot(s), {} task(s); connecting to the broker", robots_->list().size(),
                 tasks_->list().size());
    link_ = make_link_(
        mqtt::LinkEvents{[this] { loop_.post([this] { on_connected(); }); },
                         [this](const std::string& cause) { loop_.post([this, cause] { on_disconnected(cause); }); },
                         [this](const std::string& cause) { loop_.post([this, cause] { on_disconnected(cause); }); },
                         [this](const std::string& topic, const std::string& payload) {
                           inbox_.enter();  // Paho's thread waits here while the loop is behind
                           loop_.post([this, topic, payload] {
                             inbox_.leave();
                             on_message(topic, payload);
                           });
                         }});
    link_for_metrics_ = link_.get();
    connect();
    return;
  }
  loop_.after(std::chrono::milliseconds(20), [this] { check_synced(); });
}

void Bridge::connect() {
  if (stopping_ || !link_) return;
  spdlog::info("connecting to {}", config_.broker_url);
  link_->connect();
}

void Bridge::on_connected() {
  if (stopping_) return;
  mqtt_connected_ = true;
  reconnect_delay_ = std::chrono::milliseconds(500);
  metrics_.set("k8s4r_bridge_mqtt_connected", {}, 1);
  spdlog::info("connected to {}", config_.broker_url);
  if (config_.username.empty() && config_.cert_file.empty() && !std::exchange(warned_anonymous_, true)) {
    spdlog::warn(
        "connected with neither a user name nor a certificate: this broker lets anonymous clients in, and any of "
        "them can publish as any robot or as the bridge; give it a login per robot and the bridge its own "
        "(docs/security.md)");
  }
  // Register, task status and presence at QoS 1: each must arrive, and the
  // broker keeps them in the bridge's session while it is away. Heartbeats at
  // QoS 0 (the broker downgrades them for the bridge alone; robots still
  // publish at QoS 1): each is superseded by the next, so the broker neither
  // queues them while the bridge is away nor lets them fill the queue that
  // holds status reports (Mosquitto drops what exceeds max_queued_messages).
  // The shared legacy topics only while Go K8s4r agents may be left. A session
  // that subscribed to them earlier keeps them at the broker: what arrives
  // there with legacy-topics off is refused (LegacyTopic), never applied.
  // A replica following its own robots (own_subscriptions.cpp) takes only
  // the registers and presences of all, and the presences (the whole
  // fleet's retained ones come with them) once it serves slots: its first
  // slots ask for them.
  std::vector<mqtt::Subscription> subscriptions{{std::string(topics::kAllRegisterFilter), 1}};
  const bool serves_slots = std::any_of(served_.begin(), served_.end(), [](auto epoch) { return epoch != 0; });
  if (!own_subscriptions() || serves_slots) subscriptions.push_back({std::string(topics::kAllPresenceFilter), 1});
  if (!own_subscriptions()) {
    subscriptions.push_back({std::string(topics::kAllTaskStatusFilter), 1});
    subscriptions.push_back({std::string(topics::kAllHeartbeatFilter), 0});
  }
  if (config_.legacy_topics) {
    subscriptions.push_back({std::string(topics::kRegister), 1});
    subscriptions.push_back({std::string(topics::kHeartbeat), 0});
  }
  // Answers to this bridge's followers of tasks' logs: none comes unless one asked.
  subscriptions.push_back({topics::log_chunks_filter(config_.log_reply_to()).value(), 1});
  if (config_.dynamic_security) subscriptions.push_back({std::string(dynsec::kResponseTopic), 1});
  if (config_.login_plugin) subscriptions.push_back({std::string(logins::kResponseTopic), 1});
  link_->subscribe(subscriptions, [this](bool ok, const std::string& error) {
    loop_.post([this, ok, error] {
      if (!ok) {
        spdlog::error("subscribing failed: {}; reconnecting", error);
        on_disconnected("subscribe failed");
        return;
      }
      if (own_subscriptions()) {
        spdlog::info(
            "subscribed to every robot's register and presence (QoS 1){}; following its own robots' heartbeat "
            "(QoS 0) and task status (QoS 1)",
            config_.legacy_topics ? " and the legacy shared topics" : "");
      } else {
        spdlog::info("subscribed to register, task status and presence (QoS 1) and heartbeat (QoS 0){}",
                     config_.legacy_topics ? ", robots' own topics and the legacy shared ones"
                                           : ", robots' own topics only (legacy-topics off)");
      }
      if (hooks_.notify) hooks_.notify("READY=1\nSTATUS=connected, informers synced");
      subscriptions_on_connected();
      identities_on_connected();
      logins_on_connected();
      // Tasks that wait on a dispatch while the broker was away.
      for (const auto& task : tasks_->list()) reconcile_task(task);
      // Lists to keep that changed while it was away (a broker without
      // persistence lost the retained ones too).
      for (const auto& robot : robots_->list()) send_prefetch(crd::read_robot(*robot).name, true);
    });
  });
}

void Bridge::on_disconnected(const std::string& cause) {
  if (stopping_) return;
  if (mqtt_connected_)
    spdlog::warn("lost the broker: {}", cause);
  else
    spdlog::warn("cannot connect to {}: {}", config_.broker_url, cause);
  mqtt_connected_ = false;
  identities_.listed = identities_listed_ = false;  // listed again on the next connection
  logins_synced_ = false;                           // sent whole again on the next connection
  subscriptions_batch_ = 0;                         // its answer, if any, is of this connection
  metrics_.set("k8s4r_bridge_mqtt_connected", {}, 0);
  metrics_.add("k8s4r_bridge_mqtt_connection_losses_total");
  static thread_local std::mt19937 random{std::random_device{}()};
  const auto jittered = std::chrono::milliseconds(
      std::uniform_int_distribution<std::int64_t>(reconnect_delay_.count() / 2, reconnect_delay_.count())(random));
  reconnect_delay_ = std::min(reconnect_delay_ * 2, std::chrono::milliseconds(30'000));
  loop_.after(jittered, [this] { connect(); });
}

void Bridge::send_prefetch(const std::string& robot_id, bool again) {
  if (!mqtt_connected_ || !link_) return;  // sent to every robot on connecting
  if (!serves(robot_id)) return;           // its owner's
  auto topic = topics::artifacts(robot_id);
  if (!topic) return;
  const kube::ObjectPtr robot = robots_->get(namespace_, robot_id);
  if (!robot && !again) return;
  // No Robot (yet) for a robot that registers: an empty list, so one the
  // broker kept for an earlier robot of that id is not taken.
  Prefetch wanted = robot ? prefetch_of_robot(*robot, now()) : Prefetch{robot_id, {}, now()};
  const std::string listed = to_json_value(wanted)["artifacts"].dump();
  RobotMemory& memory = robot_memory_[robot_id];
  if (!again && memory.prefetch_sent == listed) return;
  memory.prefetch_sent = listed;
  // Retained: a robot that connects later, or again, gets the newest list
  // from the broker, whether or not the bridge is there. Not taken by the
  // broker: sent again at the next change, or connection.
  link_->publish(topic.value(), encode(wanted), 1, true,
                 [this, robot_id, topic = topic.value()](bool ok, const std::string& error) {
                   if (ok) return;
                   spdlog::warn("publish to {} failed: {}", topic, error);
                   loop_.post([this, robot_id] {
                     if (auto found = robot_memory_.find(robot_id); found != robot_memory_.end())
                       found->second.prefetch_sent.reset();
                   });
                 });
  spdlog::debug("robot {}: told to keep {} artifact(s) ahead of need", robot_id, wanted.artifacts.size());
}

void Bridge::forget_prefetch(const std::string& robot_id) {
  if (!mqtt_connected_ || !link_) return;
  auto topic = topics::artifacts(robot_id);
  if (!topic) return;
  // An empty list (the robot, if it still runs, lets go of what it kept),
  // then nothing retained for an id that is gone.
  link_->publish(topic.value(), encode(Prefetch{robot_id, {}, now()}), 1, true, {});
  link_->publish(topic.value(), "", 1, true, {});
}

void Bridge::publish(const std::string& topic, const std::string& payload, std::function<void(bool)> done) {
  if (!link_) {
    if (done) done(false);
    return;
  }
  link_->publish(topic, payload, 1, false, [this, topic, done](bool ok, const std::string& error) {
    if (!ok) spdlog::warn("publish to {} failed: {}", topic, error);
    if (done) loop_.post([done, ok] { done(ok); });
  });
}

namespace {
// The topic label of k8s4r_bridge_messages_not_served_total.
const char* topic_label(topics::TopicKind kind) {
  switch (kind) {
    case topics::TopicKind::register_robot:
      return "register";
    case topics::TopicKind::heartbeat:
      return "heartbeat";
    case topics::TopicKind::presence:
      return "presence";
    case topics::TopicKind::task_status:
      return "task_status";
    default:
      return "other";
  }
}
}  // namespace

void Bridge::on_message(const std::string& topic, const std::string& payload) {
  if (stopping_) return;
  if (topic == dynsec::kResponseTopic) return on_dynsec_response(payload);
  if (topic == logins::kResponseTopic) return on_login_response(payload);
  auto parsed_topic = topics::parse_topic(topic);
  if (!parsed_topic) {
    metrics_.add("k8s4r_bridge_messages_total", {{"topic", "other"}});
    refuse("a message on " + topic, {"InvalidTopic", parsed_topic.error().to_string()});
    return;
  }
  const topics::ParsedTopic& where = parsed_topic.value();
  // A log follower's answer: for this replica whoever serves the robot.
  if (where.kind == topics::TopicKind::log_chunk) return on_log_chunk(where, payload);
  // Another replica's robot: its owner has this message too. (One on a
  // legacy shared topic is judged once its payload names the robot.)
  if (!where.legacy && !where.robot_id.empty() && !serves(where.robot_id)) {
    metrics_.add("k8s4r_bridge_messages_not_served_total", {{"topic", topic_label(where.kind)}});
    // Not a register or presence (those reach every replica): a filter left from before.
    if (own_subscriptions() && where.kind != topics::TopicKind::register_robot &&
        where.kind != topics::TopicKind::presence) {
      subscriptions_.stray(where.robot_id);
      subscribe_soon();
    }
    return;
  }
  const auto not_served = [&](const std::string& robot_id) {
    if (serves(robot_id)) return false;
    metrics_.add("k8s4r_bridge_messages_not_served_total", {{"topic", topic_label(where.kind)}});
    return true;
  };
  if (where.legacy && !config_.legacy_topics) {
    metrics_.add("k8s4r_bridge_messages_total", {{"topic", "other"}});
    return refuse("a message on " + topic,
                  {"LegacyTopic", "legacy-topics is off: robots register and heartbeat on k8s4r/robots/<id>/..."});
  }
  // On a robot's own topic the payload must name that robot: the broker's
  // ACL binds the topic to the robot's identity, not the payload.
  const auto mismatch = [&](const std::string& payload_robot_id) {
    return !where.legacy && payload_robot_id != where.robot_id;
  };
  switch (where.kind) {
    case topics::TopicKind::register_robot: {
      metrics_.add("k8s4r_bridge_messages_total", {{"topic", "register"}});
      auto message = parse_register(payload);
      if (!message) return refuse("a register", {"InvalidPayload", message.error().to_string()}, where.robot_id);
      if (mismatch(message.value().robot_id))
        return refuse("a register",
                      {"TopicMismatch", "robotId " + message.value().robot_id + " differs from the topic's"},
                      where.robot_id);
      if (not_served(message.value().robot_id)) return;
      return on_register(message.value());
    }
    case topics::TopicKind::heartbeat: {
      metrics_.add("k8s4r_bridge_messages_total", {{"topic", "heartbeat"}});
      // A robot with no Robot: refused by its topic alone, unparsed (a flood
      // of made-up robots costs a cache lookup each).
      if (!where.legacy && !robots_->get(namespace_, where.robot_id)) return refuse_unknown_heartbeat(where.robot_id);
      auto message = parse_heartbeat(payload);
      if (!message) return refuse("a heartbeat", {"InvalidPayload", message.error().to_string()}, where.robot_id);
      if (mismatch(message.value().robot_id))
        return refuse("a heartbeat",
                      {"TopicMismatch", "robotId " + message.value().robot_id + " differs from the topic's"},
                      where.robot_id);
      if (not_served(message.value().robot_id)) return;
      return on_heartbeat(message.value(), !where.legacy);
    }
    case topics::TopicKind::presence: {
      metrics_.add("k8s4r_bridge_messages_total", {{"topic", "presence"}});
      // Nothing to write before it registers (on_presence); a replica
      // following its own robots looks for one heard by nobody.
      if (!own_subscriptions() && !robots_->get(namespace_, where.robot_id)) return;
      auto message = parse_presence(payload);
      if (!message) return refuse("a presence", {"InvalidPayload", message.error().to_string()}, where.robot_id);
      if (mismatch(message.value().robot_id))
        return refuse("a presence",
                      {"TopicMismatch", "robotId " + message.value().robot_id + " differs from the topic's"},
                      where.robot_id);
      if (!robots_->get(namespace_, where.robot_id)) return note_unfollowed_presence(message.value());
      return on_presence(message.value());
    }
    case topics::TopicKind::task_status: {
      metrics_.add("k8s4r_bridge_messages_total", {{"topic", "task_status"}});
      auto message = parse_task_status(payload);
      if (!message)
        return refuse("a task status", {"InvalidPayload", message.error().to_string()}, where.robot_id, where.task_uid);
      if (message.value().robot_id != where.robot_id || message.value().task_uid != where.task_uid) {
        return refuse("a task status",
                      {"TopicMismatch", "robotId " + message.value().robot_id + " and taskUid " +
                                            message.value().task_uid + " differ from the topic's"},
                      where.robot_id, where.task_uid);
      }
      return on_task_status(message.value());
    }
    case topics::TopicKind::response:
    case topics::TopicKind::dispatch:
    case topics::TopicKind::acks:
    case topics::TopicKind::artifacts:
    case topics::TopicKind::log_request:
    case topics::TopicKind::log_chunk:
      // Our own messages, if the broker's ACL lets a robot echo them: not for us.
      metrics_.add("k8s4r_bridge_messages_total", {{"topic", "other"}});
      return refuse("a message on " + topic, {"InvalidTopic", "the bridge publishes this topic, it does not read it"});
  }
}

void Bridge::on_log_chunk(const topics::ParsedTopic& where, const std::string& payload) {
  metrics_.add("k8s4r_bridge_messages_total", {{"topic", "log_chunk"}});
  if (where.reply_to != config_.log_reply_to())
    return refuse("a log chunk", {"InvalidTopic", "it answers bridge " + where.reply_to + ", not this one"},
                  where.robot_id);
  auto chunk = parse_log_chunk(payload);
  if (!chunk) return refuse("a log chunk", {"InvalidPayload", chunk.error().to_string()}, where.robot_id);
  if (chunk.value().robot_id != where.robot_id)
    return refuse("a log chunk", {"TopicMismatch", "robotId " + chunk.value().robot_id + " differs from the topic's"},
                  where.robot_id);
  // One nobody waits for is late (its follower asked again) or gone: dropped.
  log_follows_.on_chunk(std::move(chunk).value());
}

std::string Bridge::not_ready_reason() const {
  if (!synced_) return "informers not synced";
  if (!mqtt_connected_) return "not connected to the broker";
  if (config_.dynamic_security && !identities_listed_) return "the broker's robot identities not listed yet";
  if (config_.login_plugin && !logins_synced_) return "the broker's robot logins not sent whole yet";
  if (coordinator_) {
    if (auto why = coordinator_->not_ready_reason(); !why.empty()) return why;
  }
  return "";
}

void Bridge::shutdown() {
  if (stopping_) return;
  stopping_ = true;
  if (hooks_.notify) hooks_.notify("STOPPING=1");
  spdlog::info("shutting down");
  inbox_.close();  // a callback waiting for room must not hold up the disconnect
  if (link_) link_->disconnect(std::chrono::milliseconds(2000));
  mqtt_connected_ = false;
  // Writes already taken finish; the rest is read back after a restart.
  writer_->stop();
  // Nothing more is published or written: its slots go to the other
  // replicas now, not when its Lease runs out.
  leaving_ = true;
  served_.assign(kSlots, 0);
  if (coordinator_) coordinator_->leave();
  robots_->stop();
  tasks_->stop();
  if (secrets_) secrets_->stop();
  loop_.stop();
}

}  // namespace k8s4r::bridge
