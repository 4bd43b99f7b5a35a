// What k8s4r-task-shim tells the agent, and how: two small JSON texts.
//
// The start report, one line on the descriptor the agent passes as
// --report-fd, written once the task's command has been executed (or could
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

#include <string>
#include <string_view>

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
};

std::string format_started(pid_t pid);
std::string format_start_failed(std::string_view step, int error);
Result<StartReport> parse_start_report(std::string_view text);

std::string format_exit_record(const ExitRecord& record);
// Zero bytes after the record are padding; a file of zeros is a record not
// written yet (its shim still runs, or was killed).
Result<ExitRecord> parse_exit_record(std::string_view text);

}  // namespace k8s4r::shim
