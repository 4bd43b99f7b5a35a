#include "report_sender.h"

#include "k8s4r/common/topics.h"

#include <spdlog/spdlog.h>

namespace k8s4r::agent {

using namespace std::chrono_literals;

ReportSender::ReportSender(const AgentConfig& config, StateStore& store, Durability& durability,
                           daemon::EventLoop& loop, mqtt::Link& link)
    : config_(config), store_(store), durability_(durability), loop_(loop), link_(link) {}

ReportSender::~ReportSender() { loop_.cancel(retry_timer_); }

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
  auto queued =
      store_.report(task.uid, *status.seq, topics::task_status(config_.robot_id, task.uid).value(), encode(status));
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
  drain();
}

void ReportSender::on_disconnected() {
  connected_ = false;
  in_flight_.clear();  // whatever was unacknowledged is published again
  loop_.cancel(retry_timer_);
  retry_timer_ = 0;
}

void ReportSender::drain() {
  if (!connected_) return;
  const std::uint64_t generation = generation_;
  for (const QueuedReport& queued : store_.oldest(kMaxInFlight, durability_.failing())) {
    if (in_flight_.count(queued.id)) continue;
    in_flight_.insert(queued.id);
    const std::uint64_t id = queued.id;
    link_.publish(queued.topic, queued.payload, 1, false, [this, generation, id](bool ok, const std::string& error) {
      loop_.post([this, generation, id, ok, error] {
        if (generation != generation_) return;  // a newer connection publishes it again
        in_flight_.erase(id);
        if (ok) {
          store_.acknowledge(id);
          durability_.request(false);
          if (on_delivered) on_delivered();
          drain();
          return;
        }
        spdlog::warn("publishing a status report failed: {}; will retry", error);
        if (retry_timer_ == 0 && connected_) {
          retry_timer_ = loop_.after(1s, [this] {
            retry_timer_ = 0;
            drain();
          });
        }
      });
    });
  }
}

}  // namespace k8s4r::agent
