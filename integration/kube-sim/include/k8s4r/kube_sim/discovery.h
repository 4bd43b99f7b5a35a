// Discovery documents in the legacy JSON forms (/api, /api/v1, /apis,
// /apis/G, /apis/G/V) and the OpenAPI v3 documents kubectl downloads to
// validate (/openapi/v3 and /openapi/v3/apis/G/V), built from the served
// types. Clients that ask for aggregated discovery get the legacy form with
// Content-Type application/json and fall back, as they do with older servers.
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/kube_sim/resource_type.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace k8s4r::kube_sim {

nlohmann::json api_versions(const std::string& server_address);
nlohmann::json api_group_list(const std::vector<ResourceType>& types);
std::optional<nlohmann::json> api_group(const std::vector<ResourceType>& types, const std::string& group);
// group "" is the core group (/api/v1).
std::optional<nlohmann::json> api_resource_list(const std::vector<ResourceType>& types, const std::string& group,
                                                const std::string& version);
nlohmann::json version_info();

nlohmann::json openapi_v3_root(const std::vector<ResourceType>& types);
// "apis/robot.k8s4r.io/v1alpha1" or "api/v1".
std::optional<nlohmann::json> openapi_v3_document(const std::vector<ResourceType>& types,
                                                  const std::string& group_version_path);

}  // namespace k8s4r::kube_sim
