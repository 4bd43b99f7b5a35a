// Status reports on their way to the broker, kept on disk until the broker
// acknowledges them (PUBACK), so a report survives a broker outage and the
// agent's own restart, and reports leave in the order they were made.
//
// One file per report in a directory of the work dir, named by a growing
// number and written through a temporary file, fsync and rename. Bounded: a
// full queue refuses new reports with an error, which the agent logs; nothing
// already queued is dropped.
//
// Threading: not thread-safe; the agent's publisher owns it.
#pragma once

#include "k8s4r/common/result.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::agent {

struct QueuedReport {
  std::uint64_t id = 0;
  std::string topic;
  std::string payload;
};

class ReportQueue {
 public:
  // Opens (creating) `directory` and loads what an earlier run left in it.
  static Result<ReportQueue> open(const std::string& directory, std::size_t capacity);

  Result<std::uint64_t> push(const std::string& topic, const std::string& payload);
  // The oldest reports, at most `limit`, in the order they were pushed.
  std::vector<QueuedReport> oldest(std::size_t limit) const;
  // The broker has it: forget it.
  Result<void> acknowledge(std::uint64_t id);

  std::size_t size() const { return reports_.size(); }
  std::size_t capacity() const { return capacity_; }

 private:
  ReportQueue(std::string directory, std::size_t capacity) : directory_(std::move(directory)), capacity_(capacity) {}
  std::string file_of(std::uint64_t id) const;

  std::string directory_;
  std::size_t capacity_;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, QueuedReport> reports_;
};

}  // namespace k8s4r::agent
