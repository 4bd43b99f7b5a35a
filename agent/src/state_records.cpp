#include "state_records.h"

#include "k8s4r/common/json_depth.h"

#include <boost/crc.hpp>

#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <limits>

namespace k8s4r::agent::records {

using nlohmann::json;

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
// but the logs tail and the outputs, which can be a hundred times the rest.
// (The report went out whole, from its queued record, and a finished Task
// takes no later one.)
std::string without_bulk(const std::string& payload) {
  if ((payload.find("\"logsTail\"") == std::string::npos && payload.find("\"outputs\"") == std::string::npos) ||
      json_nested_deeper_than(payload))
    return payload;
  json report = json::parse(payload, nullptr, false);
  if (report.is_discarded() || !report.is_object()) return payload;
  report.erase("logsTail");
  report.erase("outputs");
  return report.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace k8s4r::agent::records
