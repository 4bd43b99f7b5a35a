#include "k8s4r/kube/event_recorder.h"

#include "k8s4r/common/hashing.h"
#include "k8s4r/common/rfc3339.h"

#include <spdlog/spdlog.h>

#include <cstdio>

namespace k8s4r::kube {

using nlohmann::json;

namespace {

constexpr std::size_t kMaxMessageBytes = 1024;

std::string text_at(const json& object, const char* outer, const char* key) {
  const json* value = &object;
  if (outer) {
    if (!object.is_object() || !object.contains(outer)) return "";
    value = &object[outer];
  }
  return value->is_object() && value->contains(key) && (*value)[key].is_string() ? (*value)[key].get<std::string>()
                                                                                 : "";
}

std::string cut_utf8(std::string text, std::size_t limit) {
  if (text.size() <= limit) return text;
  std::size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  text.resize(end);
  return text;
}

}  // namespace

json make_event(const json& object, const std::string& type, const std::string& reason, const std::string& message,
                const std::string& component, const std::string& instance, const std::string& time) {
  const std::string name = text_at(object, "metadata", "name");
  const std::string uid = text_at(object, "metadata", "uid");
  const std::string text = cut_utf8(message, kMaxMessageBytes);
  char suffix[17];
  std::snprintf(suffix, sizeof suffix, "%016llx",
                static_cast<unsigned long long>(Fnv1a64().update(uid + "/" + reason + "/" + text).value()));
  return {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      // At most 253 characters, however long the object's name.
      {"metadata",
       {{"name", name.substr(0, 253 - 17) + "." + suffix}, {"namespace", text_at(object, "metadata", "namespace")}}},
      {"involvedObject",
       {{"apiVersion", text_at(object, nullptr, "apiVersion")},
        {"kind", text_at(object, nullptr, "kind")},
        {"name", name},
        {"namespace", text_at(object, "metadata", "namespace")},
        {"uid", uid}}},
      {"reason", reason},
      {"message", text},
      {"type", type},
      {"source", {{"component", component}, {"host", instance}}},
      {"reportingComponent", component},
      {"reportingInstance", instance},
      {"firstTimestamp", time},
      {"lastTimestamp", time},
      {"count", 1}};
}

EventRecorder::EventRecorder(Client& client, std::string component, std::string instance, std::size_t max_pending)
    : client_(client), component_(std::move(component)), instance_(std::move(instance)), max_pending_(max_pending) {
  thread_ = std::thread([this] { run(); });
}

EventRecorder::~EventRecorder() { stop(); }

void EventRecorder::record(const json& object, const std::string& type, const std::string& reason,
                           const std::string& message) {
  const std::string time =
      format_rfc3339(std::chrono::time_point_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now()));
  json event = make_event(object, type, reason, message, component_, instance_, time);
  const std::string name = event["metadata"]["name"].get<std::string>();
  std::lock_guard lock(mutex_);
  if (stopping_) return;
  // The same event again (a controller judging an object again): one Event,
  // and no request for the repeats while it is remembered.
  if (!recent_.insert(name).second) return;
  recent_order_.push_back(name);
  if (recent_order_.size() > kRemembered) {
    recent_.erase(recent_order_.front());
    recent_order_.pop_front();
  }
  if (pending_.size() >= max_pending_) {
    ++dropped_;
    return;
  }
  pending_.push_back(std::move(event));
  ready_.notify_one();
}

void EventRecorder::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  ready_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EventRecorder::run() {
  for (;;) {
    json event;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      event = std::move(pending_.front());
      pending_.pop_front();
    }
    const std::string ns = event["metadata"]["namespace"].get<std::string>();
    auto created = client_.create(kEvents, ns, event);
    if (created || created.error().already_exists()) {
      ++created_;
    } else {
      spdlog::warn("could not record event {} on {}: {}", event["reason"].get<std::string>(),
                   event["involvedObject"]["name"].get<std::string>(), created.error().to_string());
    }
  }
}

}  // namespace k8s4r::kube
