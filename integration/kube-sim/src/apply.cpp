// Server-side apply (PATCH application/apply-patch+yaml) and the
// metadata.managedFields every other write keeps: the Store's side of
// managed_fields.h. An apply creates the object when it does not exist
// (201), refuses with 409 and the conflicting fields unless forced, and
// otherwise goes through the same update path (validation, admission,
// no-op detection) as a PUT.
#include "k8s4r/common/json_depth.h"
#include "k8s4r/kube_sim/store.h"

#include "managed_fields.h"
#include "store_util.h"

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <regex>
#include <variant>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

// Bounds the work of reading one YAML document (values, weighted by their
// depth): aliases can repeat a node exponentially ("billion laughs"), as
// go-yaml refuses with "excessive aliasing".
constexpr std::size_t kMaxYamlValues = 1000000;

// A YAML node as JSON, with YAML 1.1's plain-scalar types as sigs.k8s.io/yaml
// reads them; quoted scalars stay strings. `path` holds the nodes above: an
// alias to one of them would recurse forever (yaml-cpp builds `&x [*x]` as a
// node that contains itself).
json yaml_to_json(const YAML::Node& node, std::vector<YAML::Node>& path, std::size_t& values) {
  // Each value counts once plus once per node above it (the cycle check
  // below looks at each), so deep nesting cannot make the check quadratic.
  values += 1 + path.size();
  if (values > kMaxYamlValues) throw std::length_error("excessive aliasing");
  for (const YAML::Node& above : path) {
    if (above.is(node)) throw std::length_error("an alias refers to a node that contains it");
  }
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      path.push_back(node);
      json out = json::object();
      for (const auto& item : node) out[item.first.as<std::string>()] = yaml_to_json(item.second, path, values);
      path.pop_back();
      return out;
    }
    case YAML::NodeType::Sequence: {
      path.push_back(node);
      json out = json::array();
      for (const auto& item : node) out.push_back(yaml_to_json(item, path, values));
      path.pop_back();
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string text = node.Scalar();
      // Quoted, or too long to be anything but a string (and std::regex
      // recurses per character).
      if (node.Tag() == "!" || text.size() > 64) return text;
      static const std::regex null_text("~|null|Null|NULL|");
      static const std::regex true_text("true|True|TRUE|yes|Yes|YES|on|On|ON");
      static const std::regex false_text("false|False|FALSE|no|No|NO|off|Off|OFF");
      static const std::regex integer("[-+]?(0|[1-9][0-9]*)");
      static const std::regex number("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
      if (std::regex_match(text, null_text)) return nullptr;
      if (std::regex_match(text, true_text)) return true;
      if (std::regex_match(text, false_text)) return false;
      if (text.size() <= 19 && std::regex_match(text, integer)) return std::stoll(text);
      if (std::regex_match(text, number)) return std::stod(text);
      return text;
    }
    default:
      return nullptr;
  }
}

// The body of an apply: JSON (what kubectl and client-go send) or YAML.
std::variant<json, std::string> parse_apply_body(const std::string& text) {
  if (json_nested_deeper_than(text, kMaxJsonDepth))
    return "json: exceeded max depth of " + std::to_string(kMaxJsonDepth);
  json body = json::parse(text, nullptr, false);
  if (!body.is_discarded()) return body;
  try {
    // yaml-cpp refuses nesting past its own depth guard (DeepRecursion).
    std::vector<YAML::Node> path;
    std::size_t values = 0;
    return yaml_to_json(YAML::Load(text), path, values);
  } catch (const YAML::Exception& error) {
    return "error converting YAML to JSON: yaml: line " + std::to_string(error.mark.line + 1) + ": " + error.msg;
  } catch (const std::length_error& error) {
    return std::string("error converting YAML to JSON: yaml: ") + error.what();
  } catch (const std::exception&) {
    return std::string("error converting YAML to JSON: yaml: a value out of range");
  }
}

// "group/version, Kind=Kind", as GroupVersionKind prints itself.
std::string gvk_string(const std::string& api_version, const std::string& kind) {
  const auto slash = api_version.find('/');
  const std::string group = slash == std::string::npos ? "" : api_version.substr(0, slash);
  const std::string version = slash == std::string::npos ? api_version : api_version.substr(slash + 1);
  return group + "/" + version + ", Kind=" + kind;
}

