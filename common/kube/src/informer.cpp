#include "k8s4r/kube/informer.h"

#include "k8s4r/common/hashing.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <random>

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

std::uint64_t hash_entries(std::vector<std::string> entries) {
  std::sort(entries.begin(), entries.end());
  Fnv1a64 hash;
  for (const std::string& entry : entries) hash.update(entry).update("\n");
  return hash.value();
}

}  // namespace

void strip_managed_fields(json& object) {
  if (object.contains("metadata") && object["metadata"].is_object()) object["metadata"].erase("managedFields");
}

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
  return hash_entries(std::move(entries));
}

// ---- one handler: its buffer and its thread -------------------------------------------

class Informer::Listener {
 public:
  Listener(EventHandler handler, Informer& owner) : handler_(std::move(handler)), owner_(owner) {}
  ~Listener() { stop(); }

  // Called with the owner's mutex held, so events reach every listener in
  // the cache's order.
  void push(const Delta& delta) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(delta);
      ++pushed_;
    }
    changed_.notify_one();
  }

  // What is buffered now is this listener's share of the first list.
  void mark_synced_after_buffered() {
    std::lock_guard lock(mutex_);
    mark_ = pushed_;
  }

  bool synced() const {
    std::lock_guard lock(mutex_);
    return done_ >= mark_;
  }

  std::uint64_t backlog() const {
    std::lock_guard lock(mutex_);
    return queue_.size();
  }

  std::uint64_t errors() const { return errors_; }

  void start() {
    thread_ = std::thread([this] { run(); });
  }

  // Ends after the handler call in progress; what is still buffered is dropped.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (true) {
      changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      const Delta delta = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      handle(delta);
      lock.lock();
      if (++done_ == mark_) {
        lock.unlock();
        {
          std::lock_guard owner_lock(owner_.mutex_);  // so a waiter between its check and its wait is not missed
        }
        owner_.synced_changed_.notify_all();
        lock.lock();
      }
    }
  }

  void handle(const Delta& delta) {
    // One failing handler must not stop the informer or the other handlers.
    try {
      switch (delta.kind) {
        case Kind::added:
          if (handler_.on_add) handler_.on_add(delta.new_object);
          break;
        case Kind::updated:
          if (handler_.on_update &&
              (!handler_.update_filter || handler_.update_filter(*delta.old_object, *delta.new_object))) {
            handler_.on_update(delta.old_object, delta.new_object);
          }
          break;
        case Kind::deleted:
          if (handler_.on_delete) handler_.on_delete(delta.new_object, delta.final_state_unknown);
          break;
      }
    } catch (const std::exception& error) {
      ++errors_;
      spdlog::error("informer {}: a handler failed: {}", owner_.options_.resource.plural, error.what());
    } catch (...) {
      ++errors_;
      spdlog::error("informer {}: a handler failed", owner_.options_.resource.plural);
    }
  }

  EventHandler handler_;
  Informer& owner_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Delta> queue_;
  std::uint64_t pushed_ = 0, done_ = 0;
  std::uint64_t mark_ = std::numeric_limits<std::uint64_t>::max();  // not synced before the first list
  bool stopping_ = false;
  std::atomic<std::uint64_t> errors_{0};
  std::thread thread_;
};

// ---- the informer ---------------------------------------------------------------------

Informer::Informer(Client& client, InformerOptions options) : client_(client), options_(std::move(options)) {}

Informer::~Informer() { stop(); }

void Informer::add_index(const std::string& name, KeyFunction key_of_object) {
  index_functions_.emplace_back(name, std::move(key_of_object));
}

void Informer::add_handler(EventHandler handler) {
  std::lock_guard lock(mutex_);
  auto listener = std::make_unique<Listener>(std::move(handler), *this);
  if (started_) {
    // Late: it first sees what is cached, as if it had been there all along.
    for (const auto& [key, entry] : objects_) listener->push({Kind::added, nullptr, object_of(entry)});
    if (synced_) listener->mark_synced_after_buffered();
    listener->start();
  }
  listeners_.push_back(std::move(listener));
}

void Informer::start() {
  {
    std::lock_guard lock(mutex_);
    started_ = true;
    for (auto& listener : listeners_) listener->start();
  }
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
  if (options_.consistency_check_interval.count() > 0) {
    checker_ = std::thread([this] {
      while (true) {
        {
          std::unique_lock lock(stop_mutex_);
          if (stop_changed_.wait_for(lock, options_.consistency_check_interval, [this] { return stopping_.load(); }))
            return;
        }
        if (has_synced()) check_consistency();
      }
    });
  }
}

