// A Kubernetes client for any resource, as client-go's dynamic client: get,
// list, create, replace, merge and JSON patch (main resource and /status),
// delete, and watch. Failures are values carrying the server's Status code
// and reason ("tasks.robot.k8s4r.io \"x\" not found", 404, NotFound).
//
// Retries: 429 and 5xx answers and connection errors are retried with
// exponential backoff (100 ms doubling, at most 5 s), waiting Retry-After when
// the server sends it, up to ClientConfig::max_attempts. A POST, which is not
// idempotent, is retried only when the server cannot have acted on it: 429, a
// 5xx with Retry-After, or a connection that never opened. Client-side rate
// limiting (QPS and burst, a token bucket) is off unless configured.
//
// Threading: every method may be called from any thread.
#pragma once

#include "k8s4r/kube/config.h"
#include "k8s4r/kube/transport.h"

#include <boost/outcome/basic_result.hpp>
#include <boost/outcome/policy/terminate.hpp>
#include <boost/outcome/success_failure.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace k8s4r::kube {

struct ApiError {
  int code = 0;        // HTTP status; 0 when no response came
  std::string reason;  // NotFound, Conflict, AlreadyExists, Invalid, Expired, ..., or "ConnectionError"
  std::string message;

  bool not_found() const { return code == 404; }
  bool conflict() const { return code == 409 && reason == "Conflict"; }
  bool already_exists() const { return code == 409 && reason == "AlreadyExists"; }
  bool expired() const { return code == 410; }
  std::string to_string() const;
};

template <class T>
using ApiResult = boost::outcome_v2::basic_result<T, ApiError, boost::outcome_v2::policy::terminate>;

// Which resource: group ("" for core), version, plural, scope.
struct Resource {
  std::string group, version, plural;
  bool namespaced = true;

  // /apis/G/V[/namespaces/NS]/PLURAL[/NAME[/SUBRESOURCE]]
  std::string path(const std::string& namespace_, const std::string& name = "",
                   const std::string& subresource = "") const;
};

struct ListOptions {
  std::string label_selector, field_selector;
  std::string resource_version, resource_version_match;
  std::int64_t limit = 0;
  std::string continue_token;
  // Set to abandon the list, its retries included (an informer's stop()).
  const std::atomic<bool>* cancel = nullptr;
};

struct WatchOptions {
  std::string label_selector, field_selector;
  std::string resource_version;
  bool allow_bookmarks = true;
  int timeout_seconds = 300;  // the server ends the stream after this; the caller watches again
};

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
  nlohmann::json object;
};

struct ClientStats {
  std::uint64_t requests = 0, retries = 0;
};

class Client {
 public:
  using Sleep = std::function<void(std::chrono::milliseconds)>;

  // `sleep` is how the client waits between attempts (tests pass a fake).
  Client(ClientConfig config, std::unique_ptr<Transport> transport, Sleep sleep = {});
  // From configuration, over libcurl.
  explicit Client(ClientConfig config);

  ApiResult<nlohmann::json> get(const Resource& resource, const std::string& namespace_, const std::string& name);
  // One page; see list_all for every page.
  ApiResult<nlohmann::json> list(const Resource& resource, const std::string& namespace_, const ListOptions& options);
  // Every page of a list, merged, with the first page's resourceVersion.
  ApiResult<nlohmann::json> list_all(const Resource& resource, const std::string& namespace_, ListOptions options);
  ApiResult<nlohmann::json> create(const Resource& resource, const std::string& namespace_,
                                   const nlohmann::json& object);
  ApiResult<nlohmann::json> replace(const Resource& resource, const std::string& namespace_, const std::string& name,
                                    const nlohmann::json& object, bool status = false);
  ApiResult<nlohmann::json> merge_patch(const Resource& resource, const std::string& namespace_,
                                        const std::string& name, const nlohmann::json& patch, bool status = false);
  ApiResult<nlohmann::json> json_patch(const Resource& resource, const std::string& namespace_, const std::string& name,
                                       const nlohmann::json& operations, bool status = false);
  ApiResult<nlohmann::json> remove(const Resource& resource, const std::string& namespace_, const std::string& name,
                                   const nlohmann::json& delete_options = nlohmann::json::object());

  // Streams watch events to `on_event` until the server ends the stream (a
  // success), `on_event` returns false, or `cancel` is set. The request is
  // retried like any other until the stream starts; an ERROR event is passed
  // to `on_event` like the others (410 Expired means: list again).
  ApiResult<void> watch(const Resource& resource, const std::string& namespace_, const WatchOptions& options,
                        const std::function<bool(const WatchEvent&)>& on_event, const std::atomic<bool>& cancel);

  const ClientConfig& config() const { return config_; }
  ClientStats stats() const;

 private:
  // Sends with retries. `may_retry` (when given) is asked before each retry;
  // a watch says no once it has delivered events, so none arrive twice.
  ApiResult<HttpResponse> execute(const HttpRequest& request,
                                  const std::function<Result<HttpResponse>(const HttpRequest&)>& perform,
                                  const std::function<bool()>& may_retry = {});
  ApiResult<nlohmann::json> call(const std::string& method, const std::string& path, const std::string& body = "",
                                 const std::string& content_type = "", const std::atomic<bool>* cancel = nullptr);
  void wait_for_token();

  ClientConfig config_;
  std::unique_ptr<Transport> transport_;
  Sleep sleep_;
  std::atomic<std::uint64_t> requests_{0}, retries_{0};
  std::mutex limiter_mutex_;
  double tokens_ = 0;
  std::chrono::steady_clock::time_point refilled_;
};

// The error a failed response carries, from its Status body when it has one.
ApiError error_from_response(const HttpResponse& response);

}  // namespace k8s4r::kube
