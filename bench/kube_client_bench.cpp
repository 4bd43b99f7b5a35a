// Benchmark of the k8s4r Kubernetes client (common/kube) against
// k8s4r-kube-sim over loopback:
//  1. status merge-patches per second through k8s4r::kube::Client, side by
//     side with a bare HTTP client (cpp-httplib, keep-alive, TCP_NODELAY) doing
//     the same requests: the client's own overhead is the ratio;
//  2. informer throughput: events per second an Informer delivers while
//     writers patch Task statuses.
// Runs alternate between the two clients and medians are reported.
// Results: docs/performance.md.
//
// Usage: kube_client_bench --sim build/bin/k8s4r-kube-sim --crds proto-schemas/crds
//                          [--seconds 3] [--repeats 5] [--events 4000]
#include "k8s4r/kube/client.h"
#include "k8s4r/kube/informer.h"
#include "k8s4r/testing/kube_sim_process.h"
#include "statistics.h"

#include <httplib.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

namespace {

using k8s4r::bench::median;
using nlohmann::json;
using Steady = std::chrono::steady_clock;
namespace kube = k8s4r::kube;
const kube::Resource kTasks{"robot.k8s4r.io", "v1alpha1", "tasks", true};

json status_patch(long seq) { return {{"status", {{"state", "running"}, {"statusSeq", seq}}}}; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"k8s4r Kubernetes client benchmark"};
  std::string sim_path, crds;
  double seconds = 3;
  int repeats = 5, events = 4000;
  app.add_option("--sim", sim_path, "path to k8s4r-kube-sim")->required()->check(CLI::ExistingFile);
  app.add_option("--crds", crds, "proto-schemas/crds")->required()->check(CLI::ExistingDirectory);
  app.add_option("--seconds", seconds, "seconds per patch measurement")->capture_default_str();
  app.add_option("--repeats", repeats, "runs of each measurement")->capture_default_str();
  app.add_option("--events", events, "status patches made while the informer counts")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  k8s4r::testing::KubeSimProcess sim(sim_path, {"--history", "1000"});
  kube::Client client(sim.config());
  if (auto applied = sim.apply_crds(client, crds); !applied) {
    std::cerr << "apply CRDs: " << applied.error().to_string() << "\n";
    return 1;
  }
  for (const char* name : {"raw", "client", "w0", "w1", "w2", "w3"}) {
    if (!client.create(kTasks, "default", k8s4r::testing::task_json(name))) return 1;
  }
  const int port = sim.port();
  const kube::ClientConfig config = sim.config();

  std::printf("status merge-patches per second, one connection (median of %d runs of %.1fs, alternating)\n", repeats,
              seconds);
  std::vector<double> raw_rates, client_rates;
  long seq = 0;
  for (int run = 0; run < repeats; ++run) {
    {
      httplib::Client raw("127.0.0.1", port);
      raw.set_keep_alive(true);
      raw.set_tcp_nodelay(true);
      long done = 0;
      const auto start = Steady::now();
      while (std::chrono::duration<double>(Steady::now() - start).count() < seconds) {
        auto result = raw.Patch(kTasks.path("default", "raw", "status"), status_patch(++seq).dump(),
                                "application/merge-patch+json");
        if (result && result->status == 200) ++done;
      }
      raw_rates.push_back(static_cast<double>(done) / std::chrono::duration<double>(Steady::now() - start).count());
    }
    {
      long done = 0;
      const auto start = Steady::now();
      while (std::chrono::duration<double>(Steady::now() - start).count() < seconds) {
        if (client.merge_patch(kTasks, "default", "client", status_patch(++seq), true)) ++done;
      }
      client_rates.push_back(static_cast<double>(done) / std::chrono::duration<double>(Steady::now() - start).count());
    }
  }
  std::printf("  bare HTTP client: %8.0f /s   (runs:", median(raw_rates));
  for (double rate : raw_rates) std::printf(" %.0f", rate);
  std::printf(")\n  k8s4r::kube::Client: %6.0f /s   (runs:", median(client_rates));
  for (double rate : client_rates) std::printf(" %.0f", rate);
  std::vector<double> ratios;  // per pair of neighbouring runs, which share the machine's mood
  for (std::size_t i = 0; i < raw_rates.size(); ++i) ratios.push_back(client_rates[i] / raw_rates[i]);
  std::printf(")\n  ratio client/bare, median of per-run ratios: %.2f\n", median(ratios));

  std::printf("informer: events delivered while 4 writers make %d status patches (median of %d runs)\n", events,
              repeats);
  std::vector<double> informer_rates, writer_rates;
  for (int run = 0; run < repeats; ++run) {
    kube::Informer informer(client, kube::InformerOptions{kTasks, "default"});
    std::atomic<long> updates{0};
    informer.add_handler({nullptr, [&](const kube::ObjectPtr&, const kube::ObjectPtr&) { ++updates; }, nullptr, {}});
    informer.start();
    informer.wait_for_sync(std::chrono::seconds(10));
    const auto start = Steady::now();
    std::vector<std::thread> writers;
    for (int w = 0; w < 4; ++w) {
      writers.emplace_back([&, w] {
        kube::Client writer(config);
        for (int i = 0; i < events / 4; ++i) {
          (void)writer.merge_patch(kTasks, "default", "w" + std::to_string(w), status_patch(1'000'000L * (run + 1) + i),
                                   true);
        }
      });
    }
    for (auto& writer : writers) writer.join();
    const double write_seconds = std::chrono::duration<double>(Steady::now() - start).count();
    while (updates < events && std::chrono::duration<double>(Steady::now() - start).count() < 60) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const double elapsed = std::chrono::duration<double>(Steady::now() - start).count();
    informer.stop();
    if (updates < events) std::printf("  run %d: only %ld of %d updates arrived\n", run, updates.load(), events);
    informer_rates.push_back(static_cast<double>(updates.load()) / elapsed);
    writer_rates.push_back(events / write_seconds);
  }
  std::printf("  informer events: %8.0f /s   writers: %.0f patches/s   (runs:", median(informer_rates),
              median(writer_rates));
  for (double rate : informer_rates) std::printf(" %.0f", rate);
  std::printf(")\n");
  std::printf("%s\n", json{{"bare_patches_per_second", median(raw_rates)},
                           {"client_patches_per_second", median(client_rates)},
                           {"informer_events_per_second", median(informer_rates)}}
                          .dump()
                          .c_str());
  return 0;
}
