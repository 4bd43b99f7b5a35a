// What the bridge does with a message it refuses: counts it by reason,
// logs the first of each reason and then a summary (refusal_log.h), and
// answers a robot that asks again anyway at QoS 0 and at most 200 a second.
#include "k8s4r/bridge/bridge.h"

#include <spdlog/spdlog.h>

namespace k8s4r::bridge {

void Bridge::answer_refusal(const std::string& topic, const std::string& payload) {
  if (!link_) return;
  if (!refusal_answers_.take(loop_.clock().steady())) {
    metrics_.add("k8s4r_bridge_refusal_answers_dropped_total");
    return;
  }
  link_->publish(topic, payload, 0, false, [](bool, const std::string&) {});
}

void Bridge::refuse(const std::string& what, const Refusal& refusal, const std::string& robot_id,
                    const std::string& task_uid) {
  metrics_.add("k8s4r_bridge_messages_refused_total", {{"reason", refusal.reason}});
  const std::string line = "refused " + what + (robot_id.empty() ? "" : " from robot " + robot_id) +
                           (task_uid.empty() ? "" : " for task " + task_uid) + ": " + refusal.message + " (" +
                           refusal.reason + ")";
  if (auto now_line = refusal_log_.record(refusal.reason, line, loop_.clock().steady())) {
    spdlog::warn("{}", *now_line);
    return;
  }
  arm_refusal_summaries();
}

void Bridge::arm_refusal_summaries() {
  if (refusal_summary_timer_ != 0) return;
  const auto at = refusal_log_.next_due();
  if (!at) return;
  refusal_summary_timer_ = loop_.at(*at, [this] {
    refusal_summary_timer_ = 0;
    for (const std::string& summary : refusal_log_.due(loop_.clock().steady())) spdlog::warn("{}", summary);
    arm_refusal_summaries();  // other reasons, due later
  });
}

}  // namespace k8s4r::bridge
