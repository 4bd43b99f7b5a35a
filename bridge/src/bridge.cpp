// The Bridge's wiring: informers, writers, the MQTT link, routing each
// message to its handler, refusals, readiness and metrics.
#include "k8s4r/bridge/bridge.h"

#include "k8s4r/bridge/cached_fields.h"

#include "k8s4r/common/login_records.h"
#include "k8s4r/crd/resources.h"
#include "k8s4r/crd/robot_secret.h"

#include <spdlog/spdlog.h>

#include <random>
#include <utility>

namespace k8s4r::bridge {

using nlohmann::json;
using Type = daemon::Metrics::Type;

Bridge::Bridge(BridgeConfig config, std::string namespace_name, daemon::EventLoop& loop, kube::Client& client,
               LinkFactory make_link, daemon::Metrics& metrics, BridgeHooks hooks)
    : config_(std::move(config)),
      namespace_(std::move(namespace_name)),
      loop_(loop),
      client_(client),
      make_link_(std::move(make_link)),
      metrics_(metrics),
      hooks_(std::move(hooks)) {
  metrics_.declare("k8s4r_bridge_messages_total", Type::counter, "MQTT messages received, by topic.");
  metrics_.declare("k8s4r_bridge_messages_refused_total", Type::counter,
                   "MQTT messages refused (nothing written), by reason.");
  metrics_.declare("k8s4r_bridge_dispatches_total", Type::counter,
                   "Dispatch messages published: create, resend (no report in time), resync (its robot registered "
                   "again) and delete.");
  metrics_.declare("k8s4r_bridge_dispatch_latency_seconds", Type::histogram,
                   "From the Task informer seeing state dispatching to the broker acknowledging the dispatch.",
                   {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
  metrics_.declare("k8s4r_bridge_reports_duplicate_total", Type::counter,
                   "Status reports the Task already held (a robot sending again what it has no confirmation of).");
  metrics_.declare("k8s4r_bridge_heartbeat_writes_total", Type::counter,
                   "Heartbeats written to their Robot: at once (reason=changed, first), in their slot (interval), or "
                   "ahead of an offline presence (offline).");
  metrics_.declare("k8s4r_bridge_heartbeats_coalesced_total", Type::counter,
                   "Heartbeats folded into a later write instead of written themselves.");
  metrics_.declare("k8s4r_bridge_mqtt_connected", Type::gauge, "1 while the bridge holds its MQTT session.");
  metrics_.declare(
      "k8s4r_bridge_ack_refusals_dropped_total", Type::counter,
      "Refusals of status reports not acknowledged, over 500 a second (the robot sends the report again).");
  metrics_.declare("k8s4r_bridge_refusal_answers_dropped_total", Type::counter,
                   "Answers to refused messages not sent, over 200 a second (the robot asks again).");
  metrics_.declare("k8s4r_bridge_unapproved_robots", Type::gauge,
                   "Robots waiting for approval (Pending or Rejected), as last counted for --max-unapproved-robots.");
  metrics_.declare("k8s4r_bridge_inbox_depth", Type::gauge, "MQTT messages received and not yet handled.");
  metrics_.declare("k8s4r_bridge_inbox_waits_total", Type::counter,
                   "Times the MQTT client waited for the bridge to catch up (at most 8,192 messages wait).");
  metrics_.declare("k8s4r_bridge_mqtt_connection_losses_total", Type::counter, "MQTT connections lost or refused.");
  metrics_.declare("k8s4r_bridge_registers_answered_together_total", Type::counter,
                   "Registers that came while the answer to an earlier one from the robot was on its way: written, "
                   "and answered by that answer.");
  metrics_.declare("k8s4r_bridge_acks_waiting_robots", Type::gauge,
                   "Robots with acknowledgements waiting to be sent (for a moment, or for room in the MQTT link).");
  metrics_.declare("k8s4r_bridge_acks_waits_for_room_total", Type::counter,
                   "Times the acknowledgements waited because the MQTT link had publishes queued.");
  metrics_.declare("k8s4r_bridge_loop_backlog", Type::gauge,
                   "Work posted to the bridge's loop and not yet run (messages, write completions, events).");
  metrics_.declare("k8s4r_bridge_kube_write_callbacks", Type::gauge,
                   "Completions waiting on Kubernetes writes not yet made (answers to send once they are in).");
  metrics_.declare("k8s4r_bridge_mqtt_outgoing", Type::gauge,
                   "MQTT publishes and subscribes: queued, not yet handed to the MQTT library; unacknowledged, "
                   "handed over and not yet acknowledged by the broker.");
  metrics_.declare("k8s4r_bridge_work_queue_depth", Type::gauge, "Objects with a write waiting.");
  metrics_.declare("k8s4r_bridge_work_queue_in_progress", Type::gauge, "Objects being written now.");
  metrics_.declare("k8s4r_bridge_work_queue_retries_total", Type::counter, "Writes retried after a failure.");
  metrics_.declare("k8s4r_bridge_work_queue_wait_seconds_total", Type::counter,
                   "Time writes waited in the queue, summed (divide by processed for the mean).");
  metrics_.declare("k8s4r_bridge_work_queue_longest_wait_seconds", Type::gauge, "The longest a write has waited.");
  metrics_.declare("k8s4r_bridge_work_queue_processed_total", Type::counter, "Writes taken by a writer.");
  metrics_.declare("k8s4r_bridge_informer_lists_total", Type::counter, "Full lists by the informers.");
  metrics_.declare("k8s4r_bridge_informer_watches_total", Type::counter, "Watches started by the informers.");
  metrics_.declare("k8s4r_bridge_informer_relists_total", Type::counter, "Relists after 410 Expired.");
  metrics_.declare("k8s4r_bridge_informer_list_fallbacks_total", Type::counter,
                   "Paginated lists whose continue token expired, listed again in one piece.");
  metrics_.declare("k8s4r_bridge_informer_retries_total", Type::counter,
                   "Failed lists and watches, each followed by a jittered backoff.");
  metrics_.declare("k8s4r_bridge_informer_errors_total", Type::counter,
                   "Index functions and event handlers that threw, by kind (index, handler).");
  metrics_.declare("k8s4r_bridge_informer_objects", Type::gauge,
                   "Objects cached (a replica: its slots' Robots and Tasks only).");
  metrics_.declare("k8s4r_bridge_informer_handler_backlog", Type::gauge,
                   "Events cached but not yet handled, all handlers together.");
  metrics_.declare("k8s4r_bridge_informer_consistency_checks_total", Type::counter,
                   "Informer consistency checks, by result (match, mismatch).");
  metrics_.declare("k8s4r_bridge_kube_requests_total", Type::counter,
                   "Every request to the Kubernetes API (lists, watches and writes) and its retries.");
  metrics_.declare("k8s4r_bridge_slots_served", Type::gauge,
                   "Slots (of 1,024) this replica serves; with no replica-id, 0 (it serves every robot).");
  metrics_.declare("k8s4r_bridge_slot_table_epoch", Type::gauge, "The newest epoch of the slot table read.");
  metrics_.declare("k8s4r_bridge_replicas_live", Type::gauge,
                   "Bridge replicas live by their Leases, this one included.");
  metrics_.declare("k8s4r_bridge_messages_not_served_total", Type::counter,
                   "MQTT messages of robots another replica serves, dropped unread.");
  metrics_.declare("k8s4r_bridge_robots_subscribed", Type::gauge,
                   "Robots whose topics this replica subscribes to, its own (replica-own-subscriptions).");
  metrics_.declare("k8s4r_bridge_broker_identities", Type::gauge,
                   "Robot logins the bridge holds in the broker's dynamic-security plugin.");
  metrics_.declare("k8s4r_bridge_broker_identity_changes_total", Type::counter,
                   "Robot logins made (create), given a new token (rotate) and removed (remove) in the broker.");
  metrics_.declare("k8s4r_bridge_broker_identity_errors_total", Type::counter,
                   "Dynamic-security commands that failed or were not answered, by kind.");
  metrics_.declare("k8s4r_bridge_broker_logins", Type::gauge,
                   "Robot logins the broker's k8s4r-auth plugin holds, as it last answered (--login-plugin).");
  metrics_.declare(
      "k8s4r_bridge_broker_login_batches_total", Type::counter,
      "Batches of robot logins sent to the k8s4r-auth plugin, by result: ok, stale (a section refused "
      "for an older epoch), not_durable (applied, not saved), error (refused, unanswered or undelivered).");

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
  tasks_->add_handler(kube::EventHandler{
      [this](const kube::ObjectPtr& task) { loop_.post([this, task] { reconcile_task(task); }); },
      [this](const kube::ObjectPtr&, const kube::ObjectPtr& task) {
        loop_.post([this, task] { reconcile_task(task); });
      },
      // Gone is gone: whether the last state was seen changes nothing here.
      [this](const kube::ObjectPtr& task, bool) { loop_.post([this, task] { on_task_deleted(task); }); },
      {}});
  // A robot that goes away releases the Tasks being deleted on it.
  robots_->add_handler(kube::EventHandler{
      [this](const kube::ObjectPtr& robot) {
        // First sight: its list to keep is published (retained) once, an empty one too (the broker may
        // hold one from before that is no longer wanted).
        loop_.post([this, name = crd::read_robot(*robot).name] {
          follow_robot(name);
          send_prefetch(name, false);
        });
      },
      [this](const kube::ObjectPtr&, const kube::ObjectPtr& robot) {
        loop_.post([this, name = crd::read_robot(*robot).name] { on_robot_changed(name, false); });
      },
      [this](const kube::ObjectPtr& robot, bool) {
        loop_.post([this, name = crd::read_robot(*robot).name] {
          unfollow_deleted_later(name);
          on_robot_changed(name, true);
        });
      },
      [connected = kube::field_changed("/status/connected"), phase = kube::field_changed("/status/phase"),
       prefetch = kube::field_changed("/status/prefetch")](const json& old_robot, const json& robot) {
        return connected(old_robot, robot) || phase(old_robot, robot) || prefetch(old_robot, robot);
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

  metrics_.add_collector([this](daemon::Metrics& m) {
    m.set("k8s4r_bridge_inbox_depth", {}, static_cast<double>(inbox_.depth()));
    m.set("k8s4r_bridge_inbox_waits_total", {}, static_cast<double>(inbox_.waits()));
    m.set("k8s4r_bridge_ack_refusals_dropped_total", {}, static_cast<double>(acks_->refusals_dropped()));
    m.set("k8s4r_bridge_acks_waiting_robots", {}, static_cast<double>(acks_->robots_waiting()));
    m.set("k8s4r_bridge_acks_waits_for_room_total", {}, static_cast<double>(acks_->waits_for_room()));
    const auto queue = writer_->queue_metrics();
    m.set("k8s4r_bridge_work_queue_depth", {}, static_cast<double>(queue.depth));
    m.set("k8s4r_bridge_work_queue_in_progress", {}, static_cast<double>(queue.in_progress));
    m.set("k8s4r_bridge_work_queue_retries_total", {}, static_cast<double>(queue.retries));
    m.set("k8s4r_bridge_work_queue_processed_total", {}, static_cast<double>(queue.processed));
    m.set("k8s4r_bridge_work_queue_wait_seconds_total", {}, std::chrono::duration<double>(queue.wait_total).count());
    m.set("k8s4r_bridge_work_queue_longest_wait_seconds", {},
          std::chrono::duration<double>(queue.longest_wait).count());
    m.set("k8s4r_bridge_loop_backlog", {}, static_cast<double>(loop_.posted_depth()));
    m.set("k8s4r_bridge_kube_write_callbacks", {}, static_cast<double>(writer_->waiting_callbacks()));
    if (const mqtt::Link* link = link_for_metrics_) {
      const mqtt::LinkBacklog backlog = link->backlog();
      m.set("k8s4r_bridge_mqtt_outgoing", {{"state", "queued"}}, static_cast<double>(backlog.queued));
      m.set("k8s4r_bridge_mqtt_outgoing", {{"state", "unacknowledged"}}, static_cast<double>(backlog.unacknowledged));
    }
    m.set("k8s4r_bridge_broker_identities", {}, static_cast<double>(identities_.managed.size()));
    if (coordinator_) {
      m.set("k8s4r_bridge_slot_table_epoch", {}, static_cast<double>(coordinator_->table_epoch()));
      m.set("k8s4r_bridge_replicas_live", {}, static_cast<double>(coordinator_->live_replicas()));
    }
    std::vector<std::pair<const char*, kube::Informer*>> informers{{"robots", robots_.get()}, {"tasks", tasks_.get()}};
    if (secrets_) informers.emplace_back("secrets", secrets_.get());
    for (const auto& [name, informer] : informers) {
      const auto informer_metrics = informer->metrics();
      const daemon::Labels labels{{"resource", name}};
      m.set("k8s4r_bridge_informer_lists_total", labels, static_cast<double>(informer_metrics.lists));
      m.set("k8s4r_bridge_informer_watches_total", labels, static_cast<double>(informer_metrics.watches));
      m.set("k8s4r_bridge_informer_relists_total", labels, static_cast<double>(informer_metrics.relists_after_expired));
      m.set("k8s4r_bridge_informer_list_fallbacks_total", labels, static_cast<double>(informer_metrics.list_fallbacks));
      m.set("k8s4r_bridge_informer_retries_total", labels, static_cast<double>(informer_metrics.retries));
      m.set("k8s4r_bridge_informer_errors_total", {{"resource", name}, {"kind", "index"}},
            static_cast<double>(informer_metrics.index_errors));
      m.set("k8s4r_bridge_informer_errors_total", {{"resource", name}, {"kind", "handler"}},
            static_cast<double>(informer_metrics.handler_errors));
      m.set("k8s4r_bridge_informer_handler_backlog", labels, static_cast<double>(informer_metrics.handler_backlog));
      m.set("k8s4r_bridge_informer_objects", labels, static_cast<double>(informer->size()));
      m.set("k8s4r_bridge_informer_consistency_checks_total", {{"resource", name}, {"result", "match"}},
            static_cast<double>(informer_metrics.consistency_checks - informer_metrics.consistency_mismatches));
      m.set("k8s4r_bridge_informer_consistency_checks_total", {{"resource", name}, {"result", "mismatch"}},
            static_cast<double>(informer_metrics.consistency_mismatches));
    }
    const auto stats = client_.stats();
    m.set("k8s4r_bridge_kube_requests_total", {{"kind", "request"}}, static_cast<double>(stats.requests));
    m.set("k8s4r_bridge_kube_requests_total", {{"kind", "retry"}}, static_cast<double>(stats.retries));
  });
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
  // the registers of all.
  std::vector<mqtt::Subscription> subscriptions{{std::string(topics::kAllRegisterFilter), 1}};
  if (!own_subscriptions()) {
    subscriptions.push_back({std::string(topics::kAllTaskStatusFilter), 1});
    subscriptions.push_back({std::string(topics::kAllPresenceFilter), 1});
    subscriptions.push_back({std::string(topics::kAllHeartbeatFilter), 0});
  }
  if (config_.legacy_topics) {
    subscriptions.push_back({std::string(topics::kRegister), 1});
    subscriptions.push_back({std::string(topics::kHeartbeat), 0});
  }
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
            "subscribed to every robot's register (QoS 1){}; following its own robots' heartbeat (QoS 0), "
            "task status and presence (QoS 1)",
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
  // Another replica's robot: its owner has this message too. (One on a
  // legacy shared topic is judged once its payload names the robot.)
  if (!where.legacy && !where.robot_id.empty() && !serves(where.robot_id)) {
    metrics_.add("k8s4r_bridge_messages_not_served_total");
    // Not a register (those reach every replica): a filter left from before.
    if (own_subscriptions() && where.kind != topics::TopicKind::register_robot) {
      subscriptions_.stray(where.robot_id);
      subscribe_soon();
    }
    return;
  }
  const auto not_served = [&](const std::string& robot_id) {
    if (serves(robot_id)) return false;
    metrics_.add("k8s4r_bridge_messages_not_served_total");
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
      if (!robots_->get(namespace_, where.robot_id)) return;  // nothing to write before it registers (on_presence)
      auto message = parse_presence(payload);
      if (!message) return refuse("a presence", {"InvalidPayload", message.error().to_string()}, where.robot_id);
      if (mismatch(message.value().robot_id))
        return refuse("a presence",
                      {"TopicMismatch", "robotId " + message.value().robot_id + " differs from the topic's"},
                      where.robot_id);
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
      // Our own messages, if the broker's ACL lets a robot echo them: not for us.
      metrics_.add("k8s4r_bridge_messages_total", {{"topic", "other"}});
      return refuse("a message on " + topic, {"InvalidTopic", "the bridge publishes this topic, it does not read it"});
  }
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
