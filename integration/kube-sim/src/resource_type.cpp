#include "k8s4r/kube_sim/resource_type.h"

#include "k8s4r/kube_sim/schema.h"
#include "store_util.h"

#include <algorithm>
#include <cctype>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

bool dns_subdomain(const std::string& text) {
  if (text.empty() || text.size() > 253) return false;
  return std::all_of(text.begin(), text.end(),
                     [](char c) {
                       return std::islower(static_cast<unsigned char>(c)) ||
                              std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.';
                     }) &&
         std::isalnum(static_cast<unsigned char>(text.front())) &&
         std::isalnum(static_cast<unsigned char>(text.back()));
}

std::vector<std::string> strings(const json& list) {
  std::vector<std::string> values;
  if (list.is_array()) {
    for (const json& item : list) {
      if (item.is_string()) values.push_back(item.get<std::string>());
    }
  }
  return values;
}

}  // namespace

PrinterColumn age_column() {
  return {"Age",
          "date",
          "",
          "CreationTimestamp is a timestamp representing the server time when this object was created.",
          ".metadata.creationTimestamp",
          0};
}

std::vector<ResourceType> types_from_crd(const json& crd, std::vector<CrdProblem>& problems) {
  const auto problem = [&](std::string field, std::string message, std::string reason = "FieldValueInvalid") {
    problems.push_back({std::move(field), std::move(message), std::move(reason)});
  };
  std::vector<ResourceType> types;
  const json& spec = crd.contains("spec") && crd["spec"].is_object() ? crd["spec"] : json::object();
  const json& names = spec.contains("names") && spec["names"].is_object() ? spec["names"] : json::object();
  const std::string group = spec.value("group", "");
  const std::string plural = names.value("plural", "");
  const std::string kind = names.value("kind", "");
  const std::string scope = spec.value("scope", "");
  const std::string name = crd.contains("metadata") ? crd["metadata"].value("name", "") : "";

  if (group.empty())
    problem("spec.group", "Required value", "FieldValueRequired");
  else if (!dns_subdomain(group) || group.find('.') == std::string::npos)
    problem("spec.group", "Invalid value: \"" + group + "\": should be a domain with at least one dot");
  if (plural.empty())
    problem("spec.names.plural", "Required value", "FieldValueRequired");
  else if (!dns_subdomain(plural) || plural.find('.') != std::string::npos)
    problem("spec.names.plural", "Invalid value: \"" + plural + "\": a lowercase RFC 1123 label");
  if (kind.empty()) problem("spec.names.kind", "Required value", "FieldValueRequired");
  if (scope != "Namespaced" && scope != "Cluster") {
    problem("spec.scope", "Unsupported value: \"" + scope + "\": supported values: \"Cluster\", \"Namespaced\"",
            "FieldValueNotSupported");
  }
  if (!plural.empty() && !group.empty() && name != plural + "." + group) {
    problem("metadata.name", "Invalid value: \"" + name + "\": must be spec.names.plural+\".\"+spec.group");
  }
  const json& versions = spec.contains("versions") && spec["versions"].is_array() ? spec["versions"] : json::array();
  if (versions.empty())
    problem("spec.versions", "Invalid value: null: must have exactly one version marked as storage version");
  int storage_versions = 0;
  for (std::size_t i = 0; i < versions.size(); ++i) {
    const json& version = versions[i];
    const std::string at = "spec.versions[" + std::to_string(i) + "]";
    if (version.value("storage", false)) ++storage_versions;
    const json schema = version.contains("schema") && version["schema"].contains("openAPIV3Schema")
                            ? version["schema"]["openAPIV3Schema"]
                            : json();
    if (schema.is_null()) {
      problem(at + ".schema.openAPIV3Schema", "Required value: schemas are required", "FieldValueRequired");
      continue;
    }
    for (const std::string& error : structural_errors(schema, at + ".schema.openAPIV3Schema")) {
      problem(at + ".schema.openAPIV3Schema", error);
    }
    if (!version.value("served", false)) continue;
    ResourceType type;
    type.group = group;
    type.version = version.value("name", "");
    type.plural = plural;
    type.singular = names.value("singular", "");
    if (type.singular.empty()) {
      type.singular = lowercase(kind);
    }
    type.kind = kind;
    type.list_kind = names.value("listKind", kind + "List");
    type.namespaced = scope == "Namespaced";
    type.short_names = strings(names.value("shortNames", json::array()));
    type.categories = strings(names.value("categories", json::array()));
    type.status_subresource = version.contains("subresources") && version["subresources"].contains("status");
    type.schema = std::make_shared<const json>(schema);
    for (const json& column : version.value("additionalPrinterColumns", json::array())) {
      type.columns.push_back(
          {column.value("name", ""), column.value("type", "string"), column.value("format", ""),
           column.value("description", ""), column.value("jsonPath", ""),
           column.contains("priority") && column["priority"].is_number_integer() ? column["priority"].get<int>() : 0});
    }
    if (!version.contains("additionalPrinterColumns")) type.columns.push_back(age_column());
    for (const json& field : version.value("selectableFields", json::array())) {
      std::string path = field.value("jsonPath", "");
      if (!path.empty() && path.front() == '.') path.erase(0, 1);
      type.selectable_fields.push_back(path);
    }
    types.push_back(std::move(type));
  }
  if (!versions.empty() && storage_versions != 1) {
    problem("spec.versions", "Invalid value: must have exactly one version marked as storage version");
  }
  return types;
}

}  // namespace k8s4r::kube_sim
