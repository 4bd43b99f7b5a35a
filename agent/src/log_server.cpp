#include "log_server.h"

#include "k8s4r/agent/task_logs.h"
#include "k8s4r/common/topics.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>

namespace k8s4r::agent {

using namespace std::chrono_literals;

namespace {

constexpr auto kPollEvery = 50ms;

std::string path_of(const WorkDir& work_dir, const LogRequest& request) {
  return request.stream == LogStream::stderr_stream ? work_dir.stderr_of(request.task_uid)
                                                    : work_dir.stdout_of(request.task_uid);
}

std::string index_of(const WorkDir& work_dir, const std::string& uid) { return work_dir.task_file(uid, "logs.index"); }

std::int64_t unix_ms(Timestamp time) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
}

// A full piece ends after its last whole line, or else before a character
// cut in two: an operator tailing MQTT reads lines, as text.
void cut_at_line(std::string& data) {
  if (const auto newline = data.rfind('\n'); newline != std::string::npos) {
    data.resize(newline + 1);
    return;
  }
  std::size_t lead = data.size();
  for (int back = 0; back < 4 && lead > 0; ++back) {
    const auto byte = static_cast<unsigned char>(data[--lead]);
    if ((byte & 0xC0) != 0x80) {  // a character's first byte: is it whole?
      const std::size_t length = byte < 0x80         ? 1
                                 : (byte >> 5) == 6  ? 2
                                 : (byte >> 4) == 14 ? 3
                                 : (byte >> 3) == 30 ? 4
                                                     : 1;
      if (lead + length > data.size() && lead > 0) data.resize(lead);
      return;
    }
  }
}

}  // namespace

LogServer::LogServer(std::string robot_id, const WorkDir& work_dir, daemon::EventLoop& loop, Hooks hooks)
    : robot_id_(std::move(robot_id)), work_dir_(work_dir), loop_(loop), hooks_(std::move(hooks)) {}

LogServer::~LogServer() { loop_.cancel(poll_timer_); }

void LogServer::on_request(const std::string& payload) {
  auto request = parse_log_request(payload);
  if (!request) {
    spdlog::warn("ignoring a log request: {}", request.error().to_string());
    return;
  }
  if (request.value().robot_id != robot_id_) {
    spdlog::warn("ignoring a log request for robot {}", request.value().robot_id);
    return;
  }
  const LogRequest& asked = request.value();
  const std::string key = asked.reply_to + "/" + asked.follow_id;
  // A newer request of the follow replaces the one held; an older one (a
  // duplicate the broker delivered again) is not answered.
  if (const auto held = held_.find(key); held != held_.end()) {
    if (held->second.request.seq > asked.seq) return;
    held_.erase(held);
  }
  const std::int64_t offset = start_of(asked);
  if (answer(asked, offset, true)) return;
  if (held_.size() >= kMaxHeld) {
    // The one held longest is answered now, empty (its bridge asks again).
    auto oldest = std::min_element(held_.begin(), held_.end(),
                                   [](const auto& a, const auto& b) { return a.second.until < b.second.until; });
    answer(oldest->second.request, oldest->second.offset, false);
    held_.erase(oldest);
  }
  held_[key] = Held{asked, offset, loop_.clock().steady() + std::chrono::milliseconds(asked.wait_ms)};
  if (poll_timer_ == 0) poll_timer_ = loop_.after(kPollEvery, [this] { poll(); });
}

std::int64_t LogServer::start_of(const LogRequest& request) const {
  if (request.offset) return *request.offset;
  const std::string path = path_of(work_dir_, request);
  std::int64_t start = 0;
  if (request.since_seconds) {
    // By this robot's clock, the one that wrote the index.
    const std::int64_t since = unix_ms(loop_.clock().wall()) - *request.since_seconds * 1000;
    const std::int64_t sampled =
        offset_at(index_of(work_dir_, request.task_uid), request.stream == LogStream::stderr_stream, since);
    start = line_start_from(path, sampled);
  }
  if (request.tail_lines) start = std::max(start, tail_offset(path, *request.tail_lines));
  return start;
}

bool LogServer::answer(const LogRequest& request, std::int64_t offset, bool may_hold) {
  const std::optional<bool> ended = hooks_.ended(request.task_uid);
  struct stat about {};
  if (!ended && ::stat(work_dir_.task_dir(request.task_uid).c_str(), &about) != 0) {
    LogChunk chunk;
    chunk.offset = offset;
    chunk.size = offset;
    chunk.error = "TaskNotFound";
    chunk.message = "robot " + robot_id_ + " holds no task " + request.task_uid + " (never sent here, or forgotten)";
    send(request, std::move(chunk));
    return true;
  }
  // Whether it ended is known before the size is read: a size read after
  // the end is the last.
  const bool done = ended.value_or(true);
  LogPiece piece = read_log(path_of(work_dir_, request), offset, static_cast<std::size_t>(request.max_bytes));
  if (piece.data.size() == static_cast<std::size_t>(request.max_bytes)) cut_at_line(piece.data);
  const bool at_end = piece.offset + static_cast<std::int64_t>(piece.data.size()) == piece.size;
  if (may_hold && piece.data.empty() && piece.offset == offset && !done && request.wait_ms > 0) return false;
  LogChunk chunk;
  chunk.offset = piece.offset;
  chunk.data = std::move(piece.data);
  chunk.size = piece.size;
  chunk.ended = done && at_end;
  send(request, std::move(chunk));
  return true;
}

void LogServer::send(const LogRequest& request, LogChunk chunk) {
  chunk.robot_id = robot_id_;
  chunk.follow_id = request.follow_id;
  chunk.seq = request.seq;
  chunk.task_uid = request.task_uid;
  chunk.stream = request.stream;
  auto topic = topics::log_chunk(robot_id_, request.reply_to);
  if (!topic) return;  // checked when parsed
  hooks_.publish(topic.value(), encode(chunk));
}

void LogServer::poll() {
  poll_timer_ = 0;
  const SteadyTime now = loop_.clock().steady();
  for (auto it = held_.begin(); it != held_.end();) {
    // Answered once there are bytes or the task ended; empty once its wait is over.
    if (answer(it->second.request, it->second.offset, now < it->second.until)) {
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
  if (!held_.empty()) poll_timer_ = loop_.after(kPollEvery, [this] { poll(); });
}

void LogServer::sample(const std::vector<std::string>& running_uids) {
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> now;
  const std::int64_t at = unix_ms(loop_.clock().wall());
  for (const std::string& uid : running_uids) {
    const std::pair<std::int64_t, std::int64_t> sizes{read_log(work_dir_.stdout_of(uid), 0, 0).size,
                                                      read_log(work_dir_.stderr_of(uid), 0, 0).size};
    const auto before = sampled_.find(uid);
    if (before == sampled_.end() || before->second != sizes)
      append_log_index(index_of(work_dir_, uid), at, sizes.first, sizes.second);
    now.emplace(uid, sizes);
  }
  sampled_ = std::move(now);
}

}  // namespace k8s4r::agent
