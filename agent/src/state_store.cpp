#include "k8s4r/agent/state_store.h"

#include "durable_file.h"
#include "k8s4r/common/files.h"

#include "k8s4r/common/json_depth.h"

#include <spdlog/spdlog.h>
#include <boost/crc.hpp>

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

namespace {

constexpr std::uint64_t kMinCompactBytes = 1 << 20;
constexpr std::uint64_t kCompactFactor = 4;
// Beyond these a record is damage, not a value: seqs, ids and orders are
// JSON-safe integers (2^53) that can grow without overflowing, and the run
// clock stays far from overflowing when time is added to it.
constexpr std::int64_t kMaxSeq = std::int64_t{1} << 53;
constexpr std::int64_t kMaxClockNs = std::int64_t{100} * 366 * 24 * 3600 * 1'000'000'000;  // 100 years

std::string crc_hex(std::string_view text) {
  boost::crc_32_type crc;
  crc.process_bytes(text.data(), text.size());
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(crc.checksum()));
  return hex;
}

std::string line_of(const json& record) {
  const std::string text = record.dump(-1, ' ', false, json::error_handler_t::replace);
  return crc_hex(text) + '\t' + text + '\n';
}

// 0, or the errno of the write that failed.
int write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

// Typed reads of a record's fields: a record that does not have them is
// damage, reported as an error, never an exception out of open().
template <typename T>
std::optional<T> field(const json& record, const char* name) {
  const auto it = record.find(name);
  if (it == record.end()) return std::nullopt;
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return std::nullopt;
  } else {
    if (!it->is_number_integer()) return std::nullopt;
  }
  return it->get<T>();
}

// A task's processes: pid and processStart (the shim, or from agents before
// shims the task itself), taskPid and taskStart, cgroup and exitFile
// (omitted when empty).
Result<TaskProcess> read_process(const json& record) {
  TaskProcess process;
  for (const char* name : {"pid", "taskPid"}) {
    const auto value = field<std::int64_t>(record, name);
    if (value && (*value < 0 || *value > std::numeric_limits<pid_t>::max())) {
      return Error{"state",
                   std::string("a record whose ") + name + " is out of range (" + std::to_string(*value) + ")"};
    }
  }
  process.pid = static_cast<pid_t>(field<std::int64_t>(record, "pid").value_or(0));
  process.start = field<std::uint64_t>(record, "processStart").value_or(0);
  process.pgid = static_cast<pid_t>(field<std::int64_t>(record, "taskPid").value_or(process.pid));
  process.task_start =
      field<std::uint64_t>(record, "taskStart").value_or(process.pgid == process.pid ? process.start : 0);
  process.cgroup = field<std::string>(record, "cgroup").value_or("");
  process.exit_file = field<std::string>(record, "exitFile").value_or("");
  for (const std::string* path : {&process.cgroup, &process.exit_file}) {
    if (!path->empty() && path->front() != '/') return Error{"state", "a record with a relative path: " + *path};
  }
  return process;
}

void write_process(const TaskProcess& process, json& record) {
  record["pid"] = process.pid;
  record["processStart"] = process.start;
  if (process.pgid != 0 && process.pgid != process.pid) {
    record["taskPid"] = process.pgid;
    record["taskStart"] = process.task_start;
  }
  if (!process.cgroup.empty()) record["cgroup"] = process.cgroup;
  if (!process.exit_file.empty()) record["exitFile"] = process.exit_file;
}

