#include "k8s4r/kube_sim/builtin_strategies.h"

#include "k8s4r/common/base64.h"

#include "builtin_shapes.h"
#include "go_text.h"
#include "store_util.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

constexpr std::size_t kMaxSecretSize = 1024 * 1024;  // also a ConfigMap's limit
const std::string kRbacGroup = "rbac.authorization.k8s.io";

// Where Go's standard base64 decoder gives up ("illegal base64 data at
// input byte N"): the first character outside the alphabet or its padding,
// or the end when the length is not a multiple of four.
std::optional<std::size_t> base64_error_at(const std::string& text) {
  std::size_t i = 0;
  while (i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '+' || text[i] == '/'))
    ++i;
  const std::size_t data_end = i;
  while (i < text.size() && text[i] == '=' && i - data_end < 2) ++i;
  if (i < text.size()) return i;
  if (text.size() % 4 != 0 || !base64_decode(text)) return text.size();
  return std::nullopt;
}

FieldCause required(const std::string& field, const std::string& detail = "") {
  return {"FieldValueRequired", detail.empty() ? "Required value" : "Required value: " + detail, field};
}
FieldCause invalid_value(const std::string& field, const std::string& shown, const std::string& detail) {
  return {"FieldValueInvalid", "Invalid value: " + shown + ": " + detail, field};
}
FieldCause forbidden(const std::string& field, const std::string& detail) {
  return {"FieldValueForbidden", "Forbidden: " + detail, field};
}
FieldCause not_supported(const std::string& field, const std::string& value, const std::vector<std::string>& allowed) {
  std::string list;
  for (const std::string& item : allowed) list += (list.empty() ? "" : ", ") + go_quote(item);
  return {"FieldValueNotSupported", "Unsupported value: " + go_quote(value) + ": supported values: " + list, field};
}
FieldCause too_long(const std::string& field, std::size_t limit) {
  return {"FieldValueTooLong", "Too long: may not be more than " + std::to_string(limit) + " bytes", field};
}

// IsConfigMapKey: a Secret's or ConfigMap's key.
std::vector<std::string> config_key_problems(const std::string& key) {
  std::vector<std::string> problems;
  if (key.size() > 253) problems.push_back("must be no more than 253 characters");
  const bool valid = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
  if (!valid) {
    problems.push_back(
        "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
        "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')");
  }
  if (key == ".") {
    problems.push_back("must not be '.'");
  } else if (key == "..") {
    problems.push_back("must not be '..'");
  } else if (key.rfind("..", 0) == 0) {
    problems.push_back("must not start with '..'");
  }
  return problems;
}

void check_keys(const json& map, const std::string& field, std::vector<FieldCause>& causes) {
  for (const auto& [key, value] : map.items()) {
    for (const std::string& problem : config_key_problems(key))
      causes.push_back(invalid_value(field + "[" + key + "]", go_quote(key), problem));
  }
}

// ---- decode errors ------------------------------------------------------------------

std::optional<std::string> bytes_map_error(const json& object, const char* field, const std::string& kind) {
  if (!object.contains(field) || object[field].is_null()) return std::nullopt;
  const json& map = object[field];
  const std::string path = kind + "." + field;
  if (!map.is_object()) return unmarshal_error(map, path, "map[string][]uint8");
  for (const auto& [key, value] : map.items()) {
    if (value.is_null()) continue;
    if (!value.is_string()) return unmarshal_error(value, path, "[]uint8");
    if (auto at = base64_error_at(value.get<std::string>()))
      return "illegal base64 data at input byte " + std::to_string(*at);
  }
  return std::nullopt;
}

std::optional<std::string> string_map_error(const json& object, const char* field, const std::string& kind) {
  if (!object.contains(field) || object[field].is_null()) return std::nullopt;
  const json& map = object[field];
  const std::string path = kind + "." + field;
  if (!map.is_object()) return unmarshal_error(map, path, "map[string]string");
  for (const auto& [key, value] : map.items()) {
    if (!value.is_null() && !value.is_string()) return unmarshal_error(value, path, "string");
  }
  return std::nullopt;
}

std::optional<std::string> scalar_error(const json& object, const char* field, const std::string& kind,
                                        const std::string& go_type, bool boolean) {
  if (!object.contains(field) || object[field].is_null()) return std::nullopt;
  const json& value = object[field];
  if (boolean ? value.is_boolean() : value.is_string()) return std::nullopt;
  return unmarshal_error(value, kind + "." + field, go_type);
}

// ---- per kind -----------------------------------------------------------------------------

