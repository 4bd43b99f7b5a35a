#include "k8s4r/kube/informer.h"

#include "k8s4r/common/hashing.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace k8s4r::kube {

using nlohmann::json;

namespace {

const json& metadata_of(const json& object) {
  static const json empty = json::object();
  return object.contains("metadata") && object["metadata"].is_object() ? object["metadata"] : empty;
}

std::string key_of(const json& object) {
  const json& metadata = metadata_of(object);
  return metadata.value("namespace", "") + "/" + metadata.value("name", "");
}

std::string version_of(const json& object) { return metadata_of(object).value("resourceVersion", ""); }

}  // namespace

bool generation_changed(const json& old_object, const json& new_object) {
  return metadata_of(old_object).value("generation", 0) != metadata_of(new_object).value("generation", 0);
}

UpdatePredicate field_changed(const std::string& json_pointer) {
  const json::json_pointer pointer(json_pointer);
  return [pointer](const json& old_object, const json& new_object) {
    const json before = old_object.contains(pointer) ? old_object.at(pointer) : json();
    const json after = new_object.contains(pointer) ? new_object.at(pointer) : json();
    return before != after;
  };
}

std::uint64_t cache_hash(const std::vector<ObjectPtr>& objects) {
  std::vector<std::string> entries;
  entries.reserve(objects.size());
  for (const ObjectPtr& object : objects) entries.push_back(key_of(*object) + "/" + version_of(*object));
  std::sort(entries.begin(), entries.end());
  Fnv1a64 hash;
  for (const std::string& entry : entries) hash.update(entry).update("\n");
  return hash.value();
}

Informer::Informer(Client& client, InformerOptions options) : client_(client), options_(std::move(options)) {}

Informer::~Informer() { stop(); }

void Informer::add_index(const std::string& name, KeyFunction key_of_object) {
  index_functions_.emplace_back(name, std::move(key_of_object));
}

void Informer::add_handler(EventHandler handler) { handlers_.push_back(std::move(handler)); }

void Informer::start() {
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
  if (options_.consistency_check_interval.count() > 0) {
    checker_ = std::thread([this] {
      auto next = std::chrono::steady_clock::now() + options_.consistency_check_interval;
      while (!stopping_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (std::chrono::steady_clock::now() < next || !has_synced()) continue;
        check_consistency();
        next = std::chrono::steady_clock::now() + options_.consistency_check_interval;
      }
    });
  }
}

void Informer::stop() {
  stopping_ = true;
  end_watch_ = true;
  if (thread_.joinable()) thread_.join();
  if (checker_.joinable()) checker_.join();
}

bool Informer::has_synced() const {
  std::lock_guard lock(mutex_);
  return synced_;
}

bool Informer::wait_for_sync(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return synced_changed_.wait_for(lock, timeout, [this] { return synced_; });
}

ObjectPtr Informer::get(const std::string& namespace_, const std::string& name) const {
  std::lock_guard lock(mutex_);
  auto it = objects_.find(namespace_ + "/" + name);
  return it == objects_.end() ? nullptr : it->second;
}

ObjectPtr Informer::get_by_uid(const std::string& uid) const {
  std::lock_guard lock(mutex_);
  auto it = by_uid_.find(uid);
  if (it == by_uid_.end()) return nullptr;
  return objects_.at(it->second);
}

std::vector<ObjectPtr> Informer::by_index(const std::string& index, const std::string& key) const {
  std::lock_guard lock(mutex_);
  std::vector<ObjectPtr> found;
  auto index_it = indexes_.find(index);
  if (index_it == indexes_.end()) return found;
  auto key_it = index_it->second.find(key);
  if (key_it == index_it->second.end()) return found;
  for (const std::string& object_key : key_it->second) found.push_back(objects_.at(object_key));
  return found;
}

std::vector<ObjectPtr> Informer::list() const {
  std::lock_guard lock(mutex_);
  std::vector<ObjectPtr> all;
  all.reserve(objects_.size());
  for (const auto& [key, object] : objects_) all.push_back(object);
  return all;
}

std::string Informer::resource_version() const {
  std::lock_guard lock(mutex_);
  return resource_version_;
}

InformerMetrics Informer::metrics() const {
  std::lock_guard lock(mutex_);
  return metrics_;
}