// A finished task's report as kept for answering a dispatch sent again: all
// but the logs tail, which can be a hundred times the rest.
std::string without_logs_tail(const std::string& payload) {
  if (payload.find("\"logsTail\"") == std::string::npos || json_nested_deeper_than(payload)) return payload;
  json report = json::parse(payload, nullptr, false);
  if (report.is_discarded() || !report.is_object()) return payload;
  report.erase("logsTail");
  return report.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

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

// ---- open and replay ------------------------------------------------------------

Result<StateStore> StateStore::open(const std::string& work_dir, std::size_t capacity) {
  StateStore store((fs::path(work_dir) / "state.log").string(), capacity);
  std::error_code error;
  const bool exists = fs::exists(store.path_, error);
  if (exists) {
    auto text = read_file(store.path_);
    if (!text) return Error{"state", text.error().message};
    if (auto replayed = store.replay(text.value()); !replayed) return replayed.error();
  }
  if (auto legacy = store.adopt_legacy(work_dir); !legacy) return legacy.error();
  if (!exists || store.has_staged()) {
    // A new file, or an older agent's state taken over: written whole, so the
    // file exists durably (with its directory entry) before anything else.
    if (auto compacted = store.compact(); !compacted) return compacted.error();
    store.staged_.clear();
    // Only now may the older files go: state.log holds what they held.
    fs::remove(fs::path(work_dir) / "journal.json", error);
    fs::remove_all(fs::path(work_dir) / "reports", error);
  }
  if (store.fd_ < 0) {
    if (auto opened = store.open_for_append(); !opened) return opened.error();
  }
  store.first_uncommitted_report_ = store.next_report_id_;
  return store;
}

Result<void> StateStore::open_for_append() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) return Error{"state", "cannot open " + path_ + ": " + std::strerror(errno)};
  const off_t end = ::lseek(fd_, 0, SEEK_END);
  if (end < 0) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    return Error{"state", "cannot seek " + path_ + ": " + std::strerror(error)};
  }
  file_bytes_ = static_cast<std::uint64_t>(end);
  return ok();
}

Result<void> StateStore::replay(const std::string& text) {
  std::size_t offset = 0;
  while (offset < text.size()) {
    const std::size_t end = text.find('\n', offset);
    std::string problem;
    if (end == std::string::npos) {
      problem = "an unfinished last record";
    } else {
      const std::string_view line(text.data() + offset, end - offset);
      const std::size_t tab = line.find('\t');
      const std::string_view body = tab == std::string_view::npos ? std::string_view() : line.substr(tab + 1);
      if (tab != 8 || crc_hex(body) != line.substr(0, 8)) {
        problem = "a record whose checksum does not match";
      } else {
        const json record =
            json_nested_deeper_than(body) ? json(json::value_t::discarded) : json::parse(body, nullptr, false);
        if (record.is_discarded() || !record.is_object()) {
          problem = "a record that is not a JSON object (or nests deeper than " +
                    std::to_string(kMaxProtocolJsonDepth) + " levels)";
        } else if (auto applied = apply(record); !applied) {
          problem = applied.error().message;
        }
      }
    }
    if (problem.empty()) {
      offset = end + 1;
      continue;
    }
    // A crash mid-write leaves the last group torn: those changes were never
    // synced, so nothing was done on their strength. Damage further back is
    // the disk's; either way the agent goes on from the last good record, and
    // keeps the whole file for whoever wants to look.
    const bool tail = end == std::string::npos || end + 1 == text.size();
    if (!tail) {
      const std::string kept = path_ + ".damaged";
      if (auto copied = write_file_durably(kept, text, "state"); !copied) return copied.error();
      spdlog::error("{}: {} at byte {}; {} bytes after it dropped (the whole file is kept as {})", path_, problem,
                    offset, text.size() - offset, kept);
    } else {
      spdlog::warn("{}: {} at byte {} (a write cut short by a crash); dropped", path_, problem, offset);
    }
    if (::truncate(path_.c_str(), static_cast<off_t>(offset)) != 0) {
      return Error{"state", "cannot cut " + path_ + " back to its last good record: " + std::strerror(errno)};
    }
    break;
  }
  return ok();
}

