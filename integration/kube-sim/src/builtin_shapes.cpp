#include "builtin_shapes.h"

#include "go_text.h"

#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

struct Shape {
  enum class Type { string, integer, boolean, object, array, string_map, any } type = Type::any;
  std::string go_type;      // as the error names it: "string", "int32", "[]v1.PolicyRule", "v1.RoleRef"
  std::string struct_name;  // objects: "PolicyRule"
  // Objects' fields; behind a pointer, as a Shape holds Shapes.
  std::shared_ptr<const std::vector<std::pair<std::string, Shape>>> fields;
  std::shared_ptr<Shape> items;  // arrays
};

Shape text() { return {Shape::Type::string, "string", "", {}, nullptr}; }
Shape integer(const char* go_type = "int32") { return {Shape::Type::integer, go_type, "", {}, nullptr}; }
Shape boolean() { return {Shape::Type::boolean, "bool", "", {}, nullptr}; }
Shape string_map() { return {Shape::Type::string_map, "map[string]string", "", {}, nullptr}; }
Shape object(std::string go_struct, std::vector<std::pair<std::string, Shape>> fields) {
  return {Shape::Type::object, "v1." + go_struct, go_struct,
          std::make_shared<const std::vector<std::pair<std::string, Shape>>>(std::move(fields)), nullptr};
}
Shape array(Shape item) {
  Shape shape{Shape::Type::array, "[]" + item.go_type, "", {}, nullptr};
  shape.items = std::make_shared<Shape>(std::move(item));
  return shape;
}
Shape strings() { return array(text()); }

// encoding/json's error: the innermost struct, then the dotted path from the
// decoded object (no indexes), then the Go type.
std::optional<std::string> check(const json& value, const Shape& shape, const std::string& in_struct,
                                 const std::string& path) {
  if (value.is_null()) return std::nullopt;
  const auto wrong = [&] {
    return "json: cannot unmarshal " + json_kind(value) + " into Go struct field " + in_struct + "." + path +
           " of type " + shape.go_type;
  };
  switch (shape.type) {
    case Shape::Type::any:
      return std::nullopt;
    case Shape::Type::string:
      if (!value.is_string()) return wrong();
      return std::nullopt;
    case Shape::Type::integer:
      if (!value.is_number_integer()) return wrong();
      return std::nullopt;
    case Shape::Type::boolean:
      if (!value.is_boolean()) return wrong();
      return std::nullopt;
    case Shape::Type::string_map:
      if (!value.is_object()) return wrong();
      for (const auto& [key, item] : value.items()) {
        if (!item.is_null() && !item.is_string())
          return "json: cannot unmarshal " + json_kind(item) + " into Go struct field " + in_struct + "." + path +
                 " of type string";
      }
      return std::nullopt;
    case Shape::Type::array:
      if (!value.is_array()) return wrong();
      for (const json& item : value) {
        if (auto error = check(item, *shape.items, in_struct, path)) return error;
      }
      return std::nullopt;
    case Shape::Type::object:
      if (!value.is_object()) return wrong();
      for (const auto& [name, field] : *shape.fields) {
        if (!value.contains(name)) continue;
        if (auto error = check(value[name], field, shape.struct_name, path + "." + name)) return error;
      }
      return std::nullopt;
  }
  return std::nullopt;
}

Shape object_reference() {
  return object("ObjectReference", {{"kind", text()},
                                    {"namespace", text()},
                                    {"name", text()},
                                    {"uid", text()},
                                    {"apiVersion", text()},
                                    {"resourceVersion", text()},
                                    {"fieldPath", text()}});
}

Shape policy_rules() {
  return array(object("PolicyRule", {{"verbs", strings()},
                                     {"apiGroups", strings()},
                                     {"resources", strings()},
                                     {"resourceNames", strings()},
                                     {"nonResourceURLs", strings()}}));
}

