#include "report_sender.h"

#include "k8s4r/common/topics.h"

#include <spdlog/spdlog.h>

namespace k8s4r::agent {

using namespace std::chrono_literals;

ReportSender::ReportSender(const AgentConfig& config, StateStore& store, Durability& durability,
                           daemon::EventLoop& loop, mqtt::Link& link)
    : config_(config),
      store_(store),
      durability_(durability),
      loop_(loop),
      link_(link),
      end_to_end_(!config.legacy_topics) {}

ReportSender::~ReportSender() {
  loop_.cancel(retry_timer_);
  loop_.cancel(resend_timer_);
}

void ReportSender::report(AgentTask& task, TaskStatus status) {
  status.task_uid = task.uid;
  status.robot_id = config_.robot_id;
  status.restart_count = task.restart_count();
  status.updated_at = loop_.clock().wall();
  // One counter serves every task: a uid forgotten after its retention and
  // dispatched again still never reuses a seq.
  status.seq = task.last_seq = store_.last_seq() + 1;
  if (!status.started_at) status.started_at = task.started_at;
  task.last_report = status;
  auto queued = store_.report(task.uid, *status.seq, status.state,
                              topics::task_status(config_.robot_id, task.uid).value(), encode(status));
  if (!queued) {
    spdlog::error("task {}: status seq {} ({}) NOT queued: {}", task.uid, *status.seq, to_string(status.state),
                  queued.error().message);
  }
  // Published once the commit holds it (seq must grow across restarts).
  durability_.request();
}

void ReportSender::on_connected() {
  connected_ = true;
  ++generation_;
  resend_after_ = kFirstResend;
  drain();
}

void ReportSender::on_disconnected() {
  connected_ = false;
  // Whatever was not confirmed is published again on the next connection.
  sent_up_to_ = 0;
  in_flight_.clear();
  unconfirmed_.clear();
  loop_.cancel(retry_timer_);
  loop_.cancel(resend_timer_);
  retry_timer_ = resend_timer_ = 0;
}

void ReportSender::drain() {
  if (!connected_) return;
  const std::uint64_t generation = generation_;
  while (in_flight_.size() < kMaxInFlight) {
    const auto batch = store_.oldest(kMaxInFlight - in_flight_.size(), durability_.failing(), sent_up_to_);
    if (batch.empty()) return;
    for (const QueuedReport& queued : batch) {
      sent_up_to_ = queued.id;
      if (superseded(queued)) continue;
      if (!in_flight_.insert(queued.id).second) continue;  // its PUBACK is still to come
      unconfirmed_.erase(queued.id);
      publish(queued, generation);
    }
  }
}

// A task's first `running`, still queued when a later report of the task
// was made, is not sent: the later one carries `startedAt`, the bridge
// records `Started` from it, and its confirmation confirms both. A burst of
// short tasks then costs one report each, not two. Every restart and end
// stays a report (and an Event) of its own; a Go K8s4r server, which tells
// nothing from `startedAt`, gets them all.
bool ReportSender::superseded(const QueuedReport& queued) const {
  if (!end_to_end_ || queued.state != TaskRunState::running) return false;
  if (store_.last_queued(queued.task_uid) == queued.id) return false;
  const auto status = parse_task_status(queued.payload);
  return status.has_value() && status.value().event == "Started" && status.value().restart_count == 0;
}

void ReportSender::publish(const QueuedReport& queued, std::uint64_t generation) {
  const std::uint64_t id = queued.id;
  link_.publish(queued.topic, queued.payload, 1, false,
                [this, generation, id, uid = queued.task_uid, seq = queued.seq](bool ok, const std::string& error) {
                  loop_.post([this, generation, id, uid, seq, ok, error] {
                    if (generation != generation_) return;  // a newer connection publishes it again
                    in_flight_.erase(id);
                    if (!ok) {
                      spdlog::warn("publishing a status report failed: {}; will retry", error);
                      sent_up_to_ = std::min(sent_up_to_, id - 1);
                      if (retry_timer_ == 0 && connected_) {
                        retry_timer_ = loop_.after(1s, [this] {
                          retry_timer_ = 0;
                          drain();
                        });
                      }
                      return;
                    }
                    if (!end_to_end_) {
                      // A Go K8s4r server confirms nothing: the broker's PUBACK is all there is.
                      store_.confirm(uid, seq);
                      durability_.request(false);
                      if (on_delivered) on_delivered();
                    } else if (store_.queued(id)) {
                      unconfirmed_.emplace(id, loop_.clock().steady());  // not confirmed before its PUBACK came
                      schedule_resend();
                    }
                    drain();
                  });
                });
}

void ReportSender::on_ack(const Ack& ack) {
  std::size_t confirmed = 0;
  for (const ReportAck& report : ack.reports) {
    if (report.result == ReportResult::refused) {
      spdlog::warn("the bridge refused the report seq {} of task {} for good: {} ({}); it is not sent again",
                   report.seq, report.task_uid, report.message, report.reason);
    }
    confirmed += store_.confirm(report.task_uid, report.seq);
  }
  if (confirmed > 0) {
    // Those confirmed leave the resend list; the rest wait on.
    std::erase_if(unconfirmed_, [&](const auto& entry) { return !store_.queued(entry.first); });
    durability_.request(false);
    if (on_delivered) on_delivered();
  }
  // The bridge is there: after a silence in which reports went unconfirmed,
  // they go again now rather than at the end of a long backoff.
  if (resend_after_ > kFirstResend && !unconfirmed_.empty()) {
    resend_after_ = kFirstResend;
    resend_all();
    return;
  }
  if (confirmed > 0) resend_after_ = kFirstResend;
  drain();
}

void ReportSender::on_bridge_back() {
  if (!end_to_end_ || unconfirmed_.empty()) return;
  resend_after_ = kFirstResend;
  resend_all();
}

void ReportSender::resend_all() {
  if (!connected_) return;
  spdlog::info("{} status report(s) not confirmed by the bridge; sending them again", unconfirmed_.size());
  // From the first unconfirmed on; in flight ones are not sent twice at once.
  sent_up_to_ = unconfirmed_.empty() ? sent_up_to_ : std::min(sent_up_to_, unconfirmed_.begin()->first - 1);
  unconfirmed_.clear();
  loop_.cancel(resend_timer_);
  resend_timer_ = 0;
  drain();
}

void ReportSender::schedule_resend() {
  if (resend_timer_ != 0 || unconfirmed_.empty()) return;
  SteadyTime oldest = unconfirmed_.begin()->second;
  for (const auto& [id, since] : unconfirmed_) oldest = std::min(oldest, since);
  resend_timer_ = loop_.at(oldest + std::chrono::duration_cast<SteadyTime::duration>(resend_after_), [this] {
    resend_timer_ = 0;
    if (unconfirmed_.empty()) return;
    const SteadyTime now = loop_.clock().steady();
    bool due = false;
    for (const auto& [id, since] : unconfirmed_) due = due || now - since >= resend_after_;
    if (!due) return schedule_resend();
    resend_after_ = std::min<std::chrono::nanoseconds>(resend_after_ * 2, kMaxResend);
    resend_all();
  });
}

}  // namespace k8s4r::agent
