#include "k8s4r/kube_sim/api_status.h"

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

json details_of(const StatusSubject& subject) {
  json details = json::object();
  if (!subject.name.empty()) details["name"] = subject.name;
  if (!subject.group.empty()) details["group"] = subject.group;
  if (!subject.kind.empty()) details["kind"] = subject.kind;
  return details;
}

// `tasks.robot.k8s4r.io "x"`, or `namespaces "x"` for the core group.
std::string qualified(const StatusSubject& subject) {
  std::string resource = subject.kind;
  if (!subject.group.empty()) resource += "." + subject.group;
  return resource + " \"" + subject.name + "\"";
}

}  // namespace

json status_body(int code, const std::string& reason, const std::string& message, const json& details) {
  json body = {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
               {"status", "Failure"}, {"message", message}, {"reason", reason},
               {"code", code}};
  if (!details.is_null()) body["details"] = details;
  return body;
}

ApiResponse not_found(const StatusSubject& subject) {
  return {404, status_body(404, "NotFound", qualified(subject) + " not found", details_of(subject)), {}};
}

ApiResponse already_exists(const StatusSubject& subject) {
  return {409, status_body(409, "AlreadyExists", qualified(subject) + " already exists", details_of(subject)), {}};
}

ApiResponse conflict(const StatusSubject& subject, const std::string& why) {
  return {409,
          status_body(409, "Conflict", "Operation cannot be fulfilled on " + qualified(subject) + ": " + why,
                      details_of(subject)),
          {}};
}

ApiResponse invalid(const StatusSubject& subject, const std::string& qualified_kind,
                    const std::vector<FieldCause>& causes) {
  json details = details_of(subject);
  details["kind"] = qualified_kind.substr(0, qualified_kind.find('.'));
  json cause_list = json::array();
  std::string summary;
  for (const FieldCause& cause : causes) {
    cause_list.push_back({{"reason", cause.reason}, {"message", cause.message}, {"field", cause.field}});
    if (!summary.empty()) summary += ", ";
    summary += cause.field.empty() ? cause.message : cause.field + ": " + cause.message;
  }
  details["causes"] = cause_list;
  if (causes.size() > 1) summary = "[" + summary + "]";
  return {422,
          status_body(422, "Invalid", qualified_kind + " \"" + subject.name + "\" is invalid: " + summary, details),
          {}};
}

ApiResponse bad_request(const std::string& message) { return {400, status_body(400, "BadRequest", message), {}}; }

ApiResponse method_not_allowed(const std::string& message) {
  return {405, status_body(405, "MethodNotAllowed", message), {}};
}

ApiResponse unsupported_media_type(const std::string& message) {
  return {415, status_body(415, "UnsupportedMediaType", message), {}};
}

ApiResponse gone(const std::string& message) { return {410, status_body(410, "Expired", message), {}}; }

ApiResponse unauthorized() { return {401, status_body(401, "Unauthorized", "Unauthorized"), {}}; }

ApiResponse not_found_path(const std::string& path) {
  return {404,
          status_body(404, "NotFound", "the server could not find the requested resource",
                      json{{"causes", json::array({{{"reason", "UnexpectedServerResponse"},
                                                    {"message", "404 page not found: " + path}}})}}),
          {}};
}

ApiResponse success_status(const StatusSubject& subject) {
  json body = {{"kind", "Status"},
               {"apiVersion", "v1"},
               {"metadata", json::object()},
               {"status", "Success"},
               {"details", details_of(subject)}};
  return {200, body, {}};
}

}  // namespace k8s4r::kube_sim
