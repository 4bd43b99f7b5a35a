// The reflector's logic against a scripted server: relist after 410 delivers
// the difference once, predicates, indexes.
#include "k8s4r/kube/informer.h"

#include "fake_transport.h"
#include "k8s4r/crd/resources.h"

#include <gtest/gtest.h>

#include <condition_variable>

namespace k8s4r::kube {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::FakeReply;
using testing::FakeTransport;

const Resource kTasks = k8s4r::crd::kTasks;

json task(const std::string& name, const std::string& version, const std::string& robot, int generation = 1) {
  return {{"metadata",
           {{"name", name},
            {"namespace", "default"},
            {"uid", "uid-" + name},
            {"resourceVersion", version},
            {"generation", generation}}},
          {"spec", {{"targetRobot", robot}}}};
}

std::string event(const std::string& type, const json& object) {
  return json{{"type", type}, {"object", object}}.dump();
}

// Serves a script of (list, watch) rounds; once the script is done, watches
// block until cancelled.
class ScriptedServer {
 public:
  struct Round {
    json list;  // null: no list expected in this round
    std::vector<std::string> watch_lines;
  };
  explicit ScriptedServer(std::vector<Round> rounds) : rounds_(std::move(rounds)) {}

  FakeReply answer(const HttpRequest& request) {
    std::unique_lock lock(mutex_);
    const bool is_watch = request.path.find("watch=1") != std::string::npos;
    if (!is_watch) {
      while (next_list_ < rounds_.size() && rounds_[next_list_].list.is_null()) ++next_list_;
      if (next_list_ >= rounds_.size()) return FakeReply{HttpResponse{500, "{}", ""}};
      return FakeReply{HttpResponse{200, rounds_[next_list_++].list.dump(), ""}};
    }
    if (next_watch_ < rounds_.size()) {
      FakeReply reply{HttpResponse{200, "", ""}};
      reply.lines = rounds_[next_watch_++].watch_lines;
      changed_.notify_all();
      return reply;
    }
    done_ = true;
    changed_.notify_all();
    return FakeReply{Error{"http", "script finished"}};
  }

  void wait_until_done() {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, 10s, [this] { return done_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Round> rounds_;
  std::size_t next_list_ = 0, next_watch_ = 0;
  bool done_ = false;
};

json list_of(const std::string& version, std::vector<json> items) {
  return {{"metadata", {{"resourceVersion", version}}}, {"items", items}};
}

TEST(Informer, RelistAfterExpiredDeliversTheDifferenceOnce) {
  ScriptedServer server({
      {list_of("10", {task("a", "5", "r1"), task("b", "6", "r1")}),
       {event("MODIFIED", task("a", "11", "r2")), event("ADDED", task("a", "11", "r2")),  // a duplicate: ignored
        event("ERROR", {{"kind", "Status"}, {"code", 410}, {"reason", "Expired"}})}},
      // While the watch was gone: b deleted, a changed, c added; a relist shows it.
      {list_of("20", {task("a", "15", "r3"), task("c", "18", "r1")}),
       {event("BOOKMARK", {{"metadata", {{"resourceVersion", "25"}}}})}},
  });
  Client client(ClientConfig{}, std::make_unique<FakeTransport>([&](const HttpRequest& r) { return server.answer(r); }),
                [](std::chrono::milliseconds) {});
  InformerOptions options{kTasks, "default"};
  options.retry_delay = 10ms;
  Informer informer(client, options);
  std::vector<std::string> events;
  std::mutex events_mutex;
  informer.add_handler({[&](const ObjectPtr& o) {
                          std::lock_guard l(events_mutex);
                          events.push_back("add " + (*o)["metadata"]["name"].get<std::string>());
                        },
                        [&](const ObjectPtr&, const ObjectPtr& o) {
                          std::lock_guard l(events_mutex);
                          events.push_back("update " + (*o)["metadata"]["name"].get<std::string>() + "@" +
                                           (*o)["metadata"]["resourceVersion"].get<std::string>());
                        },
                        [&](const ObjectPtr& o) {
                          std::lock_guard l(events_mutex);
                          events.push_back("delete " + (*o)["metadata"]["name"].get<std::string>());
                        },
                        {}});
  informer.add_index(
      "robot", [](const json& o) { return std::vector<std::string>{o["spec"]["targetRobot"].get<std::string>()}; });
  informer.start();
  server.wait_until_done();
  informer.stop();

  EXPECT_EQ(events, (std::vector<std::string>{"add a", "add b", "update a@11", "delete b", "update a@15", "add c"}));
  EXPECT_EQ(informer.list().size(), 2u);
  EXPECT_EQ(informer.resource_version(), "25");
  EXPECT_EQ(informer.get_by_uid("uid-c")->at("metadata")["name"], "c");
  EXPECT_EQ(informer.by_index("robot", "r3").size(), 1u);
  EXPECT_TRUE(informer.by_index("robot", "r2").empty());
  EXPECT_EQ(informer.metrics().relists_after_expired, 1u);
  EXPECT_TRUE(informer.has_synced());
}

TEST(Informer, PredicatesDropUpdatesAHandlerDoesNotCareAbout) {
  json status_only = task("a", "11", "r1");
  status_only["status"] = {{"state", "running"}};
  ScriptedServer server({{list_of("10", {task("a", "5", "r1")}),
                          {event("MODIFIED", status_only), event("MODIFIED", task("a", "12", "r1", 2))}}});
  Client client(ClientConfig{}, std::make_unique<FakeTransport>([&](const HttpRequest& r) { return server.answer(r); }),
                [](std::chrono::milliseconds) {});
  InformerOptions options{kTasks, "default"};
  options.retry_delay = 10ms;
  Informer informer(client, options);
  std::atomic<int> spec_updates{0}, state_updates{0}, all_updates{0};
  informer.add_handler(
      {nullptr, [&](const ObjectPtr&, const ObjectPtr&) { ++spec_updates; }, nullptr, generation_changed});
  informer.add_handler(
      {nullptr, [&](const ObjectPtr&, const ObjectPtr&) { ++state_updates; }, nullptr, field_changed("/status/state")});
  informer.add_handler({nullptr, [&](const ObjectPtr&, const ObjectPtr&) { ++all_updates; }, nullptr, {}});
  informer.start();
  server.wait_until_done();
  informer.stop();
  EXPECT_EQ(spec_updates, 1);   // only the generation bump
  EXPECT_EQ(state_updates, 2);  // state appeared, then vanished
  EXPECT_EQ(all_updates, 2);
}

TEST(Informer, CacheHashIsOrderIndependentAndSeesVersions) {
  auto a = std::make_shared<const json>(task("a", "1", "r"));
  auto b = std::make_shared<const json>(task("b", "2", "r"));
  auto b2 = std::make_shared<const json>(task("b", "3", "r"));
  EXPECT_EQ(cache_hash({a, b}), cache_hash({b, a}));
  EXPECT_NE(cache_hash({a, b}), cache_hash({a, b2}));
  EXPECT_NE(cache_hash({a, b}), cache_hash({a}));
}

}  // namespace
}  // namespace k8s4r::kube
