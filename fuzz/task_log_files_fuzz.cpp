// The files a task's log is read from for a follower (agent/task_logs.h) are
// in the task's own directory, so the task may write anything there: its
// output, and also a forged logs.index or stdout.log.base. Reading them by
// offset, by lines back or by time must never crash, hang or hand out bytes
// outside the stream: each piece lies within [offset, size], a tail or a
// line start within the stream.
#include "k8s4r/agent/task_logs.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include <unistd.h>

namespace {

const std::string& directory() {
  static const std::string made = [] {
    char path[] = "/tmp/k8s4r-fuzz-logs-XXXXXX";
    if (!::mkdtemp(path)) std::abort();
    return std::string(path);
  }();
  return made;
}

void write(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace k8s4r::agent;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  // The input, split in three: the log, its .base and the index.
  const std::size_t a = size / 2, b = a + (size - a) / 4;
  const std::string log = directory() + "/stdout.log";
  write(log, input.substr(0, a));
  write(log + ".base", input.substr(a, b - a));
  write(log + ".1", input.substr(0, a / 3));
  write(directory() + "/logs.index", input.substr(b));
  const std::int64_t end = read_log(log, 0, 0).size;
  if (end < 0) std::abort();
  for (const std::int64_t asked : {std::int64_t{0}, end / 2, end, end + 7}) {
    const LogPiece piece = read_log(log, asked, 64);
    if (piece.offset < 0 || piece.offset > piece.size ||
        piece.size - piece.offset < static_cast<std::int64_t>(piece.data.size()) || piece.data.size() > 64)
      std::abort();
    const std::int64_t start = line_start_from(log, asked);
    if (start < 0 || (start < asked && start != 0)) std::abort();
  }
  for (const std::int64_t lines : {0, 1, 3, 1000}) {
    const std::int64_t tail = tail_offset(log, lines);
    if (tail < 0 || tail > end) std::abort();
  }
  for (const std::int64_t at : {std::int64_t{0}, std::int64_t{1000}, std::int64_t{1LL << 62}}) {
    if (offset_at(directory() + "/logs.index", false, at) < 0) std::abort();
  }
  return 0;
}
