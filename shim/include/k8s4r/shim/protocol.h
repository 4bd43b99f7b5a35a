// What k8s4r-task-shim and the agent tell each other: the task the agent
// hands to a spare shim, and two small JSON texts back.
//
// The task handoff, on the descriptor a spare shim was started with
// (--spare-fd): two blocks, each its length in bytes (4 bytes, little-endian)
// and then that many bytes of strings, each ending in a NUL:
//   [length][the shim's arguments: --exit-file F ... -- COMMAND ARG...]
//   [length][the task's environment: NAME=VALUE ...]
//
// The start report, one line on the descriptor the agent passes as
// --report-fd (a spare: its own descriptor), written once the task's command has been executed (or could
// not be):
//   {"pid":1234}                      the task runs; 1234 is its pid and its process group
//   {"error":"execvp","errno":2}      it never ran: the step that failed and errno
//
// The exit record, the file named by --exit-file: allocated (4096 zero
// bytes) before the task starts, written in place and cut to its length once
// the task's process has ended and nothing of it is left:
//   {"pid":1234,"exitCode":0,"signal":0,"leftovers":0}
// exitCode is 128+N when signal N ended it, as shells report it; leftovers
// counts the processes of the task still alive when its main process ended,
// which the shim killed. The shim outlives an agent that restarts, so a
// restarted agent still learns how its task ended.
#pragma once

#include "k8s4r/common/result.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace k8s4r::shim {

struct StartReport {
  pid_t pid = 0;     // > 0 when the task runs
  std::string step;  // when it did not: "execvp", "cgroup", "fork", ...
  int error = 0;     // errno of that step
};

struct ExitRecord {
  pid_t pid = 0;
  int exit_code = 0;
  int signal = 0;  // 0 when it exited by itself
  int leftovers = 0;
  bool disconnected = false;  // the shim stopped it: no contact with the bridge for --stop-after
};

struct TaskHandoff {
  std::vector<std::string> args;  // as on the command line, without the program name
  std::vector<std::string> env;   // NAME=VALUE
};

// The most either block may hold: as much as a command line or an
// environment may (the kernel's limit for both together is 1/4 of the stack
// limit; 16 MiB is far above any a task is dispatched with).
constexpr std::uint32_t kMaxHandoffBlock = 16u << 20;

std::string format_task_handoff(const TaskHandoff& handoff);
// The length a block's 4-byte prefix gives, refused above kMaxHandoffBlock.
Result<std::uint32_t> parse_handoff_length(std::string_view prefix);
// A whole handoff, both blocks with their prefixes, and nothing after them.
Result<TaskHandoff> parse_task_handoff(std::string_view bytes);

std::string format_started(pid_t pid);
std::string format_start_failed(std::string_view step, int error);
Result<StartReport> parse_start_report(std::string_view text);

std::string format_exit_record(const ExitRecord& record);
// Zero bytes after the record are padding; a file of zeros is a record not
// written yet (its shim still runs, or was killed).
Result<ExitRecord> parse_exit_record(std::string_view text);

}  // namespace k8s4r::shim
