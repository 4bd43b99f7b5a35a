// The client and the informer against the real k8s4r-kube-sim binary over
// loopback: TLS with a CA and a bearer token, conflicts as values, and an
// informer that recovers from cut watches, 410 Expired, 500s and 429s, and
// lost events, each time ending with a cache equal to the server's objects and
// every change delivered once.
#include "k8s4r/kube/client.h"
#include "k8s4r/kube/informer.h"
#include "k8s4r/testing/kube_sim_process.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

namespace k8s4r::kube {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
namespace fs = std::filesystem;

using testing::KubeSimProcess;
using testing::task_json;
const Resource kTasks = crd::kTasks;

// A stand-in with the CRDs applied, and a client for it.
struct Sim {
  explicit Sim(std::vector<std::string> args = {})
      : process(K8S4R_KUBE_SIM, std::move(args)), client(process.config()) {
    auto applied = process.apply_crds(client, K8S4R_CRD_DIR);
    if (!applied) throw std::runtime_error("apply CRDs: " + applied.error().to_string());
  }
  void admin(const std::string& what, const json& body = json::object()) {
    ASSERT_TRUE(process.admin(what, body)) << what;
  }
  KubeSimProcess process;
  Client client;
};

// Records every delivered change, and checks none arrives twice.
struct Recorder {
  std::mutex mutex;
  std::multiset<std::string> seen;  // "name@resourceVersion" or "deleted name"
  void handle(Informer& informer) {
    informer.add_handler({[this](const ObjectPtr& o) { add(*o); },
                          [this](const ObjectPtr&, const ObjectPtr& o) { add(*o); },
                          [this](const ObjectPtr& o, bool) {
                            std::lock_guard lock(mutex);
                            seen.insert("deleted " + (*o)["metadata"]["name"].get<std::string>());
                          },
                          {}});
  }
  void add(const json& object) {
    std::lock_guard lock(mutex);
    seen.insert(object["metadata"]["name"].get<std::string>() + "@" +
                object["metadata"]["resourceVersion"].get<std::string>());
  }
  bool has(const std::string& entry) {
    std::lock_guard lock(mutex);
    return seen.count(entry) > 0;
  }
  std::size_t duplicates() {
    std::lock_guard lock(mutex);
    std::size_t extra = 0;
    for (auto it = seen.begin(); it != seen.end(); it = seen.upper_bound(*it)) extra += seen.count(*it) - 1;
    return extra;
  }
};

// name -> resourceVersion, as the server has them and as the cache has them.
std::map<std::string, std::string> server_state(Client& client) {
  std::map<std::string, std::string> state;
  auto listed = client.list_all(kTasks, "default", {});
  for (const auto& item : listed.value()["items"])
    state[item["metadata"]["name"]] = item["metadata"]["resourceVersion"];
  return state;
}
std::map<std::string, std::string> cache_state(const Informer& informer) {
  std::map<std::string, std::string> state;
  for (const auto& object : informer.list())
    state[(*object)["metadata"]["name"]] = (*object)["metadata"]["resourceVersion"];
  return state;
}
bool eventually(const std::function<bool()>& condition, std::chrono::seconds timeout = 15s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return condition();
}

InformerOptions fast_options() {
  InformerOptions options{kTasks, "default"};
  options.retry_delay = 100ms;
  return options;
}

TEST(AgainstKubeSim, TlsWithACaAndABearerToken) {
  const fs::path certs = fs::temp_directory_path() / ("k8s4r-client-tls-" + std::to_string(::getpid()));
  fs::create_directories(certs);
  const std::string run =
      "cd " + certs.string() +
      " && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1 -subj /CN=test-ca"
      " && openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1"
      " && echo subjectAltName=IP:127.0.0.1 > san.ext"
      " && openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt"
      " -days 1 -extfile san.ext) >/dev/null 2>&1";
  ASSERT_EQ(std::system(("(" + run).c_str()), 0);
  KubeSimProcess sim(K8S4R_KUBE_SIM, {"--token", "s3cret", "--tls-cert", (certs / "server.crt").string(), "--tls-key",
                                      (certs / "server.key").string(), "--tls-ca", (certs / "ca.crt").string()});
  EXPECT_EQ(sim.config().server.rfind("https://127.0.0.1:", 0), 0u);
  Client client(sim.config());
  auto ns = client.get(Resource{"", "v1", "namespaces", false}, "", "default");
  ASSERT_TRUE(ns) << ns.error().to_string();
  EXPECT_EQ(ns.value()["metadata"]["name"], "default");

  ClientConfig wrong_token = sim.config();
  wrong_token.token = "wrong";
  auto refused = Client(wrong_token).get(Resource{"", "v1", "namespaces", false}, "", "default");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, 401);
  EXPECT_EQ(refused.error().reason, "Unauthorized");

  ClientConfig untrusted = sim.config();
  untrusted.ca_pem.clear();  // the system CAs do not know our test CA
  auto tls_error = Client(untrusted).get(Resource{"", "v1", "namespaces", false}, "", "default");
  ASSERT_FALSE(tls_error);
  EXPECT_EQ(tls_error.error().reason, "ConnectionError");
  // Which check failed, in curl's words, not only its class.
  EXPECT_NE(tls_error.error().message.find("SSL certificate problem: unable to get local issuer certificate"),
            std::string::npos)
      << tls_error.error().message;

