#include "k8s4r/bridge/cached_fields.h"

#include "k8s4r/bridge/robot_patches.h"
#include "k8s4r/common/slots.h"

#include <array>
#include <string_view>

namespace k8s4r::bridge {

namespace {

template <std::size_t N>
void keep_only(nlohmann::json& value, const std::array<std::string_view, N>& keys) {
  if (!value.is_object()) return;
  for (auto it = value.begin(); it != value.end();) {
    bool keep = false;
    for (std::string_view key : keys) keep = keep || it.key() == key;
    it = keep ? std::next(it) : value.erase(it);
  }
}

}  // namespace

void keep_cached_fields(nlohmann::json& object) {
  if (!object.is_object()) return;
  static constexpr std::array<std::string_view, 4> kTop{"apiVersion", "kind", "spec", "status"};
  static constexpr std::array<std::string_view, 8> kMetadata{
      "name",      "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
      "finalizers"};
  nlohmann::json metadata = object.contains("metadata") ? std::move(object["metadata"]) : nlohmann::json::object();
  keep_only(object, kTop);
  // Of the labels, only the slot (common/slots.h): a Robot without it is
  // labelled at its next register.
  nlohmann::json slot;
  if (auto labels = metadata.find("labels"); labels != metadata.end() && labels->is_object()) {
    if (auto found = labels->find(kSlotLabel); found != labels->end()) slot = std::move(*found);
  }
  keep_only(metadata, kMetadata);
  if (!slot.is_null()) metadata["labels"] = {{kSlotLabel, std::move(slot)}};
  object["metadata"] = std::move(metadata);
}

void keep_cached_robot_fields(nlohmann::json& robot) {
  keep_cached_fields(robot);
  if (!robot.is_object()) return;
  static constexpr std::array<std::string_view, 1> kSpec{"labels"};
  // tokenDigest: a digest, never the token (dynamic security tells a stale
  // rejection from a real one); newestDispatch: dispatches are stamped above it.
  static constexpr std::array<std::string_view, 13> kStatus{
      "phase",        "message",     "connected",           "conditions",
      "runningTasks", "endedTasks",  "endedTasksTruncated", "lastHeartbeatTime",
      "deviceInfo",   "tokenDigest", "newestDispatch",      "artifacts",
      "prefetch"};
  if (auto spec = robot.find("spec"); spec != robot.end()) keep_only(*spec, kSpec);
  if (auto status = robot.find("status"); status != robot.end() && status->is_object()) {
    keep_only(*status, kStatus);
    if (auto device = status->find("deviceInfo"); device != status->end()) *device = capacity_text(*device);
    // Of the artifacts listed, only what tells them unchanged (2 KiB a robot otherwise).
    if (auto artifacts = status->find("artifacts"); artifacts != status->end() && artifacts->is_object()) {
      static constexpr std::array<std::string_view, 1> kArtifacts{"fingerprint"};
      keep_only(*artifacts, kArtifacts);
    }
  }
}

}  // namespace k8s4r::bridge
