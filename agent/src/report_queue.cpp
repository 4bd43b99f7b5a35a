#include "k8s4r/agent/report_queue.h"

#include "durable_file.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace k8s4r::agent {

namespace fs = std::filesystem;
using nlohmann::json;

std::string ReportQueue::file_of(std::uint64_t id) const {
  char name[32];
  std::snprintf(name, sizeof name, "%020llu.json", static_cast<unsigned long long>(id));
  return (fs::path(directory_) / name).string();
}

Result<ReportQueue> ReportQueue::open(const std::string& directory, std::size_t capacity) {
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) return Error{"report-queue", "cannot create " + directory + ": " + error.message()};
  ReportQueue queue(directory, capacity);
  for (const auto& file : fs::directory_iterator(directory, error)) {
    const std::string name = file.path().filename().string();
    if (file.path().extension() == ".tmp") {  // a write the last run did not finish
      fs::remove(file.path(), error);
      continue;
    }
    if (file.path().extension() != ".json") continue;
    std::uint64_t id = 0;
    try {
      id = std::stoull(name);
    } catch (...) {
      continue;
    }
    std::ifstream in(file.path());
    const json report = json::parse(in, nullptr, false);
    if (report.is_discarded() || !report.contains("topic") || !report.contains("payload")) {
      return Error{"report-queue", file.path().string() + " is not a queued report"};
    }
    queue.reports_[id] = QueuedReport{id, report["topic"].get<std::string>(), report["payload"].get<std::string>()};
    queue.next_id_ = std::max(queue.next_id_, id + 1);
  }
  if (error) return Error{"report-queue", "cannot read " + directory + ": " + error.message()};
  return queue;
}

Result<std::uint64_t> ReportQueue::push(const std::string& topic, const std::string& payload) {
  if (reports_.size() >= capacity_) {
    return Error{"report-queue", "full (" + std::to_string(capacity_) +
                                     " reports waiting for the broker); report for " + topic + " refused"};
  }
  const std::uint64_t id = next_id_;
  const std::string text =
      json{{"topic", topic}, {"payload", payload}}.dump(-1, ' ', false, json::error_handler_t::replace);
  if (auto stored = write_file_durably(file_of(id), text, "report-queue"); !stored) return stored.error();
  ++next_id_;
  reports_[id] = QueuedReport{id, topic, payload};
  return id;
}

std::vector<QueuedReport> ReportQueue::oldest(std::size_t limit) const {
  std::vector<QueuedReport> reports;
  for (auto it = reports_.begin(); it != reports_.end() && reports.size() < limit; ++it) reports.push_back(it->second);
  return reports;
}

Result<void> ReportQueue::acknowledge(std::uint64_t id) {
  if (reports_.erase(id) == 0) return ok();
  if (::unlink(file_of(id).c_str()) != 0 && errno != ENOENT) {
    return Error{"report-queue", "cannot remove " + file_of(id) + ": " + std::strerror(errno)};
  }
  return ok();
}

}  // namespace k8s4r::agent