  // A token file the kubelet rotated: refused with the old token, the next
  // request reads the file again and goes through, with no new Client.
  const fs::path token_file = certs / "token";
  std::ofstream(token_file) << "expired\n";
  ClientConfig rotating = sim.config();
  rotating.token = "expired";
  rotating.token_file = token_file.string();
  Client rotated(rotating);
  auto before = rotated.get(Resource{"", "v1", "namespaces", false}, "", "default");
  ASSERT_FALSE(before);
  EXPECT_EQ(before.error().code, 401);
  std::ofstream(token_file) << "s3cret\n";
  auto after = rotated.get(Resource{"", "v1", "namespaces", false}, "", "default");
  EXPECT_TRUE(after) << after.error().to_string();
  fs::remove_all(certs);
}

TEST(AgainstKubeSim, ConflictAndNotFoundAreValues) {
  Sim sim;
  Client& client = sim.client;
  auto created = client.create(kTasks, "default", task_json("a"));
  ASSERT_TRUE(created) << created.error().to_string();
  json stale = created.value();
  ASSERT_TRUE(client.merge_patch(kTasks, "default", "a", {{"metadata", {{"labels", {{"x", "y"}}}}}}));
  stale["spec"]["user"] = "late";
  auto conflict = client.replace(kTasks, "default", "a", stale);
  ASSERT_FALSE(conflict);
  EXPECT_TRUE(conflict.error().conflict());
  EXPECT_NE(conflict.error().message.find("the object has been modified"), std::string::npos);
  EXPECT_TRUE(client.get(kTasks, "default", "missing").error().not_found());
  EXPECT_TRUE(client.create(kTasks, "default", task_json("a")).error().already_exists());
  auto status = client.json_patch(kTasks, "default", "a",
                                  json::parse(R"([{"op":"add","path":"/status","value":{"state":"running"}}])"), true);
  ASSERT_TRUE(status) << status.error().to_string();
  EXPECT_EQ(status.value()["status"]["state"], "running");
}

TEST(AgainstKubeSim, InformerResumesAfterCutWatches) {
  Sim sim;
  Client& client = sim.client;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(client.create(kTasks, "default", task_json("t" + std::to_string(i))));
  Informer informer(client, fast_options());
  Recorder recorder;
  recorder.handle(informer);
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(10s));
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(sim.process.wait_for_watches(1));  // cut a watch that is really there
    sim.admin("close-watches");
    ASSERT_TRUE(client.merge_patch(kTasks, "default", "t" + std::to_string(round),
                                   {{"spec", {{"user", "u" + std::to_string(round)}}}}));
    ASSERT_TRUE(client.create(kTasks, "default", task_json("new" + std::to_string(round))));
  }
  ASSERT_TRUE(client.remove(kTasks, "default", "t4"));
  EXPECT_TRUE(eventually([&] { return cache_state(informer) == server_state(client); }));
  // The cache is updated before handlers run, each on its own thread: the
  // handler's delete may come a moment after the cache shows it.
  EXPECT_TRUE(eventually([&] { return recorder.has("deleted t4"); }));
  EXPECT_EQ(recorder.duplicates(), 0u);
  EXPECT_EQ(informer.metrics().relists_after_expired, 0u);  // resumed, never relisted
  EXPECT_GE(informer.metrics().watches, 4u);
  informer.stop();
}

TEST(AgainstKubeSim, InformerRelistsAfterExpired) {
  Sim sim({"--history", "5"});
  Client& client = sim.client;
  ASSERT_TRUE(client.create(kTasks, "default", task_json("a")));
  ASSERT_TRUE(client.create(kTasks, "default", task_json("b")));
  Informer informer(client, fast_options());
  Recorder recorder;
  recorder.handle(informer);
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(10s));
  // Only a live watch can lose an event: one started later replays the window.
  ASSERT_TRUE(sim.process.wait_for_watches(1));
  // The informer misses these changes, and the window forgets them: its next
  // watch gets 410 and it must list again.
  sim.admin("faults", {{"dropWatchEvents", 3}});
  auto changed = client.merge_patch(kTasks, "default", "a", {{"spec", {{"user", "changed"}}}});
  ASSERT_TRUE(client.remove(kTasks, "default", "b"));
  ASSERT_TRUE(client.create(kTasks, "default", task_json("c")));
  sim.admin("compact");
  sim.admin("close-watches");
  EXPECT_TRUE(eventually([&] { return cache_state(informer) == server_state(client); }));
  EXPECT_GE(informer.metrics().relists_after_expired, 1u);
  // Handlers run on their own thread: they may see the relist's events just
  // after the cache holds them.
  const std::string a_changed = "a@" + changed.value()["metadata"]["resourceVersion"].get<std::string>();
  EXPECT_TRUE(eventually([&] { return recorder.has(a_changed); }));
  EXPECT_TRUE(eventually([&] { return recorder.has("deleted b"); }));
  EXPECT_EQ(recorder.duplicates(), 0u);
  informer.stop();
}

