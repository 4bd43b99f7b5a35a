// The reflector's logic against a scripted server: relist after 410 delivers
// the difference once, predicates, indexes; and the informer under fleet
// load: a slow handler delays only itself, an expired continue token falls
// back to one full list, failures back off with jitter, stop() does not wait
// out a list, a throwing index function, handlers added late, the transform.
#include "k8s4r/kube/informer.h"

#include "fake_transport.h"
#include "k8s4r/crd/resources.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <thread>

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

// Polls `condition` until it holds or 10 s pass.
template <class Condition>
bool eventually(Condition condition) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// Every test runs over both ways of keeping the cache: parsed objects, and
// packed (MessagePack, parsed again on each read).
class InformerTest : public ::testing::TestWithParam<bool> {
 protected:
  InformerOptions options_for(const Resource& resource) const {
    InformerOptions options{resource, "default"};
    options.packed = GetParam();
    return options;
  }
  InformerOptions quick_options() const {
    InformerOptions options = options_for(kTasks);
    options.retry_delay = 10ms;
    options.max_retry_delay = 20ms;
    return options;
  }
};

json list_of(const std::string& version, std::vector<json> items) {
  return {{"metadata", {{"resourceVersion", version}}}, {"items", items}};
}

TEST_P(InformerTest, RelistAfterExpiredDeliversTheDifferenceOnce) {
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
  InformerOptions options = options_for(kTasks);
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
                        [&](const ObjectPtr& o, bool final_state_unknown) {
                          std::lock_guard l(events_mutex);
                          events.push_back("delete " + (*o)["metadata"]["name"].get<std::string>() +
                                           (final_state_unknown ? " (last state unknown)" : ""));
                        },
                        {}});
  informer.add_index(
      "robot", [](const json& o) { return std::vector<std::string>{o["spec"]["targetRobot"].get<std::string>()}; });
  informer.start();
  server.wait_until_done();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard l(events_mutex);
    return events.size() >= 6;
  }));
  informer.stop();

  EXPECT_EQ(events, (std::vector<std::string>{"add a", "add b", "update a@11", "delete b (last state unknown)",
                                              "update a@15", "add c"}));
  EXPECT_EQ(informer.list().size(), 2u);
  EXPECT_EQ(informer.resource_version(), "25");
  EXPECT_EQ(informer.get_by_uid("uid-c")->at("metadata")["name"], "c");
  EXPECT_EQ(informer.by_index("robot", "r3").size(), 1u);
  EXPECT_TRUE(informer.by_index("robot", "r2").empty());
  EXPECT_EQ(informer.metrics().relists_after_expired, 1u);
  EXPECT_TRUE(informer.has_synced());
}

TEST_P(InformerTest, ANewSelectionIsListedAndWhatLeftItIsDeleted) {
  // Lists answer by their selector (a bridge replica's slots); watches have nothing to say.
  std::atomic<int> lists{0};
  Client client(ClientConfig{}, std::make_unique<FakeTransport>([&](const HttpRequest& request) -> FakeReply {
                  if (request.path.find("watch=1") != std::string::npos) {
                    std::this_thread::sleep_for(5ms);
                    return FakeReply{Error{"http", "no news"}};
                  }
                  ++lists;
                  const bool b = request.path.find("slot%3Db") != std::string::npos;
                  return FakeReply{
                      HttpResponse{200, list_of("10", {b ? task("b", "7", "r2") : task("a", "5", "r1")}).dump(), ""}};
                }),
                [](std::chrono::milliseconds) {});
  InformerOptions options = quick_options();
  options.label_selector = "slot=a";
  Informer informer(client, options);
  std::vector<std::string> events;
  std::mutex events_mutex;
  const auto note = [&](const std::string& what) {
    std::lock_guard l(events_mutex);
    events.push_back(what);
  };
  informer.add_handler({[&](const ObjectPtr& o) { note("add " + (*o)["metadata"]["name"].get<std::string>()); },
                        {},
                        [&](const ObjectPtr& o, bool unknown) {
                          note("delete " + (*o)["metadata"]["name"].get<std::string>() + (unknown ? " (unknown)" : ""));
                        },
                        {}});
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(10s));
  ASSERT_NE(informer.get("default", "a"), nullptr);
  const auto selection = informer.select("slot=b");
  EXPECT_FALSE(informer.selected(selection + 1));
  ASSERT_TRUE(eventually([&] { return informer.selected(selection); }));
  EXPECT_EQ(informer.get("default", "a"), nullptr);
  ASSERT_NE(informer.get("default", "b"), nullptr);
  EXPECT_EQ(informer.select("slot=b"), selection);  // the same selection: no new list
  ASSERT_TRUE(eventually([&] {
    std::lock_guard l(events_mutex);
    return events.size() >= 3;
  }));
  informer.stop();
  EXPECT_EQ(events, (std::vector<std::string>{"add a", "delete a (unknown)", "add b"}));
  EXPECT_EQ(lists.load(), 2);
}