Result<void> StateStore::apply(const json& record) {
  const auto op = field<std::string>(record, "op");
  if (!op) return Error{"state", "a record without op"};
  const auto uid = field<std::string>(record, "uid");
  auto need_uid = [&]() -> Result<void> {
    if (!uid || uid->empty()) return Error{"state", "a " + *op + " record without uid"};
    return ok();
  };
  // The task a record is about, counted out of finished_ while it changes.
  auto task_of = [&]() -> StoredTask& {
    StoredTask& task = tasks_[*uid];
    task.uid = *uid;
    if (task.finished_order != 0) --finished_;
    return task;
  };
  auto done_with = [&](const StoredTask& task) {
    if (task.finished_order != 0) ++finished_;
  };
  for (const auto& [name, limit] : {std::pair{"seq", kMaxSeq}, std::pair{"lastSeq", kMaxSeq}, std::pair{"id", kMaxSeq},
                                    std::pair{"finishedOrder", kMaxSeq}, std::pair{"clock", kMaxClockNs},
                                    std::pair{"finishedClock", kMaxClockNs}}) {
    const auto value = field<std::int64_t>(record, name);
    if (value && (*value < 0 || *value > limit)) {
      return Error{"state", "a " + *op + " record whose " + name + " is out of range (" + std::to_string(*value) + ")"};
    }
  }
  if (*op == "accept" || *op == "task") {
    if (auto checked = need_uid(); !checked) return checked;
    auto process = read_process(record);
    if (!process) return process.error();
    StoredTask& task = task_of();
    task = StoredTask{};
    task.uid = *uid;
    task.dispatch = record.value("dispatch", json());
    task.process = process.value();
    task.last_seq = field<std::int64_t>(record, "lastSeq").value_or(0);
    task.last_report = field<std::string>(record, "lastReport").value_or("");
    task.finished_order = field<std::uint64_t>(record, "finishedOrder").value_or(0);
    task.finished_clock =
        std::chrono::nanoseconds(field<std::int64_t>(record, "finishedClock").value_or(clock_.count()));
    last_seq_ = std::max(last_seq_, task.last_seq);
    done_with(task);
    return ok();
  }
  if (*op == "process") {
    if (auto checked = need_uid(); !checked) return checked;
    auto process = read_process(record);
    if (!process) return process.error();
    StoredTask& task = task_of();
    task.process = process.value();
    done_with(task);
    return ok();
  }
  if (*op == "report" || *op == "queued") {
    // A report: the task's new last seq and report, and (with an id) queued
    // for the broker. A queued record is only the latter (snapshots).
    const auto id = field<std::uint64_t>(record, "id");
    const auto topic = field<std::string>(record, "topic");
    const auto payload = field<std::string>(record, "payload");
    if (!payload || (id && !topic) || (*op == "queued" && !id)) {
      return Error{"state", "a " + *op + " record without its id, topic or payload"};
    }
    if (*op == "report") {
      if (auto checked = need_uid(); !checked) return checked;
      StoredTask& task = task_of();
      const std::int64_t seq = field<std::int64_t>(record, "seq").value_or(0);
      if (seq >= task.last_seq) {
        task.last_seq = seq;
        task.last_report = task.finished_order != 0 ? without_logs_tail(*payload) : *payload;
      }
      last_seq_ = std::max(last_seq_, seq);
      done_with(task);
    }
    if (id) {
      QueuedReport queued{*id, *topic, *payload};
      queued.task_uid = uid.value_or("");
      queued.seq = field<std::int64_t>(record, "seq").value_or(0);
      const auto state = field<std::string>(record, "state");
      if (state) {
        queued.state = *state == "completed" ? TaskRunState::completed
                       : *state == "failed"  ? TaskRunState::failed
                                             : TaskRunState::running;
      }
      if (queued.task_uid.empty() || queued.seq == 0 || !state) {
        // Written by an agent before these fields: the report itself says.
        if (auto report = parse_task_status(*payload)) {
          queued.task_uid = report.value().task_uid;
          queued.seq = report.value().seq.value_or(0);
          queued.state = report.value().state;
        }
      }
      reports_by_task_[queued.task_uid].insert(*id);
      reports_[*id] = std::move(queued);
      next_report_id_ = std::max(next_report_id_, *id + 1);
    }
    return ok();
  }
  if (*op == "finish") {
    if (auto checked = need_uid(); !checked) return checked;
    StoredTask& task = task_of();
    task.finished_order = field<std::uint64_t>(record, "finishedOrder").value_or(0);
    const auto clock = field<std::int64_t>(record, "clock");
    task.finished_clock = std::chrono::nanoseconds(clock.value_or(clock_.count()));
    if (clock) clock_ = std::max(clock_, task.finished_clock);
    task.dispatch = nullptr;  // a finished task needs only its last report
    task.process = TaskProcess{};
    done_with(task);
    return ok();
  }
  if (*op == "clock") {
    const auto clock = field<std::int64_t>(record, "clock");
    if (!clock) return Error{"state", "a clock record without clock"};
    clock_ = std::max(clock_, std::chrono::nanoseconds(*clock));
    last_seq_ = std::max(last_seq_, field<std::int64_t>(record, "lastSeq").value_or(0));
    return ok();
  }
  if (*op == "ack") {
    const auto id = field<std::uint64_t>(record, "id");
    if (!id) return Error{"state", "an ack record without id"};
    if (auto found = reports_.find(*id); found != reports_.end()) {
      auto task = reports_by_task_.find(found->second.task_uid);
      if (task != reports_by_task_.end() && task->second.erase(*id) && task->second.empty())
        reports_by_task_.erase(task);
      reports_.erase(found);
    }
    return ok();
  }
  if (*op == "forget") {
    if (auto checked = need_uid(); !checked) return checked;
    const auto it = tasks_.find(*uid);
    if (it != tasks_.end()) {
      if (it->second.finished_order != 0) --finished_;
      tasks_.erase(it);
    }
    return ok();
  }
  return Error{"state", "a record of unknown op " + *op};
}