void Informer::stop() {
  {
    std::lock_guard lock(stop_mutex_);
    stopping_ = true;
  }
  stop_changed_.notify_all();
  end_watch_ = true;
  if (thread_.joinable()) thread_.join();
  if (checker_.joinable()) checker_.join();
  // The reflector has ended, so nothing pushes any more.
  std::vector<Listener*> listeners;
  {
    std::lock_guard lock(mutex_);
    for (auto& listener : listeners_) listeners.push_back(listener.get());
  }
  for (Listener* listener : listeners) listener->stop();
}

bool Informer::listeners_synced() const {
  return std::all_of(listeners_.begin(), listeners_.end(), [](const auto& listener) { return listener->synced(); });
}

bool Informer::has_synced() const {
  std::lock_guard lock(mutex_);
  return synced_ && listeners_synced();
}

bool Informer::wait_for_sync(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return synced_changed_.wait_for(lock, timeout, [this] { return synced_ && listeners_synced(); });
}

// Reads copy an entry under the lock and unpack it after, so a packed cache
// holds the lock for a copy, not a parse.
ObjectPtr Informer::get(const std::string& namespace_, const std::string& name) const {
  Entry entry;
  {
    std::lock_guard lock(mutex_);
    auto it = objects_.find(namespace_ + "/" + name);
    if (it == objects_.end()) return nullptr;
    entry = it->second;
  }
  return object_of(entry);
}

ObjectPtr Informer::get_by_uid(const std::string& uid) const {
  Entry entry;
  {
    std::lock_guard lock(mutex_);
    auto it = by_uid_.find(uid);
    if (it == by_uid_.end()) return nullptr;
    entry = objects_.at(it->second);
  }
  return object_of(entry);
}

std::vector<ObjectPtr> Informer::by_index(const std::string& index, const std::string& key) const {
  std::vector<Entry> entries;
  {
    std::lock_guard lock(mutex_);
    auto index_it = indexes_.find(index);
    if (index_it == indexes_.end()) return {};
    auto key_it = index_it->second.find(key);
    if (key_it == index_it->second.end()) return {};
    for (const std::string& object_key : key_it->second) entries.push_back(objects_.at(object_key));
  }
  std::vector<ObjectPtr> found;
  found.reserve(entries.size());
  for (const Entry& entry : entries) found.push_back(object_of(entry));
  return found;
}

std::vector<ObjectPtr> Informer::list() const {
  std::vector<Entry> entries;
  {
    std::lock_guard lock(mutex_);
    entries.reserve(objects_.size());
    for (const auto& [key, entry] : objects_) entries.push_back(entry);
  }
  std::vector<ObjectPtr> all;
  all.reserve(entries.size());
  for (const Entry& entry : entries) all.push_back(object_of(entry));
  return all;
}

std::size_t Informer::size() const {
  std::lock_guard lock(mutex_);
  return objects_.size();
}

std::string Informer::resource_version() const {
  std::lock_guard lock(mutex_);
  return resource_version_;
}

InformerMetrics Informer::metrics() const {
  std::lock_guard lock(mutex_);
  InformerMetrics metrics = metrics_;
  for (const auto& listener : listeners_) {
    metrics.handler_errors += listener->errors();
    metrics.handler_backlog += listener->backlog();
  }
  return metrics;
}

// ---- cache --------------------------------------------------------------------------

Informer::Entry Informer::entry_of(ObjectPtr object) const {
  Entry entry;
  entry.version = version_of(*object);
  if (!options_.packed) {
    entry.object = std::move(object);
    return entry;
  }
  entry.packed = PackedJson(*object);
  return entry;
}

