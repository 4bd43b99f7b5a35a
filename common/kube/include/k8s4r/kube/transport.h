// The HTTP seam of the Kubernetes client: one narrow interface, a libcurl
// implementation with keep-alive connections and TLS, and room for a fake in
// unit tests.
//
// Threading: a Transport is shared by all threads of a Client; send() and
// stream() may run concurrently.
#pragma once

#include "k8s4r/common/result.h"
#include "k8s4r/kube/config.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace k8s4r::kube {

struct HttpRequest {
  std::string method;  // GET, POST, PUT, PATCH, DELETE
  std::string path;    // with the query, e.g. /api/v1/namespaces?limit=500
  std::string body;
  std::string content_type;  // for bodies
  // When set and it becomes true, the request is abandoned (noticed within
  // about a second) and send() returns an Error.
  const std::atomic<bool>* cancel = nullptr;
};

struct HttpResponse {
  long status = 0;
  std::string body;
  std::string retry_after;  // the Retry-After header, if any
};

class Transport {
 public:
  virtual ~Transport() = default;
  // One request. An Error means no HTTP response arrived (connection
  // refused or reset, TLS failure, timeout).
  virtual Result<HttpResponse> send(const HttpRequest& request) = 0;
  // A streamed GET: `on_line` gets each newline-terminated line of a 200
  // response until it returns false, the server ends the stream or `cancel`
  // becomes true (noticed within a second). For other statuses the body is in
  // the response and `on_line` is not called.
  virtual Result<HttpResponse> stream(const HttpRequest& request, const std::function<bool(std::string_view)>& on_line,
                                      const std::atomic<bool>& cancel) = 0;
};

std::unique_ptr<Transport> make_curl_transport(const ClientConfig& config);

}  // namespace k8s4r::kube
