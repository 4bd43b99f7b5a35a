#include "k8s4r/bridge/cached_fields.h"

#include <array>
#include <string_view>

namespace k8s4r::bridge {

void keep_cached_fields(nlohmann::json& object) {
  if (!object.is_object()) return;
  static constexpr std::array<std::string_view, 4> kTop{"apiVersion", "kind", "spec", "status"};
  static constexpr std::array<std::string_view, 8> kMetadata{
      "name",      "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
      "finalizers"};
  const auto keep_only = [](nlohmann::json& value, const auto& keys) {
    for (auto it = value.begin(); it != value.end();) {
      bool keep = false;
      for (std::string_view key : keys) keep = keep || it.key() == key;
      it = keep ? std::next(it) : value.erase(it);
    }
  };
  nlohmann::json metadata = object.contains("metadata") ? std::move(object["metadata"]) : nlohmann::json::object();
  keep_only(object, kTop);
  if (metadata.is_object()) keep_only(metadata, kMetadata);
  object["metadata"] = std::move(metadata);
}

}  // namespace k8s4r::bridge
