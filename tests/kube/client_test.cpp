#include "k8s4r/kube/client.h"

#include "fake_transport.h"
#include "k8s4r/crd/resources.h"

#include <gtest/gtest.h>

namespace k8s4r::kube {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::FakeReply;
using testing::FakeTransport;

const Resource kTasks = k8s4r::crd::kTasks;

struct Harness {
  explicit Harness(FakeTransport::Script script, ClientConfig config = {}) {
    auto fake = std::make_unique<FakeTransport>(std::move(script));
    transport = fake.get();
    config.server = "http://sim";
    client =
        std::make_unique<Client>(config, std::move(fake), [this](std::chrono::milliseconds d) { sleeps.push_back(d); });
  }
  FakeTransport* transport;
  std::unique_ptr<Client> client;
  std::vector<std::chrono::milliseconds> sleeps;
};

HttpResponse status(long code, const std::string& reason, const std::string& retry_after = "") {
  return {code, json{{"kind", "Status"}, {"code", code}, {"reason", reason}, {"message", reason + " happened"}}.dump(),
          retry_after};
}

TEST(Client, BuildsPathsAndQueries) {
  Harness h([](const HttpRequest&) { return FakeReply{HttpResponse{200, R"({"items":[]})", ""}}; });
  ListOptions options;
  options.label_selector = "env in (dev,prod)";
  options.limit = 10;
  ASSERT_TRUE(h.client->list(kTasks, "default", options));
  ASSERT_TRUE(h.client->merge_patch(kTasks, "default", "t1", json{{"status", {{"state", "running"}}}}, true));
  ASSERT_TRUE(h.client->get(Resource{"", "v1", "namespaces", false}, "", "default"));
  const auto requests = h.transport->requests();
  EXPECT_EQ(
      requests[0].path,
      "/apis/robot.k8s4r.io/v1alpha1/namespaces/default/tasks?labelSelector=env%20in%20%28dev%2Cprod%29&limit=10");
  EXPECT_EQ(requests[1].method, "PATCH");
  EXPECT_EQ(requests[1].path, "/apis/robot.k8s4r.io/v1alpha1/namespaces/default/tasks/t1/status");
  EXPECT_EQ(requests[1].content_type, "application/merge-patch+json");
  EXPECT_EQ(requests[2].path, "/api/v1/namespaces/default");
}

TEST(Client, ConflictIsAValueAndNotRetried) {
  Harness h([](const HttpRequest&) { return FakeReply{status(409, "Conflict")}; });
  auto replaced = h.client->replace(kTasks, "default", "t1", json::object());
  ASSERT_FALSE(replaced);
  EXPECT_TRUE(replaced.error().conflict());
  EXPECT_EQ(replaced.error().to_string(), "409 Conflict: Conflict happened");
  EXPECT_EQ(h.transport->requests().size(), 1u);
}

TEST(Client, RetriesTooManyRequestsHonouringRetryAfter) {
  int calls = 0;
  Harness h([&](const HttpRequest&) {
    return ++calls < 3 ? FakeReply{status(429, "TooManyRequests", "2")} : FakeReply{HttpResponse{200, "{}", ""}};
  });
  EXPECT_TRUE(h.client->get(kTasks, "default", "t1"));
  EXPECT_EQ(h.sleeps, (std::vector<std::chrono::milliseconds>{2s, 2s}));
  EXPECT_EQ(h.client->stats().retries, 2u);
}

TEST(Client, BacksOffOnServerErrorsAndConnectionErrorsThenGivesUp) {
  int calls = 0;
  Harness h([&](const HttpRequest&) {
    ++calls;
    if (calls % 2) return FakeReply{Error{"http", "connection refused"}};
    return FakeReply{status(503, "ServiceUnavailable")};
  });
  auto got = h.client->get(kTasks, "default", "t1");
  ASSERT_FALSE(got);
  EXPECT_EQ(calls, 5);  // max_attempts
  EXPECT_EQ(got.error().reason, "ConnectionError");
  EXPECT_EQ(h.sleeps, (std::vector<std::chrono::milliseconds>{100ms, 200ms, 400ms, 800ms}));
}

TEST(Client, APostIsRetriedOnlyWhenTheServerCannotHaveActedOnIt) {
  int calls = 0;
  Harness failing([&](const HttpRequest&) {
    ++calls;
    return FakeReply{status(500, "InternalError")};
  });
  EXPECT_EQ(failing.client->create(kTasks, "default", json::object()).error().code, 500);
  EXPECT_EQ(calls, 1);  // it may have been created: no blind second try

  calls = 0;
  Harness refused([&](const HttpRequest&) {
    return ++calls < 2 ? FakeReply{Error{"connect", "connection refused"}} : FakeReply{HttpResponse{201, "{}", ""}};
  });
  EXPECT_TRUE(refused.client->create(kTasks, "default", json::object()));
  EXPECT_EQ(calls, 2);  // the first never reached the server
}

TEST(Client, AWatchIsNotRepeatedOnceItDeliveredEvents) {
  int calls = 0;
  Harness h([&](const HttpRequest&) {
    ++calls;
    FakeReply reply{Error{"http", "connection reset"}};
    reply.lines = {R"({"type":"ADDED","object":{"metadata":{"name":"a"}}})"};
    return reply;
  });
  std::atomic<bool> cancel{false};
  int events = 0;
  auto watched = h.client->watch(
      kTasks, "default", {}, [&](const WatchEvent&) { return ++events > 0; }, cancel);
  EXPECT_FALSE(watched);
  EXPECT_EQ(calls, 1);  // the caller resumes from its last resourceVersion instead
}

TEST(Client, RateLimitSpacesRequestsAfterTheBurst) {
  ClientConfig config;
  config.qps = 10;
  config.burst = 2;
  Harness h([](const HttpRequest&) { return FakeReply{HttpResponse{200, "{}", ""}}; }, config);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(h.client->get(kTasks, "default", "t"));
  ASSERT_EQ(h.sleeps.size(), 2u);  // the burst went through, the rest waited about 1/qps each
  EXPECT_GE(h.sleeps[0].count(), 90);
  EXPECT_GE(h.sleeps[1].count(), 190);
}

TEST(Client, ListAllFollowsContinueTokens) {
  Harness h([](const HttpRequest& request) {
    if (request.path.find("continue=") == std::string::npos) {
      return FakeReply{
          HttpResponse{200, R"({"metadata":{"resourceVersion":"7","continue":"abc"},"items":[{"n":1}]})", ""}};
    }
    return FakeReply{HttpResponse{200, R"({"metadata":{"resourceVersion":"7"},"items":[{"n":2}]})", ""}};
  });
  auto all = h.client->list_all(kTasks, "default", {});
  ASSERT_TRUE(all);
  EXPECT_EQ(all.value()["items"], json::parse(R"([{"n":1},{"n":2}])"));
  EXPECT_EQ(all.value()["metadata"]["resourceVersion"], "7");
}

TEST(Client, WatchDeliversEventsAndRejectsGarbage) {
  Harness h([](const HttpRequest&) {
    FakeReply reply{HttpResponse{200, "", ""}};
    reply.lines = {R"({"type":"ADDED","object":{"metadata":{"name":"a"}}})", "not json"};
    return reply;
  });
  std::vector<std::string> seen;
  std::atomic<bool> cancel{false};
  auto watched = h.client->watch(
      kTasks, "default", {},
      [&](const WatchEvent& event) {
        seen.push_back(event.type + " " + event.object["metadata"]["name"].get<std::string>());
        return true;
      },
      cancel);
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED a"}));
  ASSERT_FALSE(watched);
  EXPECT_EQ(watched.error().reason, "InvalidResponse");
  EXPECT_NE(h.transport->requests()[0].path.find("watch=1&allowWatchBookmarks=true&timeoutSeconds=300"),
            std::string::npos);
}

}  // namespace
}  // namespace k8s4r::kube