ObjectPtr Informer::object_of(const Entry& entry) const {
  if (entry.object) return entry.object;
  return std::make_shared<const json>(entry.packed.get());
}

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
    std::vector<std::string> index_keys;
    try {
      index_keys = key_function(*object);
    } catch (const std::exception& error) {
      // The object stays cached, under no key of this index.
      if (add) {
        ++metrics_.index_errors;
        spdlog::error("informer {}: index {} failed for {}: {}", options_.resource.plural, name, key, error.what());
      }
      continue;
    }
    for (const std::string& index_key : index_keys) {
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

void Informer::publish(const Delta& delta) {
  ++metrics_.events;
  for (auto& listener : listeners_) listener->push(delta);
}

void Informer::upsert(ObjectPtr object) {
  const std::string key = key_of(*object);
  Entry entry = entry_of(object);  // packed before the lock, which every read takes
  std::lock_guard lock(mutex_);
  if (!entry.version.empty()) resource_version_ = entry.version;
  auto it = objects_.find(key);
  if (it == objects_.end()) {
    objects_.emplace(key, std::move(entry));
    index(key, object, true);
    publish({Kind::added, nullptr, object});
    return;
  }
  if (it->second.version == entry.version) return;  // seen already
  ObjectPtr old_object = object_of(it->second);
  index(key, old_object, false);
  it->second = std::move(entry);
  index(key, object, true);
  publish({Kind::updated, old_object, object});
}

void Informer::erase(const ObjectPtr& object) {
  std::lock_guard lock(mutex_);
  const std::string key = key_of(*object);
  if (const std::string version = version_of(*object); !version.empty()) resource_version_ = version;
  auto it = objects_.find(key);
  if (it == objects_.end()) return;
  index(key, object_of(it->second), false);
  objects_.erase(it);
  publish({Kind::deleted, nullptr, object});
}

// ---- reflector ----------------------------------------------------------------------

void Informer::back_off() {
  std::chrono::milliseconds step;
  {
    std::lock_guard lock(mutex_);
    backoff_ = backoff_.count() == 0 ? options_.retry_delay : std::min(backoff_ * 2, options_.max_retry_delay);
    step = backoff_;
    ++metrics_.retries;
  }
  // Jitter in [0.5, 1.5) of the step, so many informers restarted together
  // do not come back together.
  thread_local std::mt19937_64 random{std::random_device{}()};
  const auto wait = std::chrono::milliseconds(
      static_cast<long long>(static_cast<double>(step.count()) * std::uniform_real_distribution(0.5, 1.5)(random)));
  std::unique_lock lock(stop_mutex_);
  stop_changed_.wait_for(lock, wait, [this] { return stopping_.load() || wake_; });
  wake_ = false;
}

std::optional<std::string> Informer::list_pages(ListOptions options, const std::function<void(json&&)>& on_item,
                                                const std::function<void()>& on_restart) {
  options.cancel = &stopping_;
  const ListOptions first_page = options;
  std::string version;
  bool first = true;
  while (true) {
    auto page = client_.list(options_.resource, options_.namespace_, options);
    if (!page) {
      if (page.error().expired() && !options.continue_token.empty()) {
        // The token outlived the server's window (writes kept coming while we
        // paged): the pages so far are from an old version. One full list,
        // as client-go's pager does.
        spdlog::warn("informer {}: continue token expired; listing again in one piece", options_.resource.plural);
        {
          std::lock_guard lock(mutex_);
          ++metrics_.list_fallbacks;
        }
        on_restart();
        options = first_page;
        options.limit = 0;
        first = true;
        continue;
      }
      if (!stopping_) spdlog::warn("informer {}: list failed: {}", options_.resource.plural, page.error().to_string());
      return std::nullopt;
    }
    json body = std::move(page).value();
    const json& metadata = metadata_of(body);
    if (first) version = metadata.value("resourceVersion", "");
    first = false;
    const std::string next = metadata.contains("continue") && metadata["continue"].is_string()
                                 ? metadata["continue"].get<std::string>()
                                 : "";
    if (body.contains("items") && body["items"].is_array()) {
      for (json& item : body["items"]) {
        if (options_.transform) options_.transform(item);
        on_item(std::move(item));
      }
    }
    if (next.empty()) return version;
    options.continue_token = next;
    options.resource_version.clear();  // the token pins the version
    options.resource_version_match.clear();
  }
}

std::uint64_t Informer::select(const std::string& label_selector) {
  std::lock_guard lock(mutex_);
  if (label_selector == options_.label_selector) return selection_;
  options_.label_selector = label_selector;
  relist_ = true;
  end_watch_ = true;
  {
    std::lock_guard stop_lock(stop_mutex_);
    wake_ = true;  // a back-off under way ends: the new selection is listed now
  }
  stop_changed_.notify_all();
  return ++selection_;
}

bool Informer::selected(std::uint64_t selection) const {
  std::lock_guard lock(mutex_);
  return listed_selection_ >= selection;
}

bool Informer::list_and_replace() {
  ListOptions options;
  std::uint64_t selection = 0;
  {
    std::lock_guard lock(mutex_);
    options.label_selector = options_.label_selector;
    selection = selection_;
  }
  options.field_selector = options_.field_selector;
  options.limit = options_.page_size;
  // Packed as the pages come, when the cache is: a relist holds one parsed
  // page, not a second parsed copy of everything.
  std::map<std::string, Entry> fresh;
  const auto version = list_pages(
      options,
      [&](json&& item) {
        auto object = std::make_shared<const json>(std::move(item));
        std::string key = key_of(*object);
        fresh[std::move(key)] = entry_of(std::move(object));
      },
      [&] { fresh.clear(); });
  if (!version) return false;
  {
    std::lock_guard lock(mutex_);
    // The difference between what we had and what is there now. A delete
    // seen only here may have missed the object's last state.
    std::vector<Delta> deltas;
    std::map<std::string, Entry> old = std::move(objects_);
    objects_.clear();
    by_uid_.clear();
    indexes_.clear();
    for (const auto& [key, entry] : old) {
      if (!fresh.count(key)) deltas.push_back({Kind::deleted, nullptr, object_of(entry), true});
    }
    for (auto& [key, entry] : fresh) {
      const ObjectPtr object = object_of(entry);
      auto it = old.find(key);
      if (it == old.end()) {
        deltas.push_back({Kind::added, nullptr, object});
      } else if (it->second.version != entry.version) {
        deltas.push_back({Kind::updated, object_of(it->second), object});
      }
      index(key, object, true);
      objects_.emplace(key, std::move(entry));
    }
    resource_version_ = *version;
    ++metrics_.lists;
    // A select() meanwhile asked for another list: this one stands until it.
    relist_ = selection != selection_;
    listed_selection_ = std::max(listed_selection_, selection);
    backoff_ = std::chrono::milliseconds{0};
    for (const Delta& delta : deltas) publish(delta);
    if (!synced_) {
      synced_ = true;
      for (auto& listener : listeners_) listener->mark_synced_after_buffered();
    }
  }
  synced_changed_.notify_all();
  return true;
}

void Informer::watch_once() {
  WatchOptions options;
  {
    std::lock_guard lock(mutex_);
    options.label_selector = options_.label_selector;
  }
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
  bool delivered = false;
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
    delivered = true;
    if (event.type == "BOOKMARK") {
      std::lock_guard lock(mutex_);
      if (const std::string version = version_of(event.object); !version.empty()) resource_version_ = version;
      return !relist_;
    }
    json object = event.object;
    if (options_.transform) options_.transform(object);
    auto shared = std::make_shared<const json>(std::move(object));
    if (event.type == "DELETED") {
      erase(shared);
    } else {
      upsert(std::move(shared));
    }
    std::lock_guard lock(mutex_);
    return !relist_;  // a failed consistency check asks for a relist
  };
  auto watched = client_.watch(options_.resource, options_.namespace_, options, on_event, end_watch_);
  if (!watched) {
    expired = expired || watched.error().expired();
    if (!expired) spdlog::warn("informer {}: watch failed: {}", options_.resource.plural, watched.error().to_string());
  }
  if (expired) {
    std::lock_guard lock(mutex_);
    relist_ = true;
    ++metrics_.relists_after_expired;
    return;
  }
  if (!watched || server_error) {
    back_off();  // so a failing server is not hammered
  } else if (delivered) {
    std::lock_guard lock(mutex_);
    backoff_ = std::chrono::milliseconds{0};
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
      if (!stopping_) back_off();
      continue;
    }
    watch_once();
  }
}

