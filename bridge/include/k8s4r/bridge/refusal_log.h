// What the bridge says in its log about the messages it refuses: the first
// of each reason at once, the rest as one summary line per reason at most
// once per interval ("refused 6,912 more ... (UnknownRobot) in the last
// 10s; the last: ..."). A flood of refused messages from an anonymous client
// must not become a flood of log lines; every refusal is still counted in
// k8s4r_bridge_messages_refused_total{reason}.
//
// Pure logic over the times it is given; the bridge logs what it returns and
// arms a timer for next_due().
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::bridge {

class RefusalLog {
 public:
  using Time = std::chrono::steady_clock::time_point;

  explicit RefusalLog(std::chrono::nanoseconds interval) : interval_(interval) {}

  // A refusal worded `line`: the line to log now, or none (it goes into its
  // reason's next summary).
  std::optional<std::string> record(const std::string& reason, const std::string& line, Time now);

  // The summaries due at `now`, each for a reason with refusals unlogged
  // since its last line at least an interval ago.
  std::vector<std::string> due(Time now);

  // When the next summary is due, if any refusal waits for one.
  std::optional<Time> next_due() const;

 private:
  struct Reason {
    Time logged{};               // its last line
    std::uint64_t unlogged = 0;  // refusals since
    std::string last;            // the newest of them
  };
  std::chrono::nanoseconds interval_;
  std::map<std::string, Reason> reasons_;
};

}  // namespace k8s4r::bridge
