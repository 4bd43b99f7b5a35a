// A daemon's HTTP endpoint for operators and kubelets: /metrics (Prometheus
// text), /healthz (the process answers) and /readyz (200 once the daemon says
// it is ready, 503 with its reason before), on --metrics-bind-address.
//
// Threading: serves on its own thread; `ready` is called from it.
#pragma once

#include "k8s4r/daemon/metrics.h"

#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace k8s4r::daemon {

class HealthServer {
 public:
  // ready(): empty when ready, else why not.
  HealthServer(Metrics& metrics, std::function<std::string()> ready);
  ~HealthServer();
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  // Binds host:port (port 0: any free port) and starts serving; throws
  // std::runtime_error when the address cannot be bound. Returns the port.
  int start(const std::string& bind_address);
  void stop();

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace k8s4r::daemon
