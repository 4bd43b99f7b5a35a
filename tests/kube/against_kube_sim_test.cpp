// The client and the informer against the real k8s4r-kube-sim binary over
// loopback: TLS with a CA and a bearer token, conflicts as values, and an
// informer that recovers from cut watches, 410 Expired, 500s and 429s, and
// lost events, each time ending with a cache equal to the server's objects and
// every change delivered once.
#include "k8s4r/kube/client.h"
#include "k8s4r/kube/informer.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

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

const Resource kTasks{"robot.k8s4r.io", "v1alpha1", "tasks", true};
const Resource kCrds{"apiextensions.k8s.io", "v1", "customresourcedefinitions", false};

// YAML to JSON with the types a YAML 1.2 core schema gives plain scalars.
json to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json object = json::object();
      for (const auto& entry : node) object[entry.first.as<std::string>()] = to_json(entry.second);
      return object;
    }
    case YAML::NodeType::Sequence: {
      json array = json::array();
      for (const auto& item : node) array.push_back(to_json(item));
      return array;
    }
    case YAML::NodeType::Scalar: {
      const std::string text = node.Scalar();
      if (node.Tag() == "!") return text;  // quoted
      if (text == "true" || text == "false") return text == "true";
      if (text == "null" || text == "~") return nullptr;
      try {
        std::size_t used = 0;
        const long long number = std::stoll(text, &used);
        if (used == text.size()) return number;
      } catch (...) {
      }
      return text;
    }
    default:
      return nullptr;
  }
}

class KubeSim {
 public:
  explicit KubeSim(std::vector<std::string> args = {}) {
    dir_ = fs::temp_directory_path() /
           ("k8s4r-client-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::create_directories(dir_);
    const std::string kubeconfig = (dir_ / "kubeconfig").string();
    std::vector<std::string> argv = {K8S4R_KUBE_SIM, "--listen", "127.0.0.1:0", "--write-kubeconfig", kubeconfig};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<char*> raw;
      for (auto& arg : argv) raw.push_back(arg.data());
      raw.push_back(nullptr);
      const std::string log = (dir_ / "kube-sim.log").string();
      freopen(log.c_str(), "w", stdout);
      freopen(log.c_str(), "a", stderr);
      execv(raw[0], raw.data());
      _exit(127);
    }
    for (int i = 0; i < 400 && !fs::exists(kubeconfig); ++i) std::this_thread::sleep_for(25ms);
    auto loaded = load_kubeconfig(kubeconfig);
    if (!loaded) throw std::runtime_error("k8s4r-kube-sim did not start: " + loaded.error().to_string());
    config_ = loaded.value();
  }
  ~KubeSim() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    fs::remove_all(dir_);
  }
  const ClientConfig& config() const { return config_; }
  const fs::path& dir() const { return dir_; }

  void apply_task_crd(Client& client) {
    auto created = client.create(kCrds, "", to_json(YAML::LoadFile(std::string(K8S4R_CRD_DIR) + "/tasks.yaml")));
    ASSERT_TRUE(created) << created.error().to_string();
  }
  // The admin endpoints of the stand-in, through the same client.
  void admin(Client& client, const std::string& what, const json& body = json::object()) {
    Resource admin{"", "", "", false};
    (void)admin;
    auto transport = make_curl_transport(config_);
    auto response = transport->send({"POST", "/_sim/" + what, body.dump(), "application/json"});
    ASSERT_TRUE(response && response.value().status == 200) << what;
    (void)client;
  }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
  pid_t pid_ = -1;
  ClientConfig config_;
};

json task(const std::string& name) {
  return {{"apiVersion", "robot.k8s4r.io/v1alpha1"},
          {"kind", "Task"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"name", name},
            {"driver", "exec"},
            {"targetRobot", "robot-001"},
            {"config", {{"execConfig", {{"command", "/bin/true"}}}}}}}};
}

