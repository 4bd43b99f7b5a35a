// The objects, the global resourceVersion, commits into the history window,
// and reads: get, list (with selectors, pages and past versions), snapshots.
#include "k8s4r/kube_sim/store.h"

#include "conversion.h"
#include "store_util.h"

#include "k8s4r/common/base64.h"
#include "k8s4r/kube_sim/rbac_authorizer.h"

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

const std::vector<std::string> kDefaultNamespaces = {"default", "kube-system", "kube-public", "kube-node-lease"};

}  // namespace

Store::Store(StoreOptions options, Clock clock) : options_(options), clock_(std::move(clock)) {
  for (ResourceType& type : builtin_types()) {
    Resource& resource = resources_[resource_key(type)];
    if (type.stored_as.empty()) resource.storage_version = type.api_version();
    resource.versions[type.api_version()] = type;
  }
  const ResourceType namespaces = *find_type_locked("", "v1", "namespaces");
  for (const std::string& name : kDefaultNamespaces) {
    auto object = std::make_shared<json>(json{{"apiVersion", "v1"},
                                              {"kind", "Namespace"},
                                              {"metadata",
                                               {{"name", name},
                                                {"uid", random_uid()},
                                                {"creationTimestamp", format_rfc3339(clock_())},
                                                {"labels", {{"kubernetes.io/metadata.name", name}}}}},
                                              {"spec", {{"finalizers", {"kubernetes"}}}},
                                              {"status", {{"phase", "Active"}}}});
    commit(*resource_of(namespaces), object_key("", name), object, "ADDED");
  }
  // The default ClusterRoles and bindings every cluster starts with.
  for (const json& object : bootstrap_policy()) {
    const std::string plural = object["kind"] == "ClusterRole" ? "clusterroles" : "clusterrolebindings";
    create_locked(Target{*find_type_locked("rbac.authorization.k8s.io", "v1", plural), ""}, object, {});
  }
}

Store::Resource* Store::resource_of(const ResourceType& type) {
  auto it = resources_.find(resource_key(type));
  return it == resources_.end() || !it->second.versions.count(type.api_version()) ? nullptr : &it->second;
}

const Store::Resource* Store::resource_of(const ResourceType& type) const {
  return const_cast<Store*>(this)->resource_of(type);
}

std::vector<ResourceType> Store::served_types() const {
  std::lock_guard lock(mutex_);
  std::vector<ResourceType> types;
  for (const auto& [key, resource] : resources_) {
    for (const auto& [version, type] : resource.versions) types.push_back(type);
  }
  return types;
}

std::optional<ResourceType> Store::find_type(const std::string& group, const std::string& version,
                                             const std::string& plural) const {
  std::lock_guard lock(mutex_);
  return find_type_locked(group, version, plural);
}

std::optional<ResourceType> Store::find_type_locked(const std::string& group, const std::string& version,
                                                    const std::string& plural) const {
  const std::string api_version = group.empty() ? version : group + "/" + version;
  if (auto it = resources_.find(group + "/" + plural); it != resources_.end()) {
    if (auto found = it->second.versions.find(api_version); found != it->second.versions.end()) return found->second;
  }
  // A type stored with another group's resource (events.k8s.io/v1 events).
  for (const auto& [key, resource] : resources_) {
    auto found = resource.versions.find(api_version);
    if (found != resource.versions.end() && found->second.plural == plural) return found->second;
  }
  return std::nullopt;
}

const ResourceType& Store::storage_type(const Resource& resource) {
  auto it = resource.versions.find(resource.storage_version);
  return it != resource.versions.end() ? it->second : resource.versions.begin()->second;
}

bool Store::namespace_exists(const std::string& name) const {
  std::lock_guard lock(mutex_);
  auto it = resources_.find("/namespaces");
  return it != resources_.end() && it->second.objects.count(object_key("", name));
}

std::uint64_t Store::resource_version() const {
  std::lock_guard lock(mutex_);
  return resource_version_;
}

StatusSubject Store::subject(const ResourceType& type, const std::string& name) const {
  return {type.group, type.plural, name};
}

json Store::for_version(const json& object, const ResourceType& type) const {
  if (object.value("apiVersion", "") == type.api_version()) return object;
  return convert(object, type);
}

std::shared_ptr<const json> Store::commit(Resource& resource, const std::string& key, std::shared_ptr<json> object,
                                          const std::string& event_type) {
  const std::uint64_t version = ++resource_version_;
  HistoryEvent event;
  event.resource_version = version;
  event.type = event_type;
  auto existing = resource.objects.find(key);
  if (existing != resource.objects.end()) event.previous = existing->second;
  index_and_queue(resource, key, event.previous.get(), event_type == "DELETED" ? nullptr : object.get());
  if (event_type == "DELETED") {
    // The DELETED event carries the object as it was, at the deletion's
    // resourceVersion, so a client resuming from it misses nothing.
    auto deleted = std::make_shared<json>(*event.previous);
    (*deleted)["metadata"]["resourceVersion"] = std::to_string(version);
    event.object = deleted;
    resource.objects.erase(existing);
  } else {
    (*object)["metadata"]["resourceVersion"] = std::to_string(version);
    event.object = object;
    resource.objects[key] = object;
  }
  resource.history.push_back(event);
  while (resource.history.size() > options_.history_per_resource) {
    resource.window_start = resource.history.front().resource_version;
    resource.history.pop_front();
  }
  if (events_to_drop_ > 0) {
    --events_to_drop_;
  } else {
    notify(resource, event);
  }
  return event.object;
}

