#include "store_util.h"

#include <algorithm>
#include <cstdio>
#include <random>

namespace k8s4r::kube_sim {

using nlohmann::json;

std::string random_uid() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  std::uniform_int_distribution<std::uint64_t> bits;
  const std::uint64_t high = (bits(random) & 0xFFFFFFFFFFFF0FFFULL) | 0x0000000000004000ULL;  // version 4
  const std::uint64_t low = (bits(random) & 0x3FFFFFFFFFFFFFFFULL) | 0x8000000000000000ULL;   // variant 10
  char text[37];
  std::snprintf(text, sizeof text, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(high >> 32),
                static_cast<unsigned>((high >> 16) & 0xFFFF), static_cast<unsigned>(high & 0xFFFF),
                static_cast<unsigned>(low >> 48), static_cast<unsigned long long>(low & 0xFFFFFFFFFFFFULL));
  return text;
}

// generateName suffixes use the same alphabet as kube-apiserver (no vowels).
std::string random_suffix() {
  static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  thread_local std::mt19937 random{std::random_device{}()};
  std::uniform_int_distribution<std::size_t> pick(0, sizeof kAlphabet - 2);
  std::string suffix;
  for (int i = 0; i < 5; ++i) suffix += kAlphabet[pick(random)];
  return suffix;
}

const json& object_at(const json& object, const char* key) {
  static const json empty = json::object();
  return object.is_object() && object.contains(key) && object[key].is_object() ? object[key] : empty;
}

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> segments;
  std::size_t start = 0;
  while (start < path.size()) {
    std::size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    if (slash > start) segments.emplace_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return segments;
}

std::string lowercase(std::string text) {
  for (char& c : text) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return text;
}

std::string string_at(const json& object, const char* key) {
  return object.contains(key) && object[key].is_string() ? object[key].get<std::string>() : "";
}

const json& list_at(const json& object, const char* key) {
  static const json empty = json::array();
  return object.is_object() && object.contains(key) && object[key].is_array() ? object[key] : empty;
}

bool has_finalizers(const json& object) {
  const json& metadata = metadata_of(object);
  return metadata.contains("finalizers") && metadata["finalizers"].is_array() && !metadata["finalizers"].empty();
}

bool has_finalizer(const json& object, const std::string& finalizer) {
  const json& metadata = metadata_of(object);
  if (!metadata.contains("finalizers") || !metadata["finalizers"].is_array()) return false;
  for (const json& item : metadata["finalizers"]) {
    if (item.is_string() && item.get<std::string>() == finalizer) return true;
  }
  return false;
}

bool holds_namespace_open(const json& object) {
  if (object.value("kind", "") != "Namespace" || !object.contains("spec") || !object["spec"].is_object()) return false;
  const json& spec = object["spec"];
  return spec.contains("finalizers") && spec["finalizers"].is_array() && !spec["finalizers"].empty();
}

std::optional<std::uint64_t> parse_version(const std::string& text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  std::uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return value;
}

Result<FieldSelector> checked_field_selector(const ResourceType& type, const std::string& text) {
  auto selector = FieldSelector::parse(text);
  if (!selector) return selector.error();
  for (const auto& requirement : selector.value().requirements()) {
    const std::string& path = requirement.path;
    if (path == "metadata.name" || path == "metadata.namespace") continue;
    if (std::find(type.selectable_fields.begin(), type.selectable_fields.end(), path) != type.selectable_fields.end())
      continue;
    return Error{"fieldSelector", "field label not supported: " + path};
  }
  return selector;
}

// A body naming another apiVersion or kind than the URL is refused, as
// kube-apiserver does; one naming none is taken to mean the URL's.
std::optional<ApiResponse> check_name_and_namespace(const json& metadata, const std::string& name,
                                                    const ResourceType& type, const std::string& namespace_) {
  const std::string body_name = string_at(metadata, "name");
  if (!body_name.empty() && body_name != name) {
    return bad_request("the name of the object (" + body_name + ") does not match the name on the URL (" + name + ")");
  }
  const std::string body_namespace = string_at(metadata, "namespace");
  if (type.namespaced && !body_namespace.empty() && body_namespace != namespace_)
    return bad_request("the namespace of the provided object does not match the namespace sent on the request");
  return std::nullopt;
}

std::optional<ApiResponse> check_type_meta(const json& body, const ResourceType& type) {
  const std::string api_version = string_at(body, "apiVersion");
  const std::string kind = string_at(body, "kind");
  if (!api_version.empty() && api_version != type.api_version()) {
    return bad_request("the API version in the data (" + api_version + ") does not match the expected API version (" +
                       type.api_version() + ")");
  }
  if (!kind.empty() && kind != type.kind) {
    return bad_request("the kind in the data (" + kind + ") does not match the expected kind (" + type.kind + ")");
  }
  return std::nullopt;
}

}  // namespace k8s4r::kube_sim
