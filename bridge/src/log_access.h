// Whether a bearer token's holder may read a Task's log: a TokenReview says
// who holds it, a SubjectAccessReview whether they may `get` `tasks/log` in
// the Task's namespace (the bridge needs `create` on both: deploy/bridge).
// Private to k8s4r_bridge_core.
#pragma once

#include "k8s4r/kube/client.h"

#include <string>

namespace k8s4r::bridge {

struct LogAccess {
  int code = 200;       // 200, 401 (no or a bad token), 403 (not allowed), 503 (the API server did not answer)
  std::string user;     // who, when known
  std::string message;  // why not
};

LogAccess may_read_log(kube::Client& client, const std::string& token, const std::string& namespace_,
                       const std::string& task_name);

}  // namespace k8s4r::bridge