std::size_t decoded_size(const json& map) {
  std::size_t total = 0;
  for (const auto& [key, value] : map.items()) {
    if (value.is_string()) total += base64_decode(value.get<std::string>()).value_or("").size();
  }
  return total;
}

void immutable_data(const json& object, const json* existing, const std::vector<const char*>& fields,
                    std::vector<FieldCause>& causes) {
  if (existing == nullptr || existing->value("immutable", false) != true) return;
  for (const char* field : fields) {
    const json before = existing->contains(field) ? (*existing)[field] : json();
    const json after = object.contains(field) ? object[field] : json();
    if (before != after) causes.push_back(forbidden(field, "field is immutable when `immutable` is set"));
  }
  if (object.value("immutable", false) != true)
    causes.push_back(forbidden("immutable", "field is immutable when `immutable` is set"));
}

void validate_secret(const json& object, const json* existing, std::vector<FieldCause>& causes) {
  const json& data = object_at(object, "data");
  check_keys(data, "data", causes);
  if (decoded_size(data) > kMaxSecretSize) causes.push_back(too_long("data", kMaxSecretSize));
  const std::string type = string_at(object, "type");
  if (type == "kubernetes.io/tls") {
    for (const char* key : {"tls.crt", "tls.key"}) {
      if (!data.contains(key)) causes.push_back(required(std::string("data[") + key + "]"));
    }
  } else if (type == "kubernetes.io/dockerconfigjson" && !data.contains(".dockerconfigjson")) {
    causes.push_back(required("data[.dockerconfigjson]"));
  } else if (type == "kubernetes.io/service-account-token" &&
             string_at(object_at(object_at(object, "metadata"), "annotations"), "kubernetes.io/service-account.name")
                 .empty()) {
    causes.push_back(required("metadata.annotations[kubernetes.io/service-account.name]"));
  }
  if (existing != nullptr) {
    const std::string old_type = string_at(*existing, "type");
    if (old_type != type) causes.push_back(invalid_value("type", go_quote(type), "field is immutable"));
    immutable_data(object, existing, {"data"}, causes);
  }
}

void validate_config_map(const json& object, const json* existing, std::vector<FieldCause>& causes) {
  const json& data = object_at(object, "data");
  const json& binary = object_at(object, "binaryData");
  check_keys(data, "data", causes);
  check_keys(binary, "binaryData", causes);
  std::size_t total = decoded_size(binary);
  for (const auto& [key, value] : data.items()) {
    if (binary.contains(key))
      causes.push_back(invalid_value("data[" + key + "]", go_quote(key), "duplicate of key present in binaryData"));
    if (value.is_string()) total += value.get<std::string>().size();
  }
  if (total > kMaxSecretSize) causes.push_back(too_long("", kMaxSecretSize));
  immutable_data(object, existing, {"data", "binaryData"}, causes);
}

void validate_namespace(const json& object, std::vector<FieldCause>& causes) {
  const json& spec = object_at(object, "spec");
  if (!spec.contains("finalizers") || !spec["finalizers"].is_array()) return;
  for (const json& item : spec["finalizers"]) {
    const std::string finalizer = item.is_string() ? item.get<std::string>() : "";
    for (const std::string& problem : qualified_name_problems(finalizer))
      causes.push_back(invalid_value("spec.finalizers", go_quote(finalizer), problem));
    if (finalizer.find('/') == std::string::npos && finalizer != "kubernetes")
      causes.push_back(invalid_value("spec.finalizers", go_quote(finalizer),
                                     "name is neither a standard finalizer name nor is it fully qualified"));
  }
}