FieldWriter writer_of(const ResourceType& type, const WriteOptions& options, bool status_subresource) {
  return {options.field_manager, type.api_version(), status_subresource ? "status" : ""};
}

ManagedFields managed_of(const json& object) {
  const json& metadata = metadata_of(object);
  if (!metadata.contains("managedFields")) return {};
  auto decoded = decode_managed_fields(metadata["managedFields"]);
  return decoded ? std::move(decoded).value() : ManagedFields{};
}

void set_managed(json& object, const ManagedFields& managed) {
  if (!object["metadata"].is_object()) object["metadata"] = json::object();
  if (managed.empty()) {
    object["metadata"].erase("managedFields");
  } else {
    object["metadata"]["managedFields"] = encode_managed_fields(managed);
  }
}

constexpr const char* kLastApplied = "kubectl.kubernetes.io/last-applied-configuration";

// The conflicts kubectl's client-side apply does not account for: those
// whose live value is not the one recorded for it in the last-applied
// annotation (lastappliedmanager.go forces the others).
std::vector<FieldConflict> not_last_applied(const json& live, const std::vector<FieldConflict>& conflicts) {
  const json& annotations = object_at(metadata_of(live), "annotations");
  const std::string recorded = string_at(annotations, kLastApplied);
  if (recorded.empty() || json_nested_deeper_than(recorded, kMaxJsonDepth)) return conflicts;
  const json last_applied = json::parse(recorded, nullptr, false);
  if (last_applied.is_discarded()) return conflicts;
  std::vector<FieldConflict> left;
  for (const FieldConflict& conflict : conflicts) {
    const json* before = value_at(last_applied, conflict.path);
    const json* now = value_at(live, conflict.path);
    if (before == nullptr || now == nullptr || *before != *now) left.push_back(conflict);
  }
  return left;
}

// After kubectl's server-side apply, an object that carries the client-side
// annotation gets it rewritten to what was applied, so a later client-side
// apply still knows what it set (lastappliedupdater.go).
void keep_last_applied(json& object, json config) {
  if (!object_at(metadata_of(object), "annotations").contains(kLastApplied)) return;
  if (config.contains("metadata") && config["metadata"].is_object() && config["metadata"].contains("annotations") &&
      config["metadata"]["annotations"].is_object()) {
    config["metadata"]["annotations"].erase(kLastApplied);
    if (config["metadata"]["annotations"].empty()) config["metadata"].erase("annotations");
  }
  object["metadata"]["annotations"][kLastApplied] = config.dump() + "\n";
}

// 1.32 answers a configuration that does not fit the schema with a 500.
ApiResponse typed_patch_failure(const std::string& namespace_, const std::string& name, const ResourceType& type,
                                const Error& error) {
  return {500,
          status_body(500, "InternalError",
                      "failed to create typed patch object (" + namespace_ + "/" + name + "; " +
                          gvk_string(type.api_version(), type.kind) + "): " + error.to_string()),
          {}};
}

}  // namespace

void Store::track_fields(const Target& target, json& object, const json* existing, bool status_subresource,
                         const WriteOptions& options) const {
  if (options.managed_fields_set) return;
  const ResourceType& type = target.type;
  // The entries this write starts from: those the request sets on purpose
  // (a non-empty, valid list on the main resource), none when it asks for a
  // reset ([] or [{}]), else the live object's.
  ManagedFields managed;
  const json& metadata = metadata_of(object);
  const bool reset = !status_subresource && resets_managed_fields(metadata);
  bool from_request = false;
  if (!status_subresource && !reset && metadata.contains("managedFields")) {
    auto decoded = decode_managed_fields(metadata["managedFields"]);
    if (decoded && !decoded.value().empty()) {
      managed = std::move(decoded).value();
      from_request = true;
    }
  }
  const bool from_existing = !reset && !from_request && existing != nullptr;
  if (from_existing) managed = managed_of(*existing);
  auto tracked =
      track_update(apply_schema_for(type), existing, object, managed, writer_of(type, options, status_subresource),
                   field_scope(type.status_subresource, status_subresource), format_rfc3339(clock_()));
  if (!tracked) {
    // As kube-apiserver's UpdateNoErrors: the write goes on, untracked.
    spdlog::warn("managedFields of {} {} not tracked: {}", type.qualified_plural(), string_at(metadata, "name"),
                 tracked.error().to_string());
    object["metadata"].erase("managedFields");
    return;
  }
  if (from_existing && tracked.value() == managed) {
    // The common steady write (a controller setting its own fields again
    // within the second): the stored entries stand as they are, unencoded.
    const json& stored = metadata_of(*existing);
    if (stored.contains("managedFields")) {
      object["metadata"]["managedFields"] = stored["managedFields"];
    } else {
      object["metadata"].erase("managedFields");
    }
    return;
  }
  set_managed(object, tracked.value());
}

