#include "k8s4r/crd/robot_secret.h"

#include "k8s4r/common/base64.h"
#include "k8s4r/crd/resources.h"
#include "k8s4r/kube/informer.h"

namespace k8s4r::crd {

using nlohmann::json;

std::string robot_secret_name(const std::string& robot_id) { return "k8s4r-robot-" + robot_id; }

void keep_robot_secret_fields(json& secret) {
  if (!secret.is_object()) return;  // the API server lists objects; anything else is kept out of harm's way
  kube::strip_managed_fields(secret);
  json data = json::object();
  if (secret.contains("data") && secret["data"].is_object() && secret["data"].contains("token"))
    data["token"] = secret["data"]["token"];
  secret["data"] = std::move(data);
  secret.erase("stringData");
  if (secret.contains("metadata") && secret["metadata"].is_object()) secret["metadata"].erase("annotations");
}

std::string robot_of_secret(const json& secret) {
  const std::string robot = string_at(secret, {"metadata", "labels", kRobotIdLabel});
  if (robot.empty() || string_at(secret, {"metadata", "name"}) != robot_secret_name(robot)) return "";
  return robot;
}

std::optional<std::string> robot_secret_token(const json& secret, const std::string& robot_id) {
  if (robot_id.empty() || robot_of_secret(secret) != robot_id) return std::nullopt;
  const std::string encoded = string_at(secret, {"data", "token"});
  if (encoded.empty()) return std::nullopt;
  auto token = base64_decode(encoded);
  if (!token) return std::nullopt;
  // `kubectl create secret --from-file=token=FILE` keeps the file's final
  // newline; the agent reads its --token-file without it (one line, trailing
  // CR/LF dropped). The same token either way.
  while (!token->empty() && (token->back() == '\n' || token->back() == '\r')) token->pop_back();
  if (token->empty()) return std::nullopt;
  return std::move(*token);
}

}  // namespace k8s4r::crd
