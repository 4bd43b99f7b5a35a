// The HTTP(S) front of k8s4r-kube-sim: routes Kubernetes REST paths to the
// Store, streams watches as chunked newline-delimited JSON, answers discovery
// and OpenAPI, renders Tables, checks the bearer token, and injects faults
// for tests (latency, 500/429 answers, pausing, closing watches, compaction)
// through flags or the admin endpoints under /_sim/.
//
// Threading: Boost.Beast on one Asio io_context run by `threads` threads;
// each connection is a chain of asynchronous operations on its own strand, so
// idle keep-alive connections and open watches hold no thread. Fault settings
// are guarded by their own mutex. start() returns once the socket listens;
// stop() ends every stream and joins.
#pragma once

#include "k8s4r/kube_sim/store.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::kube_sim {

struct Faults {
  std::chrono::milliseconds latency{0};
  double error_rate = 0;        // share of API requests answered with error_code
  std::uint64_t fail_next = 0;  // the next this many API requests are answered with error_code, whatever the rate
  int error_code = 500;         // 500 or 429
  int retry_after_seconds = 1;  // sent with 429
  bool paused = false;          // requests wait until unpaused
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;       // 0: pick a free port
  std::string token;  // when set, API requests need "Authorization: Bearer <token>"
  std::string tls_cert_file, tls_key_file;
  std::chrono::milliseconds bookmark_interval{10'000};
  std::chrono::seconds default_watch_timeout{1800};
  int threads = 4;  // threads running the I/O context; connections and watches hold none
  bool log_requests = false;
  // Authentication (docs/kube-sim.md): `token` is the admin's (system:masters);
  // a token file adds users; a client CA lets certificates name users.
  std::string token_auth_file;
  std::string client_ca_file;
  // Anonymous requests: unset means allowed when no credential source is
  // configured, and otherwise only for /version, /healthz, /livez, /readyz.
  std::optional<bool> anonymous_auth;
  std::string service_account_issuer = "https://kubernetes.default.svc.cluster.local";
  std::vector<std::string> api_audiences;
  std::string authorization_mode = "AlwaysAllow";  // or RBAC
  Faults faults;
};

class Server {
 public:
  Server(Store& store, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts serving in the background; false (with a log line) when
  // the address cannot be bound or the certificate cannot be loaded.
  bool start();
  // Ends every watch stream, stops listening and joins.
  void stop();
  int port() const;
  // http(s)://host:port
  std::string url() const;

 private:
  friend class Connection;  // server.cpp: one client connection
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace k8s4r::kube_sim