// journal.json and reports/NNN.json, as agents before state.log kept them.
Result<void> StateStore::adopt_legacy(const std::string& work_dir) {
  const std::string journal_path = (fs::path(work_dir) / "journal.json").string();
  if (auto text = read_file(journal_path)) {
    const json document = json_nested_deeper_than(text.value()) ? json(json::value_t::discarded)
                                                                : json::parse(text.value(), nullptr, false);
    if (document.is_discarded() || !document.is_object() || !document.contains("tasks") ||
        !document["tasks"].is_array()) {
      return Error{"state", journal_path + " is not a k8s4r journal"};
    }
    for (const json& entry : document["tasks"]) {
      if (!entry.is_object() || !entry.contains("taskUid")) return Error{"state", journal_path + ": a bad entry"};
      json record = {{"op", "task"},
                     {"uid", entry.value("taskUid", "")},
                     {"dispatch", entry.value("dispatch", json())},
                     {"pid", entry.value("pid", 0)},
                     {"processStart", entry.value("processStart", std::uint64_t{0})},
                     {"lastSeq", entry.value("lastSeq", std::int64_t{0})},
                     {"finishedOrder", entry.value("finishedOrder", std::uint64_t{0})}};
      const json last = entry.value("lastReport", json());
      if (!last.is_null()) record["lastReport"] = last.dump();
      if (auto applied = apply(record); !applied) return Error{"state", journal_path + ": " + applied.error().message};
      stage(record);
    }
  }
  std::error_code error;
  const fs::path queue = fs::path(work_dir) / "reports";
  if (!fs::is_directory(queue, error)) return ok();
  std::map<std::uint64_t, fs::path> files;
  for (const auto& file : fs::directory_iterator(queue, error)) {
    if (file.path().extension() != ".json") continue;
    try {
      files[std::stoull(file.path().filename().string())] = file.path();
    } catch (...) {
    }
  }
  for (const auto& [number, file] : files) {
    const auto read = read_file(file.string());
    const std::string text = read ? read.value() : std::string();
    const json report =
        json_nested_deeper_than(text) ? json(json::value_t::discarded) : json::parse(text, nullptr, false);
    if (report.is_discarded() || !report.is_object() || !report.contains("topic") || !report.contains("payload")) {
      return Error{"state", file.string() + " is not a queued report"};
    }
    const json record = {
        {"op", "queued"}, {"id", next_report_id_}, {"topic", report["topic"]}, {"payload", report["payload"]}};
    if (auto applied = apply(record); !applied) return Error{"state", file.string() + ": " + applied.error().message};
    stage(record);
  }
  return ok();
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
  std::string text = line_of({{"op", "clock"}, {"clock", clock_.count()}, {"lastSeq", last_seq_}});
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