// ---- cache --------------------------------------------------------------------------

void Informer::index(const std::string& key, const ObjectPtr& object, bool add) {
  const std::string uid = metadata_of(*object).value("uid", "");
  if (!uid.empty()) {
    if (add) {
      by_uid_[uid] = key;
    } else {
      by_uid_.erase(uid);
    }
  }
  for (const auto& [name, key_function] : index_functions_) {
    for (const std::string& index_key : key_function(*object)) {
      auto& keys = indexes_[name][index_key];
      if (add) {
        keys.insert(key);
      } else {
        keys.erase(key);
        if (keys.empty()) indexes_[name].erase(index_key);
      }
    }
  }
}

std::vector<Informer::Delta> Informer::upsert(ObjectPtr object) {
  std::lock_guard lock(mutex_);
  const std::string key = key_of(*object);
  if (const std::string version = version_of(*object); !version.empty()) resource_version_ = version;
  auto it = objects_.find(key);
  if (it == objects_.end()) {
    objects_[key] = object;
    index(key, object, true);
    return {{Delta::added, nullptr, object}};
  }
  if (version_of(*it->second) == version_of(*object)) return {};  // seen already
  ObjectPtr old_object = it->second;
  index(key, old_object, false);
  it->second = object;
  index(key, object, true);
  return {{Delta::updated, old_object, object}};
}

std::vector<Informer::Delta> Informer::erase(const ObjectPtr& object) {
  std::lock_guard lock(mutex_);
  const std::string key = key_of(*object);
  if (const std::string version = version_of(*object); !version.empty()) resource_version_ = version;
  auto it = objects_.find(key);
  if (it == objects_.end()) return {};
  index(key, it->second, false);
  objects_.erase(it);
  return {{Delta::deleted, nullptr, object}};
}

void Informer::deliver(const std::vector<Delta>& deltas) {
  for (const Delta& delta : deltas) {
    {
      std::lock_guard lock(mutex_);
      ++metrics_.events;
    }
    for (const EventHandler& handler : handlers_) {
      // One failing handler must not stop the informer or the other handlers.
      try {
        switch (delta.kind) {
          case Delta::added:
            if (handler.on_add) handler.on_add(delta.new_object);
            break;
          case Delta::updated:
            if (handler.on_update &&
                (!handler.update_filter || handler.update_filter(*delta.old_object, *delta.new_object))) {
              handler.on_update(delta.old_object, delta.new_object);
            }
            break;
          case Delta::deleted:
            if (handler.on_delete) handler.on_delete(delta.new_object);
            break;
        }
      } catch (const std::exception& error) {
        spdlog::error("informer {}: a handler failed: {}", options_.resource.plural, error.what());
      }
    }
  }
}

// ---- reflector ----------------------------------------------------------------------

bool Informer::list_and_replace() {
  ListOptions options;
  options.label_selector = options_.label_selector;
  options.field_selector = options_.field_selector;
  options.limit = options_.page_size;
  auto listed = client_.list_all(options_.resource, options_.namespace_, options);
  if (!listed) {
    spdlog::warn("informer {}: list failed: {}", options_.resource.plural, listed.error().to_string());
    return false;
  }
  std::map<std::string, ObjectPtr> fresh;
  for (auto& item : listed.value()["items"]) {
    auto object = std::make_shared<const json>(std::move(item));
    fresh[key_of(*object)] = object;
  }
  std::vector<Delta> deltas;
  {
    std::lock_guard lock(mutex_);
    // The difference between what we had and what is there now.
    for (const auto& [key, object] : objects_) {
      if (!fresh.count(key)) deltas.push_back({Delta::deleted, nullptr, object});
    }
    for (const auto& [key, object] : fresh) {
      auto it = objects_.find(key);
      if (it == objects_.end()) {
        deltas.push_back({Delta::added, nullptr, object});
      } else if (version_of(*it->second) != version_of(*object)) {
        deltas.push_back({Delta::updated, it->second, object});
      }
    }
    objects_.clear();
    by_uid_.clear();
    indexes_.clear();
    for (const auto& [key, object] : fresh) {
      objects_[key] = object;
      index(key, object, true);
    }
    resource_version_ = listed.value()["metadata"].value("resourceVersion", "");
    ++metrics_.lists;
    relist_ = false;
  }
  deliver(deltas);
  {
    std::lock_guard lock(mutex_);
    synced_ = true;
  }
  synced_changed_.notify_all();
  return true;
}

