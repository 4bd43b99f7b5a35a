#include "k8s4r/kube_sim/object_meta_validation.h"

#include "go_text.h"
#include "k8s4r/common/rfc3339.h"
#include "store_util.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

// The messages of k8s.io/apimachinery/pkg/util/validation, word for word
// (including the double space before each "or" of the examples).
constexpr const char* kSubdomainMessage =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
constexpr const char* kLabelMessage =
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with "
    "an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
constexpr const char* kQualifiedNamePart =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character "
    "(e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
constexpr const char* kLabelValueMessage =
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
constexpr std::size_t kAnnotationsLimit = 256 * 1024;

bool lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool alnum(char c) { return lower_alnum(c) || (c >= 'A' && c <= 'Z'); }

bool is_dns_label(const std::string& text) {
  if (text.empty() || text.size() > 63) return false;
  for (char c : text) {
    if (!lower_alnum(c) && c != '-') return false;
  }
  return lower_alnum(text.front()) && lower_alnum(text.back());
}

bool is_dns_subdomain(const std::string& text) {
  if (text.empty()) return false;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = text.find('.', start);
    const std::string part = text.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    // Each dot-separated part is a label without the 63-character limit.
    if (part.empty() || !lower_alnum(part.front()) || !lower_alnum(part.back())) return false;
    for (char c : part) {
      if (!lower_alnum(c) && c != '-') return false;
    }
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

std::vector<std::string> subdomain_problems(const std::string& text) {
  std::vector<std::string> problems;
  if (text.size() > 253) problems.push_back("must be no more than 253 characters");
  if (!is_dns_subdomain(text)) problems.push_back(kSubdomainMessage);
  return problems;
}

// ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]
bool is_qualified_part(const std::string& text) {
  if (text.empty() || !alnum(text.front()) || !alnum(text.back())) return false;
  for (char c : text) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

FieldCause invalid_value(const std::string& field, const std::string& shown_value, const std::string& detail) {
  return {"FieldValueInvalid", "Invalid value: " + shown_value + ": " + detail, field};
}

std::string go_bool_pointer(const json& value) {
  return value.is_boolean() ? (value.get<bool>() ? "(*bool)(0xc000010001)" : "(*bool)(0xc000010000)") : "(*bool)(nil)";
}

std::string go_owner_references(const json& references) {
  std::string text = "[]v1.OwnerReference{";
  bool first = true;
  for (const json& reference : references) {
    if (!reference.is_object()) continue;
    text += std::string(first ? "" : ", ") +
            "v1.OwnerReference{APIVersion:" + go_quote(reference.value("apiVersion", "")) +
            ", Kind:" + go_quote(reference.value("kind", "")) + ", Name:" + go_quote(reference.value("name", "")) +
            ", UID:" + go_quote(reference.value("uid", "")) +
            ", Controller:" + go_bool_pointer(reference.value("controller", json())) +
            ", BlockOwnerDeletion:" + go_bool_pointer(reference.value("blockOwnerDeletion", json())) + "}";
    first = false;
  }
  return text + "}";
}

const std::set<std::string> kStandardFinalizers = {"kubernetes", "orphan", "foregroundDeletion"};

}  // namespace

std::vector<std::string> qualified_name_problems(const std::string& value) {
  std::vector<std::string> problems;
  std::string name = value;
  const std::size_t slash = value.find('/');
  if (slash != std::string::npos) {
    if (value.find('/', slash + 1) != std::string::npos) {
      return {std::string("a qualified name ") + kQualifiedNamePart +
              " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"};
    }
    const std::string prefix = value.substr(0, slash);
    name = value.substr(slash + 1);
    if (prefix.empty()) {
      problems.push_back("prefix part must be non-empty");
    } else {
      for (const std::string& problem : subdomain_problems(prefix)) problems.push_back("prefix part " + problem);
    }
  }
  if (name.empty()) {
    problems.push_back("name part must be non-empty");
  } else if (name.size() > 63) {
    problems.push_back("name part must be no more than 63 characters");
  }
  if (!is_qualified_part(name)) problems.push_back(std::string("name part ") + kQualifiedNamePart);
  return problems;
}

std::vector<std::string> name_problems(const std::string& name, NameRule rule) {
  switch (rule) {
    case NameRule::dns_subdomain:
      return subdomain_problems(name);
    case NameRule::dns_label: {
      std::vector<std::string> problems;
      if (name.size() > 63) problems.push_back("must be no more than 63 characters");
      if (!is_dns_label(name)) problems.push_back(is_dns_subdomain(name) ? "must not contain dots" : kLabelMessage);
      return problems;
    }
    case NameRule::path_segment: {
      if (name == "." || name == "..") return {"may not be '" + name + "'"};
      std::vector<std::string> problems;
      if (name.find('/') != std::string::npos) problems.push_back("may not contain '/'");
      if (name.find('%') != std::string::npos) problems.push_back("may not contain '%'");
      return problems;
    }
  }
  return {};
}

std::optional<std::string> metadata_type_error(const json& object, const std::string& kind, bool builtin) {
  if (!object.contains("metadata") || object["metadata"].is_null()) return std::nullopt;
  const json& metadata = object["metadata"];
  if (!metadata.is_object()) {
    return builtin ? unmarshal_error(metadata, kind + ".metadata", "v1.ObjectMeta")
                   : "json: cannot unmarshal " + json_kind(metadata) + " into Go value of type v1.ObjectMeta";
  }
  const std::string base = builtin ? "metadata." : "";
  const auto at = [&](const std::string& go_struct, const std::string& field) {
    return go_struct + "." + base + field;
  };
  static const std::map<std::string, std::string> kStrings = {
      {"name", "string"},     {"generateName", "string"},    {"namespace", "string"},
      {"selfLink", "string"}, {"resourceVersion", "string"}, {"uid", "types.UID"}};
  for (const auto& [field, value] : metadata.items()) {
    if (value.is_null()) continue;
    if (auto found = kStrings.find(field); found != kStrings.end()) {
      if (!value.is_string()) return unmarshal_error(value, at("ObjectMeta", field), found->second);
    } else if (field == "generation" || field == "deletionGracePeriodSeconds") {
      if (!value.is_number_integer()) return unmarshal_error(value, at("ObjectMeta", field), "int64");
    } else if (field == "creationTimestamp" || field == "deletionTimestamp") {
      // metav1.Time decodes itself, so its error names no struct field.
      if (!value.is_string()) return "json: cannot unmarshal " + json_kind(value) + " into Go value of type string";
    } else if (field == "labels" || field == "annotations") {
      if (!value.is_object()) return unmarshal_error(value, at("ObjectMeta", field), "map[string]string");
      for (const auto& [key, item] : value.items()) {
        if (!item.is_string() && !item.is_null()) return unmarshal_error(item, at("ObjectMeta", field), "string");
      }
    } else if (field == "finalizers") {
      if (!value.is_array()) return unmarshal_error(value, at("ObjectMeta", field), "[]string");
      for (const json& item : value) {
        if (!item.is_string()) return unmarshal_error(item, at("ObjectMeta", field), "string");
      }
    } else if (field == "ownerReferences") {
      if (!value.is_array()) return unmarshal_error(value, at("ObjectMeta", field), "[]v1.OwnerReference");
      for (const json& reference : value) {
        if (!reference.is_object()) return unmarshal_error(reference, at("ObjectMeta", field), "v1.OwnerReference");
        for (const auto& [key, item] : reference.items()) {
          if (item.is_null()) continue;
          const bool flag = key == "controller" || key == "blockOwnerDeletion";
          if (flag && !item.is_boolean())
            return unmarshal_error(item, at("OwnerReference", "ownerReferences." + key), "bool");
          if (!flag && !item.is_string())
            return unmarshal_error(item, at("OwnerReference", "ownerReferences." + key),
                                   key == "uid" ? "types.UID" : "string");
        }
      }
    } else if (field == "managedFields") {
      if (!value.is_array()) return unmarshal_error(value, at("ObjectMeta", field), "[]v1.ManagedFieldsEntry");
      for (const json& entry : value) {
        if (!entry.is_object()) return unmarshal_error(entry, at("ObjectMeta", field), "v1.ManagedFieldsEntry");
        for (const char* key : {"manager", "operation", "apiVersion", "fieldsType", "subresource"}) {
          if (entry.contains(key) && !entry[key].is_null() && !entry[key].is_string()) {
            return unmarshal_error(entry[key], at("ManagedFieldsEntry", field + "." + key),
                                   std::string(key) == "operation" ? "v1.ManagedFieldsOperationType" : "string");
          }
        }
        if (entry.contains("time") && !entry["time"].is_null()) {
          // metav1.Time decodes RFC 3339 or fails the whole object.
          const json& time = entry["time"];
          if (!time.is_string()) return unmarshal_error(time, at("ManagedFieldsEntry", field + ".time"), "v1.Time");
          const std::string text = time.get<std::string>();
          if (!parse_rfc3339(text))
            return "parsing time " + go_quote(text) + " as \"2006-01-02T15:04:05Z07:00\": cannot parse " +
                   go_quote(text) + " as \"2006\"";
        }
      }
    }
  }
  return std::nullopt;
}

std::vector<FieldCause> validate_object_meta(const json& metadata, const MetaRules& rules) {
  std::vector<FieldCause> causes;
  const auto text = [&](const char* key) {
    return metadata.contains(key) && metadata[key].is_string() ? metadata[key].get<std::string>() : std::string();
  };
  // generateName is checked as a prefix: a trailing '-' is allowed (the
  // real check masks the last two characters).
  if (const std::string prefix = text("generateName"); !prefix.empty()) {
    std::string masked = prefix;
    if (masked.size() > 1 && masked.back() == '-') masked = masked.substr(0, masked.size() - 2) + "a";
    for (const std::string& problem : name_problems(masked, rules.name))
      causes.push_back(invalid_value("metadata.generateName", go_quote(prefix), problem));
  }
  const std::string name = text("name");
  if (name.empty()) {
    causes.push_back({"FieldValueRequired", "Required value: name or generateName is required", "metadata.name"});
  } else {
    for (const std::string& problem : name_problems(name, rules.name))
      causes.push_back(invalid_value("metadata.name", go_quote(name), problem));
  }
  if (metadata.contains("generation") && metadata["generation"].is_number_integer() &&
      metadata["generation"].get<std::int64_t>() < 0) {
    causes.push_back(
        invalid_value("metadata.generation", metadata["generation"].dump(), "must be greater than or equal to 0"));
  }
  if (metadata.contains("labels") && metadata["labels"].is_object()) {
    for (const auto& [key, value] : metadata["labels"].items()) {
      for (const std::string& problem : qualified_name_problems(key))
        causes.push_back(invalid_value("metadata.labels", go_quote(key), problem));
      const std::string label = value.is_string() ? value.get<std::string>() : "";
      if (label.size() > 63)
        causes.push_back(invalid_value("metadata.labels", go_quote(label), "must be no more than 63 characters"));
      if (!label.empty() && !is_qualified_part(label))
        causes.push_back(invalid_value("metadata.labels", go_quote(label), kLabelValueMessage));
    }
  }
  if (metadata.contains("annotations") && metadata["annotations"].is_object()) {
    std::size_t total = 0;
    for (const auto& [key, value] : metadata["annotations"].items()) {
      for (const std::string& problem : qualified_name_problems(lowercase(key)))
        causes.push_back(invalid_value("metadata.annotations", go_quote(key), problem));
      total += key.size() + (value.is_string() ? value.get<std::string>().size() : 0);
    }
    if (total > kAnnotationsLimit) {
      causes.push_back({"FieldValueTooLong",
                        "Too long: may not be more than " + std::to_string(kAnnotationsLimit) + " bytes",
                        "metadata.annotations"});
    }
  }
  if (metadata.contains("ownerReferences") && metadata["ownerReferences"].is_array()) {
    const json& references = metadata["ownerReferences"];
    std::string controller;
    for (const json& reference : references) {
      if (!reference.is_object()) continue;
      const std::string api_version = reference.value("apiVersion", "");
      const std::size_t slash = api_version.find('/');
      const std::string version =
          slash == std::string::npos
              ? api_version
              : (api_version.find('/', slash + 1) == std::string::npos ? api_version.substr(slash + 1) : "");
      if (version.empty())
        causes.push_back(
            invalid_value("metadata.ownerReferences.apiVersion", go_quote(api_version), "version must not be empty"));
      if (reference.value("kind", "").empty())
        causes.push_back(invalid_value("metadata.ownerReferences.kind", "\"\"", "kind must not be empty"));
      if (reference.value("name", "").empty())
        causes.push_back(invalid_value("metadata.ownerReferences.name", "\"\"", "name must not be empty"));
      if (reference.value("uid", "").empty())
        causes.push_back(invalid_value("metadata.ownerReferences.uid", "\"\"", "uid must not be empty"));
      if (api_version == "v1" && reference.value("kind", "") == "Event") {
        causes.push_back(invalid_value("metadata.ownerReferences", go_owner_references(json::array({reference})),
                                       "/v1, Kind=Event is disallowed from being an owner"));
      }
      if (reference.value("controller", false) == true) {
        const std::string current = reference.value("kind", "") + "/" + reference.value("name", "");
        if (controller.empty()) {
          controller = current;
        } else {
          causes.push_back(
              invalid_value("metadata.ownerReferences", go_owner_references(references),
                            "Only one reference can have Controller set to true. Found \"true\" in references for " +
                                controller + " and " + current));
        }
      }
    }
  }
  if (metadata.contains("finalizers") && metadata["finalizers"].is_array()) {
    const json& finalizers = metadata["finalizers"];
    bool orphan = false, foreground = false;
    for (std::size_t i = 0; i < finalizers.size(); ++i) {
      const std::string finalizer = finalizers[i].is_string() ? finalizers[i].get<std::string>() : "";
      for (const std::string& problem : qualified_name_problems(finalizer))
        causes.push_back(invalid_value("metadata.finalizers", go_quote(finalizer), problem));
      orphan = orphan || finalizer == "orphan";
      foreground = foreground || finalizer == "foregroundDeletion";
      if (rules.standard_finalizers_only && finalizer.find('/') == std::string::npos &&
          !kStandardFinalizers.count(finalizer)) {
        causes.push_back(invalid_value("metadata.finalizers[" + std::to_string(i) + "]", go_quote(finalizer),
                                       "name is neither a standard finalizer name nor is it fully qualified"));
      }
    }
    if (orphan && foreground) {
      std::string listed = "[]string{";
      for (std::size_t i = 0; i < finalizers.size(); ++i)
        listed += (i ? ", " : "") + go_quote(finalizers[i].is_string() ? finalizers[i].get<std::string>() : "");
      causes.push_back(invalid_value("metadata.finalizers", listed + "}",
                                     "finalizer orphan and foregroundDeletion cannot be both set"));
    }
  }
  if (metadata.contains("managedFields") && metadata["managedFields"].is_array()) {
    const json& entries = metadata["managedFields"];
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const json& entry = entries[i];
      if (!entry.is_object()) continue;
      const std::string at = "metadata.managedFields[" + std::to_string(i) + "]";
      const std::string operation = entry.value("operation", "");
      if (operation != "Apply" && operation != "Update")
        causes.push_back(invalid_value(at + ".operation", go_quote(operation), "must be `Apply` or `Update`"));
      const std::string fields_type = entry.value("fieldsType", "");
      if (fields_type != "FieldsV1")
        causes.push_back(invalid_value(at + ".fieldsType", go_quote(fields_type), "must be `FieldsV1`"));
      if (entry.value("manager", "").size() > 128)
        causes.push_back({"FieldValueTooLong", "Too long: may not be more than 128 bytes", at + ".manager"});
    }
  }
  return causes;
}