TEST(AgainstKubeSim, InformerAndClientRideOutServerErrorsAndThrottling) {
  Sim sim;
  Client& client = sim.client;
  Informer informer(client, fast_options());
  Recorder recorder;
  recorder.handle(informer);
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(10s));
  ClientConfig patient = sim.process.config();
  patient.max_attempts = 20;
  Client writer(patient);
  // A POST is retried only where the server cannot have acted on it: 429.
  // The informer's watch is open and asks nothing now, so the two forced
  // failures land on the writer's first create; the random ones on anyone.
  ASSERT_TRUE(sim.process.wait_for_watches(1));
  sim.admin("faults", {{"failNext", 2}, {"errorRate", 0.5}, {"errorCode", 429}, {"retryAfterSeconds", 0}});
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(writer.create(kTasks, "default", task_json("e" + std::to_string(i))));
  sim.admin("close-watches");
  const auto retries_after_creates = writer.stats().retries;
  EXPECT_GE(retries_after_creates, 2u);
  ASSERT_TRUE(sim.process.wait_for_watches(1));                // the informer's new watch is open and asks nothing more
  sim.admin("faults", {{"failNext", 2}, {"errorCode", 500}});  // PATCH, idempotent, rides out 500s too
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(writer.merge_patch(kTasks, "default", "e" + std::to_string(i), {{"spec", {{"user", "x"}}}}));
  sim.admin("close-watches");
  EXPECT_GE(writer.stats().retries, retries_after_creates + 2);
  sim.admin("faults", {{"errorRate", 0}});
  EXPECT_TRUE(eventually([&] { return cache_state(informer) == server_state(client); }));
  EXPECT_EQ(recorder.duplicates(), 0u);
  informer.stop();
}

TEST(AgainstKubeSim, ConsistencyCheckDetectsALostEventAndRelists) {
  Sim sim;
  Client& client = sim.client;
  ASSERT_TRUE(client.create(kTasks, "default", task_json("a")));
  ASSERT_TRUE(client.create(kTasks, "default", task_json("b")));
  InformerOptions options = fast_options();
  options.consistency_check_interval = 300ms;
  Informer informer(client, options);
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(10s));
  ASSERT_TRUE(sim.process.wait_for_watches(1));  // a watch started later would replay the lost event
  sim.admin("faults", {{"dropWatchEvents", 1}});
  ASSERT_TRUE(client.merge_patch(kTasks, "default", "a", {{"spec", {{"user", "lost"}}}}));  // never reaches the watch
  ASSERT_TRUE(
      client.merge_patch(kTasks, "default", "b", {{"spec", {{"user", "seen"}}}}));  // moves the cache's version past it
  EXPECT_TRUE(eventually([&] { return informer.metrics().consistency_mismatches >= 1; }));
  EXPECT_TRUE(eventually([&] { return cache_state(informer) == server_state(client); }));
  EXPECT_EQ((*informer.get("default", "a"))["spec"]["user"], "lost");
  informer.stop();
}

TEST(AgainstKubeSim, StopAbandonsAListTheServerIsSlowToAnswer) {
  Sim sim;
  ASSERT_TRUE(sim.client.create(kTasks, "default", task_json("a")));
  sim.admin("faults", {{"latencyMs", 60'000}});  // every request now takes a minute
  Informer informer(sim.client, fast_options());
  informer.start();
  EXPECT_FALSE(informer.wait_for_sync(300ms));  // the list is in flight
  const auto before = std::chrono::steady_clock::now();
  informer.stop();
  // libcurl notices the cancel within about a second.
  EXPECT_LT(std::chrono::steady_clock::now() - before, 5s);
  sim.admin("faults", {{"latencyMs", 0}});
}

TEST(AgainstKubeSim, InformerSyncsWhileWritesOutrunItsContinueTokens) {
  // A window of 5 changes: a token is too old after 5 writes, and a page
  // takes longer than a write, so paging through 200 Tasks never finishes.
  Sim sim({"--history", "5"});
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(sim.client.create(kTasks, "default", task_json("t" + std::to_string(i))));
  std::atomic<bool> writing{true};
  std::thread writer([&] {
    Client client(sim.process.config());
    for (int i = 0; writing; ++i)
      (void)client.merge_patch(kTasks, "default", "t" + std::to_string(i % 200),
                               {{"spec", {{"user", std::to_string(i)}}}});
  });
  InformerOptions options = fast_options();
  options.page_size = 2;
  sim.admin("faults", {{"latencyMs", 5}});
  Informer informer(sim.client, options);
  informer.start();
  const bool synced = informer.wait_for_sync(20s);
  writing = false;
  writer.join();
  sim.admin("faults", {{"latencyMs", 0}});
  EXPECT_TRUE(synced);
  EXPECT_GE(informer.metrics().list_fallbacks, 1u);
  EXPECT_TRUE(eventually([&] { return cache_state(informer) == server_state(sim.client); }));
  informer.stop();
}

}  // namespace
}  // namespace k8s4r::kube
