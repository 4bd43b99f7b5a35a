// The typed operations of server-side apply, as structured-merge-diff does
// them over a resource's schema: which fields an applied configuration
// owns, what a write added, changed and removed, how a configuration merges
// into the live object, and removing the fields nobody owns any more.
//
// The schema is OpenAPI v3 as CRDs carry it, read for its topology only:
// `properties` are struct fields; `additionalProperties` and
// x-kubernetes-preserve-unknown-fields make map keys; x-kubernetes-map-type
// atomic makes a map one unit; x-kubernetes-list-type set and map (with
// x-kubernetes-list-map-keys) make lists merge item by item, and every other
// list is atomic. metadata is ObjectMeta's: labels and annotations granular,
// finalizers a set, ownerReferences keyed by uid. Built-in kinds carry a
// small schema of their own (apply_schemas.cpp).
//
// Thread-safety: pure functions. Private to kube_sim.
#pragma once

#include "field_set.h"

#include "k8s4r/common/result.h"

#include <nlohmann/json.hpp>

#include <memory>

namespace k8s4r::kube_sim {

struct ResourceType;

class ApplySchema {
 public:
  // `root` is a type's openAPIV3Schema (null: everything deduced from the
  // values). `strict`: a field the schema does not declare is an error, as for
  // custom resources; otherwise it is taken as a struct field at the top and
  // a map key below.
  ApplySchema(std::shared_ptr<const nlohmann::json> root, bool strict);

  // What a child of an object is.
  struct Child {
    const nlohmann::json* schema;  // null: deduced from the value
    bool declared;                 // a struct field (owned only through its children when not empty)
  };
  Result<Child> child(const nlohmann::json* schema, const std::string& key) const;
  const nlohmann::json* root() const { return root_.get(); }

  enum class Shape { scalar, granular_map, atomic_map, atomic_list, set_list, map_list };
  static Shape shape_of(const nlohmann::json* schema, const nlohmann::json& value);
  static const nlohmann::json* items_of(const nlohmann::json* schema);
  // The path element of an item of a set or map list: v:<value> or k:<keys>.
  static Result<std::string> item_element(const nlohmann::json* schema, Shape shape, const nlohmann::json& item);

 private:
  std::shared_ptr<const nlohmann::json> root_;
  bool strict_;
};

// The schema server-side apply uses for `type` (a CRD's, or a built-in's own).
ApplySchema apply_schema_for(const ResourceType& type);

// The fields an applied configuration sets: every leaf, atomic value and list
// item; map keys and empty or null values themselves.
Result<FieldSet> field_set_of(const ApplySchema& schema, const nlohmann::json& object);

struct Comparison {
  FieldSet added, modified, removed;
};
// What changed from `live` to `updated`.
Result<Comparison> compare(const ApplySchema& schema, const nlohmann::json& live, const nlohmann::json& updated);

// `config` merged into `live`: config values win; maps and structs merge key
// by key; set and map lists item by item (live-only items keep their place);
// atomic values are replaced whole.
Result<nlohmann::json> merge(const ApplySchema& schema, const nlohmann::json& live, const nlohmann::json& config);

// Removes every member of `paths` (with what is under it) from `object`.
void remove_fields(nlohmann::json& object, const FieldSet& paths);

// The value at `path` in `object`, or null when it has none.
const nlohmann::json* value_at(const nlohmann::json& object, const FieldPath& path);

}  // namespace k8s4r::kube_sim