std::optional<std::string> deduplicate_owner_references(json& metadata) {
  if (!metadata.contains("ownerReferences") || !metadata["ownerReferences"].is_array()) return std::nullopt;
  json unique = json::array();
  std::vector<std::string> repeated;
  for (const json& reference : metadata["ownerReferences"]) {
    if (std::find(unique.begin(), unique.end(), reference) != unique.end()) {
      const std::string uid = reference.is_object() ? reference.value("uid", "") : "";
      if (std::find(repeated.begin(), repeated.end(), uid) == repeated.end()) repeated.push_back(uid);
      continue;
    }
    unique.push_back(reference);
  }
  if (repeated.empty()) return std::nullopt;
  metadata["ownerReferences"] = unique;
  std::string uids;
  for (const std::string& uid : repeated) uids += (uids.empty() ? "" : ", ") + uid;
  return ".metadata.ownerReferences contains duplicate entries; API server dedups owner references in 1.20+, and may "
         "reject such requests as early as 1.24; please fix your requests; duplicate UID(s) observed: " +
         uids;
}

std::vector<std::string> finalizer_warnings(const json& metadata, const json* old_metadata) {
  std::set<std::string> existing;
  if (old_metadata != nullptr && old_metadata->contains("finalizers") && (*old_metadata)["finalizers"].is_array()) {
    for (const json& item : (*old_metadata)["finalizers"])
      if (item.is_string()) existing.insert(item.get<std::string>());
  }
  std::vector<std::string> warnings;
  if (!metadata.contains("finalizers") || !metadata["finalizers"].is_array()) return warnings;
  for (const json& item : metadata["finalizers"]) {
    if (!item.is_string()) continue;
    const std::string finalizer = item.get<std::string>();
    if (existing.count(finalizer) || kStandardFinalizers.count(finalizer)) continue;
    if (finalizer.find('/') != std::string::npos) continue;
    warnings.push_back("metadata.finalizers: " + go_quote(finalizer) +
                       (finalizer.find('.') != std::string::npos
                            ? ": prefer a domain-qualified finalizer name including a path (/) to avoid accidental "
                              "conflicts with other finalizer writers"
                            : ": prefer a domain-qualified finalizer name to avoid accidental conflicts with other "
                              "finalizer writers"));
  }
  return warnings;
}

}  // namespace k8s4r::kube_sim
