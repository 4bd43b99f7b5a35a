#include "k8s4r/bridge/robot_subscriptions.h"

#include "k8s4r/common/topics.h"

namespace k8s4r::bridge {

std::vector<mqtt::Subscription> RobotSubscriptions::filters(const std::string& robot_id) {
  auto heartbeat = topics::robot_heartbeat(robot_id);
  auto reports = topics::task_status_filter(robot_id);
  if (!heartbeat || !reports) return {};
  // Heartbeats at QoS 0 as with the shared filters (bridge.cpp on_connected).
  return {{std::move(heartbeat).value(), 0}, {std::move(reports).value(), 1}};
}

void RobotSubscriptions::want(const std::string& robot_id) {
  if (filters(robot_id).empty()) return;
  stray_queue_.erase(robot_id);
  if (wanted_.insert(robot_id).second) touch(robot_id);
}

void RobotSubscriptions::unwant(const std::string& robot_id) {
  if (wanted_.erase(robot_id) > 0) touch(robot_id);
}

void RobotSubscriptions::unwant_if(const std::function<bool(const std::string&)>& gone) {
  for (auto robot = wanted_.begin(); robot != wanted_.end();) {
    if (!gone(*robot)) {
      ++robot;
      continue;
    }
    const std::string robot_id = *robot;
    robot = wanted_.erase(robot);
    touch(robot_id);
  }
}

void RobotSubscriptions::stray(const std::string& robot_id) {
  if (wanted_.contains(robot_id) || filters(robot_id).empty() || !strays_.insert(robot_id).second) return;
  // Held by an earlier process, or a connection before. One held here and
  // unwanted is being unsubscribed already.
  if (!held_.contains(robot_id)) stray_queue_.insert(robot_id);
}

void RobotSubscriptions::reconnected() {
  held_.clear();
  strays_.clear();
  stray_queue_.clear();
  dirty_ = wanted_;
}

void RobotSubscriptions::touch(const std::string& robot_id) {
  if (wanted_.contains(robot_id) != held_.contains(robot_id)) {
    dirty_.insert(robot_id);
  } else {
    dirty_.erase(robot_id);
  }
}

RobotSubscriptions::Batch RobotSubscriptions::next(std::size_t max_robots) {
  Batch batch;
  for (auto robot = dirty_.begin();
       robot != dirty_.end() && batch.subscribe.size() + batch.unsubscribe.size() < max_robots;) {
    if (wanted_.contains(*robot)) {
      held_.insert(*robot);
      batch.subscribe.push_back(*robot);
    } else {
      held_.erase(*robot);
      batch.unsubscribe.push_back(*robot);
    }
    robot = dirty_.erase(robot);
  }
  for (auto robot = stray_queue_.begin();
       robot != stray_queue_.end() && batch.subscribe.size() + batch.unsubscribe.size() < max_robots;) {
    batch.unsubscribe.push_back(*robot);
    robot = stray_queue_.erase(robot);
  }
  return batch;
}

}  // namespace k8s4r::bridge
