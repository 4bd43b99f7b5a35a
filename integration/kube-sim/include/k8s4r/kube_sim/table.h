// meta.k8s.io/v1 Table responses, as kube-apiserver builds them for
// `kubectl get` (Accept: application/json;as=Table;v=v1;g=meta.k8s.io): a Name
// column, then a CRD's additionalPrinterColumns (or a built-in's columns).
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/common/rfc3339.h"
#include "k8s4r/kube_sim/resource_type.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace k8s4r::kube_sim {

// How kubectl shows an age: "45s", "5m3s", "3h", "12d" (apimachinery's
// duration.HumanDuration).
std::string human_duration(std::chrono::nanoseconds duration);

// The value at a simple JSONPath (".status.state", ".spec.items[0].name",
// "{.status.state}"); null when absent.
nlohmann::json json_path_value(const nlohmann::json& object, const std::string& path);

enum class IncludeObject { none, metadata, object };

// A Table of `objects`. `column_definitions` false leaves them out, as in
// watch events after the first.
nlohmann::json to_table(const ResourceType& type, const std::vector<nlohmann::json>& objects,
                        const std::string& resource_version, const std::string& continue_token, Timestamp now,
                        IncludeObject include, bool column_definitions = true);

}  // namespace k8s4r::kube_sim
