#include "k8s4r/kube_sim/store.h"

#include "k8s4r/kube_sim/schema.h"

#include "k8s4r/common/base64.h"

#include <algorithm>
#include <random>
#include <set>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

const std::vector<std::string> kDefaultNamespaces = {"default", "kube-system", "kube-public", "kube-node-lease"};

std::string random_uid() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  std::uniform_int_distribution<std::uint64_t> bits;
  const std::uint64_t high = (bits(random) & 0xFFFFFFFFFFFF0FFFULL) | 0x0000000000004000ULL;  // version 4
  const std::uint64_t low = (bits(random) & 0x3FFFFFFFFFFFFFFFULL) | 0x8000000000000000ULL;   // variant 10
  char text[37];
  std::snprintf(text, sizeof text, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(high >> 32),
                static_cast<unsigned>((high >> 16) & 0xFFFF), static_cast<unsigned>(high & 0xFFFF),
                static_cast<unsigned>(low >> 48), static_cast<unsigned long long>(low & 0xFFFFFFFFFFFFULL));
  return text;
}

// generateName suffixes use the same alphabet as kube-apiserver (no vowels).
std::string random_suffix() {
  static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  thread_local std::mt19937 random{std::random_device{}()};
  std::uniform_int_distribution<std::size_t> pick(0, sizeof kAlphabet - 2);
  std::string suffix;
  for (int i = 0; i < 5; ++i) suffix += kAlphabet[pick(random)];
  return suffix;
}

const json& metadata_of(const json& object) {
  static const json empty = json::object();
  return object.contains("metadata") && object["metadata"].is_object() ? object["metadata"] : empty;
}

std::string string_at(const json& object, const char* key) {
  return object.contains(key) && object[key].is_string() ? object[key].get<std::string>() : "";
}

bool valid_object_name(const std::string& name, bool label_only) {
  if (name.empty() || name.size() > (label_only ? 63u : 253u)) return false;
  const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  for (char c : name) {
    if (!alnum(c) && c != '-' && (label_only || c != '.')) return false;
  }
  return alnum(name.front()) && alnum(name.back());
}

// Everything but metadata and status: what moves `generation`.
json spec_part(const json& object) {
  json copy = object;
  copy.erase("metadata");
  copy.erase("status");
  return copy;
}

// The object without what the server sets on every write, to tell a no-op.
json comparable(const json& object) {
  json copy = object;
  if (copy.contains("metadata")) {
    copy["metadata"].erase("resourceVersion");
    copy["metadata"].erase("managedFields");
  }
  return copy;
}

// A body naming another apiVersion or kind than the URL is refused, as
// kube-apiserver does; one naming none is taken to mean the URL's.
std::optional<ApiResponse> check_type_meta(const json& body, const ResourceType& type) {
  const std::string api_version = string_at(body, "apiVersion");
  const std::string kind = string_at(body, "kind");
  if (!api_version.empty() && api_version != type.api_version()) {
    return bad_request("the API version in the data (" + api_version + ") does not match the expected API version (" +
                       type.api_version() + ")");
  }
  if (!kind.empty() && kind != type.kind) {
    return bad_request("the kind in the data (" + kind + ") does not match the expected kind (" + type.kind + ")");
  }
  return std::nullopt;
}

bool has_finalizers(const json& object) {
  const json& metadata = metadata_of(object);
  return metadata.contains("finalizers") && metadata["finalizers"].is_array() && !metadata["finalizers"].empty();
}

// Strategic-merge-patch directives ($patch, $setElementOrder/..., $retainKeys)
// have no meaning in a JSON merge patch; drop them.
void strip_directives(json& patch) {
  if (!patch.is_object()) return;
  for (auto it = patch.begin(); it != patch.end();) {
    if (!it.key().empty() && it.key().front() == '$') {
      it = patch.erase(it);
    } else {
      strip_directives(*it);
      ++it;
    }
  }
}

bool watcher_matches(const Watcher& watcher, const json* object, const std::string& namespace_filter,
                     const LabelSelector& labels, const FieldSelector& fields) {
  if (object == nullptr) return false;
  const json& metadata = metadata_of(*object);
  if (!namespace_filter.empty() && string_at(metadata, "namespace") != namespace_filter) return false;
  (void)watcher;
  return labels.matches(metadata.contains("labels") ? metadata["labels"] : json()) && fields.matches(*object);
}

}  // namespace

