// Go duration strings, as Kubernetes serializes metav1.Duration ("90s",
// "1m30s", "1h0m0s", "500ms") and as users write them in manifests
// (spec.timeout: "1.5h").
//
// parse_go_duration accepts exactly what Go's time.ParseDuration accepts: an
// optional sign, then "0" or one or more <decimal><unit> with units ns, us,
// µs, μs, ms, s, m, h; values beyond ±2^63 ns are an error, as in Go.
// format_go_duration prints what Go's Duration.String() prints.
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/common/result.h"

#include <chrono>
#include <string>
#include <string_view>

namespace k8s4r {

Result<std::chrono::nanoseconds> parse_go_duration(std::string_view text);

// The longest timeout, interval or delay anything of ours accepts: 87600h
// (ten years). Go allows 2^63 ns (292 years), but a deadline is a clock
// reading plus such values (now + timeout + killTimeout, a restart's delay
// within its interval), and a sum near 2^63 ns wraps and takes effect at
// once; ten years keeps every such sum far from it.
inline constexpr std::chrono::hours kMaxDuration{87600};

// For fields where a sign makes no sense (timeouts, intervals, delays, and
// every duration in a daemon's configuration): the same grammar without a
// leading '+' or '-', and at most kMaxDuration.
Result<std::chrono::nanoseconds> parse_non_negative_go_duration(std::string_view text);

std::string format_go_duration(std::chrono::nanoseconds duration);

}  // namespace k8s4r
