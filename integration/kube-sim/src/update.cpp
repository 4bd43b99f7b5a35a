// PUT and PATCH (merge, JSON, strategic on built-ins): optimistic
// concurrency on resourceVersion, the fields a client cannot change, the
// status subresource split, generation, and no-op detection.
#include "k8s4r/common/json_depth.h"
#include "k8s4r/kube_sim/store.h"

#include "conversion.h"
#include "managed_fields.h"
#include "store_util.h"

#include "k8s4r/kube_sim/builtin_strategies.h"
#include "k8s4r/kube_sim/object_meta_validation.h"

#include <set>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

// Whether `a` and `b` hold the same members, leaving out those named in
// `except`; compares in place (objects can be large; no copies).
bool same_except(const json& a, const json& b, std::initializer_list<const char*> except) {
  const auto skipped = [&](const std::string& key) {
    for (const char* name : except) {
      if (key == name) return true;
    }
    return false;
  };
  std::size_t a_count = 0, b_count = 0;
  for (const auto& [key, value] : a.items()) {
    if (skipped(key)) continue;
    ++a_count;
    auto other = b.find(key);
    if (other == b.end() || *other != value) return false;
  }
  for (const auto& [key, value] : b.items()) {
    if (!skipped(key)) ++b_count;
  }
  return a_count == b_count;
}

// Everything but metadata and status (what moves `generation`) is the same.
bool same_spec(const json& a, const json& b) { return same_except(a, b, {"metadata", "status"}); }

// The same object but for what the server sets on every write: a no-op.
// (managedFields count: they change only when a write changed something, or
// when a client sets them on purpose.)
bool same_but_version(const json& a, const json& b) {
  return same_except(a, b, {"metadata"}) && same_except(metadata_of(a), metadata_of(b), {"resourceVersion"});
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

std::string json_patch_failure(const json& operation) {
  if (!operation.is_object()) return "Unexpected kind: " + operation.dump();
  const std::string op = operation.value("op", ""), path = operation.value("path", "");
  if (op == "remove") return "Unable to remove nonexistent key: " + path + ": missing value";
  if (op == "replace") return "replace operation does not apply: doc is missing key: " + path + ": missing value";
  if (op == "add") return "add operation does not apply: doc is missing path: \"" + path + "\": missing value";
  if (op == "test") return "testing value " + path + " failed: test failed";
  if (op == "move" || op == "copy")
    return op + " operation does not apply: doc is missing from path: " + operation.value("from", "") +
           ": missing value";
  return "Unexpected kind: " + op;
}

}  // namespace

ApiResponse Store::replace(const Target& target, const std::string& name, json body, bool status_subresource,
                           const WriteOptions& options) {
  std::lock_guard lock(mutex_);
  ApiResponse response = update_locked(target, name, std::move(body), status_subresource, options, false);
  run_controllers_locked();
  return response;
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
  if (auto error = decode_errors(type, body, from_patch)) return *error;
  if (type.api_version() != resource->storage_version) body = convert(body, storage_type(*resource));
  if (!body.contains("metadata") || !body["metadata"].is_object()) body["metadata"] = json::object();
  json& metadata = body["metadata"];
  if (auto mismatch = check_name_and_namespace(metadata, name, type, namespace_)) return *mismatch;
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
    if (options.managed_fields_set) {  // an apply to /status computed them
      if (metadata.contains("managedFields")) {
        updated["metadata"]["managedFields"] = metadata["managedFields"];
      } else {
        updated["metadata"].erase("managedFields");
      }
    }
  } else {
    updated = std::move(body);
    updated["apiVersion"] = resource->storage_version;
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
      std::string added;
      for (const json& finalizer : updated["metadata"]["finalizers"]) {
        if (finalizer.is_string() && !allowed.count(finalizer.get<std::string>()))
          added += (added.empty() ? "\"" : ", \"") + finalizer.get<std::string>() + "\"";
      }
      if (!added.empty()) {
        return invalid(subject(type, name), type.qualified_kind(),
                       {{"FieldValueForbidden",
                         "Forbidden: no new finalizers can be added if the object is being deleted, found new "
                         "finalizers []string{" +
                             added + "}",
                         "metadata.finalizers"}});
      }
    }
  }

  std::vector<std::string> warnings;
  if (!status_subresource && !options.managed_fields_set)
    settle_request_managed_fields(updated["metadata"], &old_metadata);
  if (!status_subresource) prepare_for_update(type, updated, existing);
  std::vector<FieldCause> causes = validate_builtin(type, updated, &existing);
  for (FieldCause& cause : validate_object_meta(updated["metadata"], meta_rules(type))) causes.push_back(cause);
  if (!causes.empty()) return invalid(subject(type, name), type.qualified_kind(), causes);
  if (auto warning = deduplicate_owner_references(updated["metadata"])) warnings.push_back(*warning);
  if (!type.builtin) {
    for (std::string& warning : finalizer_warnings(updated["metadata"], &old_metadata)) warnings.push_back(warning);
  }
  if (auto admitted = admit(target, updated, &existing, options, warnings); !admitted.ok()) return admitted;
  if (old_metadata.contains("generation") && !same_spec(updated, existing)) {
    updated["metadata"]["generation"] = old_metadata.value("generation", 1) + 1;
  }
  track_fields(target, updated, &existing, status_subresource, options);
  if (same_but_version(updated, existing)) return {200, for_version(existing, type), warnings};
  if (options.dry_run) return {200, updated, warnings};

  if (metadata_of(updated).contains("deletionTimestamp") && !has_finalizers(updated) &&
      !holds_namespace_open(updated)) {
    commit(*resource, key, std::make_shared<json>(std::move(updated)), "MODIFIED");
    auto deleted = resource->objects.at(key);
    finish_deletion(*resource, key);
    return {200, for_version(*deleted, type), warnings};
  }
  auto stored = commit(*resource, key, std::make_shared<json>(std::move(updated)), "MODIFIED");
  if (is_crd(type)) register_crd(*stored);
  return {200, for_version(*stored, type), warnings};
}

