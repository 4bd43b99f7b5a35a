// Responses of the stand-in: a status code, a JSON body, and the headers a
// real kube-apiserver adds (Warning, Retry-After). Failures carry a
// `kind: Status` body with the code and reason kube-apiserver uses, so
// clients (kubectl, client-go, the Python client) react to them as they
// would to the real server.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace k8s4r::kube_sim {

struct ApiResponse {
  int code = 200;
  nlohmann::json body;
  std::vector<std::string> warnings;  // each becomes a `Warning: 299 - "..."` header

  bool ok() const { return code >= 200 && code < 300; }
};

// The object a failure names, for Status.details.
struct StatusSubject {
  std::string group, kind, name;  // kind is the resource's plural in most errors, as the real server does
};

// One field error of a 422 Invalid, as k8s.io/apimachinery/pkg/util/validation/field formats it.
struct FieldCause {
  std::string reason;   // FieldValueRequired, FieldValueInvalid, FieldValueNotSupported, FieldValueTypeInvalid, ...
  std::string message;  // "Required value", "Unsupported value: \"x\": supported values: ..."
  std::string field;    // "spec.driver"
};

nlohmann::json status_body(int code, const std::string& reason, const std::string& message,
                           const nlohmann::json& details = nullptr);

ApiResponse not_found(const StatusSubject& subject);       // 404 NotFound: `tasks.robot.k8s4r.io "x" not found`
ApiResponse already_exists(const StatusSubject& subject);  // 409 AlreadyExists
ApiResponse conflict(const StatusSubject& subject, const std::string& why);  // 409 Conflict
ApiResponse invalid(const StatusSubject& subject, const std::string& qualified_kind,
                    const std::vector<FieldCause>& causes);      // 422 Invalid
ApiResponse bad_request(const std::string& message);             // 400 BadRequest
ApiResponse method_not_allowed(const std::string& message);      // 405 MethodNotAllowed
ApiResponse unsupported_media_type(const std::string& message);  // 415 UnsupportedMediaType
ApiResponse gone(const std::string& message);                    // 410 Expired
ApiResponse unauthorized();                                      // 401 Unauthorized
ApiResponse not_found_path(const std::string& path);             // 404 for an unknown URL
ApiResponse success_status(const StatusSubject& subject);        // 200 Success, for deletes of collections

}  // namespace k8s4r::kube_sim
