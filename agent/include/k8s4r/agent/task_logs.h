// A task's stdout and stderr files: the tail that travels in its final
// status, and the cap that keeps a chatty task from filling the robot's disk.
//
// Threading: plain functions over files; the agent's loop calls them.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace k8s4r::agent {

// The task's user owns the directory its files are in, so it may have put
// anything in their place: the agent (root) opens only a regular file of one
// name, never through a symbolic or a hard link (either could lead to
// /etc/shadow) and never blocking (a FIFO would hold the agent's loop). The
// descriptor and the file's size; -1 when it is not one, errno saying why
// (ENOENT: there is none; ELOOP: a symbolic link; EINVAL: not a regular
// file, or a hard link).
int open_task_file(const std::string& path, int flags, off_t& size);

// The last `max_bytes` of each file, stdout then stderr, cut to at most
// `max_bytes` in all at a UTF-8 character boundary. Missing files read as empty.
std::string logs_tail(const std::string& stdout_path, const std::string& stderr_path, std::size_t max_bytes);

// When `path` holds more than `max_bytes`, its content moves to `path`.1
// (replacing an older one) and `path` starts again empty; the task keeps
// writing to it, since it was opened with O_APPEND. So a stream never takes
// much more than twice `max_bytes` on disk. True when it rotated.
bool cap_log(const std::string& path, std::size_t max_bytes);

}  // namespace k8s4r::agent

namespace k8s4r::agent {

// ---- A stream read by offset, for followers (log_server.cpp) ----
//
// An offset counts the bytes the task wrote to the stream since it started:
// cap_log keeps how many it rotated away in `path`.base, so the bytes of
// `path`.1 and `path` keep their offsets across a rotation.

struct LogPiece {
  std::int64_t offset = 0;  // where data starts: more than asked when those bytes were rotated away
  std::string data;
  std::int64_t size = 0;  // the stream's end so far
};

// At most `max_bytes` from `offset` (from `path`.1 first when it still holds
// them), never past the stream's end. An unreadable or missing file reads as
// empty.
LogPiece read_log(const std::string& path, std::int64_t offset, std::size_t max_bytes);
// The offset of the first of the last `lines` lines (a last line without its
// newline counts), looking back at most 16 MiB.
std::int64_t tail_offset(const std::string& path, std::int64_t lines);
// `offset` when a line starts there, else the start of the next line.
std::int64_t line_start_from(const std::string& path, std::int64_t offset);

// ---- When each byte was written, for --since ----
//
// `index` (the task's logs.index) gets a line "UNIX_MS STDOUT_SIZE
// STDERR_SIZE" when sampled sizes changed; offset_at says from where the bytes
// written at or after `unix_ms` start (to the sampling's precision: earlier,
// never later). Kept under 1 MiB: past it, no more samples (a since beyond
// them gives more lines, never fewer).
void append_log_index(const std::string& index, std::int64_t unix_ms, std::int64_t stdout_size,
                      std::int64_t stderr_size);
std::int64_t offset_at(const std::string& index, bool stderr_stream, std::int64_t unix_ms);

}  // namespace k8s4r::agent
