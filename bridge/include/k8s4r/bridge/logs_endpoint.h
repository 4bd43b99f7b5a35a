// `kubectl k8s4r logs`' way in (docs/logs.md): an HTTP(S) endpoint on
// --logs-bind-address serving
//
//   GET /apis/robot.k8s4r.io/v1alpha1/namespaces/NS/tasks/NAME/log
//       ?follow=true&stream=stderr&offset=N&tailLines=N&sinceSeconds=N
//
// as the path of a Task's log subresource would be. The caller's bearer
// token is checked with the API server, as a kubelet checks its callers: a
// TokenReview says who it is, a SubjectAccessReview whether they may `get`
// `tasks/log` there (RBAC: resources: ["tasks/log"]). The answer streams
// newline-delimited JSON, each line one of
//
//   {"offset":N,"text":"..."} or {"offset":N,"base64":"..."}   bytes of the log, from offset N
//   {"offset":N}                        nothing new yet (about every 5 s while following)
//   {"gap":{"from":A,"to":B},"message":"..."}  bytes A..B are no longer kept on the robot
//   {"end":"TaskEnded","offset":N}      the task has ended and every byte was sent
//   {"end":"CaughtUp","offset":N}       (not following) every byte written when asked was sent
//   {"error":"...","message":"..."}     the follow cannot go on
//
// A reader that loses the stream before an "end" asks again from the offset
// it has (offset=N): nothing is lost or repeated.
//
// Threading: serves on its own threads (one per follower), which wait on
// LogFollows and call the Kubernetes client.
#pragma once

#include "k8s4r/bridge/log_follows.h"
#include "k8s4r/bridge/token_bucket.h"
#include "k8s4r/daemon/metrics.h"
#include "k8s4r/kube/client.h"

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace k8s4r::bridge {

struct LogsEndpointConfig {
  std::string bind_address;         // host:port; port 0: any free port
  std::string cert_file, key_file;  // both set: HTTPS
  std::string namespace_;           // the bridge's: of its Tasks
  std::size_t max_followers = 64;   // more at once are refused (429)
  double reviews_per_second = 50;   // TokenReviews asked at most (a second's worth at once); more: 429
  double reviews_per_address = 5;   // and at most this many a second for one client address
  // Empty while the bridge can follow (its MQTT link up); else why not: 503, and the reader tries again.
  std::function<std::string()> not_ready;
};

class LogsEndpoint {
 public:
  LogsEndpoint(LogsEndpointConfig config, kube::Client& client, LogFollows& follows, daemon::Metrics& metrics);
  ~LogsEndpoint();
  LogsEndpoint(const LogsEndpoint&) = delete;
  LogsEndpoint& operator=(const LogsEndpoint&) = delete;

  // Binds and starts serving; throws std::runtime_error when it cannot. The port.
  int start();
  void stop();

 private:
  void serve(const httplib::Request& request, httplib::Response& response);
  // Whether the Task has not reached its robot yet (it has no state, or is pending or dispatching).
  bool not_sent_yet(const std::string& namespace_, const std::string& name);

  LogsEndpointConfig config_;
  kube::Client& client_;
  LogFollows& follows_;
  daemon::Metrics& metrics_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<std::size_t> following_{0};
  std::mutex reviews_mutex_;
  TokenBucket reviews_;
  std::map<std::string, TokenBucket> reviews_by_address_;  // forgotten whole past 4096 addresses
};

}  // namespace k8s4r::bridge
