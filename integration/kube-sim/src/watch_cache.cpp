// Watches: each watcher's queue, fan-out of committed events to the
// watchers whose selectors match (objects entering or leaving a selection
// become ADDED or DELETED), replays from the history window, 410 Expired for
// a resourceVersion that has left it, and bookmarks.
#include "k8s4r/kube_sim/store.h"

#include "store_util.h"

#include <algorithm>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

bool watcher_matches(const Watcher& watcher, const json* object, const std::string& namespace_filter,
                     const LabelSelector& labels, const FieldSelector& fields) {
  if (object == nullptr) return false;
  const json& metadata = metadata_of(*object);
  if (!namespace_filter.empty() && string_at(metadata, "namespace") != namespace_filter) return false;
  (void)watcher;
  return labels.matches(metadata.contains("labels") ? metadata["labels"] : json()) && fields.matches(*object);
}

}  // namespace

std::optional<WatchEvent> Watcher::next(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  ready_.wait_until(lock, deadline, [this] { return !queue_.empty() || closed_; });
  if (queue_.empty()) return std::nullopt;
  WatchEvent event = std::move(queue_.front());
  queue_.pop_front();
  return event;
}

std::optional<WatchEvent> Watcher::try_next() {
  std::lock_guard lock(mutex_);
  if (queue_.empty()) return std::nullopt;
  WatchEvent event = std::move(queue_.front());
  queue_.pop_front();
  return event;
}

void Watcher::set_listener(std::function<void()> listener) {
  std::lock_guard lock(mutex_);
  listener_ = std::move(listener);
}

void Watcher::close() {
  std::function<void()> listener;
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    listener = listener_;
  }
  ready_.notify_all();
  if (listener) listener();
}

bool Watcher::closed() const {
  std::lock_guard lock(mutex_);
  return closed_ && queue_.empty();
}

bool Watcher::push(WatchEvent event, std::size_t limit) {
  std::function<void()> listener;
  {
    std::lock_guard lock(mutex_);
    if (closed_) return false;
    if (queue_.size() >= limit) {
      // Like kube-apiserver's cacher: a watcher that cannot keep up is ended;
      // its client resumes from the last resourceVersion it saw.
      closed_ = true;
    } else {
      queue_.push_back(std::move(event));
    }
    // Only the first queued event needs to wake the stream; it drains the rest.
    if (queue_.size() == 1 || closed_) listener = listener_;
  }
  ready_.notify_all();
  if (listener) listener();
  return true;
}

std::string encode_watch_line(const std::string& type, const json& object) {
  std::string line = R"({"type":")" + type + R"(","object":)";
  line += object.dump(-1, ' ', false, json::error_handler_t::replace);
  line += "}\n";
  return line;
}

void Store::notify(Resource& resource, const HistoryEvent& event) {
  auto& watchers = resource.watchers;
  // Most watchers receive the same bytes: encode each (type, object) once.
  std::map<std::pair<std::string, const json*>, std::shared_ptr<const std::string>> lines;
  for (auto it = watchers.begin(); it != watchers.end();) {
    Watcher& watcher = **it;
    const bool now = watcher_matches(watcher, event.type == "DELETED" ? nullptr : event.object.get(),
                                     watcher.namespace_, watcher.labels_, watcher.fields_);
    const bool before = watcher_matches(watcher, event.type == "DELETED" ? event.object.get() : event.previous.get(),
                                        watcher.namespace_, watcher.labels_, watcher.fields_);
    std::optional<WatchEvent> visible;
    if (event.type == "DELETED") {
      if (before) visible = WatchEvent{"DELETED", event.object};
    } else if (now) {
      visible = WatchEvent{before ? event.type : "ADDED", event.object};
    } else if (before) {
      // It left the watcher's selection: to that watcher it is deleted.
      auto gone = std::make_shared<json>(*event.previous);
      (*gone)["metadata"]["resourceVersion"] = std::to_string(event.resource_version);
      visible = WatchEvent{"DELETED", gone};
    }
    if (visible) {
      if (visible->object->value("apiVersion", "") != watcher.type_.api_version()) {
        visible->object = std::make_shared<json>(for_version(*visible->object, watcher.type_));
      } else {
        auto& line = lines[{visible->type, visible->object.get()}];
        if (!line) line = std::make_shared<const std::string>(encode_watch_line(visible->type, *visible->object));
        visible->line = line;
      }
      if (!watcher.push(std::move(*visible), options_.watcher_queue_limit)) {
        it = watchers.erase(it);
        continue;
      }
    }
    ++it;
  }
}

