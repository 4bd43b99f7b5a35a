// The kinds that are answered, never stored: TokenRequest (POST
// serviceaccounts/NAME/token), TokenReview, SelfSubjectReview (kubectl auth
// whoami), SelfSubjectAccessReview (kubectl auth can-i),
// SelfSubjectRulesReview (kubectl auth can-i --list), SubjectAccessReview
// and LocalSubjectAccessReview. Private to kube_sim.
#pragma once

#include "k8s4r/kube_sim/authentication.h"
#include "k8s4r/kube_sim/rbac_authorizer.h"
#include "k8s4r/kube_sim/store.h"

#include <functional>

namespace k8s4r::kube_sim {

using Authorize = std::function<Decision(const UserInfo&, const RequestAttributes&)>;

class Reviews {
 public:
  // `rules` is null unless RBAC decides (then SelfSubjectRulesReview lists rules).
  Reviews(Store& store, const Authenticator& authenticator, Authorize authorize, const RbacAuthorizer* rules)
      : store_(store), authenticator_(authenticator), authorize_(std::move(authorize)), rules_(rules) {}

  ApiResponse token_request(const std::string& namespace_, const std::string& name, nlohmann::json body) const;
  // POST to a create-only type.
  ApiResponse create(const ResourceType& type, const std::string& namespace_, nlohmann::json body,
                     const UserInfo& user) const;

 private:
  ApiResponse access_review(const ResourceType& type, const std::string& namespace_, nlohmann::json body,
                            const UserInfo& user) const;

  Store& store_;
  const Authenticator& authenticator_;
  Authorize authorize_;
  const RbacAuthorizer* rules_;
};

}  // namespace k8s4r::kube_sim