void validate_event(const ResourceType& request, const json& object, std::vector<FieldCause>& causes) {
  const json& metadata = object_at(object, "metadata");
  const std::string namespace_ = string_at(metadata, "namespace");
  const json& involved = object_at(object, "involvedObject");
  const std::string involved_namespace = string_at(involved, "namespace");
  const bool core = request.group.empty();
  const bool has_event_time = object.contains("eventTime") && !object["eventTime"].is_null();
  const auto length = [&](const char* field, std::size_t limit, bool needed) {
    const std::string value = string_at(object, field);
    if (needed && value.empty()) causes.push_back(required(field));
    if (value.size() > limit)
      causes.push_back(invalid_value(field, "\"\"", "can have at most " + std::to_string(limit) + " characters"));
  };
  if (!has_event_time) {
    const bool ok =
        involved_namespace.empty() ? (namespace_.empty() || namespace_ == "default") : involved_namespace == namespace_;
    if (!ok)
      causes.push_back(
          invalid_value("involvedObject.namespace", go_quote(involved_namespace), "does not match event.namespace"));
  } else {
    if (involved_namespace.empty() && namespace_ != "default" && namespace_ != "kube-system")
      causes.push_back(
          invalid_value("involvedObject.namespace", go_quote(involved_namespace), "does not match event.namespace"));
    const std::string controller = string_at(object, "reportingComponent");
    const std::string controller_field = core ? "reportingComponent" : "reportingController";
    if (controller.empty()) {
      causes.push_back(required(controller_field));
    } else {
      for (const std::string& problem : qualified_name_problems(controller))
        causes.push_back(invalid_value(controller_field, go_quote(controller), problem));
    }
    length("reportingInstance", 128, true);
    length("action", 128, true);
    length("reason", 128, true);
  }
  if (string_at(object, "message").size() > 1024)
    causes.push_back(invalid_value("message", "\"\"", "can have at most 1024 characters"));
  if (core) return;
  // events.k8s.io/v1 is strict.
  if (!has_event_time) causes.push_back(required("eventTime"));
  const std::string type = string_at(object, "type");
  if (type != "Normal" && type != "Warning")
    causes.push_back(invalid_value("type", "\"\"", "has invalid value: " + type));
  if (object.contains("series") && object["series"].is_object()) {
    const json& series = object["series"];
    // json::value would throw on a count of another type: any other type is as invalid as a small count.
    const json& count = series.contains("count") ? series["count"] : json(nullptr);
    if (!count.is_number_integer() || count.get<long long>() < 2)
      causes.push_back(invalid_value("series.count", "\"\"", "should be at least 2"));
    if (!series.contains("lastObservedTime") || series["lastObservedTime"].is_null())
      causes.push_back(required("series.lastObservedTime"));
  }
  for (const char* field : {"firstTimestamp", "lastTimestamp"}) {
    if (object.contains(field) && !object[field].is_null())
      causes.push_back(invalid_value(field, "\"\"", "needs to be unset"));
  }
  if (object.contains("count") && !object["count"].is_null() &&
      !(object["count"].is_number_integer() && object["count"].get<long long>() == 0))
    causes.push_back(invalid_value("count", "\"\"", "needs to be unset"));
  if (object.contains("source") && object["source"].is_object() && !object["source"].empty())
    causes.push_back(invalid_value("source", "\"\"", "needs to be unset"));
}

void validate_rules(const json& object, bool namespaced, std::vector<FieldCause>& causes) {
  const json rules = object.contains("rules") && object["rules"].is_array() ? object["rules"] : json::array();
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const json& rule = rules[i];
    const std::string at = "rules[" + std::to_string(i) + "]";
    const auto list = [&](const char* key) {
      return rule.is_object() && rule.contains(key) && rule[key].is_array() ? rule[key] : json::array();
    };
    if (list("verbs").empty()) causes.push_back(required(at + ".verbs", "verbs must contain at least one value"));
    if (!list("nonResourceURLs").empty()) {
      if (namespaced) {
        causes.push_back(invalid_value(at + ".nonResourceURLs", list("nonResourceURLs").dump(),
                                       "namespaced rules cannot apply to non-resource URLs"));
      }
      if (!list("apiGroups").empty() || !list("resources").empty() || !list("resourceNames").empty()) {
        causes.push_back(invalid_value(at + ".nonResourceURLs", list("nonResourceURLs").dump(),
                                       "rules cannot apply to both regular resources and non-resource URLs"));
      }
      continue;
    }
    if (list("apiGroups").empty())
      causes.push_back(required(at + ".apiGroups", "resource rules must supply at least one api group"));
    if (list("resources").empty())
      causes.push_back(required(at + ".resources", "resource rules must supply at least one resource"));
  }
}

std::string go_role_ref(const json& ref) {
  return "rbac.RoleRef{APIGroup:" + go_quote(string_at(ref, "apiGroup")) +
         ", Kind:" + go_quote(string_at(ref, "kind")) + ", Name:" + go_quote(string_at(ref, "name")) + "}";
}