// The kinds' top-level fields; `kind` names the outermost struct.
const std::map<std::string, std::vector<std::pair<std::string, Shape>>>& kinds() {
  static const auto* table = new std::map<std::string, std::vector<std::pair<std::string, Shape>>>{
      {"/Namespace", {{"spec", object("NamespaceSpec", {{"finalizers", strings()}})}}},
      {"/ServiceAccount",
       {{"secrets", array(object_reference())},
        {"imagePullSecrets", array(object("LocalObjectReference", {{"name", text()}}))},
        {"automountServiceAccountToken", boolean()}}},
      {"/Event",
       {{"involvedObject", object_reference()},
        {"related", object_reference()},
        {"reason", text()},
        {"message", text()},
        {"type", text()},
        {"action", text()},
        {"reportingComponent", text()},
        {"reportingInstance", text()},
        {"count", integer()},
        {"source", object("EventSource", {{"component", text()}, {"host", text()}})},
        {"series", object("EventSeries", {{"count", integer()}, {"lastObservedTime", text()}})},
        {"firstTimestamp", text()},
        {"lastTimestamp", text()},
        {"eventTime", text()}}},
      {"events.k8s.io/Event",
       {{"regarding", object_reference()},
        {"related", object_reference()},
        {"reason", text()},
        {"note", text()},
        {"type", text()},
        {"action", text()},
        {"reportingController", text()},
        {"reportingInstance", text()},
        {"deprecatedCount", integer()},
        {"deprecatedSource", object("EventSource", {{"component", text()}, {"host", text()}})},
        {"series", object("EventSeries", {{"count", integer()}, {"lastObservedTime", text()}})},
        {"deprecatedFirstTimestamp", text()},
        {"deprecatedLastTimestamp", text()},
        {"eventTime", text()}}},
      {"coordination.k8s.io/Lease",
       {{"spec", object("LeaseSpec", {{"holderIdentity", text()},
                                      {"leaseDurationSeconds", integer()},
                                      {"acquireTime", text()},
                                      {"renewTime", text()},
                                      {"leaseTransitions", integer()},
                                      {"strategy", text()},
                                      {"preferredHolder", text()}})}}},
      {"rbac.authorization.k8s.io/Role", {{"rules", policy_rules()}}},
      {"rbac.authorization.k8s.io/ClusterRole",
       {{"rules", policy_rules()},
        {"aggregationRule",
         object(
             "AggregationRule",
             {{"clusterRoleSelectors",
               array(object("LabelSelector",
                            {{"matchLabels", string_map()},
                             {"matchExpressions",
                              array(object("LabelSelectorRequirement",
                                           {{"key", text()}, {"operator", text()}, {"values", strings()}}))}}))}})}}},
      {"rbac.authorization.k8s.io/RoleBinding",
       {{"subjects",
         array(object("Subject", {{"kind", text()}, {"apiGroup", text()}, {"name", text()}, {"namespace", text()}}))},
        {"roleRef", object("RoleRef", {{"apiGroup", text()}, {"kind", text()}, {"name", text()}})}}},
      {"apiextensions.k8s.io/CustomResourceDefinition",
       {{"spec",
         object("CustomResourceDefinitionSpec",
                {{"group", text()},
                 {"scope", text()},
                 {"names", object("CustomResourceDefinitionNames", {{"plural", text()},
                                                                    {"singular", text()},
                                                                    {"kind", text()},
                                                                    {"listKind", text()},
                                                                    {"shortNames", strings()},
                                                                    {"categories", strings()}})},
                 {"versions",
                  array(object("CustomResourceDefinitionVersion",
                               {{"name", text()},
                                {"served", boolean()},
                                {"storage", boolean()},
                                {"schema", object("CustomResourceValidation", {{"openAPIV3Schema", {}}})},
                                {"subresources", object("CustomResourceSubresources", {})},
                                {"additionalPrinterColumns",
                                 array(object("CustomResourceColumnDefinition", {{"name", text()},
                                                                                 {"type", text()},
                                                                                 {"format", text()},
                                                                                 {"description", text()},
                                                                                 {"jsonPath", text()},
                                                                                 {"priority", integer()}}))},
                                {"selectableFields", array(object("SelectableField", {{"jsonPath", text()}}))}}))}})}}},
      {"authentication.k8s.io/TokenRequest",
       {{"spec", object("TokenRequestSpec",
                        {{"audiences", strings()},
                         {"expirationSeconds", integer("int64")},
                         {"boundObjectRef",
                          object("BoundObjectReference",
                                 {{"kind", text()}, {"apiVersion", text()}, {"name", text()}, {"uid", text()}})}})}}},
      {"authentication.k8s.io/TokenReview",
       {{"spec", object("TokenReviewSpec", {{"token", text()}, {"audiences", strings()}})}}},
  };
  return *table;
}

Shape access_review_spec() {
  const Shape selector = object("FieldSelectorAttributes", {{"rawSelector", text()}});
  return object("SubjectAccessReviewSpec",
                {{"resourceAttributes", object("ResourceAttributes", {{"namespace", text()},
                                                                      {"verb", text()},
                                                                      {"group", text()},
                                                                      {"version", text()},
                                                                      {"resource", text()},
                                                                      {"subresource", text()},
                                                                      {"name", text()},
                                                                      {"fieldSelector", selector},
                                                                      {"labelSelector", selector}})},
                 {"nonResourceAttributes", object("NonResourceAttributes", {{"path", text()}, {"verb", text()}})},
                 {"user", text()},
                 {"groups", strings()},
                 {"uid", text()}});
}

}  // namespace

std::optional<std::string> builtin_shape_error(const std::string& group, const std::string& kind,
                                               const json& object_value) {
  std::vector<std::pair<std::string, Shape>> fields;
  if (group == "authorization.k8s.io") {
    fields = {{"spec", kind == "SelfSubjectRulesReview" ? object("SelfSubjectRulesReviewSpec", {{"namespace", text()}})
                                                        : access_review_spec()}};
  } else {
    const std::string key = (kind == "ClusterRoleBinding" ? "rbac.authorization.k8s.io" : group) + "/" +
                            (kind == "ClusterRoleBinding" ? "RoleBinding" : kind);
    auto found = kinds().find(key);
    if (found == kinds().end()) return std::nullopt;
    fields = found->second;
  }
  for (const auto& [name, shape] : fields) {
    if (!object_value.contains(name)) continue;
    if (auto error = check(object_value[name], shape, kind, name)) return error;
  }
  return std::nullopt;
}

}  // namespace k8s4r::kube_sim