std::variant<json, ApiResponse> Store::apply_config_of(const Target& target, const std::string& name,
                                                       const std::string& patch) {
  const ResourceType& type = target.type;
  auto parsed = parse_apply_body(patch);
  if (auto* error = std::get_if<std::string>(&parsed)) return bad_request("error decoding YAML: " + *error);
  json config = std::get<json>(std::move(parsed));
  if (!config.is_object()) {
    return bad_request("error decoding YAML: json: cannot unmarshal " +
                       std::string(config.is_array() ? "array" : "value") +
                       " into Go value of type map[string]interface {}");
  }
  if (config.contains("metadata") && config["metadata"].is_object() && config["metadata"].contains("managedFields") &&
      !config["metadata"]["managedFields"].is_null()) {
    return bad_request("metadata.managedFields must be nil");
  }
  const std::string api_version = string_at(config, "apiVersion"), kind = string_at(config, "kind");
  if (api_version != type.api_version() || kind != type.kind)
    return bad_request("invalid object type: " + gvk_string(api_version, kind));
  if (auto error = decode_errors(type, config, false)) return *error;
  if (auto mismatch =
          check_name_and_namespace(metadata_of(config), name, type, type.namespaced ? target.namespace_ : ""))
    return *mismatch;
  return config;
}

ApiResponse Store::apply_locked(const Target& target, const std::string& name, json config, bool status_subresource,
                                const WriteOptions& options) {
  const ResourceType& type = target.type;
  const std::string body_name = string_at(metadata_of(config), "name");
  const std::string namespace_ = type.namespaced ? target.namespace_ : "";

  Resource* resource = resource_of(type);
  if (resource == nullptr) return not_found_path(type.key());
  auto found = resource->objects.find(object_key(namespace_, name));
  const bool exists = found != resource->objects.end();
  if (!exists && status_subresource) return not_found(subject(type, name));
  if (!exists && body_name.empty()) {
    return bad_request("the name of the object (" + name + " based on URL) was undeterminable: name must be provided");
  }
  const json live = exists ? for_version(*found->second, type) : json::object();

  ManagedFields managed = exists ? managed_of(live) : ManagedFields{};
  auto applied =
      apply_config(apply_schema_for(type), live, config, managed, writer_of(type, options, status_subresource),
                   options.force, field_scope(type.status_subresource, status_subresource), format_rfc3339(clock_()));
  if (!applied) return typed_patch_failure(namespace_, name, type, applied.error());

  if (!applied.value().conflicts.empty() && !options.force && options.field_manager == "kubectl") {
    // Moving from client-side to server-side apply: kubectl takes over the
    // fields it applied before without a conflict; only the others are one.
    std::vector<FieldConflict> left = not_last_applied(live, applied.value().conflicts);
    if (left.empty()) {
      applied =
          apply_config(apply_schema_for(type), live, config, managed, writer_of(type, options, status_subresource),
                       true, field_scope(type.status_subresource, status_subresource), format_rfc3339(clock_()));
      if (!applied) return typed_patch_failure(namespace_, name, type, applied.error());
    } else {
      applied.value().conflicts = std::move(left);
    }
  }
  ApplyResult& result = applied.value();
  if (!result.conflicts.empty()) {
    return {409,
            status_body(409, "Conflict", conflict_message(result.conflicts),
                        json{{"causes", conflict_causes(result.conflicts)}}),
            {}};
  }
  json object = std::move(result.object);
  set_managed(object, result.managed);
  if (options.field_manager == "kubectl") keep_last_applied(object, config);
  WriteOptions apply_options = options;
  apply_options.managed_fields_set = true;
  apply_options.from_patch = true;
  if (!exists) {
    object["metadata"]["name"] = name;
    if (type.namespaced) object["metadata"]["namespace"] = namespace_;
    return create_locked(target, std::move(object), apply_options);
  }
  return update_locked(target, name, std::move(object), status_subresource, apply_options, true);
}

}  // namespace k8s4r::kube_sim