ApiResponse Store::patch(const Target& target, const std::string& name, PatchType patch_type, const std::string& patch,
                         bool status_subresource, const WriteOptions& options) {
  const ResourceType& type = target.type;
  if (patch_type == PatchType::apply) {
    // Decoded and checked before the lock: YAML can be costly to read.
    auto config = apply_config_of(target, name, patch);
    if (auto* error = std::get_if<ApiResponse>(&config)) return *error;
    std::lock_guard lock(mutex_);
    ApiResponse response = apply_locked(target, name, std::get<json>(std::move(config)), status_subresource, options);
    run_controllers_locked();
    return response;
  }
  if (patch_type == PatchType::strategic && !type.builtin) {
    return unsupported_media_type(
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, "
        "application/merge-patch+json, application/apply-patch+yaml");
  }
  if (json_nested_deeper_than(patch, kMaxJsonDepth))
    return bad_request("error decoding patch: json: exceeded max depth of " + std::to_string(kMaxJsonDepth));
  json document = json::parse(patch, nullptr, false);
  if (document.is_discarded()) return bad_request("error decoding patch: invalid JSON");
  // kube-apiserver's limits on a JSON patch: operations, and what copy adds.
  constexpr std::size_t kMaxOperations = 10000;
  constexpr std::size_t kMaxCopiedBytes = 3 * 1024 * 1024;
  if (patch_type == PatchType::json && document.is_array() && document.size() > kMaxOperations) {
    return {413,
            status_body(413, "RequestEntityTooLarge",
                        "The allowed maximum operations in a JSON patch is " + std::to_string(kMaxOperations) +
                            ", got " + std::to_string(document.size())),
            {}};
  }

  std::lock_guard lock(mutex_);
  Resource* resource = resource_of(type);
  if (resource == nullptr) return not_found_path(type.key());
  auto found = resource->objects.find(object_key(type.namespaced ? target.namespace_ : "", name));
  if (found == resource->objects.end()) return not_found(subject(type, name));
  json patched = for_version(*found->second, type);
  if (patch_type == PatchType::json) {
    if (!document.is_array()) return bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch");
    // One operation at a time, so a failure is worded after the operation
    // that failed (as evanphx/json-patch words it), never the JSON library's text.
    std::size_t copied = 0;
    for (const json& operation : document) {
      try {
        if (operation.is_object() && operation.value("op", json()) == "copy" && operation.contains("from") &&
            operation["from"].is_string()) {
          copied += patched.at(json::json_pointer(operation["from"].get<std::string>())).dump().size();
          if (copied > kMaxCopiedBytes) {
            return {422,
                    status_body(422, "Invalid",
                                "the server rejected our request due to an error in our request: Unable to copy, "
                                "resulting document size would exceed the allowed limit of " +
                                    std::to_string(kMaxCopiedBytes) + " bytes"),
                    {}};
          }
        }
        patched.patch_inplace(json::array({operation}));
      } catch (const json::exception&) {
        return {422,
                status_body(
                    422, "Invalid",
                    "the server rejected our request due to an error in our request: " + json_patch_failure(operation)),
                {}};
      }
    }
  } else {
    if (!document.is_object()) return bad_request("error decoding patch: a merge patch must be a JSON object");
    if (patch_type == PatchType::strategic) strip_directives(document);
    patched.merge_patch(document);
  }
  WriteOptions patch_options = options;
  patch_options.from_patch = true;
  ApiResponse response = update_locked(target, name, std::move(patched), status_subresource, patch_options, true);
  run_controllers_locked();
  return response;
}

}  // namespace k8s4r::kube_sim
