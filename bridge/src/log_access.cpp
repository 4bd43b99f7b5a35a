#include "log_access.h"

namespace k8s4r::bridge {

namespace {

const kube::Resource kTokenReviews{"authentication.k8s.io", "v1", "tokenreviews", false};
const kube::Resource kSubjectAccessReviews{"authorization.k8s.io", "v1", "subjectaccessreviews", false};

}  // namespace

LogAccess may_read_log(kube::Client& client, const std::string& token, const std::string& namespace_,
                       const std::string& task_name) {
  using nlohmann::json;
  if (token.empty()) return {401, "", "no bearer token: the plugin sends the kubeconfig user's token (or --token)"};
  auto reviewed = client.create(
      kTokenReviews, "",
      json{{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenReview"}, {"spec", {{"token", token}}}});
  if (!reviewed) return {503, "", "cannot review the token: " + reviewed.error().to_string()};
  const json& status = reviewed.value().value("status", json::object());
  if (!status.value("authenticated", false)) {
    const std::string why = status.value("error", std::string("not authenticated"));
    return {401, "", "the API server does not know this token: " + why};
  }
  const json user = status.value("user", json::object());
  LogAccess access{200, user.value("username", std::string()), ""};
  json spec{{"user", access.user},
            {"resourceAttributes",
             {{"namespace", namespace_},
              {"verb", "get"},
              {"group", "robot.k8s4r.io"},
              {"resource", "tasks"},
              {"subresource", "log"},
              {"name", task_name}}}};
  if (user.contains("uid")) spec["uid"] = user["uid"];
  if (user.contains("groups")) spec["groups"] = user["groups"];
  if (user.contains("extra")) spec["extra"] = user["extra"];
  auto decided =
      client.create(kSubjectAccessReviews, "",
                    json{{"apiVersion", "authorization.k8s.io/v1"}, {"kind", "SubjectAccessReview"}, {"spec", spec}});
  if (!decided) return {503, access.user, "cannot review the access: " + decided.error().to_string()};
  const json& decision = decided.value().value("status", json::object());
  if (!decision.value("allowed", false)) {
    access.code = 403;
    access.message = "user \"" + access.user + "\" cannot get resource \"tasks/log\" in API group \"robot.k8s4r.io\"" +
                     " in the namespace \"" + namespace_ + "\"";
    if (const std::string reason = decision.value("reason", std::string()); !reason.empty())
      access.message += ": " + reason;
  }
  return access;
}

}  // namespace k8s4r::bridge
