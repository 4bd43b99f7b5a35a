// Errors as values for everything that handles input from outside the
// process: MQTT payloads, topics, durations, times. A failure carries the
// field it is about, so an operator reading a log line knows what to fix.
//
// Thread-safety: plain values; safe to copy between threads.
#pragma once

#include <boost/outcome/basic_result.hpp>
#include <boost/outcome/policy/terminate.hpp>
#include <boost/outcome/success_failure.hpp>

#include <string>
#include <utility>

namespace k8s4r {

struct Error {
  // Dotted path of the offending field ("deviceInfo.platform.os",
  // "runningTasks[2].seq"); empty when the error is about the whole input.
  std::string field;
  // What is wrong, in words meant for a log line ("must be a string").
  std::string message;

  // "field: message", or just the message when there is no field.
  std::string to_string() const { return field.empty() ? message : field + ": " + message; }

  // The same error, seen from one level up: "platform.os" inside
  // "deviceInfo" becomes "deviceInfo.platform.os".
  Error within(const std::string& parent) const {
    if (parent.empty()) return *this;
    if (field.empty()) return Error{parent, message};
    return Error{field.front() == '[' ? parent + field : parent + "." + field, message};
  }

  bool operator==(const Error&) const = default;
};

// Result<T> holds a T or an Error. Reading value() of a failed result is a
// broken invariant and terminates the process; check has_value() first.
template <class T>
using Result = boost::outcome_v2::basic_result<T, Error, boost::outcome_v2::policy::terminate>;

// For Result<void>: `return ok();`
inline auto ok() { return boost::outcome_v2::success(); }

}  // namespace k8s4r
