#include "reviews.h"

#include "builtin_shapes.h"
#include "store_util.h"

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

constexpr std::int64_t kMinTokenSeconds = 600;
constexpr std::int64_t kMaxTokenSeconds = std::int64_t{1} << 32;

ApiResponse invalid_review(const std::string& qualified_kind, std::vector<FieldCause> causes) {
  ApiResponse response = invalid({"", "", ""}, qualified_kind, causes);
  const std::size_t dot = qualified_kind.find('.');
  if (dot != std::string::npos) response.body["details"]["group"] = qualified_kind.substr(dot + 1);
  return response;
}

std::optional<ApiResponse> check_kind(const json& body, const std::string& api_version, const std::string& kind) {
  const std::string body_version = string_at(body, "apiVersion"), body_kind = string_at(body, "kind");
  if ((!body_version.empty() && body_version != api_version) || (!body_kind.empty() && body_kind != kind)) {
    return bad_request("the object provided is unrecognized: expected " + api_version + ", Kind=" + kind + ", got " +
                       body_version + ", Kind=" + body_kind);
  }
  return std::nullopt;
}

json answered(json body, const std::string& api_version, const std::string& kind, json status) {
  body["apiVersion"] = api_version;
  body["kind"] = kind;
  if (!body.contains("metadata") || !body["metadata"].is_object()) body["metadata"] = json::object();
  body["metadata"]["creationTimestamp"] = nullptr;
  body["status"] = std::move(status);
  return body;
}

RequestAttributes attributes_of(const json& spec, std::vector<FieldCause>& causes, const std::string& path) {
  RequestAttributes attributes;
  const bool has_resource = spec.contains("resourceAttributes") && spec["resourceAttributes"].is_object();
  const bool has_path = spec.contains("nonResourceAttributes") && spec["nonResourceAttributes"].is_object();
  if (has_resource == has_path) {
    causes.push_back({"FieldValueInvalid",
                      std::string("Invalid value: \"") + (has_resource ? "{...}" : "null") +
                          "\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
                      path + ".resourceAttributes"});
    return attributes;
  }
  if (has_resource) {
    const json& resource = spec["resourceAttributes"];
    attributes.resource_request = true;
    attributes.verb = resource.value("verb", "");
    attributes.api_group = resource.value("group", "");
    attributes.api_version = resource.value("version", "");
    attributes.namespace_ = resource.value("namespace", "");
    attributes.resource = resource.value("resource", "");
    attributes.subresource = resource.value("subresource", "");
    attributes.name = resource.value("name", "");
  } else {
    const json& non_resource = spec["nonResourceAttributes"];
    attributes.verb = non_resource.value("verb", "");
    attributes.path = non_resource.value("path", "");
  }
  return attributes;
}

std::optional<ApiResponse> shape_error(const json& body, const std::string& group, const std::string& kind) {
  if (auto error = builtin_shape_error(group, kind, body)) {
    return bad_request(kind + " in version \"v1\" cannot be handled as a " + kind + ": " + *error);
  }
  return std::nullopt;
}

}  // namespace

ApiResponse Reviews::token_request(const std::string& namespace_, const std::string& name, json body) const {
  if (auto wrong = check_kind(body, "authentication.k8s.io/v1", "TokenRequest")) return *wrong;
  if (auto wrong = shape_error(body, "authentication.k8s.io", "TokenRequest")) return *wrong;
  const json metadata = metadata_of(body);
  std::vector<FieldCause> causes;
  if (!string_at(metadata, "name").empty() && string_at(metadata, "name") != name) {
    causes.push_back(
        {"FieldValueInvalid",
         "Invalid value: \"" + string_at(metadata, "name") + "\": must match the service account name if specified",
         "metadata.name"});
  }
  if (!string_at(metadata, "namespace").empty() && string_at(metadata, "namespace") != namespace_) {
    causes.push_back({"FieldValueInvalid",
                      "Invalid value: \"" + string_at(metadata, "namespace") +
                          "\": must match the service account namespace if specified",
                      "metadata.namespace"});
  }
  if (!causes.empty()) return invalid_review("TokenRequest.authentication.k8s.io", causes);
  const auto accounts = store_.find_type("", "v1", "serviceaccounts");
  ApiResponse account = store_.get(Target{*accounts, namespace_}, name);
  if (!account.ok()) return account;
  json spec = body.contains("spec") && body["spec"].is_object() ? body["spec"] : json::object();
  std::int64_t seconds = 3600;
  if (spec.contains("expirationSeconds") && !spec["expirationSeconds"].is_null()) {
    if (!spec["expirationSeconds"].is_number_integer())
      return bad_request("TokenRequest in version \"v1\" cannot be handled as a TokenRequest: json: cannot unmarshal " +
                         std::string(spec["expirationSeconds"].type_name()) +
                         " into Go struct field TokenRequestSpec.spec.expirationSeconds of type int64");
    seconds = spec["expirationSeconds"].get<std::int64_t>();
  }
  if (seconds < kMinTokenSeconds) {
    causes.push_back({"FieldValueInvalid",
                      "Invalid value: " + std::to_string(seconds) + ": may not specify a duration less than 10 minutes",
                      "spec.expirationSeconds"});
  } else if (seconds > kMaxTokenSeconds) {
    causes.push_back(
        {"FieldValueInvalid",
         "Invalid value: " + std::to_string(seconds) + ": may not specify a duration larger than 2^32 seconds",
         "spec.expirationSeconds"});
  }
  if (!causes.empty()) return invalid_review("TokenRequest.authentication.k8s.io", causes);
  std::vector<std::string> audiences;
  for (const json& audience : spec.value("audiences", json::array())) {
    if (audience.is_string()) audiences.push_back(audience.get<std::string>());
  }
  if (audiences.empty()) audiences = authenticator_.audiences();
  const std::string uid = string_at(metadata_of(account.body), "uid");
  const auto issued = authenticator_.issue_token(namespace_, name, uid, audiences, seconds);
  spec["audiences"] = audiences;
  spec["expirationSeconds"] = seconds;
  if (!spec.contains("boundObjectRef")) spec["boundObjectRef"] = nullptr;
  json response = {{"kind", "TokenRequest"},
                   {"apiVersion", "authentication.k8s.io/v1"},
                   {"metadata",
                    {{"name", name},
                     {"namespace", namespace_},
                     {"creationTimestamp", format_rfc3339(issued.expires - std::chrono::seconds(seconds))}}},
                   {"spec", spec},
                   {"status", {{"token", issued.token}, {"expirationTimestamp", format_rfc3339(issued.expires)}}}};
  return {201, response, {}};
}

