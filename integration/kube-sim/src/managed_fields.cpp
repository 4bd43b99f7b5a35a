#include "managed_fields.h"

#include "go_text.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

constexpr std::size_t kMaxUpdateEntries = 10;

// What no entry records: the fields the server owns.
const FieldSet& server_owned() {
  static const FieldSet* set = [] {
    auto* out = new FieldSet;
    out->insert({"f:apiVersion"});
    out->insert({"f:kind"});
    out->insert({"f:metadata"});
    for (const char* field : {"name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName", "generation",
                              "managedFields", "resourceVersion"}) {
      out->insert({"f:metadata", std::string("f:") + field});
    }
    return out;
  }();
  return *set;
}

void strip(FieldSet& fields, const FieldScope& scope) {
  fields.subtract(server_owned());
  for (const FieldPath& path : scope.ignored) fields.erase_subtree(path);
}

void filter(Comparison& comparison, const FieldScope& scope) {
  for (FieldSet* set : {&comparison.added, &comparison.modified, &comparison.removed}) {
    for (const FieldPath& path : scope.ignored) set->erase_subtree(path);
  }
}

std::string manager_name(const FieldWriter& writer) { return writer.manager.empty() ? "unknown" : writer.manager; }

void drop_empty(ManagedFields& managed) {
  managed.erase(std::remove_if(managed.begin(), managed.end(),
                               [](const ManagedFieldsEntry& entry) { return entry.fields.empty(); }),
                managed.end());
}

// The oldest Update entries merge into one "ancient-changes" entry per
// apiVersion until at most ten are left.
void cap_updates(ManagedFields& managed) {
  std::size_t updates = static_cast<std::size_t>(
      std::count_if(managed.begin(), managed.end(), [](const ManagedFieldsEntry& e) { return !e.apply; }));
  if (updates <= kMaxUpdateEntries) return;
  std::vector<std::size_t> oldest_first;
  std::map<std::string, std::size_t> buckets;  // apiVersion -> its "ancient-changes" entry
  for (std::size_t i = 0; i < managed.size(); ++i) {
    if (managed[i].apply) continue;
    if (managed[i].manager == "ancient-changes") {
      buckets.emplace(managed[i].api_version, i);
    } else {
      oldest_first.push_back(i);
    }
  }
  std::stable_sort(oldest_first.begin(), oldest_first.end(),
                   [&](std::size_t a, std::size_t b) { return managed[a].time < managed[b].time; });
  std::vector<bool> merged(managed.size(), false);
  for (std::size_t i : oldest_first) {
    if (updates <= kMaxUpdateEntries) break;
    ManagedFieldsEntry& entry = managed[i];
    auto bucket = buckets.find(entry.api_version);
    if (bucket == buckets.end()) {  // the oldest of its version becomes the bucket
      entry.manager = "ancient-changes";
      entry.subresource.clear();
      buckets.emplace(entry.api_version, i);
      continue;
    }
    ManagedFieldsEntry& into = managed[bucket->second];
    into.fields.add(entry.fields);
    into.time = std::max(into.time, entry.time);
    merged[i] = true;
    --updates;
  }
  ManagedFields kept;
  for (std::size_t i = 0; i < managed.size(); ++i) {
    if (!merged[i]) kept.push_back(std::move(managed[i]));
  }
  managed = std::move(kept);
}

}  // namespace

bool ManagedFieldsEntry::same_writer(const ManagedFieldsEntry& other) const {
  return manager == other.manager && apply == other.apply && subresource == other.subresource &&
         (apply || api_version == other.api_version);
}

std::string ManagedFieldsEntry::label() const {
  std::string out = go_quote(manager);
  if (!subresource.empty()) out += " with subresource " + go_quote(subresource);
  if (!apply) out += " using " + api_version;
  return out;
}

