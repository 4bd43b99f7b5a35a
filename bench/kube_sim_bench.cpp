// Benchmark of k8s4r-kube-sim over loopback, as clients see it:
//  1. merge-patches per second on /status of Task objects with 1, 4 and 16
//     keep-alive client connections, each patching its own Task;
//  2. watch fan-out: events per second delivered to 100 watchers while one
//     writer patches a Task's status.
// It starts the real binary on a free port, applies the Task CRD with kubectl,
// repeats each measurement and prints medians. Results: docs/performance.md.
//
// Usage: kube_sim_bench --sim build/bin/k8s4r-kube-sim --crds proto-schemas/crds
//                       [--seconds 3] [--repeats 3] [--watchers 100] [--events 200]
#include <httplib.h>
#include "statistics.h"

#include "k8s4r/kube/client.h"
#include "k8s4r/testing/kube_sim_process.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace {

using k8s4r::bench::median;
using nlohmann::json;
using Steady = std::chrono::steady_clock;
const std::string kTasks = "/apis/robot.k8s4r.io/v1alpha1/namespaces/default/tasks";

std::atomic<long> g_failures{0};

// Patches status of `name` as fast as it can until `stop`; returns the count.
// A failed request is counted in g_failures and retried, as clients retry.
long patch_loop(int port, const std::string& name, const std::atomic<bool>& stop) {
  httplib::Client client("127.0.0.1", port);
  client.set_keep_alive(true);
  client.set_tcp_nodelay(true);  // as Go's net/http does; without it Nagle adds ~40 ms a request
  long done = 0;
  const std::string path = kTasks + "/" + name + "/status";
  while (!stop) {
    const std::string body = R"({"status":{"state":"running","statusSeq":)" + std::to_string(done + 1) + "}}";
    auto result = client.Patch(path, body, "application/merge-patch+json");
    if (!result || result->status != 200) {
      if (g_failures++ == 0) {
        std::cerr << "first failed request: "
                  << (result ? "HTTP " + std::to_string(result->status) : httplib::to_string(result.error())) << "\n";
      }
      continue;
    }
    ++done;
  }
  return done;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"k8s4r-kube-sim benchmark"};
  std::string sim_path, crds;
  double seconds = 3;
  int repeats = 3, watchers = 100, events = 200;
  app.add_option("--sim", sim_path, "path to k8s4r-kube-sim")->required()->check(CLI::ExistingFile);
  app.add_option("--crds", crds, "proto-schemas/crds")->required()->check(CLI::ExistingDirectory);
  app.add_option("--seconds", seconds, "seconds per patch measurement")->capture_default_str();
  app.add_option("--repeats", repeats, "repeats of each measurement (median reported)")->capture_default_str();
  app.add_option("--watchers", watchers, "watchers for the fan-out measurement")->capture_default_str();
  app.add_option("--events", events, "status patches the writer makes in the fan-out measurement")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  k8s4r::testing::KubeSimProcess sim(sim_path, {"--history", "1000"});
  k8s4r::kube::Client api(sim.config());
  if (auto applied = sim.apply_crds(api, crds); !applied) {
    std::cerr << "apply CRDs: " << applied.error().to_string() << "\n";
    return 1;
  }
  for (int i = 0; i < 16; ++i) {
    if (!api.create(k8s4r::crd::kTasks, "default", k8s4r::testing::task_json("bench-" + std::to_string(i)))) {
      std::cerr << "create failed\n";
      return 1;
    }
  }
  const int port = sim.port();
  httplib::Client setup("127.0.0.1", port);

  json results = {{"patches_per_second", json::object()}};
  std::printf("status merge-patches per second (median of %d runs of %.1fs)\n", repeats, seconds);
  for (int connections : {1, 4, 16}) {
    std::vector<double> rates;
    for (int run = 0; run < repeats; ++run) {
      std::atomic<bool> stop{false};
      std::vector<long> counts(static_cast<std::size_t>(connections));
      std::vector<std::thread> threads;
      const auto start = Steady::now();
      for (int c = 0; c < connections; ++c) {
        threads.emplace_back(
            [&, c] { counts[static_cast<std::size_t>(c)] = patch_loop(port, "bench-" + std::to_string(c), stop); });
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
      stop = true;
      for (auto& thread : threads) thread.join();
      const double elapsed = std::chrono::duration<double>(Steady::now() - start).count();
      long total = 0;
      for (long count : counts) total += count;
      rates.push_back(static_cast<double>(total) / elapsed);
    }
    std::printf("  %2d connections: %8.0f /s   (runs:", connections, median(rates));
    for (double rate : rates) std::printf(" %.0f", rate);
    std::printf(")\n");
    results["patches_per_second"][std::to_string(connections)] = median(rates);
  }

  std::printf("watch fan-out: %d watchers, %d status patches by one writer (median of %d runs)\n", watchers, events,
              repeats);
  std::vector<double> delivered_rates, writer_rates;
  for (int run = 0; run < repeats; ++run) {
    const std::string start_version =
        json::parse(setup.Get(kTasks + "?limit=1")->body)["metadata"]["resourceVersion"].get<std::string>();
    std::atomic<long> delivered{0};
    std::atomic<int> connected{0};
    std::atomic<bool> finished{false};
    std::vector<std::thread> threads;
    for (int w = 0; w < watchers; ++w) {
      threads.emplace_back([&] {
        httplib::Client client("127.0.0.1", port);
        client.set_read_timeout(60, 0);
        long mine = 0;
        std::string partial;
        bool counted = false;
        client.Get(
            kTasks + "?watch=1&timeoutSeconds=60&resourceVersion=" + start_version, httplib::Headers{},
            [&](const httplib::Response&) {
              connected++;
              counted = true;
              return true;
            },
            [&](const char* data, std::size_t length) {
              for (std::size_t i = 0; i < length; ++i) {
                if (data[i] == '\n') {
                  ++mine;
                  delivered++;
                }
              }
              return mine < events && !finished;
            });
        if (!counted) connected++;
      });
    }
    while (connected < watchers) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    httplib::Client writer("127.0.0.1", port);
    writer.set_tcp_nodelay(true);
    const auto start = Steady::now();
    for (int e = 0; e < events; ++e) {
      writer.Patch(kTasks + "/bench-0/status",
                   R"({"status":{"statusSeq":)" + std::to_string(e + 100000 * (run + 1)) + "}}",
                   "application/merge-patch+json");
    }
    const double writer_seconds = std::chrono::duration<double>(Steady::now() - start).count();
    const long expected = static_cast<long>(watchers) * events;
    while (delivered < expected && std::chrono::duration<double>(Steady::now() - start).count() < 60) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const double elapsed = std::chrono::duration<double>(Steady::now() - start).count();
    finished = true;
    for (auto& thread : threads) thread.join();
    if (delivered < expected)
      std::printf("  run %d: only %ld of %ld events arrived\n", run, delivered.load(), expected);
    delivered_rates.push_back(static_cast<double>(delivered.load()) / elapsed);
    writer_rates.push_back(events / writer_seconds);
  }
  std::printf("  events delivered: %8.0f /s   writer: %.0f patches/s   (runs:", median(delivered_rates),
              median(writer_rates));
  for (double rate : delivered_rates) std::printf(" %.0f", rate);
  std::printf(")\n");
  results["watch_fanout"] = {{"watchers", watchers},
                             {"events_per_second", median(delivered_rates)},
                             {"writer_patches_per_second", median(writer_rates)}};
  results["failed_requests"] = g_failures.load();
  std::printf("failed requests (retried): %ld\n%s\n", g_failures.load(), results.dump().c_str());
  return 0;
}
