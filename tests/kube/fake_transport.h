// A scripted Transport for unit tests of the client and the informer: each
// request is answered by a function the test supplies; every request is
// recorded.
#pragma once

#include "k8s4r/kube/transport.h"

#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace k8s4r::kube::testing {

struct FakeReply {
  Result<HttpResponse> response = HttpResponse{200, "{}", ""};
  std::vector<std::string> lines;  // for streams: the lines of a 200 response, or those before a failure
};

class FakeTransport final : public Transport {
 public:
  using Script = std::function<FakeReply(const HttpRequest&)>;
  explicit FakeTransport(Script script) : script_(std::move(script)) {}

  Result<HttpResponse> send(const HttpRequest& request) override { return record(request).response; }

  Result<HttpResponse> stream(const HttpRequest& request, const std::function<bool(std::string_view)>& on_line,
                              const std::atomic<bool>& cancel) override {
    FakeReply reply = record(request);
    // Lines arrive for a 200, or before a stream breaks (an error reply).
    if (!reply.response || reply.response.value().status == 200) {
      for (const std::string& line : reply.lines) {
        if (cancel || !on_line(line)) break;
      }
    }
    return reply.response;
  }

  std::vector<HttpRequest> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  FakeReply record(const HttpRequest& request) {
    {
      std::lock_guard lock(mutex_);
      requests_.push_back(request);
    }
    return script_(request);
  }

  Script script_;
  mutable std::mutex mutex_;
  std::vector<HttpRequest> requests_;
};

}  // namespace k8s4r::kube::testing
