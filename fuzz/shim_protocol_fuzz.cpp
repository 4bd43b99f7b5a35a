// What k8s4r-task-shim and the agent tell each other
// (shim/include/k8s4r/shim/protocol.h): the task handed to a spare shim, as
// the shim reads it, and, as the agent reads them, a start report from a
// socket and an exit record from a file a crash or a full disk may have left
// half written or all zeros. Any
// bytes give a value or a refusal, never a crash; what is accepted encodes
// to a text that parses back to the same values. The shim's command line is
// parsed the same way.
#include "k8s4r/shim/protocol.h"
#include "k8s4r/shim/shim.h"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

[[noreturn]] void broken(const char* what) {
  __builtin_trap();
  static_cast<void>(what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace k8s4r::shim;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  if (auto record = parse_exit_record(text); record) {
    auto again = parse_exit_record(format_exit_record(record.value()));
    if (!again || again.value().pid != record.value().pid || again.value().exit_code != record.value().exit_code ||
        again.value().signal != record.value().signal || again.value().leftovers != record.value().leftovers) {
      broken("exit record round trip");
    }
  }
  if (auto report = parse_start_report(text); report) {
    const std::string encoded = report.value().pid > 0 ? format_started(report.value().pid)
                                                       : format_start_failed(report.value().step, report.value().error);
    auto again = parse_start_report(encoded);
    // A step is the shim's own word (letters); the agent only ever prints it,
    // so one of other characters need not survive being written back.
    const std::string& step = report.value().step;
    const bool plain =
        std::all_of(step.begin(), step.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); });
    if (plain && (!again || again.value().pid != report.value().pid || again.value().error != report.value().error ||
                  again.value().step != step)) {
      broken("start report round trip");
    }
  }

  if (auto handoff = parse_task_handoff(text); handoff) {
    if (format_task_handoff(handoff.value()) != text) broken("handoff round trip");
  }
  if (size >= 4) {
    auto length = parse_handoff_length(text.substr(0, 4));
    if (length && length.value() > kMaxHandoffBlock) broken("an oversized block accepted");
  }

  // The command line: NUL-separated arguments.
  std::vector<std::string> args;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size() && args.size() < 64; ++i) {
    if (i == text.size() || text[i] == '\0') {
      args.emplace_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  std::string error;
  if (auto options = parse_shim_args(args, error); options) {
    if (options->command.empty() || options->exit_file.empty() || options->exit_file.front() != '/') {
      broken("accepted arguments without a command or an absolute exit file");
    }
  } else if (error.empty()) {
    broken("a refusal without a reason");
  }
  return 0;
}
