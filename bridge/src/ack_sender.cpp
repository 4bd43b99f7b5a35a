#include "k8s4r/bridge/ack_sender.h"

#include "k8s4r/common/topics.h"

#include <algorithm>

namespace k8s4r::bridge {

void AckSender::report(const std::string& robot_id, ReportAck ack) {
  if (ack.result == ReportResult::refused && !refusals_.take(loop_.clock().steady())) {
    refusals_dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // The same report acknowledged again while the first waits (the robot
  // sent it again): said once, with the newest word on it, found by key (a
  // burst to one robot while the link has no room stays linear).
  Waiting& waiting = waiting_[robot_id];
  const auto [at, fresh] = waiting.position.try_emplace({ack.task_uid, ack.seq}, waiting.reports.size());
  if (fresh)
    waiting.reports.push_back(std::move(ack));
  else
    waiting.reports[at->second] = std::move(ack);
  schedule();
}

void AckSender::heartbeat(const std::string& robot_id, std::optional<Timestamp> sent_at) {
  Waiting& waiting = waiting_[robot_id];
  waiting.heartbeat_seen = true;
  if (sent_at) waiting.heartbeat = sent_at;
  schedule();
}

void AckSender::resend_artifacts(const std::string& robot_id) {
  waiting_[robot_id].resend_artifacts = true;
  schedule();
}

void AckSender::schedule() {
  counted();
  if (timer_ == 0) {
    timer_ = loop_.after(kDelay, [this] {
      timer_ = 0;
      if (has_room_ && !has_room_()) {
        waits_for_room_.fetch_add(1, std::memory_order_relaxed);
        schedule();
        return;
      }
      flush();
    });
  }
}

void AckSender::flush() {
  auto waiting = std::move(waiting_);
  waiting_.clear();
  counted();
  for (auto& [robot_id, what] : waiting) {
    auto topic = topics::acks(robot_id);
    if (!topic) continue;
    const std::optional<std::int64_t> epoch = epoch_of_ ? epoch_of_(robot_id) : std::nullopt;
    std::size_t next = 0;
    do {
      Ack ack;
      ack.robot_id = robot_id;
      ack.timestamp = loop_.clock().wall();
      ack.epoch = epoch;
      if (next == 0 && what.heartbeat_seen) ack.heartbeat = what.heartbeat.value_or(*ack.timestamp);
      if (next == 0) ack.resend_artifacts = what.resend_artifacts;
      const std::size_t end = std::min(what.reports.size(), next + kMaxAcksPerMessage);
      ack.reports.assign(std::make_move_iterator(what.reports.begin() + static_cast<std::ptrdiff_t>(next)),
                         std::make_move_iterator(what.reports.begin() + static_cast<std::ptrdiff_t>(end)));
      next = end;
      publish_(topic.value(), encode(ack));
    } while (next < what.reports.size());
  }
}

}  // namespace k8s4r::bridge