void Informer::watch_once() {
  WatchOptions options;
  options.label_selector = options_.label_selector;
  options.field_selector = options_.field_selector;
  options.resource_version = resource_version();
  options.allow_bookmarks = true;
  options.timeout_seconds = options_.watch_timeout_seconds;
  bool expired = false;
  bool server_error = false;
  {
    std::lock_guard lock(mutex_);
    ++metrics_.watches;
    // Cleared before stopping_ and relist_ are read, so a stop() or a failed
    // consistency check that sets it from now on is not lost.
    end_watch_ = false;
    if (relist_) return;
  }
  if (stopping_) return;
  const auto on_event = [&](const WatchEvent& event) {
    if (event.type == "ERROR") {
      const int code =
          event.object.is_object() && event.object.contains("code") && event.object["code"].is_number_integer()
              ? event.object["code"].get<int>()
              : 0;
      expired = code == 410;
      server_error = !expired;
      if (server_error) spdlog::warn("informer {}: watch error: {}", options_.resource.plural, event.object.dump());
      return false;
    }
    if (event.type == "BOOKMARK") {
      std::lock_guard lock(mutex_);
      if (const std::string version = version_of(event.object); !version.empty()) resource_version_ = version;
      return !relist_;
    }
    auto object = std::make_shared<const json>(event.object);
    deliver(event.type == "DELETED" ? erase(object) : upsert(object));
    std::lock_guard lock(mutex_);
    return !relist_;  // a failed consistency check asks for a relist
  };
  auto watched = client_.watch(options_.resource, options_.namespace_, options, on_event, end_watch_);
  if (!watched) {
    expired = expired || watched.error().expired();
    if (!expired) spdlog::warn("informer {}: watch failed: {}", options_.resource.plural, watched.error().to_string());
  }
  if ((!watched && !expired) || server_error) {
    // Wait before watching again, so a failing server is not hammered.
    for (int i = 0; i < options_.retry_delay.count() / 50 && !stopping_; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (expired) {
    std::lock_guard lock(mutex_);
    relist_ = true;
    ++metrics_.relists_after_expired;
  }
}

void Informer::run() {
  while (!stopping_) {
    bool relist = false;
    {
      std::lock_guard lock(mutex_);
      relist = relist_;
    }
    if (relist && !list_and_replace()) {
      for (int i = 0; i < options_.retry_delay.count() / 50 && !stopping_; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    watch_once();
  }
}

bool Informer::check_consistency() {
  std::string version;
  std::vector<ObjectPtr> cached;
  {
    std::lock_guard lock(mutex_);
    if (relist_) return false;  // a relist is already on its way
    version = resource_version_;
    for (const auto& [key, object] : objects_) cached.push_back(object);
  }
  ListOptions options;
  options.label_selector = options_.label_selector;
  options.field_selector = options_.field_selector;
  options.resource_version = version;
  options.resource_version_match = "Exact";
  options.limit = options_.page_size;
  auto listed = client_.list_all(options_.resource, options_.namespace_, options);
  if (!listed) {
    // Cannot tell (the version may have left the server's window): skip.
    spdlog::info("informer {}: consistency check skipped: {}", options_.resource.plural, listed.error().to_string());
    return true;
  }
  std::vector<ObjectPtr> fresh;
  for (auto& item : listed.value()["items"]) fresh.push_back(std::make_shared<const json>(std::move(item)));
  const std::uint64_t ours = cache_hash(cached), theirs = cache_hash(fresh);
  std::lock_guard lock(mutex_);
  ++metrics_.consistency_checks;
  if (ours == theirs) return true;
  ++metrics_.consistency_mismatches;
  relist_ = true;
  end_watch_ = true;
  spdlog::error(
      "informer {}: cache differs from the server at resourceVersion {} (hash {:016x} != {:016x}, {} vs {} "
      "objects); relisting",
      options_.resource.plural, version, ours, theirs, cached.size(), fresh.size());
  return false;
}

}  // namespace k8s4r::kube