TEST_P(InformerTest, PredicatesDropUpdatesAHandlerDoesNotCareAbout) {
  json status_only = task("a", "11", "r1");
  status_only["status"] = {{"state", "running"}};
  ScriptedServer server({{list_of("10", {task("a", "5", "r1")}),
                          {event("MODIFIED", status_only), event("MODIFIED", task("a", "12", "r1", 2))}}});
  Client client(ClientConfig{}, std::make_unique<FakeTransport>([&](const HttpRequest& r) { return server.answer(r); }),
                [](std::chrono::milliseconds) {});
  InformerOptions options = options_for(kTasks);
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
  ASSERT_TRUE(eventually([&] { return all_updates == 2 && state_updates == 2 && spec_updates >= 1; }));
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

// A watch that never ends until cancelled: what a quiet server looks like.
FakeReply quiet_watch(const HttpRequest&) { return FakeReply{HttpResponse{200, "", ""}}; }

bool is_watch(const HttpRequest& request) { return request.path.find("watch=1") != std::string::npos; }

Client client_for(FakeTransport::Script script) {
  ClientConfig config;
  config.max_attempts = 1;
  return Client(config, std::make_unique<FakeTransport>(std::move(script)), [](std::chrono::milliseconds) {});
}

// Holds a handler until the test opens it.
class Gate {
 public:
  void pass() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool open_ = false;
};

TEST_P(InformerTest, ASlowHandlerDelaysOnlyItselfNotTheCacheOrOtherHandlers) {
  constexpr int kTasksInWatch = 200;
  std::vector<std::string> lines;
  for (int i = 0; i < kTasksInWatch; ++i)
    lines.push_back(event("ADDED", task("t" + std::to_string(i), "1" + std::to_string(i), "r")));
  ScriptedServer server({{list_of("1", {}), lines}});
  Client client(ClientConfig{}, std::make_unique<FakeTransport>([&](const HttpRequest& r) { return server.answer(r); }),
                [](std::chrono::milliseconds) {});
  Informer informer(client, quick_options());
  Gate gate;
  std::atomic<int> slow_seen{0}, fast_seen{0};
  informer.add_handler({[&](const ObjectPtr&) {
                          gate.pass();  // stuck until the test opens the gate
                          ++slow_seen;
                        },
                        nullptr,
                        nullptr,
                        {}});
  informer.add_handler({[&](const ObjectPtr&) { ++fast_seen; }, nullptr, nullptr, {}});
  informer.start();
  // The slow handler is stuck on its first event; the cache and the other
  // handler are not held back by it.
  EXPECT_TRUE(eventually([&] { return informer.list().size() == kTasksInWatch && fast_seen == kTasksInWatch; }));
  EXPECT_EQ(slow_seen, 0);
  EXPECT_GE(informer.metrics().handler_backlog, static_cast<std::uint64_t>(kTasksInWatch - 1));
  gate.open();
  EXPECT_TRUE(eventually([&] { return slow_seen == kTasksInWatch; }));
  EXPECT_EQ(informer.metrics().handler_backlog, 0u);
  informer.stop();
}

TEST_P(InformerTest, HasSyncedWaitsForEveryHandlerToHandleTheFirstList) {
  ScriptedServer server(
      std::vector<ScriptedServer::Round>{{list_of("1", {task("a", "1", "r"), task("b", "1", "r")}), {}}});
  Client client(ClientConfig{}, std::make_unique<FakeTransport>([&](const HttpRequest& r) { return server.answer(r); }),
                [](std::chrono::milliseconds) {});
  Informer informer(client, quick_options());
  Gate gate;
  informer.add_handler({[&](const ObjectPtr&) { gate.pass(); }, nullptr, nullptr, {}});
  informer.start();
  ASSERT_TRUE(eventually([&] { return informer.list().size() == 2; }));
  EXPECT_FALSE(informer.wait_for_sync(50ms));  // cached, but not yet handled
  gate.open();
  EXPECT_TRUE(informer.wait_for_sync(10s));
  informer.stop();
}

TEST_P(InformerTest, AnExpiredContinueTokenFallsBackToOneFullList) {
  std::atomic<int> full_lists{0};
  Client client = client_for([&](const HttpRequest& request) -> FakeReply {
    if (is_watch(request)) return quiet_watch(request);
    if (request.path.find("continue=") != std::string::npos) {
      return FakeReply{HttpResponse{410,
                                    json{{"kind", "Status"},
                                         {"code", 410},
                                         {"reason", "Expired"},
                                         {"message", "The provided continue parameter is too old"}}
                                        .dump(),
                                    ""}};
    }
    if (request.path.find("limit=") != std::string::npos) {
      json page = list_of("10", {task("a", "5", "r")});
      page["metadata"]["continue"] = "token-1";
      return FakeReply{HttpResponse{200, page.dump(), ""}};
    }
    ++full_lists;
    return FakeReply{HttpResponse{200, list_of("30", {task("a", "25", "r"), task("b", "26", "r")}).dump(), ""}};
  });
  InformerOptions options = quick_options();
  options.page_size = 1;
  Informer informer(client, options);
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(10s));
  // Not retried forever from the same token: one full list, at its own version.
  EXPECT_EQ(full_lists, 1);
  EXPECT_EQ(informer.metrics().list_fallbacks, 1u);
  EXPECT_EQ(informer.list().size(), 2u);
  EXPECT_EQ((*informer.get("default", "a"))["metadata"]["resourceVersion"], "25");
  EXPECT_EQ(informer.resource_version(), "30");
  informer.stop();
}