bool Informer::check_consistency() {
  std::string version, selector;
  std::vector<std::string> cached;
  {
    std::lock_guard lock(mutex_);
    if (relist_) return false;  // a relist is already on its way
    version = resource_version_;
    selector = options_.label_selector;  // the selection this cache holds
    cached.reserve(objects_.size());
    for (const auto& [key, entry] : objects_) cached.push_back(key + "/" + entry.version);
  }
  ListOptions options;
  options.label_selector = selector;
  options.field_selector = options_.field_selector;
  options.resource_version = version;
  options.resource_version_match = "Exact";
  options.limit = options_.page_size;
  // Only each object's identity is kept, page by page: a check never holds a
  // second copy of the objects.
  std::vector<std::string> fresh;
  const auto listed = list_pages(
      options, [&](json&& item) { fresh.push_back(key_of(item) + "/" + version_of(item)); }, [&] { fresh.clear(); });
  if (!listed) {
    // Cannot tell (the version may have left the server's window): skip.
    spdlog::info("informer {}: consistency check at resourceVersion {} skipped", options_.resource.plural, version);
    return true;
  }
  const std::size_t cached_count = cached.size(), fresh_count = fresh.size();
  const std::uint64_t ours = hash_entries(std::move(cached)), theirs = hash_entries(std::move(fresh));
  std::lock_guard lock(mutex_);
  if (selector != options_.label_selector) return true;  // selected anew meanwhile: compared with another list
  ++metrics_.consistency_checks;
  if (ours == theirs) return true;
  ++metrics_.consistency_mismatches;
  relist_ = true;
  end_watch_ = true;
  spdlog::error(
      "informer {}: cache differs from the server at resourceVersion {} (hash {:016x} != {:016x}, {} vs {} "
      "objects); relisting",
      options_.resource.plural, version, ours, theirs, cached_count, fresh_count);
  return false;
}

}  // namespace k8s4r::kube
