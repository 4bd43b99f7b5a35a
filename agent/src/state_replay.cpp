// Opening state.log: replaying its records into the StateStore, and taking
// over an earlier agent's journal.json and reports/.
#include "k8s4r/agent/state_store.h"

#include "durable_file.h"
#include "k8s4r/common/files.h"
#include "k8s4r/common/json_depth.h"
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
        task.last_report = task.finished_order != 0 ? without_bulk(*payload) : *payload;
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
    const auto epoch = field<std::int64_t>(record, "epoch").value_or(0);
    if (epoch < 0 || epoch > kMaxSeq) return Error{"state", "a clock record with an epoch out of range"};
    epoch_ = std::max(epoch_, epoch);
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

}  // namespace k8s4r::agent
