// RFC 3339 times as Kubernetes and our MQTT payloads carry them.
//
// parse_rfc3339 accepts what Go's time.Parse(time.RFC3339, s) accepts:
// "2006-01-02T15:04:05Z", an optional fraction of 1 to 9 digits, and either
// 'Z' or a numeric offset "+07:00"; 'T' and 'Z' are upper case, as in Go.
// Every time is normalised to UTC.
//
// format_rfc3339 always writes UTC with a 'Z'. Kubernetes' metav1.Time uses
// whole seconds and metav1.MicroTime microseconds; our payloads use as many
// fractional digits as the time needs (Go's RFC3339Nano), so a time read from
// a payload is written back unchanged.
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/common/result.h"

#include <chrono>
#include <string>
#include <string_view>

namespace k8s4r {

using Timestamp = std::chrono::sys_time<std::chrono::nanoseconds>;

enum class TimePrecision {
  seconds,       // 2006-01-02T15:04:05Z
  milliseconds,  // 2006-01-02T15:04:05.000Z
  microseconds,  // 2006-01-02T15:04:05.000000Z
  nanoseconds,   // 2006-01-02T15:04:05.000000000Z
  as_needed,     // trailing zeros of the fraction dropped, no '.' when none is left
};

Result<Timestamp> parse_rfc3339(std::string_view text);

std::string format_rfc3339(Timestamp time, TimePrecision precision = TimePrecision::seconds);

// to - from, never negative, saturating: resource times span the years 1678
// to 2262, whose distance does not fit in 64-bit nanoseconds.
std::chrono::nanoseconds elapsed(Timestamp from, Timestamp to);
// time + delay, saturating (a user's "2000000h" must not wrap around).
Timestamp later_by(Timestamp time, std::chrono::nanoseconds delay);

}  // namespace k8s4r