// ---- Watcher -------------------------------------------------------------------------

std::optional<WatchEvent> Watcher::next(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  ready_.wait_until(lock, deadline, [this] { return !queue_.empty() || closed_; });
  if (queue_.empty()) return std::nullopt;
  WatchEvent event = std::move(queue_.front());
  queue_.pop_front();
  return event;
}

void Watcher::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  ready_.notify_all();
}

bool Watcher::closed() const {
  std::lock_guard lock(mutex_);
  return closed_ && queue_.empty();
}

bool Watcher::push(WatchEvent event, std::size_t limit) {
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
  }
  ready_.notify_all();
  return true;
}

// ---- Store ------------------------------------------------------------------------------

Store::Store(StoreOptions options, Clock clock) : options_(options), clock_(std::move(clock)) {
  for (ResourceType& type : builtin_types()) {
    Resource& resource = resources_[resource_key(type)];
    resource.storage_version = type.version;
    resource.versions[type.version] = type;
  }
  const ResourceType namespaces = *find_type("", "v1", "namespaces");
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
}

Store::Resource* Store::resource_of(const ResourceType& type) {
  auto it = resources_.find(resource_key(type));
  return it == resources_.end() || !it->second.versions.count(type.version) ? nullptr : &it->second;
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
  auto it = resources_.find(group + "/" + plural);
  if (it == resources_.end()) return std::nullopt;
  auto version_it = it->second.versions.find(version);
  if (version_it == it->second.versions.end()) return std::nullopt;
  return version_it->second;
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
  json copy = object;
  copy["apiVersion"] = type.api_version();
  return copy;
}