std::optional<Store::Objects> Store::snapshot_at(const Resource& resource, std::uint64_t version) const {
  if (version < resource.window_start) return std::nullopt;
  Objects objects = resource.objects;
  for (auto it = resource.history.rbegin(); it != resource.history.rend() && it->resource_version > version; ++it) {
    const json& metadata = metadata_of(*it->object);
    const std::string key = object_key(string_at(metadata, "namespace"), string_at(metadata, "name"));
    if (it->previous) {
      objects[key] = it->previous;
    } else {
      objects.erase(key);
    }
  }
  return objects;
}

ApiResponse Store::get(const Target& target, const std::string& name) const {
  std::lock_guard lock(mutex_);
  const Resource* resource = resource_of(target.type);
  if (resource == nullptr) return not_found_path(target.type.key());
  auto it = resource->objects.find(object_key(target.type.namespaced ? target.namespace_ : "", name));
  if (it == resource->objects.end()) return not_found(subject(target.type, name));
  return {200, for_version(*it->second, target.type), {}};
}

namespace {

struct ContinueToken {
  std::uint64_t resource_version = 0;
  std::string after;  // the last key returned
};

std::string encode_continue(const ContinueToken& token) {
  return base64_encode(json{{"rv", token.resource_version}, {"after", token.after}}.dump(), /*url_safe=*/true);
}

std::optional<ContinueToken> decode_continue(const std::string& token) {
  const auto text = base64_decode(token);
  if (!text) return std::nullopt;
  const json parsed = json::parse(*text, nullptr, false);
  if (!parsed.is_object() || !parsed.contains("rv") || !parsed["rv"].is_number_unsigned() ||
      !parsed.contains("after") || !parsed["after"].is_string()) {
    return std::nullopt;
  }
  return ContinueToken{parsed["rv"].get<std::uint64_t>(), parsed["after"].get<std::string>()};
}

}  // namespace

ApiResponse Store::list(const Target& target, const ListOptions& options) const {
  const ResourceType& type = target.type;
  auto labels = LabelSelector::parse(options.label_selector);
  if (!labels) return bad_request(labels.error().message);
  auto fields = checked_field_selector(type, options.field_selector);
  if (!fields) return bad_request(fields.error().message);

  std::lock_guard lock(mutex_);
  const Resource* resource = resource_of(type);
  if (resource == nullptr) return not_found_path(type.key());

  std::uint64_t at = resource_version_;
  std::string after;
  const Objects* objects = &resource->objects;
  std::optional<Objects> snapshot;
  if (!options.continue_token.empty()) {
    auto token = decode_continue(options.continue_token);
    if (!token) return bad_request("continue key is not valid: illegal base64 data");
    at = token->resource_version;
    after = token->after;
  } else if (options.resource_version_match == "Exact") {
    auto version = parse_version(options.resource_version);
    if (!version) return bad_request("resourceVersionMatch=Exact needs a resourceVersion");
    at = *version;
  } else if (!options.resource_version.empty() && options.resource_version != "0" &&
             !parse_version(options.resource_version)) {
    return bad_request("invalid resourceVersion: " + options.resource_version);
  }
  if (at > resource_version_) {
    return {504,
            status_body(504, "Timeout",
                        "Too large resource version: " + std::to_string(at) +
                            ", current: " + std::to_string(resource_version_)),
            {}};
  }
  if (at != resource_version_) {
    snapshot = snapshot_at(*resource, at);
    if (!snapshot) {
      if (!options.continue_token.empty()) {
        return gone(
            "The provided continue parameter is too old to display a consistent list result. You can start a new list "
            "without the continue parameter.");
      }
      return gone("The resourceVersion for the provided list is too old.");
    }
    objects = &*snapshot;
  }

  json items = json::array();
  std::string last_key;
  std::int64_t remaining = 0;
  const std::string prefix = type.namespaced && !target.namespace_.empty() ? target.namespace_ + "/" : "";
  for (auto it = after.empty() ? objects->lower_bound(prefix) : objects->upper_bound(after); it != objects->end();
       ++it) {
    if (!prefix.empty() && it->first.compare(0, prefix.size(), prefix) != 0) break;
    const json& object = *it->second;
    const json& metadata = metadata_of(object);
    if (!labels.value().matches(metadata.contains("labels") ? metadata["labels"] : json()) ||
        !fields.value().matches(object)) {
      continue;
    }
    if (options.limit > 0 && static_cast<std::int64_t>(items.size()) >= options.limit) {
      ++remaining;
      continue;
    }
    items.push_back(for_version(object, type));
    last_key = it->first;
  }
  json list_metadata = {{"resourceVersion", std::to_string(at)}};
  if (remaining > 0) {
    list_metadata["continue"] = encode_continue({at, last_key});
    if (labels.value().empty() && fields.value().empty()) list_metadata["remainingItemCount"] = remaining;
  }
  return {200,
          {{"apiVersion", type.api_version()}, {"kind", type.list_kind}, {"metadata", list_metadata}, {"items", items}},
          {}};
}

void Store::compact() {
  std::lock_guard lock(mutex_);
  for (auto& [key, resource] : resources_) {
    resource.history.clear();
    resource.window_start = resource_version_;
  }
}

json Store::stats() const {
  std::lock_guard lock(mutex_);
  json resources = json::object();
  std::size_t watchers = 0;
  for (const auto& [key, resource] : resources_) {
    resources[key] = {{"objects", resource.objects.size()},
                      {"history", resource.history.size()},
                      {"windowStart", resource.window_start},
                      {"watchers", resource.watchers.size()}};
    watchers += resource.watchers.size();
  }
  return {{"resourceVersion", resource_version_},
          {"watchers", watchers},
          {"watchEventsToDrop", events_to_drop_},
          {"resources", resources}};
}

}  // namespace k8s4r::kube_sim
