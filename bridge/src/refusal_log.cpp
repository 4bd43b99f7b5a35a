#include "k8s4r/bridge/refusal_log.h"

#include "k8s4r/common/duration.h"

namespace k8s4r::bridge {

std::optional<std::string> RefusalLog::record(const std::string& reason, const std::string& line, Time now) {
  auto [it, first] = reasons_.try_emplace(reason);
  Reason& entry = it->second;
  if (first || (entry.unlogged == 0 && now - entry.logged >= interval_)) {
    entry.logged = now;
    return line;
  }
  ++entry.unlogged;
  entry.last = line;
  return std::nullopt;
}

std::vector<std::string> RefusalLog::due(Time now) {
  std::vector<std::string> lines;
  for (auto& [reason, entry] : reasons_) {
    if (entry.unlogged == 0 || now - entry.logged < interval_) continue;
    lines.push_back("refused " + std::to_string(entry.unlogged) + " more message" + (entry.unlogged == 1 ? "" : "s") +
                    " (" + reason + ") in the last " +
                    format_go_duration(std::chrono::duration_cast<std::chrono::seconds>(now - entry.logged)) +
                    "; the last: " + entry.last);
    entry.logged = now;
    entry.unlogged = 0;
    entry.last.clear();
  }
  return lines;
}

std::optional<RefusalLog::Time> RefusalLog::next_due() const {
  std::optional<Time> next;
  for (const auto& [reason, entry] : reasons_) {
    if (entry.unlogged == 0) continue;
    const Time at = entry.logged + std::chrono::duration_cast<Time::duration>(interval_);
    if (!next || at < *next) next = at;
  }
  return next;
}

}  // namespace k8s4r::bridge