Result<ManagedFields> decode_managed_fields(const json& entries) {
  ManagedFields out;
  // Writer identity -> its entry in `out`: one per writer, as the real
  // decoder keeps them in a map (a later duplicate replaces the earlier).
  std::map<std::tuple<std::string, bool, std::string, std::string>, std::size_t> by_writer;
  if (entries.is_null()) return out;
  if (!entries.is_array()) return Error{"metadata.managedFields", "must be a list"};
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const json& item = entries[i];
    const std::string at = "metadata.managedFields[" + std::to_string(i) + "]";
    if (!item.is_object()) return Error{at, "must be an object"};
    ManagedFieldsEntry entry;
    const auto text = [&](const char* key) {
      return item.contains(key) && item[key].is_string() ? item[key].get<std::string>() : std::string();
    };
    entry.manager = text("manager");
    const std::string operation = text("operation");
    if (operation != "Apply" && operation != "Update") return Error{at, "operation must be `Apply` or `Update`"};
    entry.apply = operation == "Apply";
    entry.api_version = text("apiVersion");
    if (entry.api_version.empty()) return Error{at, "apiVersion must not be empty"};
    entry.subresource = text("subresource");
    entry.time = text("time");
    const std::string fields_type = text("fieldsType");
    if (fields_type.empty()) return Error{at, "missing fieldsType in managed fields entry " + std::to_string(i)};
    if (fields_type != "FieldsV1")
      return Error{at, "invalid fieldsType " + go_quote(fields_type) + " in managed fields entry " + std::to_string(i)};
    auto fields = FieldSet::from_fields_v1(item.contains("fieldsV1") ? item["fieldsV1"] : json::object());
    if (!fields) return fields.error().within(at);
    entry.fields = std::move(fields).value();
    const auto writer =
        std::make_tuple(entry.manager, entry.apply, entry.apply ? "" : entry.api_version, entry.subresource);
    if (auto same = by_writer.find(writer); same != by_writer.end()) {
      out[same->second] = std::move(entry);
    } else {
      by_writer.emplace(writer, out.size());
      out.push_back(std::move(entry));
    }
  }
  return out;
}

json encode_managed_fields(ManagedFields entries) {
  std::sort(entries.begin(), entries.end(), [](const ManagedFieldsEntry& a, const ManagedFieldsEntry& b) {
    return std::make_tuple(!a.apply, a.time, a.manager, a.api_version, a.subresource) <
           std::make_tuple(!b.apply, b.time, b.manager, b.api_version, b.subresource);
  });
  json out = json::array();
  for (const ManagedFieldsEntry& entry : entries) {
    json item = {{"manager", entry.manager},
                 {"operation", entry.apply ? "Apply" : "Update"},
                 {"apiVersion", entry.api_version},
                 {"fieldsType", "FieldsV1"},
                 {"fieldsV1", entry.fields.to_fields_v1()}};
    if (!entry.time.empty()) item["time"] = entry.time;
    if (!entry.subresource.empty()) item["subresource"] = entry.subresource;
    out.push_back(std::move(item));
  }
  return out;
}

void settle_request_managed_fields(json& metadata, const json* existing_metadata) {
  if (!metadata.is_object() || !metadata.contains("managedFields")) return;
  if (resets_managed_fields(metadata)) {
    metadata["managedFields"] = json::array();
    return;
  }
  if (decode_managed_fields(metadata["managedFields"])) return;
  if (existing_metadata != nullptr && existing_metadata->contains("managedFields")) {
    metadata["managedFields"] = (*existing_metadata)["managedFields"];
  } else {
    metadata.erase("managedFields");
  }
}

bool resets_managed_fields(const json& metadata) {
  if (!metadata.is_object() || !metadata.contains("managedFields")) return false;
  const json& entries = metadata["managedFields"];
  if (!entries.is_array()) return false;
  return entries.empty() || (entries.size() == 1 && entries[0].is_object() && entries[0].empty());
}

FieldScope field_scope(bool type_has_status_subresource, bool status_request) {
  if (status_request) return {{{"f:spec"}}};
  if (type_has_status_subresource) return {{{"f:status"}}};
  return {};
}

Result<ManagedFields> track_update(const ApplySchema& schema, const json* live, const json& updated,
                                   ManagedFields managed, const FieldWriter& writer, const FieldScope& scope,
                                   const std::string& now) {
  if (live != nullptr && managed.empty()) return managed;  // untracked since its managedFields were cleared
  static const json nothing = json::object();
  auto comparison = compare(schema, live != nullptr ? *live : nothing, updated);
  if (!comparison) return comparison.error();
  Comparison& changes = comparison.value();
  filter(changes, scope);
  FieldSet changed = changes.added;
  changed.add(changes.modified);
  strip(changed, scope);
  for (ManagedFieldsEntry& entry : managed) {
    entry.fields.subtract(changed);
    entry.fields.subtract(changes.removed);
  }
  if (!changed.empty()) {
    ManagedFieldsEntry mine{manager_name(writer), false, writer.api_version, writer.subresource, now, {}};
    auto existing = std::find_if(managed.begin(), managed.end(),
                                 [&](const ManagedFieldsEntry& entry) { return entry.same_writer(mine); });
    if (existing == managed.end()) {
      mine.fields = std::move(changed);
      managed.push_back(std::move(mine));
    } else {
      existing->fields.add(changed);
      existing->time = now;
    }
  }
  drop_empty(managed);
  cap_updates(managed);
  return managed;
}

