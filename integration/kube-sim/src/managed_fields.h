// metadata.managedFields: who owns which fields of an object, kept on every
// write as kube-apiserver's field manager keeps it, and server-side apply
// itself (merge, prune, conflicts, force) on top of structured_merge.
//
// Entries are identified as the real server identifies them: an Apply entry
// by (manager, subresource), an Update entry by (manager, apiVersion,
// subresource). A writer's time moves only when its write changed something.
// Fields the server owns (apiVersion, kind, metadata.name, namespace, uid,
// resourceVersion, generation, creationTimestamp, selfLink, managedFields)
// are never recorded. At most 10 Update entries are kept; older ones merge
// into "ancient-changes".
//
// Thread-safety: pure functions. Private to kube_sim.
#pragma once

#include "field_set.h"
#include "structured_merge.h"

#include "k8s4r/common/result.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace k8s4r::kube_sim {

struct ManagedFieldsEntry {
  std::string manager;
  bool apply = false;  // operation: Apply, else Update
  std::string api_version, subresource;
  std::string time;  // RFC 3339; empty when the entry has none
  FieldSet fields;

  // The entry's identity: Apply entries ignore apiVersion.
  bool same_writer(const ManagedFieldsEntry& other) const;
  // How conflicts name it: "kubectl", "m" with subresource "status",
  // "kube-controller-manager" using apps/v1.
  std::string label() const;

  bool operator==(const ManagedFieldsEntry&) const = default;
};
using ManagedFields = std::vector<ManagedFieldsEntry>;

// Who writes, and through which version and subresource.
struct FieldWriter {
  std::string manager;  // "" becomes "unknown"
  std::string api_version;
  std::string subresource;  // "" or "status"
};

// The entries of metadata.managedFields, with the real decode errors
// ("operation must be `Apply` or `Update`").
Result<ManagedFields> decode_managed_fields(const nlohmann::json& entries);
// Sorted as the real server sorts them: operation, time, manager, apiVersion, subresource.
nlohmann::json encode_managed_fields(ManagedFields entries);

// Whether an update's metadata.managedFields asks for them to be reset:
// [] or [{}].
bool resets_managed_fields(const nlohmann::json& metadata);
// What a write's metadata.managedFields mean before anything validates
// them: a reset becomes [], entries that do not decode give way to the live
// object's (none on a create), as kube-apiserver's field manager takes them.
void settle_request_managed_fields(nlohmann::json& metadata, const nlohmann::json* existing_metadata);

// The fields no entry records, and the subtree each request ignores:
// .status on the main resource of a type with a status subresource, .spec
// through /status.
struct FieldScope {
  std::vector<FieldPath> ignored;
};
FieldScope field_scope(bool type_has_status_subresource, bool status_request);

// After a create or update by `writer` from `live` (null: created) to
// `updated`: `managed` with the writer's changes recorded. `managed` holds
// the live object's entries (or those the request set on purpose). An
// object without entries that already existed stays untracked, as on a
// real server once its managedFields were cleared.
Result<ManagedFields> track_update(const ApplySchema& schema, const nlohmann::json* live, const nlohmann::json& updated,
                                   ManagedFields managed, const FieldWriter& writer, const FieldScope& scope,
                                   const std::string& now);

// One conflicting field: the other writer and the path.
struct FieldConflict {
  std::string manager_label;
  FieldPath path;
};

struct ApplyResult {
  nlohmann::json object;  // the merged object (live when nothing changed)
  ManagedFields managed;
  bool changed = false;                  // the object itself changed
  std::vector<FieldConflict> conflicts;  // not empty: refused (without force)
};
// Server-side apply of `config` by `writer` onto `live` (an empty object when
// it does not exist yet).
Result<ApplyResult> apply_config(const ApplySchema& schema, const nlohmann::json& live, const nlohmann::json& config,
                                 ManagedFields managed, const FieldWriter& writer, bool force, const FieldScope& scope,
                                 const std::string& now);

// "Apply failed with 1 conflict: conflict with \"m\": .spec.x", and the
// causes, as the 409 carries them.
std::string conflict_message(const std::vector<FieldConflict>& conflicts);
nlohmann::json conflict_causes(const std::vector<FieldConflict>& conflicts);

}  // namespace k8s4r::kube_sim