void validate_binding(const json& object, const json* existing, bool cluster, std::vector<FieldCause>& causes) {
  const json& ref = object_at(object, "roleRef");
  const std::string group = string_at(ref, "apiGroup");
  if (group != kRbacGroup) causes.push_back(not_supported("roleRef.apiGroup", group, {kRbacGroup}));
  const std::string kind = string_at(ref, "kind");
  if (cluster && kind != "ClusterRole") {
    causes.push_back(not_supported("roleRef.kind", kind, {"ClusterRole"}));
  } else if (!cluster && kind != "Role" && kind != "ClusterRole") {
    causes.push_back(not_supported("roleRef.kind", kind, {"Role", "ClusterRole"}));
  }
  if (string_at(ref, "name").empty()) causes.push_back(required("roleRef.name"));
  const json subjects =
      object.contains("subjects") && object["subjects"].is_array() ? object["subjects"] : json::array();
  for (std::size_t i = 0; i < subjects.size(); ++i) {
    const json& subject = subjects[i];
    const std::string at = "subjects[" + std::to_string(i) + "]";
    if (string_at(subject, "name").empty()) causes.push_back(required(at + ".name"));
    const std::string subject_kind = string_at(subject, "kind");
    const std::string api_group = string_at(subject, "apiGroup");
    if (subject_kind == "ServiceAccount") {
      if (!api_group.empty()) causes.push_back(not_supported(at + ".apiGroup", api_group, {""}));
      if (cluster && string_at(subject, "namespace").empty()) causes.push_back(required(at + ".namespace"));
    } else if (subject_kind == "User" || subject_kind == "Group") {
      if (api_group != kRbacGroup) causes.push_back(not_supported(at + ".apiGroup", api_group, {kRbacGroup}));
    } else {
      causes.push_back(not_supported(at + ".kind", subject_kind, {"ServiceAccount", "User", "Group"}));
    }
  }
  if (existing != nullptr && object_at(*existing, "roleRef") != ref)
    causes.push_back(invalid_value("roleRef", go_role_ref(ref), "cannot change roleRef"));
}

void default_binding(json& object) {
  if (object.contains("roleRef") && object["roleRef"].is_object() && string_at(object["roleRef"], "apiGroup").empty())
    object["roleRef"]["apiGroup"] = kRbacGroup;
  if (!object.contains("subjects") || !object["subjects"].is_array()) return;
  for (json& subject : object["subjects"]) {
    if (!subject.is_object()) continue;
    const std::string kind = string_at(subject, "kind");
    if ((kind == "User" || kind == "Group") && string_at(subject, "apiGroup").empty()) subject["apiGroup"] = kRbacGroup;
  }
}

void fold_string_data(json& object) {
  if (!object.contains("stringData")) return;
  if (object["stringData"].is_object()) {
    if (!object.contains("data") || !object["data"].is_object()) object["data"] = json::object();
    for (const auto& [key, value] : object["stringData"].items()) {
      if (value.is_string()) object["data"][key] = base64_encode(value.get<std::string>());
    }
  }
  object.erase("stringData");
}

void crd_status(json& object, Timestamp now) {
  if (!object.contains("spec") || !object["spec"].is_object()) return;
  const json names = object["spec"].value("names", json::object());
  json accepted = names;
  if (!accepted.contains("singular")) {
    accepted["singular"] = lowercase(string_at(names, "kind"));
  }
  if (!accepted.contains("listKind")) accepted["listKind"] = names.value("kind", "") + "List";
  const std::string time = format_rfc3339(now);
  json stored = json::array();
  for (const json& version : object["spec"].value("versions", json::array())) {
    if (version.is_object() && version.value("storage", false)) stored.push_back(version["name"]);
  }
  object["status"] = {{"acceptedNames", accepted},
                      {"conditions",
                       {{{"type", "NamesAccepted"},
                         {"status", "True"},
                         {"lastTransitionTime", time},
                         {"reason", "NoConflicts"},
                         {"message", "no conflicts found"}},
                        {{"type", "Established"},
                         {"status", "True"},
                         {"lastTransitionTime", time},
                         {"reason", "InitialNamesAccepted"},
                         {"message", "the initial names have been accepted"}}}},
                      {"storedVersions", stored}};
}

bool is(const ResourceType& type, const char* group, const char* plural) {
  return type.group == group && type.plural == plural;
}

}  // namespace

MetaRules meta_rules(const ResourceType& request) {
  if (!request.builtin) return {NameRule::dns_subdomain, false};
  if (is(request, "", "namespaces")) return {NameRule::dns_label, true};
  if (is(request, "", "events")) return {NameRule::path_segment, false};
  if (request.group == kRbacGroup) return {NameRule::path_segment, true};
  if (is(request, "coordination.k8s.io", "leases") || is(request, "apiextensions.k8s.io", "customresourcedefinitions"))
    return {NameRule::dns_subdomain, false};
  return {NameRule::dns_subdomain, true};  // secrets, configmaps, serviceaccounts, events.k8s.io events
}

