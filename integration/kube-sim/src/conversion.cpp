#include "conversion.h"

#include <array>
#include <utility>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

// core/v1 Event field <-> events.k8s.io/v1 Event field, as
// k8s.io/kubernetes/pkg/apis/events/v1 converts them. Fields with the same
// name in both (eventTime, series, action, reason, related, type,
// reportingInstance) pass through.
constexpr std::array<std::pair<const char*, const char*>, 7> kEventFields = {{
    {"involvedObject", "regarding"},
    {"message", "note"},
    {"source", "deprecatedSource"},
    {"firstTimestamp", "deprecatedFirstTimestamp"},
    {"lastTimestamp", "deprecatedLastTimestamp"},
    {"count", "deprecatedCount"},
    {"reportingComponent", "reportingController"},
}};

json convert_event(const json& object, bool to_events_group) {
  json converted = object;
  for (const auto& [core, events] : kEventFields) {
    const char* from = to_events_group ? core : events;
    const char* into = to_events_group ? events : core;
    converted.erase(into);
    if (object.contains(from)) {
      converted.erase(from);
      converted[into] = object[from];
    }
  }
  // Fields Go writes even when empty, so clients see them as the real server sends them.
  if (!converted.contains("eventTime")) converted["eventTime"] = nullptr;
  if (to_events_group) {
    if (!converted.contains("deprecatedSource")) converted["deprecatedSource"] = json::object();
    for (const char* field : {"deprecatedFirstTimestamp", "deprecatedLastTimestamp"}) {
      if (!converted.contains(field)) converted[field] = nullptr;
    }
  } else {
    if (!converted.contains("reportingComponent")) converted["reportingComponent"] = "";
    if (!converted.contains("reportingInstance")) converted["reportingInstance"] = "";
  }
  return converted;
}

}  // namespace

json convert(const json& object, const ResourceType& to) {
  json converted;
  const std::string from_version = object.value("apiVersion", "");
  if (to.kind == "Event" && (to.group == "events.k8s.io") != (from_version == "events.k8s.io/v1")) {
    converted = convert_event(object, to.group == "events.k8s.io");
  } else {
    converted = object;
  }
  converted["apiVersion"] = to.api_version();
  return converted;
}

}  // namespace k8s4r::kube_sim