TEST_P(InformerTest, FailingListsBackOffExponentiallyWithJitter) {
  std::mutex mutex;
  std::vector<std::chrono::steady_clock::time_point> attempts;
  Client client = client_for([&](const HttpRequest& request) -> FakeReply {
    if (is_watch(request)) return quiet_watch(request);
    std::lock_guard lock(mutex);
    attempts.push_back(std::chrono::steady_clock::now());
    return FakeReply{HttpResponse{500, "{}", ""}};
  });
  InformerOptions options = options_for(kTasks);
  options.retry_delay = 20ms;
  options.max_retry_delay = 160ms;
  Informer informer(client, options);
  informer.start();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mutex);
    return attempts.size() >= 8;
  }));
  informer.stop();
  std::lock_guard lock(mutex);
  // Waits 20, 40, 80, 160, 160... ms, each jittered to at least half: a slow
  // machine only makes the gaps longer, so lower bounds are safe to assert.
  const std::vector<long> least_ms{10, 20, 40, 80, 80, 80, 80};
  for (std::size_t i = 0; i < least_ms.size(); ++i) {
    const auto gap = std::chrono::duration_cast<std::chrono::milliseconds>(attempts[i + 1] - attempts[i]).count();
    EXPECT_GE(gap, least_ms[i]) << "gap " << i;
  }
  EXPECT_GE(informer.metrics().retries, 7u);
  EXPECT_FALSE(informer.has_synced());
}

