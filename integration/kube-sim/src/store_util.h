// Small helpers the store's files share: reading metadata, server-set
// identifiers, resourceVersion and selector parsing. Private to kube_sim.
#pragma once

#include "k8s4r/common/result.h"
#include "k8s4r/kube_sim/api_status.h"
#include "k8s4r/kube_sim/resource_type.h"
#include "k8s4r/kube_sim/selectors.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace k8s4r::kube_sim {

// A random RFC 4122 version 4 UUID, as object uids are.
std::string random_uid();
// Five characters from kube-apiserver's generateName alphabet (no vowels).
std::string random_suffix();

// object[key] when it is an object, else an empty object.
const nlohmann::json& object_at(const nlohmann::json& object, const char* key);
// object.metadata, or an empty object when absent or not an object.
inline const nlohmann::json& metadata_of(const nlohmann::json& object) { return object_at(object, "metadata"); }
// object[key] when it is a string, else "".
std::string string_at(const nlohmann::json& object, const char* key);
bool has_finalizers(const nlohmann::json& object);
// object[key] when it is an array, else an empty array.
const nlohmann::json& list_at(const nlohmann::json& object, const char* key);
bool has_finalizer(const nlohmann::json& object, const std::string& finalizer);
// A Namespace whose spec.finalizers is not empty yet: its deletion waits.
bool holds_namespace_open(const nlohmann::json& object);

// apiextensions.k8s.io/v1 customresourcedefinitions (not a CRD's kind that
// happens to be named so).
inline bool is_crd(const ResourceType& type) {
  return type.group == "apiextensions.k8s.io" && type.plural == "customresourcedefinitions";
}

// kube-apiserver's JSON decoder refuses documents nested deeper than this;
// nlohmann::json copies, compares and dumps recursively, so deeper ones would
// overflow the stack.
constexpr std::size_t kMaxJsonDepth = 10000;

// The non-empty segments of a URL path: "/api/v1/x" -> {"api", "v1", "x"}.
std::vector<std::string> split_path(std::string_view path);
// ASCII lower case.
std::string lowercase(std::string text);

// A resourceVersion: decimal digits that fit in 64 bits.
std::optional<std::uint64_t> parse_version(const std::string& text);

// A field selector on metadata.name, metadata.namespace or one of the
// type's selectable fields; others are "field label not supported".
Result<FieldSelector> checked_field_selector(const ResourceType& type, const std::string& text);

// 400 when a written object's metadata names another object than the URL:
// its name (when it has one) or its namespace.
std::optional<ApiResponse> check_name_and_namespace(const nlohmann::json& metadata, const std::string& name,
                                                    const ResourceType& type, const std::string& namespace_);

// 400 when the body names another apiVersion or kind than the URL.
std::optional<ApiResponse> check_type_meta(const nlohmann::json& body, const ResourceType& type);

}  // namespace k8s4r::kube_sim
