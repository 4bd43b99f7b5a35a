#include "k8s4r/bridge/log_follows.h"

#include "k8s4r/common/topics.h"

#include <cstdio>
#include <random>

namespace k8s4r::bridge {

std::string LogFollows::new_follow_id() {
  // Random as well as counted: a bridge started again must not take an
  // earlier run's answers, still on their way, for its own.
  static thread_local std::mt19937_64 random{std::random_device{}()};
  std::lock_guard lock(mutex_);
  char id[40];
  std::snprintf(id, sizeof id, "f%llx-%llu", static_cast<unsigned long long>(random() & 0xffffffffffULL),
                static_cast<unsigned long long>(++next_id_));
  return id;
}

std::optional<LogChunk> LogFollows::ask(LogRequest request, std::chrono::milliseconds timeout) {
  request.reply_to = reply_to_;
  auto topic = topics::log_request(request.robot_id);
  if (!topic) return std::nullopt;
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return std::nullopt;
    waiting_[request.follow_id] = Waiting{request, std::nullopt};
  }
  publish_(topic.value(), encode(request));
  std::unique_lock lock(mutex_);
  arrived_.wait_for(lock, timeout, [&] { return stopped_ || waiting_[request.follow_id].answer.has_value(); });
  auto answer = std::move(waiting_[request.follow_id].answer);
  waiting_.erase(request.follow_id);
  return answer;
}

bool LogFollows::on_chunk(LogChunk chunk) {
  std::lock_guard lock(mutex_);
  const auto follower = waiting_.find(chunk.follow_id);
  // Only the answer to the request waited for, from the robot asked: an
  // earlier one's, late, would repeat or skip bytes.
  const LogRequest* asked = follower == waiting_.end() ? nullptr : &follower->second.request;
  if (!asked || asked->seq != chunk.seq || asked->robot_id != chunk.robot_id || asked->task_uid != chunk.task_uid ||
      asked->stream != chunk.stream || follower->second.answer) {
    dropped_.fetch_add(1);
    return false;
  }
  bytes_.fetch_add(chunk.data.size());
  follower->second.answer = std::move(chunk);
  arrived_.notify_all();
  return true;
}

void LogFollows::stop() {
  std::lock_guard lock(mutex_);
  stopped_ = true;
  arrived_.notify_all();
}

bool LogFollows::stopped() const {
  std::lock_guard lock(mutex_);
  return stopped_;
}

std::size_t LogFollows::followers() const {
  std::lock_guard lock(mutex_);
  return waiting_.size();
}

}  // namespace k8s4r::bridge
