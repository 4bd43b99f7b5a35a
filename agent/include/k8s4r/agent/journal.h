// The agent's memory across its own restarts, in the work dir: for every task
// it holds, the process (pid and the kernel's start time of that pid, so a
// reused pid is not mistaken for ours), the dispatched task, and the last
// status seq used. seq must grow across restarts, so every seq is written
// here before the report that carries it is published.
//
// The file is JSON, rewritten whole on each change through a temporary file,
// fsync and rename, so a crash leaves either the old or the new journal.
//
// Threading: not thread-safe; the agent's task owner serializes access.
#pragma once

#include "k8s4r/common/result.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <sys/types.h>

namespace k8s4r::agent {

struct JournalEntry {
  std::string task_uid;
  pid_t pid = 0;                     // 0 when no process runs (waiting to restart, or finished but unreported)
  std::uint64_t process_start = 0;   // /proc/<pid>/stat starttime, in clock ticks since boot
  std::int64_t last_seq = 0;         // the last seq handed out for this task
  nlohmann::json dispatch;           // the Dispatch that created the task
  nlohmann::json last_report;        // the last TaskStatus made for it (null before the first)
  std::uint64_t finished_order = 0;  // when it finished, counting across restarts; 0 while it runs
};

class Journal {
 public:
  // Loads `path`; a missing file is an empty journal. A file that cannot be
  // read or parsed is an error naming it (the caller decides what to do).
  static Result<Journal> open(const std::string& path);

  const std::map<std::string, JournalEntry>& entries() const { return entries_; }
  const JournalEntry* find(const std::string& task_uid) const;

  Result<void> put(const JournalEntry& entry);
  Result<void> remove(const std::string& task_uid);
  // The next seq for `task_uid` (last + 1), written down before it is returned.
  // A task the journal no longer holds starts again after `floor`.
  Result<std::int64_t> next_seq(const std::string& task_uid, std::int64_t floor = 0);

 private:
  explicit Journal(std::string path) : path_(std::move(path)) {}
  Result<void> save() const;

  std::string path_;
  std::map<std::string, JournalEntry> entries_;
};

// The start time of process `pid` (field 22 of /proc/<pid>/stat), or nullopt
// when it does not exist.
std::optional<std::uint64_t> process_start_time(pid_t pid);

// True when `pid` is the very process the journal recorded: it exists and
// started at `start`. A zombie counts as gone.
bool same_process_running(pid_t pid, std::uint64_t start);

}  // namespace k8s4r::agent