TEST_P(InformerTest, StopCancelsAListInFlightAndItsRetries) {
  std::atomic<bool> list_started{false};
  ClientConfig config;
  config.max_attempts = 100;  // a list retried for minutes, were it not cancelled
  Client client(config, std::make_unique<FakeTransport>([&](const HttpRequest& request) -> FakeReply {
                  list_started = true;
                  // A server that takes 30 s to answer, unless the request is abandoned.
                  const auto deadline = std::chrono::steady_clock::now() + 30s;
                  while (std::chrono::steady_clock::now() < deadline && !(request.cancel && request.cancel->load()))
                    std::this_thread::sleep_for(5ms);
                  return FakeReply{Error{"http", "timed out"}};
                }));
  Informer informer(client, quick_options());
  informer.start();
  ASSERT_TRUE(eventually([&] { return list_started.load(); }));
  const auto before = std::chrono::steady_clock::now();
  informer.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - before, 5s);
}

TEST_P(InformerTest, AThrowingIndexFunctionIsCountedAndTheObjectStaysCached) {
  ScriptedServer server(std::vector<ScriptedServer::Round>{
      {list_of("1", {task("a", "1", "r1"), task("bad", "2", "r1")}), {event("ADDED", task("c", "3", "r2"))}}});
  Client client(ClientConfig{}, std::make_unique<FakeTransport>([&](const HttpRequest& r) { return server.answer(r); }),
                [](std::chrono::milliseconds) {});
  Informer informer(client, quick_options());
  informer.add_index("robot", [](const json& o) -> std::vector<std::string> {
    if (o["metadata"]["name"] == "bad") throw std::runtime_error("no robot");
    return {o["spec"]["targetRobot"].get<std::string>()};
  });
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(10s));
  ASSERT_TRUE(eventually([&] { return informer.list().size() == 3; }));
  EXPECT_NE(informer.get("default", "bad"), nullptr);
  EXPECT_EQ(informer.by_index("robot", "r1").size(), 1u);  // a, not bad
  EXPECT_EQ(informer.by_index("robot", "r2").size(), 1u);
  EXPECT_EQ(informer.metrics().index_errors, 1u);
  informer.stop();
}

TEST_P(InformerTest, AHandlerAddedAfterStartSeesTheCacheThenEveryChange) {
  std::atomic<bool> release_watch{false}, finished{false};
  Client client = client_for([&](const HttpRequest& request) -> FakeReply {
    if (!is_watch(request))
      return FakeReply{HttpResponse{200, list_of("5", {task("a", "1", "r"), task("b", "2", "r")}).dump(), ""}};
    while (!release_watch && !finished) std::this_thread::sleep_for(2ms);
    FakeReply reply{HttpResponse{200, "", ""}};
    reply.lines = {event("MODIFIED", task("a", "6", "r")), event("DELETED", task("b", "7", "r"))};
    release_watch = false;  // the next watch waits again
    return reply;
  });
  Informer informer(client, quick_options());
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(10s));
  std::mutex mutex;
  std::vector<std::string> seen;
  const auto record = [&](std::string what) {
    std::lock_guard lock(mutex);
    seen.push_back(std::move(what));
  };
  informer.add_handler(
      {[&](const ObjectPtr& o) { record("add " + (*o)["metadata"]["name"].get<std::string>()); },
       [&](const ObjectPtr&, const ObjectPtr& o) { record("update " + (*o)["metadata"]["name"].get<std::string>()); },
       [&](const ObjectPtr& o, bool) { record("delete " + (*o)["metadata"]["name"].get<std::string>()); },
       {}});
  EXPECT_TRUE(informer.wait_for_sync(10s));  // the late handler's share of the cache is handled
  release_watch = true;
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mutex);
    return seen.size() >= 4;
  }));
  finished = true;
  informer.stop();
  EXPECT_EQ(seen, (std::vector<std::string>{"add a", "add b", "update a", "delete b"}));
}

