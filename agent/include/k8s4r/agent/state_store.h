// Everything the agent must not forget across its own restarts, in one
// append-only file, WORK_DIR/state.log: for every task it holds, the dispatch
// it accepted, its process (its shim's pid and the kernel's start time of
// that pid, so a reused pid is not mistaken for ours; the task's process
// group, cgroup and the shim's exit record), the last status seq used and the last
// report; every report the broker has not acknowledged yet, in order; and the
// agent's run clock and highest seq, which only grow.
//
// Finished tasks stay until the agent forgets them (forget_finished, after
// its retention), so a dispatch sent again is answered with the final report
// instead of running twice. What is kept of one is small: its seq, when it
// finished, and its last report without the logs tail (the report as it was
// sent, tail included, stays queued until the broker has it).
//
// Changes are applied in memory at once and staged; commit() appends every
// staged change with one write and one fdatasync (group commit: a burst of a
// thousand dispatches costs one sync, not a thousand whole-file rewrites).
// The caller decides what must wait for durability: the agent starts a task
// only once its acceptance is committed, and publishes a report only once it
// is committed (seq must grow across restarts), unless storage has failed.
//
// The file holds one record per line, `CRC32<TAB>JSON`, readable with
// `cut -f2 state.log | jq .`. A torn last line (a crash mid-write) is cut off
// at open; damage before the last line is an error naming the offset. When
// the file outgrows its live content (4x the last snapshot, at least 1 MiB),
// commit() replaces it with a snapshot (temporary file, fsync, rename,
// directory fsync), so its size stays proportional to what the agent holds.
//
// A work dir from an earlier agent (journal.json and reports/) is taken over
// at open, and its files removed once state.log holds them.
//
// Threading: not thread-safe; the agent's loop owns it.
#pragma once

#include "k8s4r/agent/process.h"
#include "k8s4r/common/messages.h"
#include "k8s4r/common/result.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <sys/types.h>

namespace k8s4r::agent {

struct StoredTask {
  std::string uid;
  nlohmann::json dispatch;                     // the Dispatch that created it; null once it finished
  TaskProcess process;                         // process.pid is 0 when no process runs
  std::int64_t last_seq = 0;                   // the last seq handed out for this task
  std::string last_report;                     // the last TaskStatus made for it, as published ("" before the first)
  std::uint64_t finished_order = 0;            // when it finished, counting across restarts; 0 while it runs
  std::chrono::nanoseconds finished_clock{0};  // the run clock when it finished
};

struct QueuedReport {
  std::uint64_t id = 0;
  std::string topic;
  std::string payload;
  std::string task_uid;
  std::int64_t seq = 0;
  TaskRunState state = TaskRunState::running;
};

class StateStore {
 public:
  // Opens (creating) WORK_DIR/state.log, replays it, and takes over an older
  // agent's journal.json and reports/. `capacity` bounds the reports waiting
  // for the broker. An unreadable or damaged file is an error naming it.
  static Result<StateStore> open(const std::string& work_dir, std::size_t capacity);

  StateStore(StateStore&&) noexcept;
  StateStore& operator=(StateStore&&) noexcept;
  ~StateStore();

  // ---- what it holds (committed or staged) ----
  const std::map<std::string, StoredTask>& tasks() const { return tasks_; }
  const StoredTask* find(const std::string& uid) const;
  std::size_t queued_reports() const { return reports_.size(); }
  bool queued(std::uint64_t report_id) const { return reports_.count(report_id) > 0; }
  // The id of the task's newest queued report; 0 when none is queued.
  std::uint64_t last_queued(const std::string& uid) const {
    const auto found = reports_by_task_.find(uid);
    return found == reports_by_task_.end() ? 0 : *found->second.rbegin();
  }
  std::size_t capacity() const { return capacity_; }
  std::size_t finished_tasks() const { return finished_; }
  // The highest seq recorded for any task, ever (forgetting a task does not
  // lower it): a new report's seq is above it, so a uid forgotten and then
  // dispatched again never reuses a seq.
  std::int64_t last_seq() const { return last_seq_; }
  // Seqs drawn from now on are above `seq` too: one this robot drew before
  // its state was lost, which the bridge tells it (Dispatch.reportedSeq).
  // Durable with the next report, whose seq is above it.
  void raise_last_seq(std::int64_t seq) { last_seq_ = std::max(last_seq_, seq); }
  // The newest bridge epoch this robot has seen (Dispatch::epoch, Ack::epoch):
  // a dispatch below it comes from a replica that no longer serves the
  // robot. Raising it stages a record (durable at the next commit).
  std::int64_t epoch() const { return epoch_; }
  void raise_epoch(std::int64_t epoch);
  // The agent's run clock as last recorded: how long agents have run on this
  // work dir, summed over restarts. Retention is measured on it, not on the
  // wall clock, which a robot may set late or change; time the agent was
  // down does not count, so nothing is ever forgotten early.
  std::chrono::nanoseconds clock() const { return clock_; }
  // The oldest queued reports after the one with id `after` (0: from the
  // first), at most `limit`, in the order they were made; only those already
  // committed unless `uncommitted_too`.
  std::vector<QueuedReport> oldest(std::size_t limit, bool uncommitted_too = false, std::uint64_t after = 0) const;