ApiResponse Reviews::create(const ResourceType& type, const std::string& namespace_, json body,
                            const UserInfo& user) const {
  if (auto wrong = check_kind(body, type.api_version(), type.kind)) return *wrong;
  if (auto wrong = shape_error(body, type.group, type.kind)) return *wrong;
  if (type.kind == "SelfSubjectReview") {
    return {201, answered(std::move(body), type.api_version(), type.kind, {{"userInfo", user.to_json()}}), {}};
  }
  if (type.kind == "TokenReview") {
    const json spec = body.value("spec", json::object());
    auto reviewed = authenticator_.authenticate("Bearer " + spec.value("token", ""), std::nullopt);
    json status = {{"user", json::object()}};
    if (reviewed && reviewed.value().name != "system:anonymous") {
      status = {
          {"authenticated", true}, {"user", reviewed.value().to_json()}, {"audiences", authenticator_.audiences()}};
    } else {
      status["error"] = reviewed ? "invalid bearer token" : reviewed.error().message;
    }
    return {201, answered(std::move(body), type.api_version(), type.kind, status), {}};
  }
  if (type.kind == "SelfSubjectRulesReview") {
    const std::string review_namespace = body.value("spec", json::object()).value("namespace", "");
    if (review_namespace.empty()) return bad_request("no namespace on request");
    json status = rules_ != nullptr
                      ? rules_->rules_review(user, review_namespace)
                      : json{{"resourceRules", {{{"verbs", {"*"}}, {"apiGroups", {"*"}}, {"resources", {"*"}}}}},
                             {"nonResourceRules", {{{"verbs", {"*"}}, {"nonResourceURLs", {"*"}}}}},
                             {"incomplete", false}};
    return {201, answered(std::move(body), type.api_version(), type.kind, status), {}};
  }
  return access_review(type, namespace_, std::move(body), user);
}

ApiResponse Reviews::access_review(const ResourceType& type, const std::string& namespace_, json body,
                                   const UserInfo& user) const {
  const json spec = body.contains("spec") && body["spec"].is_object() ? body["spec"] : json::object();
  std::vector<FieldCause> causes;
  RequestAttributes attributes = attributes_of(spec, causes, "spec");
  UserInfo subject = user;
  if (type.kind == "SubjectAccessReview" || type.kind == "LocalSubjectAccessReview") {
    subject = UserInfo{spec.value("user", ""), spec.value("uid", ""), {}, {}};
    for (const json& group : spec.value("groups", json::array())) {
      if (group.is_string()) subject.groups.push_back(group.get<std::string>());
    }
    if (subject.name.empty() && subject.groups.empty())
      causes.push_back(
          {"FieldValueInvalid", "Invalid value: \"\": at least one of user or group must be specified", "spec.user"});
    if (type.kind == "LocalSubjectAccessReview" && attributes.namespace_ != namespace_)
      causes.push_back({"FieldValueInvalid",
                        "Invalid value: \"" + attributes.namespace_ + "\": must match metadata.namespace",
                        "spec.resourceAttributes.namespace"});
  }
  if (!causes.empty()) return invalid_review(type.qualified_kind(), causes);
  const Decision decision = authorize_(subject, attributes);
  json status = {{"allowed", decision.allowed}};
  if (!decision.reason.empty()) status["reason"] = decision.reason;
  return {201, answered(std::move(body), type.api_version(), type.kind, status), {}};
}

}  // namespace k8s4r::kube_sim
