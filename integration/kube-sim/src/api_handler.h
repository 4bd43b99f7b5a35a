// The Kubernetes API behind the HTTP layer: who is asking (authentication,
// impersonation), whether they may (AlwaysAllow or RBAC), and what the
// request means (discovery, OpenAPI, CRUD on the Store, subresources,
// reviews, watches), with request parameters checked as kube-apiserver
// checks them. Knows nothing of sockets: the HTTP layer (server.cpp) hands it
// an HttpRequest and writes back what it returns, streaming a watch.
// Private to kube_sim.
#pragma once

#include "k8s4r/kube_sim/authentication.h"
#include "k8s4r/kube_sim/rbac_authorizer.h"
#include "k8s4r/kube_sim/server.h"
#include "k8s4r/kube_sim/store.h"
#include "k8s4r/kube_sim/table.h"

#include "reviews.h"

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>

namespace k8s4r::kube_sim {

struct HttpRequest {
  std::string method, path;
  std::multimap<std::string, std::string> query;
  std::function<std::string(const std::string& name)> header;  // "" when absent
  std::string body;
  std::optional<ClientCertificate> client_certificate;  // verified against the client CA

  bool has_param(const std::string& name) const { return query.count(name) > 0; }
  std::string param(const std::string& name) const {
    auto it = query.find(name);
    return it == query.end() ? "" : it->second;
  }
};

// An open watch for the HTTP layer to stream.
struct WatchStream {
  std::shared_ptr<Watcher> watcher;
  std::chrono::steady_clock::time_point deadline;
  bool table = false;
  IncludeObject include = IncludeObject::metadata;
  bool bookmarks = false;
  ResourceType type;
};

struct HandlerResult {
  ApiResponse response;
  // A body that is not JSON (the OpenAPI v2 document); sent as is when set.
  std::optional<std::string> raw_body;
  std::string content_type = "application/json";
  std::optional<WatchStream> watch;
};

class ApiHandler {
 public:
  // Throws std::runtime_error when the options cannot work (a token file that
  // does not parse).
  ApiHandler(Store& store, const ServerOptions& options);

  // Authentication, impersonation and authorization: the user, or the 401
  // or 403 to answer.
  std::variant<UserInfo, ApiResponse> admit(const HttpRequest& request) const;
  HandlerResult route(const HttpRequest& request, const UserInfo& user) const;
  void set_address(const std::string& address) { address_ = address; }
  // Admitted resource requests so far, by user and then by "verb
  // resource[/subresource]", as /_sim/stats reports them: what a benchmark
  // reads to count a client's GETs and LISTs.
  nlohmann::json request_counts() const;

 private:
  Decision authorize(const UserInfo& user, const RequestAttributes& attributes) const;
  HandlerResult resource_request(const HttpRequest& request, const UserInfo& user, const std::string& group,
                                 const std::string& version, std::vector<std::string> rest, bool watch_path) const;
  HandlerResult watch(const Target& target, const std::string& name, const HttpRequest& request) const;
  std::variant<nlohmann::json, ApiResponse> parse_body(const HttpRequest& request) const;
  // RBAC's escalation check: a Role may carry only rules its writer holds
  // (or may `escalate`), a binding may grant only a role whose rules its
  // writer holds (or may `bind`). `object` is the Role or binding as written.
  std::optional<ApiResponse> escalation_check(const Target& target, const std::string& name,
                                              const nlohmann::json& object, const UserInfo& user) const;

  Store& store_;
  const ServerOptions& options_;
  std::unique_ptr<Authenticator> authenticator_;
  std::unique_ptr<RbacAuthorizer> rbac_;
  std::unique_ptr<Reviews> reviews_;
  std::string address_;
  mutable std::mutex counts_mutex_;
  mutable std::map<std::string, std::map<std::string, long long>> counts_;
  mutable std::size_t counted_ = 0;  // distinct keys in counts_
};

}  // namespace k8s4r::kube_sim
