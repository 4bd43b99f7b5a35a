// What state.log's records are made of, shared by the StateStore's replay
// (state_replay.cpp) and its changes (state_store.cpp): one record per line,
// `CRC32<TAB>JSON`, typed reads of a record's fields (a record without them
// is damage, an error, never an exception), and a task's processes.
#pragma once

#include "k8s4r/agent/process.h"
#include "k8s4r/common/result.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace k8s4r::agent::records {

inline constexpr std::uint64_t kMinCompactBytes = 1 << 20;
inline constexpr std::uint64_t kCompactFactor = 4;
// Beyond these a record is damage, not a value: seqs, ids and orders are
// JSON-safe integers (2^53) that can grow without overflowing, and the run
// clock stays far from overflowing when time is added to it.
inline constexpr std::int64_t kMaxSeq = std::int64_t{1} << 53;
inline constexpr std::int64_t kMaxClockNs = std::int64_t{100} * 366 * 24 * 3600 * 1'000'000'000;  // 100 years

std::string crc_hex(std::string_view text);
std::string line_of(const nlohmann::json& record);
// 0, or the errno of the write that failed.
int write_all(int fd, std::string_view text);

template <typename T>
std::optional<T> field(const nlohmann::json& record, const char* name) {
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
Result<TaskProcess> read_process(const nlohmann::json& record);
void write_process(const TaskProcess& process, nlohmann::json& record);

// A finished task's report as kept for answering a dispatch sent again: all
// but the logs tail and the outputs, which can be a hundred times the rest.
// (The report went out whole, from its queued record, and a finished Task
// takes no later one.)
std::string without_bulk(const std::string& payload);

}  // namespace k8s4r::agent::records