Result<ApplyResult> apply_config(const ApplySchema& schema, const json& live, const json& config, ManagedFields managed,
                                 const FieldWriter& writer, bool force, const FieldScope& scope,
                                 const std::string& now) {
  const bool exists = live.contains("metadata") && live["metadata"].is_object() && live["metadata"].contains("uid");
  if (exists && managed.empty()) {
    // What the object held before anyone applied is recorded first, so an
    // applier that changes it conflicts with "before-first-apply".
    auto before = track_update(schema, nullptr, live, {},
                               {"before-first-apply", writer.api_version, writer.subresource}, scope, now);
    if (!before) return before.error();
    managed = std::move(before).value();
  }

  auto merged = merge(schema, live, config);
  if (!merged) return merged.error();
  auto applied = field_set_of(schema, config);
  if (!applied) return applied.error();
  FieldSet mine = std::move(applied).value();
  for (const FieldPath& path : scope.ignored) mine.erase_subtree(path);

  const ManagedFieldsEntry me{manager_name(writer), true, writer.api_version, writer.subresource, "", {}};
  auto previous = std::find_if(managed.begin(), managed.end(),
                               [&](const ManagedFieldsEntry& entry) { return entry.same_writer(me); });
  FieldSet others;
  for (const ManagedFieldsEntry& entry : managed) {
    if (!entry.same_writer(me)) others.add(entry.fields);
  }
  ApplyResult result;
  result.object = std::move(merged).value();
  if (previous != managed.end()) {
    // Fields this applier set before and no longer does go, unless someone
    // else holds them (or something under them).
    FieldSet keep = mine;
    keep.add(others);
    remove_fields(result.object, previous->fields.untouched_by(keep));
  }

  auto comparison = compare(schema, live, result.object);
  if (!comparison) return comparison.error();
  Comparison& changes = comparison.value();
  filter(changes, scope);
  FieldSet changed = changes.added;
  changed.add(changes.modified);

  for (ManagedFieldsEntry& entry : managed) {
    if (entry.same_writer(me)) continue;
    FieldSet taken = entry.fields.intersection(changed);
    for (FieldPath& path : taken.paths()) result.conflicts.push_back({entry.label(), std::move(path)});
  }
  if (!result.conflicts.empty() && !force) return result;
  result.conflicts.clear();
  for (ManagedFieldsEntry& entry : managed) {
    if (entry.same_writer(me)) continue;
    entry.fields.subtract(changed);
    entry.fields.subtract(changes.removed);
  }

  json before = live, after = result.object;
  for (json* object : {&before, &after}) {
    if (object->contains("metadata") && (*object)["metadata"].is_object()) (*object)["metadata"].erase("managedFields");
  }
  result.changed = before != after;
  strip(mine, scope);
  ManagedFieldsEntry entry = me;
  entry.fields = std::move(mine);
  if (previous != managed.end()) entry.time = previous->time;
  if (result.changed) entry.time = now;
  if (previous != managed.end()) {
    *previous = std::move(entry);
  } else {
    managed.push_back(std::move(entry));
  }
  drop_empty(managed);
  cap_updates(managed);
  result.managed = std::move(managed);
  if (!result.changed) result.object = live;
  return result;
}

std::string conflict_message(const std::vector<FieldConflict>& conflicts) {
  if (conflicts.size() == 1) {
    return "Apply failed with 1 conflict: conflict with " + conflicts[0].manager_label + ": " +
           path_string(conflicts[0].path);
  }
  std::map<std::string, std::vector<std::string>> by_manager;
  for (const FieldConflict& conflict : conflicts)
    by_manager[conflict.manager_label].push_back(path_string(conflict.path));
  std::string lines;
  for (const auto& [manager, paths] : by_manager) {
    lines += (lines.empty() ? "" : "\n") + std::string("conflicts with ") + manager + ":";
    for (const std::string& path : paths) lines += "\n- " + path;
  }
  return "Apply failed with " + std::to_string(conflicts.size()) + " conflicts: " + lines;
}

json conflict_causes(const std::vector<FieldConflict>& conflicts) {
  json causes = json::array();
  for (const FieldConflict& conflict : conflicts) {
    causes.push_back({{"reason", "FieldManagerConflict"},
                      {"message", "conflict with " + conflict.manager_label},
                      {"field", path_string(conflict.path)}});
  }
  return causes;
}

}  // namespace k8s4r::kube_sim
