// The bridge's metrics (docs/bridge.md#metrics-and-health): every series declared
// once, and the collector that reads the gauges and counters other parts
// keep (the inbox, the writer, the link, the informers, the Kubernetes
// client) when /metrics is scraped.
//
// Threading: collect_metrics runs on the metrics server's thread; what it
// reads is safe to read from any thread.
#include "k8s4r/bridge/bridge.h"

namespace k8s4r::bridge {

using Type = daemon::Metrics::Type;

void Bridge::declare_metrics() {
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
                   "MQTT messages of robots another replica serves, dropped unread, by topic.");
  metrics_.declare("k8s4r_bridge_slot_labels_corrected_total", Type::counter,
                   "Robots and Tasks this replica labelled back with their robot's slot (changed by hand).");
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
}

void Bridge::collect_metrics(daemon::Metrics& m) const {
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
  m.set("k8s4r_bridge_work_queue_longest_wait_seconds", {}, std::chrono::duration<double>(queue.longest_wait).count());
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
}

}  // namespace k8s4r::bridge
