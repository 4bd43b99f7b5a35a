#include "k8s4r/daemon/health_server.h"

#include <httplib.h>

#include <stdexcept>

namespace k8s4r::daemon {

HealthServer::HealthServer(Metrics& metrics, std::function<std::string()> ready)
    : server_(std::make_unique<httplib::Server>()) {
  server_->Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& response) {
    response.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("ok\n", "text/plain");
  });
  server_->Get("/readyz", [ready = std::move(ready)](const httplib::Request&, httplib::Response& response) {
    const std::string why_not = ready ? ready() : std::string();
    response.status = why_not.empty() ? 200 : 503;
    response.set_content(why_not.empty() ? "ok\n" : why_not + "\n", "text/plain");
  });
}

HealthServer::~HealthServer() { stop(); }

int HealthServer::start(const std::string& bind_address) {
  const auto colon = bind_address.rfind(':');
  std::string host = bind_address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const int port = std::stoi(bind_address.substr(colon + 1));
  const int bound = port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (bound < 0) throw std::runtime_error("cannot listen on " + bind_address);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return bound;
}

void HealthServer::stop() {
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

}  // namespace k8s4r::daemon
