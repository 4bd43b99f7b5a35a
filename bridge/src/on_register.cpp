// A robot's Register: create its Robot (Pending: the manager approves) or
// update the Robot's status, then answer on k8s4r/robots/{id}/response once
// the write is in. Go K8s4r agents wait for that answer before anything else.
// A Robot is created only within --new-robots-per-second and while fewer
// than --max-unapproved-robots wait for approval (new_robot_gate.h).
#include "k8s4r/bridge/bridge.h"

#include "k8s4r/crd/resources.h"

#include <spdlog/spdlog.h>

namespace k8s4r::bridge {

std::size_t Bridge::unapproved_robots() {
  const auto steady_now = loop_.clock().steady();
  if (!unapproved_counted_at_ || steady_now - *unapproved_counted_at_ >= std::chrono::seconds(1)) {
    std::size_t waiting = 0;
    for (const auto& robot : robots_->list()) {
      const auto phase = crd::read_robot(*robot).phase;
      if (phase != crd::RobotPhase::online && phase != crd::RobotPhase::offline) ++waiting;
    }
    unapproved_counted_ = waiting;
    unapproved_created_since_ = 0;
    unapproved_counted_at_ = steady_now;
    metrics_.set("k8s4r_bridge_unapproved_robots", {}, static_cast<double>(waiting));
  }
  return unapproved_counted_ + unapproved_created_since_;
}

void Bridge::on_register(const Register& message) {
  const std::string robot_id = message.robot_id;
  const kube::ObjectPtr robot = robots_->get(namespace_, robot_id);
  const std::string response_topic = topics::response(robot_id).value();  // the codec validated the id
  if (auto allowed = may_register(robot.get(), message); !allowed) {
    refuse("a register", allowed.error(), robot_id);
    answer_refusal(response_topic, encode(register_response(robot_id, false, allowed.error().message, robot.get())));
    return;
  }
  // A robot asks again every few seconds until it is answered: while the
  // answer to an earlier register is on its way, this one's facts are written
  // (merged with that write when it still waits) and not answered again. In
  // a registration storm the answers would otherwise multiply with the delay
  // they see, and queue behind each other towards the broker.
  const auto steady_now = loop_.clock().steady();
  const auto remembered = robot_memory_.find(robot_id);
  const bool answer_on_its_way = remembered != robot_memory_.end() && remembered->second.register_answer_since &&
                                 steady_now - *remembered->second.register_answer_since < kRegisterAnswerPatience;
  // A new Robot, unless the register it asks again about makes it already.
  // (Nothing is remembered of a robot refused here: a flood of made-up ids
  // costs no memory.)
  const bool creates = !robot && !answer_on_its_way;
  if (creates) {
    if (auto admitted = new_robots_->admit(unapproved_robots(), steady_now); !admitted) {
      refuse("a register", admitted.error(), robot_id);
      answer_refusal(response_topic, encode(register_response(robot_id, false, admitted.error().message, nullptr)));
      return;
    }
    ++unapproved_created_since_;
  }
  RobotMemory& memory = robot_memory_[robot_id];
  WriteRequest request;
  if (creates) request.create = new_robot(message, namespace_);
  // A replica sees only its slots' Robots: one that exists unseen (made
  // before slot labels) is not to be judged as new; it is labelled by the
  // backfill (slot_coordinator.h), and the robot registers again.
  request.must_be_new = coordinator_ != nullptr;
  if (request.must_be_new && request.create)
    request.exists_patch = {{"metadata", {{"labels", {{std::string(kSlotLabel), std::to_string(slot_of(robot_id))}}}}}};
  request.main_patch = robot ? register_robot_patch(message, *robot) : nullptr;
  request.status_patch = register_status_patch(message, robot.get(), now());
  if (answer_on_its_way) {
    metrics_.add("k8s4r_bridge_registers_answered_together_total");
  } else {
    memory.register_answer_since = steady_now;
    request.done = [this, robot_id, response_topic, created = !robot](bool ok, const std::string& error) {
      loop_.post([this, robot_id, response_topic, created, ok, error] {
        answer_register(robot_id, response_topic, created, ok, error);
      });
    };
  }
  // A new registration is a fresh start for heartbeat coalescing: the next
  // heartbeat compares with the Robot as the cache then holds it.
  memory.wrote = false;
  memory.unwritten.reset();
  // A Go K8s4r agent (it lists no tasks) subscribes to its dispatches some
  // seconds after it registers: what was sent it meanwhile is sent again at
  // its first heartbeat, rather than at the next resend.
  memory.resend_dispatches_at_heartbeat = !message.lists_running_tasks;
  writer_->write(robot_ref(robot_id), std::move(request));
}

void Bridge::answer_register(const std::string& robot_id, const std::string& response_topic, bool created, bool ok,
                             const std::string& error) {
  // The answer is on its way until the broker has it; then a robot that asks
  // again (it did not get this one) is answered again.
  const auto delivered = [this, robot_id](bool) {
    if (auto found = robot_memory_.find(robot_id); found != robot_memory_.end())
      found->second.register_answer_since.reset();
  };
  const kube::ObjectPtr current = robots_->get(namespace_, robot_id);
  if (ok && current && crd::read_robot(*current).phase == crd::RobotPhase::rejected) {
    // A new token from a Rejected robot: written for the manager to judge;
    // the robot asks again until it is approved.
    spdlog::info("robot {} is Rejected and registered with another token: recorded for the manager to judge", robot_id);
    publish(response_topic,
            encode(register_response(robot_id, false, "the Robot is Rejected; its new token waits for the manager",
                                     current.get())),
            delivered);
    return;
  }
  if (ok) {
    spdlog::info("robot {} registered{}", robot_id, created ? ": Robot created, Pending approval" : "");
    resync_robot(robot_id);
    // What it is to keep ahead of need, unless this bridge sent it the list
    // it holds (retained: the broker gives it to the robot when it
    // subscribes).
    const auto found = robot_memory_.find(robot_id);
    send_prefetch(robot_id, found == robot_memory_.end() || !found->second.prefetch_sent);
  } else {
    spdlog::warn("robot {} could not be registered: {}", robot_id, error);
  }
  publish(
      response_topic,
      encode(register_response(robot_id, ok, ok ? "registered" : "could not write the Robot: " + error, current.get())),
      delivered);
}

}  // namespace k8s4r::bridge