  // ---- changes: in memory at once, on disk at the next commit() ----
  void accept(const std::string& uid, const nlohmann::json& dispatch);
  // The task's processes as they run now; TaskProcess{} when none does.
  void set_process(const std::string& uid, const TaskProcess& process);
  // Records the task's report `seq` (its new last seq and last report) and
  // queues it for the broker; refused when the queue is full.
  Result<std::uint64_t> report(const std::string& uid, std::int64_t seq, TaskRunState state, const std::string& topic,
                               const std::string& payload);
  void finish(const std::string& uid, std::uint64_t order, std::chrono::nanoseconds clock);
  void forget(const std::string& uid);
  // Records the run clock (it never goes back), so the time since the last
  // record is not lost to a crash.
  void note_clock(std::chrono::nanoseconds clock);
  // Forgets every finished task that finished before `cutoff` on the run
  // clock (`expired`), then the oldest beyond `keep` (`evicted`).
  struct Forgotten {
    std::vector<std::string> expired, evicted;
  };
  Forgotten forget_finished(std::chrono::nanoseconds cutoff, std::size_t keep);
  // It was delivered: it leaves the queue.
  void acknowledge(std::uint64_t id);
  // The bridge has recorded the task's report `seq` (or refused it for
  // good): it and the task's earlier reports leave the queue. Returns how
  // many left.
  std::size_t confirm(const std::string& uid, std::int64_t seq);
  // Tasks whose final report (completed or failed) is queued, with its seq
  // and state, oldest first, at most `limit`; `more` is set when there are
  // more than that.
  std::vector<RunningTask> unconfirmed_ends(std::size_t limit, bool& more) const;

  // ---- durability ----
  bool has_staged() const { return !staged_.empty(); }
  // Appends what was staged (one write, one fdatasync), then compacts if the
  // file outgrew its content. On failure nothing staged is lost: it stays in
  // memory for the next commit, and the file is cut back to what was durable.
  Result<void> commit();
  // True when the last commit failed for want of space (ENOSPC, EDQUOT).
  bool out_of_space() const { return last_errno_ == ENOSPC || last_errno_ == EDQUOT; }
  // Bytes in state.log, and commits/syncs made (for logs and tests).
  std::uint64_t file_bytes() const { return file_bytes_; }
  std::uint64_t syncs() const { return syncs_; }

 private:
  StateStore(std::string path, std::size_t capacity);
  void stage(const nlohmann::json& record);
  Result<void> apply(const nlohmann::json& record);
  Result<void> replay(const std::string& text);
  Result<void> adopt_legacy(const std::string& work_dir);
  std::string snapshot() const;
  Result<void> compact();
  Result<void> open_for_append();

  std::string path_;
  std::size_t capacity_;
  int fd_ = -1;
  std::map<std::string, StoredTask> tasks_;
  std::map<std::uint64_t, QueuedReport> reports_;
  std::map<std::string, std::set<std::uint64_t>> reports_by_task_;  // the ids queued for each task
  std::size_t finished_ = 0;                                        // tasks_ with finished_order != 0
  std::int64_t last_seq_ = 0;
  std::int64_t epoch_ = 0;
  std::chrono::nanoseconds clock_{0};
  std::uint64_t next_report_id_ = 1;
  std::uint64_t first_uncommitted_report_ = 1;  // reports from this id on are staged only
  std::string staged_;                          // records not yet durable, one per line
  std::uint64_t file_bytes_ = 0;
  std::uint64_t snapshot_bytes_ = 0;
  std::uint64_t syncs_ = 0;
  int last_errno_ = 0;              // of the last commit; 0 when it succeeded
  bool fragment_possible_ = false;  // a failed commit could not cut its partial write off
};

}  // namespace k8s4r::agent