// Records every delivered change, and checks none arrives twice.
struct Recorder {
  std::mutex mutex;
  std::multiset<std::string> seen;  // "name@resourceVersion" or "deleted name"
  void handle(Informer& informer) {
    informer.add_handler({[this](const ObjectPtr& o) { add(*o); },
                          [this](const ObjectPtr&, const ObjectPtr& o) { add(*o); },
                          [this](const ObjectPtr& o) {
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
  KubeSim sim({"--token", "s3cret", "--tls-cert", (certs / "server.crt").string(), "--tls-key",
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
  fs::remove_all(certs);
}

TEST(AgainstKubeSim, ConflictAndNotFoundAreValues) {
  KubeSim sim;
  Client client(sim.config());
  sim.apply_task_crd(client);
  auto created = client.create(kTasks, "default", task("a"));
  ASSERT_TRUE(created) << created.error().to_string();
  json stale = created.value();
  ASSERT_TRUE(client.merge_patch(kTasks, "default", "a", {{"metadata", {{"labels", {{"x", "y"}}}}}}));
  stale["spec"]["user"] = "late";
  auto conflict = client.replace(kTasks, "default", "a", stale);
  ASSERT_FALSE(conflict);
  EXPECT_TRUE(conflict.error().conflict());
  EXPECT_NE(conflict.error().message.find("the object has been modified"), std::string::npos);
  EXPECT_TRUE(client.get(kTasks, "default", "missing").error().not_found());
  EXPECT_TRUE(client.create(kTasks, "default", task("a")).error().already_exists());
  auto status = client.json_patch(kTasks, "default", "a",
                                  json::parse(R"([{"op":"add","path":"/status","value":{"state":"running"}}])"), true);
  ASSERT_TRUE(status) << status.error().to_string();
  EXPECT_EQ(status.value()["status"]["state"], "running");
}

TEST(AgainstKubeSim, InformerResumesAfterCutWatches) {
  KubeSim sim;
  Client client(sim.config());
  sim.apply_task_crd(client);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(client.create(kTasks, "default", task("t" + std::to_string(i))));
  Informer informer(client, fast_options());
  Recorder recorder;
  recorder.handle(informer);
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(10s));
  for (int round = 0; round < 3; ++round) {
    sim.admin(client, "close-watches");
    ASSERT_TRUE(client.merge_patch(kTasks, "default", "t" + std::to_string(round),
                                   {{"spec", {{"user", "u" + std::to_string(round)}}}}));
    ASSERT_TRUE(client.create(kTasks, "default", task("new" + std::to_string(round))));
  }
  ASSERT_TRUE(client.remove(kTasks, "default", "t4"));
  EXPECT_TRUE(eventually([&] { return cache_state(informer) == server_state(client); }));
  EXPECT_TRUE(recorder.has("deleted t4"));
  EXPECT_EQ(recorder.duplicates(), 0u);
  EXPECT_EQ(informer.metrics().relists_after_expired, 0u);  // resumed, never relisted
  EXPECT_GE(informer.metrics().watches, 4u);
  informer.stop();
}

TEST(AgainstKubeSim, InformerRelistsAfterExpired) {
  KubeSim sim({"--history", "5"});
  Client client(sim.config());
  sim.apply_task_crd(client);
  ASSERT_TRUE(client.create(kTasks, "default", task("a")));
  ASSERT_TRUE(client.create(kTasks, "default", task("b")));
  Informer informer(client, fast_options());
  Recorder recorder;
  recorder.handle(informer);
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(10s));
  // The informer misses these changes, and the window forgets them: its next
  // watch gets 410 and it must list again.
  sim.admin(client, "faults", {{"dropWatchEvents", 3}});
  auto changed = client.merge_patch(kTasks, "default", "a", {{"spec", {{"user", "changed"}}}});
  ASSERT_TRUE(client.remove(kTasks, "default", "b"));
  ASSERT_TRUE(client.create(kTasks, "default", task("c")));
  sim.admin(client, "compact");
  sim.admin(client, "close-watches");
  EXPECT_TRUE(eventually([&] { return cache_state(informer) == server_state(client); }));
  EXPECT_GE(informer.metrics().relists_after_expired, 1u);
  EXPECT_TRUE(recorder.has("a@" + changed.value()["metadata"]["resourceVersion"].get<std::string>()));
  EXPECT_TRUE(recorder.has("deleted b"));
  EXPECT_EQ(recorder.duplicates(), 0u);
  informer.stop();
}

TEST(AgainstKubeSim, InformerAndClientRideOutServerErrorsAndThrottling) {
  KubeSim sim;
  Client client(sim.config());
  sim.apply_task_crd(client);
  Informer informer(client, fast_options());
  Recorder recorder;
  recorder.handle(informer);
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(10s));
  ClientConfig patient = sim.config();
  patient.max_attempts = 20;
  Client writer(patient);
  sim.admin(client, "faults", {{"errorRate", 0.5}, {"errorCode", 500}});
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(writer.create(kTasks, "default", task("e" + std::to_string(i))));
  sim.admin(client, "close-watches");
  sim.admin(client, "faults", {{"errorCode", 429}, {"retryAfterSeconds", 0}});
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(writer.merge_patch(kTasks, "default", "e" + std::to_string(i), {{"spec", {{"user", "x"}}}}));
  sim.admin(client, "close-watches");
  EXPECT_GT(writer.stats().retries, 0u);
  sim.admin(client, "faults", {{"errorRate", 0}});
  EXPECT_TRUE(eventually([&] { return cache_state(informer) == server_state(client); }));
  EXPECT_EQ(recorder.duplicates(), 0u);
  informer.stop();
}

TEST(AgainstKubeSim, ConsistencyCheckDetectsALostEventAndRelists) {
  KubeSim sim;
  Client client(sim.config());
  sim.apply_task_crd(client);
  ASSERT_TRUE(client.create(kTasks, "default", task("a")));
  ASSERT_TRUE(client.create(kTasks, "default", task("b")));
  InformerOptions options = fast_options();
  options.consistency_check_interval = 300ms;
  Informer informer(client, options);
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(10s));
  sim.admin(client, "faults", {{"dropWatchEvents", 1}});
  ASSERT_TRUE(client.merge_patch(kTasks, "default", "a", {{"spec", {{"user", "lost"}}}}));  // never reaches the watch
  ASSERT_TRUE(
      client.merge_patch(kTasks, "default", "b", {{"spec", {{"user", "seen"}}}}));  // moves the cache's version past it
  EXPECT_TRUE(eventually([&] { return informer.metrics().consistency_mismatches >= 1; }));
  EXPECT_TRUE(eventually([&] { return cache_state(informer) == server_state(client); }));
  EXPECT_EQ((*informer.get("default", "a"))["spec"]["user"], "lost");
  informer.stop();
}

}  // namespace
}  // namespace k8s4r::kube