std::optional<std::string> builtin_decode_error(const ResourceType& request, const json& object) {
  if (is(request, "", "secrets")) {
    if (auto error = bytes_map_error(object, "data", "Secret")) return error;
    if (auto error = string_map_error(object, "stringData", "Secret")) return error;
    if (auto error = scalar_error(object, "type", "Secret", "v1.SecretType", false)) return error;
    return scalar_error(object, "immutable", "Secret", "bool", true);
  }
  if (is(request, "", "configmaps")) {
    if (auto error = string_map_error(object, "data", "ConfigMap")) return error;
    if (auto error = bytes_map_error(object, "binaryData", "ConfigMap")) return error;
    return scalar_error(object, "immutable", "ConfigMap", "bool", true);
  }
  if (!request.builtin) return std::nullopt;
  return builtin_shape_error(request.group, request.kind, object);
}

void prepare_for_create(const ResourceType& request, json& object, Timestamp now) {
  if (is(request, "", "secrets")) {
    fold_string_data(object);
    if (string_at(object, "type").empty()) object["type"] = "Opaque";
  } else if (is(request, "", "namespaces")) {
    object["status"] = {{"phase", "Active"}};
    json& spec = object["spec"];
    if (!spec.is_object()) spec = json::object();
    if (!spec.contains("finalizers") || !spec["finalizers"].is_array()) spec["finalizers"] = json::array();
    if (std::find(spec["finalizers"].begin(), spec["finalizers"].end(), "kubernetes") == spec["finalizers"].end())
      spec["finalizers"].push_back("kubernetes");
  } else if (request.group == kRbacGroup &&
             (request.plural == "rolebindings" || request.plural == "clusterrolebindings")) {
    default_binding(object);
  } else if (is(request, "apiextensions.k8s.io", "customresourcedefinitions")) {
    crd_status(object, now);
  }
  if (is(request, "", "namespaces")) {
    json& metadata = object["metadata"];
    if (!metadata.contains("labels") || !metadata["labels"].is_object()) metadata["labels"] = json::object();
    metadata["labels"]["kubernetes.io/metadata.name"] = string_at(metadata, "name");
  }
}

void prepare_for_update(const ResourceType& request, json& object, const json& existing) {
  if (is(request, "", "secrets")) {
    fold_string_data(object);
    if (string_at(object, "type").empty())
      object["type"] = string_at(existing, "type").empty() ? "Opaque" : existing["type"];
  } else if (is(request, "", "namespaces")) {
    // spec.finalizers changes only through /finalize.
    const json old_finalizers = object_at(existing, "spec").value("finalizers", json::array());
    if (!object.contains("spec") || !object["spec"].is_object()) object["spec"] = json::object();
    object["spec"]["finalizers"] = old_finalizers;
    json& metadata = object["metadata"];
    if (!metadata.contains("labels") || !metadata["labels"].is_object()) metadata["labels"] = json::object();
    metadata["labels"]["kubernetes.io/metadata.name"] = string_at(metadata, "name");
  } else if (request.group == kRbacGroup &&
             (request.plural == "rolebindings" || request.plural == "clusterrolebindings")) {
    default_binding(object);
  }
}

std::vector<FieldCause> validate_builtin(const ResourceType& request, const json& object, const json* existing) {
  std::vector<FieldCause> causes;
  if (!request.builtin) return causes;
  if (is(request, "", "secrets")) {
    validate_secret(object, existing, causes);
  } else if (is(request, "", "configmaps")) {
    validate_config_map(object, existing, causes);
  } else if (is(request, "", "namespaces")) {
    validate_namespace(object, causes);
  } else if (request.kind == "Event" && (request.group.empty() || request.group == "events.k8s.io")) {
    if (existing == nullptr) validate_event(request, object, causes);
  } else if (is(request, kRbacGroup.c_str(), "roles") || is(request, kRbacGroup.c_str(), "clusterroles")) {
    validate_rules(object, request.plural == "roles", causes);
  } else if (is(request, kRbacGroup.c_str(), "rolebindings") ||
             is(request, kRbacGroup.c_str(), "clusterrolebindings")) {
    validate_binding(object, existing, request.plural == "clusterrolebindings", causes);
  } else if (is(request, "apiextensions.k8s.io", "customresourcedefinitions")) {
    std::vector<CrdProblem> problems;
    types_from_crd(object, problems);
    for (const CrdProblem& problem : problems) causes.push_back({problem.reason, problem.message, problem.field});
  }
  return causes;
}

}  // namespace k8s4r::kube_sim
