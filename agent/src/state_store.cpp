#include "k8s4r/agent/state_store.h"

#include "durable_file.h"
#include "k8s4r/common/files.h"
#include "state_records.h"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

namespace k8s4r::agent {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace records;

StateStore::StateStore(std::string path, std::size_t capacity) : path_(std::move(path)), capacity_(capacity) {}

StateStore::StateStore(StateStore&& other) noexcept { *this = std::move(other); }

StateStore& StateStore::operator=(StateStore&& other) noexcept {
  if (this == &other) return *this;
  if (fd_ >= 0) ::close(fd_);
  path_ = std::move(other.path_);
  capacity_ = other.capacity_;
  fd_ = std::exchange(other.fd_, -1);
  tasks_ = std::move(other.tasks_);
  finished_ = other.finished_;
  last_seq_ = other.last_seq_;
  epoch_ = other.epoch_;
  clock_ = other.clock_;
  reports_ = std::move(other.reports_);
  reports_by_task_ = std::move(other.reports_by_task_);
  next_report_id_ = other.next_report_id_;
  first_uncommitted_report_ = other.first_uncommitted_report_;
  staged_ = std::move(other.staged_);
  file_bytes_ = other.file_bytes_;
  snapshot_bytes_ = other.snapshot_bytes_;
  syncs_ = other.syncs_;
  last_errno_ = other.last_errno_;
  fragment_possible_ = other.fragment_possible_;
  return *this;
}

StateStore::~StateStore() {
  if (fd_ >= 0) ::close(fd_);
}

// ---- reads ---------------------------------------------------------------------------

const StoredTask* StateStore::find(const std::string& uid) const {
  const auto it = tasks_.find(uid);
  return it == tasks_.end() ? nullptr : &it->second;
}

std::vector<QueuedReport> StateStore::oldest(std::size_t limit, bool uncommitted_too, std::uint64_t after) const {
  std::vector<QueuedReport> oldest;
  for (auto it = reports_.upper_bound(after); it != reports_.end() && oldest.size() < limit; ++it) {
    if (!uncommitted_too && it->first >= first_uncommitted_report_) break;
    oldest.push_back(it->second);
  }
  return oldest;
}

// ---- changes -----------------------------------------------------------------------

void StateStore::stage(const json& record) { staged_ += line_of(record); }

void StateStore::accept(const std::string& uid, const json& dispatch) {
  const json record = {{"op", "accept"}, {"uid", uid}, {"dispatch", dispatch}};
  static_cast<void>(apply(record));
  stage(record);
}

void StateStore::set_process(const std::string& uid, const TaskProcess& process) {
  json record = {{"op", "process"}, {"uid", uid}};
  write_process(process, record);
  static_cast<void>(apply(record));
  stage(record);
}

Result<std::uint64_t> StateStore::report(const std::string& uid, std::int64_t seq, TaskRunState state,
                                         const std::string& topic, const std::string& payload) {
  json record = {{"op", "report"}, {"uid", uid}, {"seq", seq}, {"state", to_string(state)}, {"payload", payload}};
  const bool full = reports_.size() >= capacity_;
  const std::uint64_t id = next_report_id_;
  if (!full) {
    record["id"] = id;
    record["topic"] = topic;
  }
  // Even a report the queue cannot take keeps its seq: seq never goes back.
  static_cast<void>(apply(record));
  stage(record);
  if (full) {
    return Error{"state", "the report queue is full (" + std::to_string(capacity_) +
                              " reports waiting for the broker); report for " + topic + " refused"};
  }
  return id;
}

void StateStore::finish(const std::string& uid, std::uint64_t order, std::chrono::nanoseconds clock) {
  const json record = {{"op", "finish"}, {"uid", uid}, {"finishedOrder", order}, {"clock", clock.count()}};
  static_cast<void>(apply(record));
  stage(record);
}

void StateStore::raise_epoch(std::int64_t epoch) {
  if (epoch <= epoch_) return;
  // A clock record (older agents read its clock and lastSeq and pass over
  // the epoch), so a downgraded agent still reads the file.
  const json record = {{"op", "clock"}, {"clock", clock_.count()}, {"lastSeq", last_seq_}, {"epoch", epoch}};
  static_cast<void>(apply(record));
  stage(record);
}

void StateStore::note_clock(std::chrono::nanoseconds clock) {
  if (clock <= clock_) return;
  const json record = {{"op", "clock"}, {"clock", clock.count()}};
  static_cast<void>(apply(record));
  stage(record);
}

StateStore::Forgotten StateStore::forget_finished(std::chrono::nanoseconds cutoff, std::size_t keep) {
  Forgotten forgotten;
  std::vector<std::pair<std::uint64_t, std::string>> kept;  // by the order they finished in
  for (const auto& [uid, task] : tasks_) {
    if (task.finished_order == 0) continue;
    if (task.finished_clock < cutoff) {
      forgotten.expired.push_back(uid);
    } else {
      kept.emplace_back(task.finished_order, uid);
    }
  }
  if (kept.size() > keep) {
    std::sort(kept.begin(), kept.end());
    for (std::size_t i = 0; i + keep < kept.size(); ++i) forgotten.evicted.push_back(kept[i].second);
  }
  for (const auto* uids : {&forgotten.expired, &forgotten.evicted}) {
    for (const std::string& uid : *uids) forget(uid);
  }
  return forgotten;
}

void StateStore::forget(const std::string& uid) {
  if (!tasks_.count(uid)) return;
  const json record = {{"op", "forget"}, {"uid", uid}};
  static_cast<void>(apply(record));
  stage(record);
}

void StateStore::acknowledge(std::uint64_t id) {
  if (!reports_.count(id)) return;
  const json record = {{"op", "ack"}, {"id", id}};
  static_cast<void>(apply(record));
  stage(record);
}

std::size_t StateStore::confirm(const std::string& uid, std::int64_t seq) {
  const auto task = reports_by_task_.find(uid);
  if (task == reports_by_task_.end()) return 0;
  std::vector<std::uint64_t> done;
  for (const std::uint64_t id : task->second) {
    if (reports_.at(id).seq <= seq) done.push_back(id);
  }
  for (const std::uint64_t id : done) acknowledge(id);
  return done.size();
}

std::vector<RunningTask> StateStore::unconfirmed_ends(std::size_t limit, bool& more) const {
  // By the id of their final report: the order they ended in.
  std::map<std::uint64_t, RunningTask> ends;
  for (const auto& [uid, ids] : reports_by_task_) {
    const QueuedReport& last = reports_.at(*ids.rbegin());
    if (last.state != TaskRunState::running) ends.emplace(last.id, RunningTask{uid, last.state, last.seq});
  }
  more = ends.size() > limit;
  std::vector<RunningTask> out;
  for (auto it = ends.begin(); it != ends.end() && out.size() < limit; ++it) out.push_back(it->second);
  return out;
}

// ---- durability --------------------------------------------------------------------

Result<void> StateStore::commit() {
  if (staged_.empty()) return ok();
  if (fd_ < 0) {
    // Closed by a failed commit that could not cut its fragment off (cut it
    // now, before appending after it), or by a reopen that failed after a
    // snapshot (the file on the path holds everything committed: take it).
    const std::uint64_t durable = file_bytes_;
    if (auto opened = open_for_append(); !opened) return opened.error();
    if (fragment_possible_) {
      if (::ftruncate(fd_, static_cast<off_t>(durable)) != 0) {
        const int error = errno;
        ::close(fd_);
        fd_ = -1;
        return Error{"state", "cannot cut " + path_ + " back to its last commit: " + std::strerror(error)};
      }
      file_bytes_ = durable;
      fragment_possible_ = false;
    }
  }
  int failure = write_all(fd_, staged_);
  if (failure == 0 && ::fdatasync(fd_) != 0) failure = errno;
  last_errno_ = failure;
  if (failure != 0) {
    // Whatever part of the group reached the file must not stay there half
    // written: cut back to what was durable, and keep the group staged.
    if (::ftruncate(fd_, static_cast<off_t>(file_bytes_)) != 0) {
      // The file now ends in a fragment (a restart would cut it off as a torn
      // write, which it is); appending after it would not be safe.
      ::close(fd_);
      fd_ = -1;
      fragment_possible_ = true;
    }
    return Error{"state", "cannot write " + path_ + ": " + std::strerror(failure)};
  }
  ++syncs_;
  file_bytes_ += staged_.size();
  staged_.clear();
  first_uncommitted_report_ = next_report_id_;
  if (file_bytes_ > std::max(kMinCompactBytes, kCompactFactor * snapshot_bytes_)) {
    // Durable already; a snapshot that cannot be written only means the file
    // stays longer, so this is logged, not returned.
    if (auto compacted = compact(); !compacted) spdlog::warn("{}", compacted.error().message);
  }
  return ok();
}

std::string StateStore::snapshot() const {
  // First, what only grows: forgotten tasks take their seqs with them, and
  // the next seq must still be above every one of those.
  json clock = {{"op", "clock"}, {"clock", clock_.count()}, {"lastSeq", last_seq_}};
  if (epoch_ != 0) clock["epoch"] = epoch_;
  std::string text = line_of(clock);
  for (const auto& [uid, task] : tasks_) {
    json record = {{"op", "task"}, {"uid", uid}, {"lastSeq", task.last_seq}, {"finishedOrder", task.finished_order}};
    write_process(task.process, record);
    if (task.finished_order != 0) record["finishedClock"] = task.finished_clock.count();
    if (!task.dispatch.is_null()) record["dispatch"] = task.dispatch;
    if (!task.last_report.empty()) record["lastReport"] = task.last_report;
    text += line_of(record);
  }
  // After the tasks, so a queued report does not bring back a forgotten task.
  for (const auto& [id, report] : reports_) {
    text += line_of({{"op", "queued"},
                     {"id", id},
                     {"uid", report.task_uid},
                     {"seq", report.seq},
                     {"state", to_string(report.state)},
                     {"topic", report.topic},
                     {"payload", report.payload}});
  }
  return text;
}

Result<void> StateStore::compact() {
  const std::string text = snapshot();
  const auto written = write_file_durably(path_, text, "state");
  if (written) snapshot_bytes_ = text.size();
  // Whatever happened, the path now holds either the old file or the
  // snapshot (a failure after the rename, syncing the directory, leaves the
  // snapshot), and both hold everything committed; appending must go to that
  // file, never to an old descriptor of a file renamed over.
  auto reopened = open_for_append();
  if (!written) return written.error();
  return reopened;
}

}  // namespace k8s4r::agent
