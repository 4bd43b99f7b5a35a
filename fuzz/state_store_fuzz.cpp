// The agent's state.log as its own parser reads it at start: whatever a crash,
// a bad disk or a hand edit left in the file, opening it gives a store or a
// refusal, never a crash, a hang or a leak; and what it gives survives a
// commit and a reopen unchanged (nothing the agent replayed is lost, and the
// run clock and highest seq never go back).
//
// Each input line gets its correct checksum prepended when the first byte is
// even, so the fuzzer reaches the records' JSON instead of stopping at the
// CRC; otherwise the bytes go to the file as they are.
#include "k8s4r/agent/state_store.h"

#include <boost/crc.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace {

namespace fs = std::filesystem;
using k8s4r::agent::StateStore;

const fs::path& work_dir() {
  static const fs::path dir = [] {
    char pattern[] = "/tmp/k8s4r-fuzz-state-XXXXXX";
    if (!mkdtemp(pattern)) std::abort();
    return fs::path(pattern);
  }();
  return dir;
}

std::string with_checksums(std::string_view input) {
  std::string text;
  while (!input.empty()) {
    const auto end = input.find('\n');
    const std::string_view line = input.substr(0, end);
    boost::crc_32_type crc;
    crc.process_bytes(line.data(), line.size());
    char hex[10];
    std::snprintf(hex, sizeof hex, "%08x\t", static_cast<unsigned>(crc.checksum()));
    text.append(hex).append(line).append("\n");
    if (end == std::string_view::npos) break;
    input.remove_prefix(end + 1);
  }
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::error_code ignored;
  fs::remove_all(work_dir(), ignored);
  fs::create_directories(work_dir());
  {
    std::ofstream out(work_dir() / "state.log", std::ios::binary);
    if (data[0] % 2 == 0) {
      out << with_checksums(input);
    } else {
      out << input;
    }
  }
  auto store = StateStore::open(work_dir().string(), 1000);
  if (!store) return 0;
  const auto tasks = store.value().tasks().size();
  const auto queued = store.value().queued_reports();
  const auto* had = store.value().find("fuzz-task");
  const bool had_it = had != nullptr;
  const auto finished = store.value().finished_tasks() - (had && had->finished_order != 0 ? 1 : 0);
  const auto last_seq = store.value().last_seq();
  const auto clock = store.value().clock();
  // A change on top, committed (which may compact), then what a restart reads.
  store.value().accept("fuzz-task", {{"action", "create"}});
  if (!store.value().commit()) std::abort();
  auto reopened = StateStore::open(work_dir().string(), 1000);
  if (!reopened) std::abort();
  if (reopened.value().tasks().size() != tasks + (had_it ? 0 : 1)) std::abort();
  if (reopened.value().queued_reports() != queued) std::abort();
  // What only grows did not shrink, and the count of finished tasks held.
  if (reopened.value().finished_tasks() != finished) std::abort();
  if (reopened.value().last_seq() != last_seq || reopened.value().clock() != clock) std::abort();
  return 0;
}