TEST_P(InformerTest, TheTransformShapesWhatIsCachedFromListsAndWatches) {
  json listed = task("a", "1", "r");
  listed["metadata"]["managedFields"] = json::array({{{"manager", "kubectl"}}});
  json watched = task("b", "2", "r");
  watched["metadata"]["managedFields"] = json::array({{{"manager", "k8s4r-bridge"}}});
  watched["status"] = {{"logsTail", std::string(1000, 'x')}};
  ScriptedServer server(std::vector<ScriptedServer::Round>{{list_of("1", {listed}), {event("ADDED", watched)}}});
  Client client(ClientConfig{}, std::make_unique<FakeTransport>([&](const HttpRequest& r) { return server.answer(r); }),
                [](std::chrono::milliseconds) {});
  InformerOptions options = quick_options();
  const auto default_transform = options.transform;
  options.transform = [&](json& object) {
    default_transform(object);
    if (object.contains("status")) object["status"].erase("logsTail");
  };
  Informer informer(client, options);
  informer.start();
  ASSERT_TRUE(eventually([&] { return informer.list().size() == 2; }));
  for (const ObjectPtr& object : informer.list()) {
    EXPECT_FALSE((*object)["metadata"].contains("managedFields")) << object->dump();
    EXPECT_FALSE(object->contains("status") && (*object)["status"].contains("logsTail")) << object->dump();
    EXPECT_TRUE((*object)["metadata"].contains("uid"));
  }
  informer.stop();
}

TEST_P(InformerTest, EveryReadHandsOutTheObjectAsListedOrWatched) {
  json listed = task("a", "1", "r1");
  listed["status"] = {{"state", "running"},
                      {"exitCode", -1},
                      {"progress", 0.25},
                      {"big", 18446744073709551615ULL},
                      {"note", "ünïcode ✓ \"quoted\""},
                      {"empty", json::object()},
                      {"none", nullptr},
                      {"list", json::array({1, "two", false, json::array()})}};
  json watched = task("b", "2", "r1");
  watched["spec"]["env"] = {{"A", "1"}};
  json changed = listed;
  changed["metadata"]["resourceVersion"] = "3";
  changed["status"]["state"] = "completed";
  ScriptedServer server(std::vector<ScriptedServer::Round>{
      {list_of("1", {listed}), {event("ADDED", watched), event("MODIFIED", changed)}}});
  Client client(ClientConfig{}, std::make_unique<FakeTransport>([&](const HttpRequest& r) { return server.answer(r); }),
                [](std::chrono::milliseconds) {});
  Informer informer(client, quick_options());
  std::mutex mutex;
  std::vector<json> old_objects;
  informer.add_handler({{},
                        [&](const ObjectPtr& old_object, const ObjectPtr&) {
                          std::lock_guard lock(mutex);
                          old_objects.push_back(*old_object);
                        },
                        {},
                        {}});
  informer.add_index("robot", [](const json& o) { return std::vector<std::string>{o["spec"]["targetRobot"]}; });
  informer.start();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mutex);
    return !old_objects.empty();
  }));
  ASSERT_TRUE(eventually([&] { return informer.list().size() == 2; }));
  EXPECT_EQ(*informer.get("default", "a"), changed);
  EXPECT_EQ(informer.get("default", "a")->dump(), changed.dump()) << "numbers keep their kind";
  EXPECT_EQ(*informer.get_by_uid("uid-b"), watched);
  EXPECT_EQ(informer.by_index("robot", "r1").size(), 2u);
  EXPECT_EQ(old_objects.front(), listed) << "an update's old object is the one cached before it";
  informer.stop();
}

INSTANTIATE_TEST_SUITE_P(Cache, InformerTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& param) { return param.param ? "Packed" : "Parsed"; });

}  // namespace
}  // namespace k8s4r::kube
