#include "k8s4r/testing/kube_sim_process.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

namespace k8s4r::testing {

namespace fs = std::filesystem;
using nlohmann::json;

KubeSimProcess::KubeSimProcess(const std::string& binary, std::vector<std::string> args) {
  static std::atomic<int> counter{0};
  directory_ =
      fs::temp_directory_path() / ("k8s4r-kube-sim-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  fs::create_directories(directory_);
  const std::string kubeconfig = (directory_ / "kubeconfig").string();
  std::vector<std::string> argv = {binary, "--listen", "127.0.0.1:0", "--write-kubeconfig", kubeconfig};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string log = (directory_ / "kube-sim.log").string();
  pid_ = fork();
  if (pid_ == 0) {
    std::vector<char*> raw;
    for (auto& arg : argv) raw.push_back(arg.data());
    raw.push_back(nullptr);
    if (!std::freopen(log.c_str(), "w", stdout) || !std::freopen(log.c_str(), "a", stderr)) _exit(126);
    execv(raw[0], raw.data());
    _exit(127);
  }
  for (int i = 0; i < 400 && !fs::exists(kubeconfig); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  auto loaded = kube::load_kubeconfig(kubeconfig);
  if (!loaded) {
    stop();
    throw std::runtime_error("k8s4r-kube-sim did not start: " + loaded.error().to_string());
  }
  config_ = loaded.value();
}

KubeSimProcess::~KubeSimProcess() { stop(); }

void KubeSimProcess::stop() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::error_code ignored;
  fs::remove_all(directory_, ignored);
}

int KubeSimProcess::port() const { return std::stoi(config_.server.substr(config_.server.rfind(':') + 1)); }

kube::ApiResult<void> KubeSimProcess::apply_crds(kube::Client& client, const std::string& crd_dir) const {
  const kube::Resource crds{"apiextensions.k8s.io", "v1", "customresourcedefinitions", false};
  for (const auto& file : fs::directory_iterator(crd_dir)) {
    if (file.path().extension() != ".yaml") continue;
    auto created = client.create(crds, "", yaml_to_json(YAML::LoadFile(file.path().string())));
    if (!created) return created.error();
  }
  return boost::outcome_v2::success();
}

bool KubeSimProcess::admin(const std::string& what, const json& body) const {
  auto transport = kube::make_curl_transport(config_);
  auto response = transport->send({"POST", "/_sim/" + what, body.dump(), "application/json"});
  return response && response.value().status == 200;
}

json KubeSimProcess::stats() const {
  auto transport = kube::make_curl_transport(config_);
  auto response = transport->send({"GET", "/_sim/stats", "", ""});
  if (!response || response.value().status != 200) return json::object();
  return json::parse(response.value().body, nullptr, false);
}

bool KubeSimProcess::wait_for_watches(std::size_t count) const {
  for (int i = 0; i < 500; ++i) {
    const json current = stats();
    if (current.is_object() && current.value("watchers", std::size_t{0}) >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json object = json::object();
      for (const auto& entry : node) object[entry.first.as<std::string>()] = yaml_to_json(entry.second);
      return object;
    }
    case YAML::NodeType::Sequence: {
      json array = json::array();
      for (const auto& item : node) array.push_back(yaml_to_json(item));
      return array;
    }
    case YAML::NodeType::Scalar: {
      const std::string text = node.Scalar();
      if (node.Tag() == "!") return text;  // quoted: always a string
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

json task_json(const std::string& name) {
  return {{"apiVersion", "robot.k8s4r.io/v1alpha1"},
          {"kind", "Task"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"name", name},
            {"driver", "exec"},
            {"targetRobot", "robot-001"},
            {"config", {{"execConfig", {{"command", "/bin/true"}}}}}}}};
}

}  // namespace k8s4r::testing
