// The stand-in's raw status merge-patch rate, as bench/bridge_bench.py sets it
// beside the bridge's: THREADS threads, each with its own k8s4r::kube::Client
// (the library and connection count the bridge's writers use), merge-patch
// /status of the named Tasks round robin for SECONDS. Prints
// {"patches":N,"failures":N,"seconds":S}.
//
// Usage: status_patch_rate --kubeconfig FILE --namespace NS --tasks FILE [--threads 4] [--seconds 5]
#include "k8s4r/kube/client.h"
#include "k8s4r/kube/config.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  namespace kube = k8s4r::kube;
  CLI::App app{"Raw status merge-patch rate against a Kubernetes API server"};
  std::string kubeconfig, namespace_ = "default", tasks_file;
  int threads = 4;
  double seconds = 5;
  app.add_option("--kubeconfig", kubeconfig)->required();
  app.add_option("--namespace", namespace_);
  app.add_option("--tasks", tasks_file, "a Task name per line")->required();
  app.add_option("--threads", threads)->check(CLI::Range(1, 64));
  app.add_option("--seconds", seconds);
  CLI11_PARSE(app, argc, argv);

  auto config = kube::load_kubeconfig(kubeconfig);
  if (!config) {
    std::cerr << "kubeconfig: " << config.error().message << "\n";
    return 1;
  }
  std::vector<std::string> names;
  std::ifstream in(tasks_file);
  for (std::string name; in >> name;) names.push_back(name);
  if (names.empty()) {
    std::cerr << "no Task names in " << tasks_file << "\n";
    return 1;
  }
  const kube::Resource tasks{"robot.k8s4r.io", "v1alpha1", "tasks", true};
  std::atomic<long> patches{0}, failures{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      kube::Client client(config.value());
      long n = 0;
      for (std::size_t i = static_cast<std::size_t>(t); !stop;
           i = (i + static_cast<std::size_t>(threads)) % names.size()) {
        const nlohmann::json patch{{"status", {{"message", "raw patch " + std::to_string(++n)}}}};
        if (client.merge_patch(tasks, namespace_, names[i], patch, true)) {
          ++patches;
        } else {
          ++failures;
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& worker : workers) worker.join();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << nlohmann::json{{"patches", patches.load()}, {"failures", failures.load()}, {"seconds", took}}.dump()
            << std::endl;
  return failures == 0 ? 0 : 1;
}
