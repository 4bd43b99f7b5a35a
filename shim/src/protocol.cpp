#include "k8s4r/shim/protocol.h"

#include "k8s4r/common/json_depth.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

namespace k8s4r::shim {

namespace {

using nlohmann::json;

// Only the shim writes these texts, but they are read from files and pipes,
// so they are checked as any input is.
Result<json> parse_object(std::string_view text) {
  if (text.size() > 4096) return Error{"", "longer than 4096 bytes"};
  if (json_nested_deeper_than(text)) return Error{"", "nests too deeply"};
  json value = json::parse(text, nullptr, false);
  if (value.is_discarded()) return Error{"", "not JSON"};
  if (!value.is_object()) return Error{"", "must be a JSON object"};
  return value;
}

Result<int> int_field(const json& object, const char* name, bool required, long long min, long long max) {
  auto found = object.find(name);
  if (found == object.end()) {
    if (required) return Error{name, "is required"};
    return 0;
  }
  if (!found->is_number_integer()) return Error{name, "must be an integer"};
  const bool is_unsigned = found->is_number_unsigned();
  if (is_unsigned && found->get<unsigned long long>() > static_cast<unsigned long long>(max)) {
    return Error{name, "is out of range"};
  }
  const long long value =
      is_unsigned ? static_cast<long long>(found->get<unsigned long long>()) : found->get<long long>();
  if (value < min || value > max) return Error{name, "is out of range"};
  return static_cast<int>(value);
}

constexpr long long kMaxPid = std::numeric_limits<pid_t>::max();

void append_block(std::string& out, const std::vector<std::string>& strings) {
  std::string block;
  for (const std::string& item : strings) {
    block += item;
    block += '\0';
  }
  const auto length = static_cast<std::uint32_t>(block.size());
  for (int shift = 0; shift < 32; shift += 8) out += static_cast<char>((length >> shift) & 0xff);
  out += block;
}

// One block from the front of `bytes`, which it then leaves after it.
Result<std::vector<std::string>> take_block(std::string_view& bytes, const char* name) {
  auto length = parse_handoff_length(bytes.substr(0, std::min<std::size_t>(bytes.size(), 4)));
  if (!length) return Error{name, length.error().message};
  bytes.remove_prefix(4);
  if (bytes.size() < length.value()) return Error{name, "is cut short"};
  std::string_view block = bytes.substr(0, length.value());
  bytes.remove_prefix(length.value());
  if (!block.empty() && block.back() != '\0') return Error{name, "does not end in a NUL"};
  std::vector<std::string> strings;
  while (!block.empty()) {
    const auto end = block.find('\0');
    strings.emplace_back(block.substr(0, end));
    block.remove_prefix(end + 1);
  }
  return strings;
}

}  // namespace

std::string format_task_handoff(const TaskHandoff& handoff) {
  std::string out;
  append_block(out, handoff.args);
  append_block(out, handoff.env);
  return out;
}

Result<std::uint32_t> parse_handoff_length(std::string_view prefix) {
  if (prefix.size() != 4) return Error{"", "a length is 4 bytes"};
  std::uint32_t length = 0;
  for (int i = 3; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(prefix[static_cast<std::size_t>(i)]);
  if (length > kMaxHandoffBlock) {
    return Error{"", "holds " + std::to_string(length) + " bytes, more than " + std::to_string(kMaxHandoffBlock)};
  }
  return length;
}

Result<TaskHandoff> parse_task_handoff(std::string_view bytes) {
  TaskHandoff handoff;
  auto args = take_block(bytes, "arguments");
  if (!args) return args.error();
  auto env = take_block(bytes, "environment");
  if (!env) return env.error();
  if (!bytes.empty()) return Error{"", std::to_string(bytes.size()) + " bytes after the environment"};
  for (const std::string& variable : env.value()) {
    const auto equals = variable.find('=');
    if (equals == std::string::npos || equals == 0) {
      return Error{"environment", "holds '" + variable.substr(0, 64) + "', not NAME=VALUE"};
    }
  }
  handoff.args = std::move(args).value();
  handoff.env = std::move(env).value();
  return handoff;
}

std::string format_started(pid_t pid) { return "{\"pid\":" + std::to_string(pid) + "}\n"; }

std::string format_start_failed(std::string_view step, int error) {
  // The steps are the shim's own words: letters only, nothing to escape.
  return "{\"error\":\"" + std::string(step) + "\",\"errno\":" + std::to_string(error) + "}\n";
}

Result<StartReport> parse_start_report(std::string_view text) {
  auto object = parse_object(text);
  if (!object) return object.error();
  StartReport report;
  auto step = object.value().find("error");
  if (step != object.value().end()) {
    if (!step->is_string() || step->get_ref<const std::string&>().empty()) {
      return Error{"error", "must be a non-empty string"};
    }
    report.step = step->get<std::string>();
    auto error = int_field(object.value(), "errno", true, 1, 4095);
    if (!error) return error.error();
    report.error = error.value();
    return report;
  }
  auto pid = int_field(object.value(), "pid", true, 1, kMaxPid);
  if (!pid) return pid.error();
  report.pid = pid.value();
  return report;
}

std::string format_exit_record(const ExitRecord& record) {
  return "{\"pid\":" + std::to_string(record.pid) + ",\"exitCode\":" + std::to_string(record.exit_code) +
         ",\"signal\":" + std::to_string(record.signal) + ",\"leftovers\":" + std::to_string(record.leftovers) +
         (record.disconnected ? ",\"stopped\":\"disconnected\"" : "") + "}\n";
}

Result<ExitRecord> parse_exit_record(std::string_view text) {
  const auto end = text.find_last_not_of('\0');
  if (end == std::string_view::npos) return Error{"", "not written"};
  text = text.substr(0, end + 1);
  auto object = parse_object(text);
  if (!object) return object.error();
  ExitRecord record;
  auto pid = int_field(object.value(), "pid", true, 1, kMaxPid);
  if (!pid) return pid.error();
  // 0-255 from exit(), 128+N for signal N (N < 65).
  auto exit_code = int_field(object.value(), "exitCode", true, 0, 255);
  if (!exit_code) return exit_code.error();
  auto signal = int_field(object.value(), "signal", false, 0, 64);
  if (!signal) return signal.error();
  auto leftovers = int_field(object.value(), "leftovers", false, 0, std::numeric_limits<int>::max());
  if (!leftovers) return leftovers.error();
  record.pid = pid.value();
  record.exit_code = exit_code.value();
  record.signal = signal.value();
  record.leftovers = leftovers.value();
  if (const auto stopped = object.value().find("stopped"); stopped != object.value().end()) {
    if (!stopped->is_string() || stopped->get<std::string>() != "disconnected")
      return Error{"stopped", "must be \"disconnected\""};
    record.disconnected = true;
  }
  return record;
}

}  // namespace k8s4r::shim