std::shared_ptr<Watcher> Store::watch(const Target& target, const WatchOptions& options, ApiResponse& error) {
  const ResourceType& type = target.type;
  auto labels = LabelSelector::parse(options.label_selector);
  if (!labels) {
    error = bad_request(labels.error().message);
    return nullptr;
  }
  auto fields = checked_field_selector(type, options.field_selector);
  if (!fields) {
    error = bad_request(fields.error().message);
    return nullptr;
  }
  std::optional<std::uint64_t> from;
  if (!options.resource_version.empty() && options.resource_version != "0") {
    from = parse_version(options.resource_version);
    if (!from) {
      error = bad_request("invalid resourceVersion: " + options.resource_version);
      return nullptr;
    }
  }

  auto watcher = std::make_shared<Watcher>();
  watcher->type_ = type;
  watcher->namespace_ = type.namespaced ? target.namespace_ : "";
  watcher->labels_ = labels.value();
  watcher->fields_ = fields.value();

  std::lock_guard lock(mutex_);
  Resource* resource = resource_of(type);
  if (resource == nullptr) {
    error = not_found_path(type.key());
    return nullptr;
  }
  const auto queue = [&](const std::string& event_type, const std::shared_ptr<const json>& object) {
    std::shared_ptr<const json> shown = object;
    if (object->value("apiVersion", "") != type.api_version())
      shown = std::make_shared<json>(for_version(*object, type));
    watcher->queue_.push_back({event_type, shown});
  };
  if (options.send_initial_events == false && !from) {
    // sendInitialEvents=false: only what changes from now on.
  } else if (options.send_initial_events == true || !from) {
    // The current state as ADDED events first (resourceVersionMatch
    // NotOlderThan: the current state is never older than asked for).
    for (const auto& [key, object] : resource->objects) {
      if (watcher_matches(*watcher, object.get(), watcher->namespace_, watcher->labels_, watcher->fields_)) {
        queue("ADDED", object);
      }
    }
    if (options.send_initial_events == true && options.allow_bookmarks) {
      watcher->queue_.push_back(
          {"BOOKMARK", std::make_shared<json>(json{{"kind", type.kind},
                                                   {"apiVersion", type.api_version()},
                                                   {"metadata",
                                                    {{"resourceVersion", std::to_string(resource_version_)},
                                                     {"annotations", {{"k8s.io/initial-events-end", "true"}}}}}})});
    }
  } else if (*from < resource->window_start) {
    // Left the window: the client must list again.
    watcher->queue_.push_back(
        {"ERROR", std::make_shared<json>(status_body(410, "Expired",
                                                     "too old resource version: " + std::to_string(*from) + " (" +
                                                         std::to_string(resource->window_start + 1) + ")"))});
    watcher->closed_ = true;
    return watcher;
  } else {
    for (const HistoryEvent& event : resource->history) {
      if (event.resource_version <= *from) continue;
      const bool now = event.type != "DELETED" && watcher_matches(*watcher, event.object.get(), watcher->namespace_,
                                                                  watcher->labels_, watcher->fields_);
      const json* before_object = event.type == "DELETED" ? event.object.get() : event.previous.get();
      const bool before =
          watcher_matches(*watcher, before_object, watcher->namespace_, watcher->labels_, watcher->fields_);
      if (event.type == "DELETED") {
        if (before) queue("DELETED", event.object);
      } else if (now) {
        queue(before ? event.type : "ADDED", event.object);
      } else if (before) {
        auto gone = std::make_shared<json>(*event.previous);
        (*gone)["metadata"]["resourceVersion"] = std::to_string(event.resource_version);
        queue("DELETED", gone);
      }
    }
  }
  resource->watchers.push_back(watcher);
  return watcher;
}

void Store::unwatch(const std::shared_ptr<Watcher>& watcher) {
  watcher->close();
  std::lock_guard lock(mutex_);
  for (auto& [key, resource] : resources_) {
    auto& watchers = resource.watchers;
    watchers.erase(std::remove(watchers.begin(), watchers.end(), watcher), watchers.end());
  }
}

std::optional<WatchEvent> Store::bookmark(const std::shared_ptr<Watcher>& watcher) const {
  std::lock_guard lock(mutex_);
  std::lock_guard watcher_lock(watcher->mutex_);
  if (!watcher->queue_.empty() || watcher->closed_) return std::nullopt;
  return WatchEvent{
      "BOOKMARK", std::make_shared<json>(json{{"kind", watcher->type_.kind},
                                              {"apiVersion", watcher->type_.api_version()},
                                              {"metadata", {{"resourceVersion", std::to_string(resource_version_)}}}})};
}

void Store::close_all_watches() {
  std::lock_guard lock(mutex_);
  for (auto& [key, resource] : resources_) {
    for (auto& watcher : resource.watchers) watcher->close();
    resource.watchers.clear();
  }
}

void Store::drop_watch_events(std::uint64_t count) {
  std::lock_guard lock(mutex_);
  events_to_drop_ = count;
}

}  // namespace k8s4r::kube_sim
