#include "k8s4r/agent/journal.h"

#include "durable_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace k8s4r::agent {

using nlohmann::json;

namespace {

// The fields of /proc/<pid>/stat after the command name, which may itself
// hold spaces and parentheses.
std::optional<std::vector<std::string>> stat_fields(pid_t pid) {
  const auto read = read_whole_file("/proc/" + std::to_string(pid) + "/stat");
  if (!read) return std::nullopt;
  const std::string& text = *read;
  const auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(text.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string field; rest >> field;) fields.push_back(field);
  return fields;  // fields[0] is field 3 (state)
}

}  // namespace

std::optional<std::uint64_t> process_start_time(pid_t pid) {
  auto fields = stat_fields(pid);
  if (!fields || fields->size() < 20) return std::nullopt;
  try {
    return std::stoull((*fields)[19]);  // field 22
  } catch (...) {
    return std::nullopt;
  }
}

bool same_process_running(pid_t pid, std::uint64_t start) {
  if (pid <= 0) return false;
  auto fields = stat_fields(pid);
  if (!fields || fields->size() < 20 || (*fields)[0] == "Z") return false;
  return process_start_time(pid) == start;
}

Result<Journal> Journal::open(const std::string& path) {
  Journal journal(path);
  if (!std::filesystem::exists(path)) return journal;
  std::ifstream in(path);
  if (!in) return Error{"journal", "cannot read " + path};
  const json document = json::parse(in, nullptr, false);
  if (document.is_discarded() || !document.is_object() || !document.contains("tasks") ||
      !document["tasks"].is_array()) {
    return Error{"journal", path + " is not a k8s4r journal"};
  }
  for (const json& task : document["tasks"]) {
    JournalEntry entry;
    entry.task_uid = task.value("taskUid", "");
    entry.pid = task.value("pid", 0);
    entry.process_start = task.value("processStart", std::uint64_t{0});
    entry.last_seq = task.value("lastSeq", std::int64_t{0});
    entry.dispatch = task.value("dispatch", json());
    entry.last_report = task.value("lastReport", json());
    entry.finished_order = task.value("finishedOrder", std::uint64_t{0});
    if (entry.task_uid.empty()) return Error{"journal", path + ": an entry has no taskUid"};
    journal.entries_[entry.task_uid] = entry;
  }
  return journal;
}

const JournalEntry* Journal::find(const std::string& task_uid) const {
  auto it = entries_.find(task_uid);
  return it == entries_.end() ? nullptr : &it->second;
}

Result<void> Journal::put(const JournalEntry& entry) {
  entries_[entry.task_uid] = entry;
  return save();
}

Result<void> Journal::remove(const std::string& task_uid) {
  if (entries_.erase(task_uid) == 0) return ok();
  return save();
}

Result<std::int64_t> Journal::next_seq(const std::string& task_uid, std::int64_t floor) {
  auto it = entries_.find(task_uid);
  if (it == entries_.end()) {
    JournalEntry entry;
    entry.task_uid = task_uid;
    entry.last_seq = floor;
    it = entries_.emplace(task_uid, entry).first;
  }
  ++it->second.last_seq;
  if (auto saved = save(); !saved) {
    --it->second.last_seq;
    return saved.error();
  }
  return it->second.last_seq;
}

Result<void> Journal::save() const {
  json tasks = json::array();
  for (const auto& [uid, entry] : entries_) {
    tasks.push_back({{"taskUid", entry.task_uid},
                     {"pid", entry.pid},
                     {"processStart", entry.process_start},
                     {"lastSeq", entry.last_seq},
                     {"dispatch", entry.dispatch},
                     {"lastReport", entry.last_report},
                     {"finishedOrder", entry.finished_order}});
  }
  const std::string text = json{{"version", 1}, {"tasks", tasks}}.dump(-1, ' ', false, json::error_handler_t::replace);
  return write_file_durably(path_, text, "journal");
}

}  // namespace k8s4r::agent
