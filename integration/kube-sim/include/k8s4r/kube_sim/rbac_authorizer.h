// Authorization as kube-apiserver 1.32 does it with --authorization-mode=RBAC:
// a request becomes attributes (verb, API group, namespace, resource,
// subresource, name, or a non-resource path), the system:masters group is
// allowed everything, and otherwise ClusterRoleBindings, then the
// RoleBindings of the request's namespace, grant the rules of their Role or
// ClusterRole to their subjects (User, Group, ServiceAccount). Refusals are
// 403 Forbidden with the real server's wording.
//
// Threading: const methods may be called from any thread; the listers it is
// given must be safe to call concurrently.
#pragma once

#include "k8s4r/kube_sim/api_status.h"
#include "k8s4r/kube_sim/authentication.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::kube_sim {

struct RequestAttributes {
  bool resource_request = false;
  std::string verb;  // get list watch create update patch delete deletecollection, or the HTTP method for paths
  std::string path;  // non-resource requests
  std::string api_group, api_version, namespace_, resource, subresource, name;
};

// What k8s.io/apiserver's RequestInfoFactory makes of a request: `query` holds
// the decoded query parameters (watch, fieldSelector).
RequestAttributes request_attributes(const std::string& method, const std::string& path,
                                     const std::multimap<std::string, std::string>& query);

struct Decision {
  bool allowed = false;
  std::string reason;  // "RBAC: allowed by ..." or why resolution failed
};

// RBAC objects in rbac.authorization.k8s.io/v1 JSON.
struct RbacSource {
  // Objects of `plural` (roles, clusterroles, rolebindings, clusterrolebindings)
  // in `namespace_` ("" for cluster-scoped ones).
  std::function<std::vector<nlohmann::json>(const std::string& plural, const std::string& namespace_)> list;
  std::function<std::optional<nlohmann::json>(const std::string& plural, const std::string& namespace_,
                                              const std::string& name)>
      get;
};

class RbacAuthorizer {
 public:
  explicit RbacAuthorizer(RbacSource source) : source_(std::move(source)) {}

  Decision authorize(const UserInfo& user, const RequestAttributes& attributes) const;
  // The rules of `rules` (a PolicyRule list) the user does not hold in
  // `namespace_` ("" for cluster-wide), each as kube-apiserver prints it in
  // an escalation refusal ({APIGroups:["g"], Resources:["r"], Verbs:["v"]}).
  // Empty when the user holds them all: then it may grant them.
  std::vector<std::string> not_held(const UserInfo& user, const std::string& namespace_,
                                    const nlohmann::json& rules) const;
  // SelfSubjectRulesReview's status for `namespace_`.
  nlohmann::json rules_review(const UserInfo& user, const std::string& namespace_) const;

 private:
  // Calls `visit(rule, source description)` for each rule that applies to the
  // user in `namespace_` until it returns true; errors collects resolution failures.
  void visit_rules(const UserInfo& user, const std::string& namespace_,
                   const std::function<bool(const nlohmann::json& rule, const std::string& source)>& visit,
                   std::vector<std::string>& errors) const;

  RbacSource source_;
};

// The 403 Forbidden kube-apiserver answers for a refused request.
ApiResponse forbidden(const UserInfo& user, const RequestAttributes& attributes, const std::string& reason);

// The ClusterRoles and ClusterRoleBindings every cluster starts with
// (cluster-admin, system:discovery, system:basic-user,
// system:public-info-viewer), as kube-apiserver's bootstrap policy makes them.
std::vector<nlohmann::json> bootstrap_policy();

}  // namespace k8s4r::kube_sim
