#include "k8s4r/manager/cache_key.h"

#include "k8s4r/common/duration.h"
#include "k8s4r/crd/resources.h"

#include <algorithm>

namespace k8s4r::manager {

using nlohmann::json;

namespace {

constexpr int kEncodingVersion = 1;

// The value of `key` in `object` when it is present and not null.
const json* present(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  const auto found = object.find(key);
  return found == object.end() || found->is_null() ? nullptr : &*found;
}

Result<json> artifact_material(const json& artifact, std::size_t index) {
  const std::string field = "spec.artifacts[" + std::to_string(index) + "]";
  if (!artifact.is_object()) return Error{field, "must be an object"};
  const json* options = present(artifact, "getterOptions");
  const json* checksum = options ? present(*options, "checksum") : nullptr;
  if (!checksum || !checksum->is_string() || checksum->get<std::string>().empty()) {
    return Error{field + ".getterOptions.checksum",
                 "an artifact without a checksum is keyed by nothing but its URL, whose content may change: "
                 "the task is not cacheable (give the artifact a checksum, or remove spec.cache)"};
  }
  json material = {{"checksum", *checksum}};
  for (const char* key : {"relativeDest", "getterMode"}) {
    if (const json* value = present(artifact, key)) material[key] = *value;
  }
  return material;
}

}  // namespace

Result<std::optional<CacheRequest>> cache_request(const json& task) {
  const json* cache = present(crd::value_at(task, {"spec"}), "cache");
  if (!cache) return std::optional<CacheRequest>();
  if (!cache->is_object()) return Error{"spec.cache", "must be an object"};
  CacheRequest request;
  if (const json* staleness = present(*cache, "maxStaleness")) {
    if (!staleness->is_string()) return Error{"spec.cache.maxStaleness", "must be a Go duration string (24h, 30m)"};
    auto parsed = parse_non_negative_go_duration(staleness->get<std::string>());
    if (!parsed) return parsed.error().within("spec.cache.maxStaleness");
    request.max_staleness = parsed.value();
  } else {
    return Error{"spec.cache.maxStaleness",
                 "is required: how old a cached result may be (24h; 0s stores, never reuses)"};
  }
  if (const json* salt = present(*cache, "salt")) {
    if (!salt->is_string()) return Error{"spec.cache.salt", "must be a string"};
    request.salt = salt->get<std::string>();
    if (request.salt.size() > kMaxCacheSaltCharacters) {
      return Error{"spec.cache.salt", "must be at most " + std::to_string(kMaxCacheSaltCharacters) + " bytes"};
    }
  }
  if (const json* labels = present(*cache, "keyLabels")) {
    if (!labels->is_array()) return Error{"spec.cache.keyLabels", "must be a list of label names"};
    if (labels->size() > kMaxCacheKeyLabels) {
      return Error{"spec.cache.keyLabels", "must name at most " + std::to_string(kMaxCacheKeyLabels) + " labels"};
    }
    for (std::size_t i = 0; i < labels->size(); ++i) {
      const json& label = (*labels)[i];
      if (!label.is_string() || label.get<std::string>().empty()) {
        return Error{"spec.cache.keyLabels[" + std::to_string(i) + "]", "must be a label name"};
      }
      request.key_labels.push_back(label.get<std::string>());
    }
    std::sort(request.key_labels.begin(), request.key_labels.end());
    request.key_labels.erase(std::unique(request.key_labels.begin(), request.key_labels.end()),
                             request.key_labels.end());
  }
  return std::optional(std::move(request));
}

Result<std::string> cache_key_material(const json& task, const CacheRequest& request, const json& robot) {
  const json& spec = crd::value_at(task, {"spec"});
  json material = {{"v", kEncodingVersion}, {"salt", request.salt}};
  const json* driver = present(spec, "driver");
  if (!driver || !driver->is_string()) return Error{"spec.driver", "is required for a cacheable task"};
  material["driver"] = *driver;
  for (const char* key : {"config", "env", "user"}) {
    if (const json* value = present(spec, key)) material[key] = *value;
  }
  json artifacts = json::array();
  if (const json* listed = present(spec, "artifacts")) {
    if (!listed->is_array()) return Error{"spec.artifacts", "must be a list"};
    for (std::size_t i = 0; i < listed->size(); ++i) {
      auto artifact = artifact_material((*listed)[i], i);
      if (!artifact) return artifact.error();
      artifacts.push_back(std::move(artifact).value());
    }
  }
  material["artifacts"] = std::move(artifacts);
  // The robot class: what the same inputs may produce differently on. A
  // robot that has not said its os and arch would share one class with
  // every other such robot, whatever they are: no key.
  const json& os = crd::value_at(robot, {"status", "deviceInfo", "platform", "os"});
  const json& arch = crd::value_at(robot, {"status", "deviceInfo", "platform", "arch"});
  if (!os.is_string() || !arch.is_string() || os.get<std::string>().empty() || arch.get<std::string>().empty()) {
    return Error{"status.deviceInfo.platform",
                 "robot " + crd::string_at(robot, {"metadata", "name"}) +
                     " has not reported its os and arch, which are part of the key: the task is not cacheable there"};
  }
  json robot_class = {{"os", os}, {"arch", arch}};
  json labels = json::object();
  const json& robot_labels = crd::value_at(robot, {"spec", "labels"});
  for (const std::string& name : request.key_labels) {
    if (!robot_labels.is_object()) break;
    const auto value = robot_labels.find(name);
    if (value != robot_labels.end() && value->is_string()) labels[name] = *value;
  }
  robot_class["labels"] = std::move(labels);
  material["robotClass"] = std::move(robot_class);
  return material.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<std::string> cache_key(const json& task, const CacheRequest& request, const json& robot) {
  auto material = cache_key_material(task, request, robot);
  if (!material) return material.error();
  return crd::sha256_digest(material.value());
}

}  // namespace k8s4r::manager
