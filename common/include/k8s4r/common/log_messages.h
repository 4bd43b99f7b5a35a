// The two messages that carry a task's log from its robot to a bridge, and
// only while someone follows it (docs/logs.md, proto-schemas/log-*.schema.json):
//
//   bridge -> robot  k8s4r/robots/{robotId}/logs/request          LogRequest
//   robot -> bridge  k8s4r/robots/{robotId}/logs/chunks/{replyTo}  LogChunk
//
// A follow is pulled, one request at a time: the bridge asks for the bytes
// from an offset, the robot answers with at most maxBytes of them (holding
// the request up to waitMs while there are none yet), and the bridge asks for
// the next piece only once its reader has taken this one. A fast writer can
// so never have more than one piece per follower in flight, and a follow is
// resumed after any drop by asking again from the offset the reader has.
// Offsets count the bytes the task has written to that stream since it
// started, across the agent's rotations of the file.
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/common/result.h"
#include "k8s4r/common/rfc3339.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace k8s4r {

enum class LogStream { stdout_stream, stderr_stream };
std::string_view to_string(LogStream stream);

// The largest piece a request may ask for, and the longest a robot holds one.
inline constexpr std::int64_t kMaxLogChunkBytes = 64 * 1024;
inline constexpr std::int64_t kMaxLogWaitMs = 30'000;
// At most this many lines back for tailLines, and seconds back for sinceSeconds (ten years).
inline constexpr std::int64_t kMaxLogTailLines = 1'000'000;
inline constexpr std::int64_t kMaxLogSinceSeconds = 10LL * 365 * 24 * 3600;
// A chunk's payload: its data as text, escaped, or as base64.
inline constexpr std::size_t kMaxLogChunkPayloadBytes = 512 * 1024;

struct LogRequest {
  std::string robot_id;   // robotId: the robot asked (its topic's)
  std::string follow_id;  // followId: which follow of the bridge; its answer carries it
  std::int64_t seq = 1;   // seq: this request's number in the follow; its answer carries it
  std::string reply_to;   // replyTo: the bridge's MQTT client id, the last level of the answer's topic
  std::string task_uid;   // taskUid
  LogStream stream = LogStream::stdout_stream;
  // Where to start: offset when set; else the first byte written in the
  // last sinceSeconds (by the robot's clock, which wrote the times down) and
  // within the last tailLines lines (both may be set), or 0.
  std::optional<std::int64_t> offset;
  std::optional<std::int64_t> tail_lines;
  std::optional<std::int64_t> since_seconds;
  std::int64_t max_bytes = 16 * 1024;  // maxBytes: 1..kMaxLogChunkBytes
  std::int64_t wait_ms = 0;            // waitMs: 0..kMaxLogWaitMs; hold while there is nothing new
  bool operator==(const LogRequest&) const = default;
};

struct LogChunk {
  std::string robot_id, follow_id;
  std::int64_t seq = 1;
  std::string task_uid;
  LogStream stream = LogStream::stdout_stream;
  // Where `data` starts. Larger than the offset asked when the bytes asked
  // for are no longer kept (the agent rotated them away): the reader is told
  // of the gap, never given other bytes in their place.
  std::int64_t offset = 0;
  std::string data;       // raw bytes: "text" on the wire when UTF-8, else "base64"
  std::int64_t size = 0;  // size: the bytes the stream holds so far
  // ended: the task has ended and data reaches size: nothing more will come.
  bool ended = false;
  // error: set when nothing could be read (TaskNotFound, InvalidRequest); message says why.
  std::string error, message;
  bool operator==(const LogChunk&) const = default;
};

// Whether bytes are UTF-8 text (a JSON string can hold them as they are).
bool is_utf8(const std::string& bytes);

Result<LogRequest> parse_log_request(std::string_view payload);
Result<LogChunk> parse_log_chunk(std::string_view payload);
std::string encode(const LogRequest& message);
// The data as "text" when it is valid UTF-8 (what an operator tailing MQTT
// reads), else as "base64".
std::string encode(const LogChunk& message);

}  // namespace k8s4r
