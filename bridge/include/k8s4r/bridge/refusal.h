// Why the bridge refused a message or a Task: a reason for the metrics
// (k8s4r_bridge_messages_refused_total{reason}) and words for the log.
#pragma once

#include <boost/outcome/basic_result.hpp>
#include <boost/outcome/policy/terminate.hpp>
#include <boost/outcome/success_failure.hpp>

#include <string>

namespace k8s4r::bridge {

struct Refusal {
  // InvalidPayload, InvalidTopic, TopicMismatch, UnknownRobot, RobotRejected,
  // TokenMismatch, UnknownTask, WrongRobot, StaleSeq, TaskFinished,
  // InvalidTask, LegacyTopic
  std::string reason;
  std::string message;
};

template <class T>
using Decision = boost::outcome_v2::basic_result<T, Refusal, boost::outcome_v2::policy::terminate>;

}  // namespace k8s4r::bridge
