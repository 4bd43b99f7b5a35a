// Kubernetes Events (core/v1) about the objects a controller acts on, as
// client-go's EventRecorder: record() returns at once and a thread of the
// recorder creates the Event, so a slow API server never holds up a
// decision. The same event (object uid, reason and message) recorded twice
// is one Event: its name is a hash of them, a repeat of one of the last
// 16,384 is not sent, and a create that finds the name taken is done. At most `max_pending` Events wait; beyond that
// they are dropped and counted, as client-go's broadcaster drops under load.
//
// Threading: every method may be called from any thread.
#pragma once

#include "k8s4r/kube/client.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

namespace k8s4r::kube {

inline const Resource kEvents{"", "v1", "events", true};

// The Event object for `object` (whose apiVersion, kind, namespace, name and
// uid it names). `type` is "Normal" or "Warning"; the message is cut to
// 1,024 bytes on a UTF-8 boundary. Pure.
nlohmann::json make_event(const nlohmann::json& object, const std::string& type, const std::string& reason,
                          const std::string& message, const std::string& component, const std::string& instance,
                          const std::string& time);

class EventRecorder {
 public:
  EventRecorder(Client& client, std::string component, std::string instance, std::size_t max_pending = 4096);
  ~EventRecorder();
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  void record(const nlohmann::json& object, const std::string& type, const std::string& reason,
              const std::string& message);
  void stop();

  std::uint64_t created() const { return created_; }
  std::uint64_t dropped() const { return dropped_; }

 private:
  void run();

  Client& client_;
  std::string component_, instance_;
  std::size_t max_pending_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<nlohmann::json> pending_;
  static constexpr std::size_t kRemembered = 16384;
  std::unordered_set<std::string> recent_;  // names of the last kRemembered Events recorded
  std::deque<std::string> recent_order_;
  bool stopping_ = false;
  std::atomic<std::uint64_t> created_{0}, dropped_{0};
  std::thread thread_;
};

}  // namespace k8s4r::kube
