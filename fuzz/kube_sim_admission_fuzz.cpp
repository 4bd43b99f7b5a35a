// Metadata and built-in kinds' validation on arbitrary JSON, as kube-sim
// runs it on every write: decode errors, defaults, validation, for each
// kind with its own rules.
#include "k8s4r/kube_sim/builtin_strategies.h"
#include "k8s4r/kube_sim/object_meta_validation.h"
#include "k8s4r/kube_sim/resource_type.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace k8s4r::kube_sim;
  static const std::vector<ResourceType> types = [] {
    std::vector<ResourceType> all = builtin_types();
    all.push_back(ResourceType{.group = "robot.k8s4r.io", .version = "v1alpha1", .plural = "tasks", .kind = "Task"});
    return all;
  }();
  const nlohmann::json input = nlohmann::json::parse(data, data + size, nullptr, false);
  if (input.is_discarded() || !input.is_object()) return 0;
  const ResourceType& type = types[size % types.size()];
  if (metadata_type_error(input, type.kind, type.builtin) || builtin_decode_error(type, input)) return 0;
  nlohmann::json object = input;
  if (!object.contains("metadata") || !object["metadata"].is_object()) object["metadata"] = nlohmann::json::object();
  prepare_for_create(type, object, k8s4r::Timestamp{});
  (void)validate_object_meta(object["metadata"], meta_rules(type));
  (void)validate_builtin(type, object, nullptr);
  (void)validate_builtin(type, object, &input);
  (void)finalizer_warnings(object["metadata"], &input);
  (void)deduplicate_owner_references(object["metadata"]);
  prepare_for_update(type, object, input);
  return 0;
}