std::shared_ptr<const json> Store::commit(Resource& resource, const std::string& key, std::shared_ptr<json> object,
                                          const std::string& event_type) {
  const std::uint64_t version = ++resource_version_;
  HistoryEvent event;
  event.resource_version = version;
  event.type = event_type;
  auto existing = resource.objects.find(key);
  if (existing != resource.objects.end()) event.previous = existing->second;
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
      if (visible->object->value("apiVersion", "") != watcher.api_version_) {
        auto copy = std::make_shared<json>(*visible->object);
        (*copy)["apiVersion"] = watcher.api_version_;
        visible->object = copy;
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

// ---- admission: names, namespaces, schema ---------------------------------------

ApiResponse Store::admit(const Target& target, json& object, const json* existing, const WriteOptions& options,
                         std::vector<std::string>& warnings) {
  const ResourceType& type = target.type;
  json& metadata = object["metadata"];
  const std::string name = string_at(metadata, "name");
  if (type.schema) {
    std::vector<std::string> pruned;
    const json as_sent = options.field_validation == "Strict" ? object : json();
    normalize(*type.schema, object, "", pruned, true);
    if (!pruned.empty()) {
      if (options.field_validation == "Strict") {
        std::string message = "strict decoding error: ";
        for (std::size_t i = 0; i < pruned.size(); ++i) {
          message += (i ? ", " : "") + std::string("unknown field \"") + pruned[i] + "\"";
        }
        // As kube-apiserver: a patch is 422 Invalid, a create or update 400.
        if (options.from_patch) {
          return invalid({"", "", ""}, "",
                         {{"FieldValueInvalid", "Invalid value: \"" + as_sent.dump() + "\": " + message, "patch"}});
        }
        return bad_request(type.kind + " in version \"" + type.version + "\" cannot be handled as a " + type.kind +
                           ": " + message);
      }
      if (options.field_validation != "Ignore") {
        for (const std::string& field : pruned) warnings.push_back("unknown field \"" + field + "\"");
      }
    }
    std::vector<FieldCause> causes;
    json to_check = object;
    to_check.erase("metadata");  // metadata is checked by the server's own rules
    validate(*type.schema, to_check, "", causes);
    if (!causes.empty()) return invalid(subject(type, name), type.qualified_kind(), causes);
  }
  (void)existing;
  return {200, nullptr, {}};
}

ApiResponse Store::create(const Target& target, json body, const WriteOptions& options) {
  const ResourceType& type = target.type;
  if (!body.is_object()) return bad_request("the body of the request must be a JSON object");
  if (auto mismatch = check_type_meta(body, type)) return *mismatch;
  body["apiVersion"] = type.api_version();
  body["kind"] = type.kind;
  if (!body.contains("metadata") || !body["metadata"].is_object()) body["metadata"] = json::object();
  json& metadata = body["metadata"];

  std::lock_guard lock(mutex_);
  Resource* resource = resource_of(type);
  if (resource == nullptr) return not_found_path(type.key());

  std::string name = string_at(metadata, "name");
  if (name.empty() && !string_at(metadata, "generateName").empty()) {
    name = string_at(metadata, "generateName") + random_suffix();
    metadata["name"] = name;
  }
  if (name.empty()) {
    return invalid(subject(type, ""), type.qualified_kind(),
                   {{"FieldValueRequired", "Required value: name or generateName is required", "metadata.name"}});
  }
  if (!valid_object_name(name, type.plural == "namespaces")) {
    return invalid(subject(type, name), type.qualified_kind(),
                   {{"FieldValueInvalid",
                     "Invalid value: \"" + name +
                         "\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
                         "or '.', and must start and end with an alphanumeric character",
                     "metadata.name"}});
  }
  std::string namespace_;
  if (type.namespaced) {
    namespace_ = string_at(metadata, "namespace");
    if (namespace_.empty()) namespace_ = target.namespace_;
    if (!target.namespace_.empty() && namespace_ != target.namespace_) {
      return bad_request("the namespace of the provided object does not match the namespace sent on the request");
    }
    if (namespace_.empty()) return bad_request("namespace is required for a namespaced resource");
    const Resource& namespaces = resources_.at("/namespaces");
    auto ns = namespaces.objects.find(object_key("", namespace_));
    if (ns == namespaces.objects.end()) return not_found({"", "namespaces", namespace_});
    if (metadata_of(*ns->second).contains("deletionTimestamp")) {
      return {403,
              status_body(403, "Forbidden",
                          type.qualified_plural() + " \"" + name +
                              "\" is forbidden: unable to create new content in namespace " + namespace_ +
                              " because it is being terminated"),
              {}};
    }
    metadata["namespace"] = namespace_;
  } else {
    metadata.erase("namespace");
  }
  const std::string key = object_key(namespace_, name);
  if (resource->objects.count(key)) return already_exists(subject(type, name));

  // Fields only the server sets.
  metadata["uid"] = random_uid();
  metadata["creationTimestamp"] = format_rfc3339(clock_());
  metadata["generation"] = 1;
  metadata.erase("resourceVersion");
  metadata.erase("deletionTimestamp");
  metadata.erase("deletionGracePeriodSeconds");
  // With a status subresource, status is set only through /status.
  if (type.status_subresource && !type.builtin) body.erase("status");

  std::vector<std::string> warnings;
  if (auto admitted = admit(target, body, nullptr, options, warnings); !admitted.ok()) return admitted;

  if (type.plural == "customresourcedefinitions") {
    std::vector<CrdProblem> problems;
    types_from_crd(body, problems);
    if (!problems.empty()) {
      std::vector<FieldCause> causes;
      for (const CrdProblem& problem : problems) causes.push_back({problem.reason, problem.message, problem.field});
      return invalid(subject(type, name), type.qualified_kind(), causes);
    }
    const json& names = body["spec"]["names"];
    json accepted = names;
    if (!accepted.contains("singular")) {
      std::string singular = names.value("kind", "");
      std::transform(singular.begin(), singular.end(), singular.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      accepted["singular"] = singular;
    }
    if (!accepted.contains("listKind")) accepted["listKind"] = names.value("kind", "") + "List";
    const std::string now = format_rfc3339(clock_());
    json stored = json::array();
    for (const json& version : body["spec"]["versions"]) {
      if (version.value("storage", false)) stored.push_back(version["name"]);
    }
    body["status"] = {{"acceptedNames", accepted},
                      {"conditions",
                       {{{"type", "NamesAccepted"},
                         {"status", "True"},
                         {"lastTransitionTime", now},
                         {"reason", "NoConflicts"},
                         {"message", "no conflicts found"}},
                        {{"type", "Established"},
                         {"status", "True"},
                         {"lastTransitionTime", now},
                         {"reason", "InitialNamesAccepted"},
                         {"message", "the initial names have been accepted"}}}},
                      {"storedVersions", stored}};
  }
  if (type.plural == "namespaces") {
    body["status"] = {{"phase", "Active"}};
    if (!metadata.contains("labels") || !metadata["labels"].is_object()) metadata["labels"] = json::object();
    metadata["labels"]["kubernetes.io/metadata.name"] = name;
  }
  if (options.dry_run) return {201, body, warnings};

  auto stored = commit(*resource, key, std::make_shared<json>(std::move(body)), "ADDED");
  if (type.plural == "customresourcedefinitions") register_crd(*stored);
  return {201, for_version(*stored, type), warnings};
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

std::optional<std::uint64_t> parse_version(const std::string& text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  std::uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return value;
}

Result<FieldSelector> checked_field_selector(const ResourceType& type, const std::string& text) {
  auto selector = FieldSelector::parse(text);
  if (!selector) return selector.error();
  for (const auto& requirement : selector.value().requirements()) {
    const std::string& path = requirement.path;
    if (path == "metadata.name" || path == "metadata.namespace") continue;
    if (std::find(type.selectable_fields.begin(), type.selectable_fields.end(), path) != type.selectable_fields.end())
      continue;
    return Error{"fieldSelector", "field label not supported: " + path};
  }
  return selector;
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

ApiResponse Store::replace(const Target& target, const std::string& name, json body, bool status_subresource,
                           const WriteOptions& options) {
  std::lock_guard lock(mutex_);
  return update_locked(target, name, std::move(body), status_subresource, options, false);
}

ApiResponse Store::update_locked(const Target& target, const std::string& name, json body, bool status_subresource,
                                 const WriteOptions& options, bool from_patch) {
  const ResourceType& type = target.type;
  Resource* resource = resource_of(type);
  if (resource == nullptr) return not_found_path(type.key());
  if (!body.is_object()) return bad_request("the body of the request must be a JSON object");
  const std::string namespace_ = type.namespaced ? target.namespace_ : "";
  const std::string key = object_key(namespace_, name);
  auto found = resource->objects.find(key);
  if (found == resource->objects.end()) return not_found(subject(type, name));
  const json& existing = *found->second;
  const json& old_metadata = metadata_of(existing);

  if (auto mismatch = check_type_meta(body, type)) return *mismatch;
  if (!body.contains("metadata") || !body["metadata"].is_object()) body["metadata"] = json::object();
  json& metadata = body["metadata"];
  const std::string body_name = string_at(metadata, "name");
  if (!body_name.empty() && body_name != name) {
    return bad_request("the name of the object (" + body_name + ") does not match the name on the URL (" + name + ")");
  }
  const std::string body_namespace = string_at(metadata, "namespace");
  if (type.namespaced && !body_namespace.empty() && body_namespace != namespace_) {
    return bad_request("the namespace of the provided object does not match the namespace sent on the request");
  }
  const std::string body_version = string_at(metadata, "resourceVersion");
  if (body_version.empty() && !type.builtin && !from_patch) {
    return invalid(
        subject(type, name), type.qualified_kind(),
        {{"FieldValueInvalid", "Invalid value: 0x0: must be specified for an update", "metadata.resourceVersion"}});
  }
  if (!body_version.empty() && body_version != string_at(old_metadata, "resourceVersion")) {
    return conflict(subject(type, name),
                    "the object has been modified; please apply your changes to the latest version and try again");
  }
  const std::string body_uid = string_at(metadata, "uid");
  if (!body_uid.empty() && body_uid != string_at(old_metadata, "uid")) {
    return conflict(subject(type, name), "Precondition failed: UID in precondition: " + body_uid +
                                             ", UID in object meta: " + string_at(old_metadata, "uid"));
  }

  json updated;
  if (status_subresource) {
    // Only status moves; everything else stays as stored.
    updated = existing;
    if (body.contains("status")) {
      updated["status"] = body["status"];
    } else {
      updated.erase("status");
    }
  } else {
    updated = std::move(body);
    updated["apiVersion"] = type.api_version();
    updated["kind"] = type.kind;
    json& new_metadata = updated["metadata"];
    for (const char* fixed : {"name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                              "deletionGracePeriodSeconds", "generation"}) {
      if (old_metadata.contains(fixed)) {
        new_metadata[fixed] = old_metadata[fixed];
      } else {
        new_metadata.erase(fixed);
      }
    }
    if (type.status_subresource) {
      if (existing.contains("status")) {
        updated["status"] = existing["status"];
      } else {
        updated.erase("status");
      }
    }
    if (metadata_of(existing).contains("deletionTimestamp") && updated["metadata"].contains("finalizers")) {
      // Finalizers can only be removed once deletion has started.
      std::set<std::string> allowed;
      for (const json& finalizer : old_metadata.value("finalizers", json::array()))
        allowed.insert(finalizer.get<std::string>());
      for (const json& finalizer : updated["metadata"]["finalizers"]) {
        if (!finalizer.is_string() || !allowed.count(finalizer.get<std::string>())) {
          return invalid(
              subject(type, name), type.qualified_kind(),
              {{"FieldValueForbidden", "Forbidden: no new finalizers can be added if the object is being deleted",
                "metadata.finalizers"}});
        }
      }
    }
  }

  std::vector<std::string> warnings;
  if (auto admitted = admit(target, updated, &existing, options, warnings); !admitted.ok()) return admitted;
  if (spec_part(updated) != spec_part(existing)) {
    updated["metadata"]["generation"] = old_metadata.value("generation", 1) + 1;
  }
  if (comparable(updated) == comparable(existing)) return {200, for_version(existing, type), warnings};
  if (options.dry_run) return {200, updated, warnings};

  if (metadata_of(updated).contains("deletionTimestamp") && !has_finalizers(updated)) {
    commit(*resource, key, std::make_shared<json>(std::move(updated)), "MODIFIED");
    auto deleted = resource->objects.at(key);
    finish_deletion(*resource, key);
    return {200, for_version(*deleted, type), warnings};
  }
  auto stored = commit(*resource, key, std::make_shared<json>(std::move(updated)), "MODIFIED");
  if (type.plural == "customresourcedefinitions") register_crd(*stored);
  return {200, for_version(*stored, type), warnings};
}

ApiResponse Store::patch(const Target& target, const std::string& name, PatchType patch_type, const std::string& patch,
                         bool status_subresource, const WriteOptions& options) {
  const ResourceType& type = target.type;
  if (patch_type == PatchType::apply) {
    return unsupported_media_type(
        "server-side apply (application/apply-patch+yaml) is not supported by k8s4r-kube-sim; use kubectl apply "
        "without --server-side");
  }
  if (patch_type == PatchType::strategic && !type.builtin) {
    return unsupported_media_type(
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, "
        "application/merge-patch+json, application/apply-patch+yaml");
  }
  json document = json::parse(patch, nullptr, false);
  if (document.is_discarded()) return bad_request("error decoding patch: invalid JSON");

  std::lock_guard lock(mutex_);
  Resource* resource = resource_of(type);
  if (resource == nullptr) return not_found_path(type.key());
  auto found = resource->objects.find(object_key(type.namespaced ? target.namespace_ : "", name));
  if (found == resource->objects.end()) return not_found(subject(type, name));
  json patched = *found->second;
  if (patch_type == PatchType::json) {
    if (!document.is_array()) return bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch");
    try {
      patched = patched.patch(document);
    } catch (const json::exception& error) {
      return {
          422,
          status_body(422, "Invalid",
                      std::string("the server rejected our request due to an error in our request: ") + error.what()),
          {}};
    }
  } else {
    if (!document.is_object()) return bad_request("error decoding patch: a merge patch must be a JSON object");
    if (patch_type == PatchType::strategic) strip_directives(document);
    patched.merge_patch(document);
  }
  WriteOptions patch_options = options;
  patch_options.from_patch = true;
  return update_locked(target, name, std::move(patched), status_subresource, patch_options, true);
}

ApiResponse Store::remove(const Target& target, const std::string& name, const json& delete_options) {
  std::lock_guard lock(mutex_);
  Resource* resource = resource_of(target.type);
  if (resource == nullptr) return not_found_path(target.type.key());
  return delete_locked(*resource, target.type, target.type.namespaced ? target.namespace_ : "", name, delete_options);
}

ApiResponse Store::delete_locked(Resource& resource, const ResourceType& type, const std::string& namespace_,
                                 const std::string& name, const json& delete_options) {
  const std::string key = object_key(namespace_, name);
  auto found = resource.objects.find(key);
  if (found == resource.objects.end()) return not_found(subject(type, name));
  const json& existing = *found->second;
  const json& metadata = metadata_of(existing);
  if (delete_options.is_object() && delete_options.contains("preconditions") &&
      delete_options["preconditions"].is_object()) {
    const json& preconditions = delete_options["preconditions"];
    const std::string uid = string_at(preconditions, "uid");
    if (!uid.empty() && uid != string_at(metadata, "uid")) {
      return conflict(subject(type, name), "Precondition failed: UID in precondition: " + uid +
                                               ", UID in object meta: " + string_at(metadata, "uid"));
    }
    const std::string version = string_at(preconditions, "resourceVersion");
    if (!version.empty() && version != string_at(metadata, "resourceVersion")) {
      return conflict(subject(type, name),
                      "Precondition failed: ResourceVersion in precondition: " + version +
                          ", ResourceVersion in object meta: " + string_at(metadata, "resourceVersion"));
    }
  }
  const bool dry_run =
      delete_options.is_object() && delete_options.contains("dryRun") && !delete_options["dryRun"].empty();
  if (dry_run) return {200, for_version(existing, type), {}};

  json updated = existing;
  std::string policy = delete_options.is_object() ? delete_options.value("propagationPolicy", "") : "";
  if (policy.empty() && delete_options.is_object() && delete_options.contains("orphanDependents") &&
      delete_options["orphanDependents"] == true) {
    policy = "Orphan";
  }
  const std::string uid = string_at(metadata, "uid");
  if (policy == "Orphan") {
    // Dependents lose their owner reference and stay.
    for (auto& [resource_name, other] : resources_) {
      for (auto& [other_key, object] : other.objects) {
        const json& other_metadata = metadata_of(*object);
        if (!other_metadata.contains("ownerReferences")) continue;
        json references = json::array();
        for (const json& reference : other_metadata["ownerReferences"]) {
          if (string_at(reference, "uid") != uid) references.push_back(reference);
        }
        if (references.size() == other_metadata["ownerReferences"].size()) continue;
        auto changed = std::make_shared<json>(*object);
        if (references.empty()) {
          (*changed)["metadata"].erase("ownerReferences");
        } else {
          (*changed)["metadata"]["ownerReferences"] = references;
        }
        commit(other, other_key, changed, "MODIFIED");
      }
    }
  } else if (policy == "Foreground") {
    // Dependents are deleted first. Unlike kube-apiserver, the owner does not
    // wait (with a foregroundDeletion finalizer) for dependents that finalizers
    // still hold; see docs/kube-sim.md.
    collect_garbage(uid);
  }
  if (has_finalizers(existing)) {
    if (!metadata.contains("deletionTimestamp")) {
      updated["metadata"]["deletionTimestamp"] = format_rfc3339(clock_());
      updated["metadata"]["deletionGracePeriodSeconds"] = 0;
      auto stored = commit(resource, key, std::make_shared<json>(std::move(updated)), "MODIFIED");
      return {200, for_version(*stored, type), {}};
    }
    return {200, for_version(existing, type), {}};
  }
  auto last = found->second;
  finish_deletion(resource, key);
  return {200, for_version(*last, type), {}};
}

void Store::finish_deletion(Resource& resource, const std::string& key) {
  const json object = *resource.objects.at(key);
  const std::string kind = object.value("kind", "");
  commit(resource, key, nullptr, "DELETED");
  const json& metadata = metadata_of(object);
  if (kind == "CustomResourceDefinition") unregister_crd(object);
  if (kind == "Namespace") {
    const std::string prefix = string_at(metadata, "name") + "/";
    for (auto& [resource_name, other] : resources_) {
      std::vector<std::string> keys;
      for (const auto& [other_key, other_object] : other.objects) {
        if (other_key.compare(0, prefix.size(), prefix) == 0) keys.push_back(other_key);
      }
      for (const std::string& other_key : keys) commit(other, other_key, nullptr, "DELETED");
    }
  }
  collect_garbage(string_at(metadata, "uid"));
}

// What kube-controller-manager's garbage collector does, at once: an object
// whose every owner is gone is deleted in the background.
void Store::collect_garbage(const std::string& owner_uid) {
  if (owner_uid.empty()) return;
  std::set<std::string> live_uids;
  for (const auto& [name, resource] : resources_) {
    for (const auto& [key, object] : resource.objects) live_uids.insert(string_at(metadata_of(*object), "uid"));
  }
  live_uids.erase(owner_uid);
  for (auto& [resource_name, resource] : resources_) {
    std::vector<std::pair<std::string, std::string>> orphans;  // namespace, name
    for (const auto& [key, object] : resource.objects) {
      const json& metadata = metadata_of(*object);
      if (!metadata.contains("ownerReferences") || !metadata["ownerReferences"].is_array()) continue;
      bool owned_by_it = false, any_owner_alive = false;
      for (const json& reference : metadata["ownerReferences"]) {
        const std::string uid = string_at(reference, "uid");
        owned_by_it = owned_by_it || uid == owner_uid;
        any_owner_alive = any_owner_alive || live_uids.count(uid);
      }
      if (owned_by_it && !any_owner_alive)
        orphans.emplace_back(string_at(metadata, "namespace"), string_at(metadata, "name"));
    }
    if (orphans.empty() || resource.versions.empty()) continue;
    const ResourceType type = resource.versions.begin()->second;
    for (const auto& [namespace_, name] : orphans) {
      if (resource.objects.count(object_key(namespace_, name)))
        delete_locked(resource, type, namespace_, name, json::object());
    }
  }
}

ApiResponse Store::remove_collection(const Target& target, const ListOptions& list_options,
                                     const json& delete_options) {
  ApiResponse listed = list(target, list_options);
  if (!listed.ok()) return listed;
  json deleted = json::array();
  std::lock_guard lock(mutex_);
  Resource* resource = resource_of(target.type);
  if (resource == nullptr) return not_found_path(target.type.key());
  for (const json& item : listed.body["items"]) {
    const json& metadata = metadata_of(item);
    ApiResponse removed = delete_locked(*resource, target.type, string_at(metadata, "namespace"),
                                        string_at(metadata, "name"), delete_options);
    if (removed.ok()) deleted.push_back(removed.body);
  }
  listed.body["items"] = deleted;
  listed.body["metadata"]["resourceVersion"] = std::to_string(resource_version_);
  return listed;
}

// ---- CRDs -------------------------------------------------------------------------------

void Store::register_crd(const json& crd) {
  std::vector<CrdProblem> problems;
  std::vector<ResourceType> types = types_from_crd(crd, problems);
  if (types.empty()) return;
  Resource& resource = resources_[resource_key(types.front())];
  resource.versions.clear();
  for (const json& version : crd["spec"]["versions"]) {
    if (version.value("storage", false)) resource.storage_version = version.value("name", "");
  }
  for (ResourceType& type : types) resource.versions[type.version] = std::move(type);
}

void Store::unregister_crd(const json& crd) {
  std::vector<CrdProblem> problems;
  std::vector<ResourceType> types = types_from_crd(crd, problems);
  if (types.empty()) return;
  auto it = resources_.find(resource_key(types.front()));
  if (it == resources_.end()) return;
  std::vector<std::string> keys;
  for (const auto& [key, object] : it->second.objects) keys.push_back(key);
  for (const std::string& key : keys) commit(it->second, key, nullptr, "DELETED");
  for (auto& watcher : it->second.watchers) watcher->close();
  resources_.erase(it);
}

// ---- watch ----------------------------------------------------------------------------------

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
  watcher->api_version_ = type.api_version();
  watcher->kind_ = type.kind;
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
    if (object->value("apiVersion", "") != watcher->api_version_)
      shown = std::make_shared<json>(for_version(*object, type));
    watcher->queue_.push_back({event_type, shown});
  };
  if (!from) {
    // No resourceVersion, or "0": the current state as ADDED events first.
    for (const auto& [key, object] : resource->objects) {
      if (watcher_matches(*watcher, object.get(), watcher->namespace_, watcher->labels_, watcher->fields_)) {
        queue("ADDED", object);
      }
    }
    if (options.send_initial_events && options.allow_bookmarks) {
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
      "BOOKMARK", std::make_shared<json>(json{{"kind", watcher->kind_},
                                              {"apiVersion", watcher->api_version_},
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
