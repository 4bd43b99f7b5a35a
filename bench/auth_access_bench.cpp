// The k8s4r-auth plugin's per-message check (auth::decide_access), which
// Mosquitto calls in its one thread for every message a robot publishes and
// every message delivered to one: nanoseconds per call, with a table of
// --robots logins, over a mix of a heartbeat written, a task report written
// and a dispatch read, each by its own robot (ids as the fleet's: robot-N).
//
// Usage: build/bench/auth_access_bench [--robots 100000] [--calls 3000000] [--runs 5]
// Prints the median of the runs and each run, in ns per call.
#include "k8s4r/auth/access.h"
#include "k8s4r/auth/login_table.h"
#include "k8s4r/common/slots.h"
#include "statistics.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  using namespace k8s4r;
  CLI::App app{"ns per decide_access call of the k8s4r-auth plugin"};
  std::size_t robots = 100000, calls = 3000000, runs = 5;
  app.add_option("--robots", robots, "logins in the table");
  app.add_option("--calls", calls, "calls per run");
  app.add_option("--runs", runs, "runs");
  CLI11_PARSE(app, argc, argv);

  auth::LoginTable table;
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < robots; ++i) {
    ids.push_back("warehouse-7-robot-" + std::to_string(i));  // 19-24 characters: past the short-string buffer
    logins::StateRecord record;
    record.robot_id = ids.back();
    record.digest[0] = static_cast<std::uint8_t>(i);
    table.restore(record);
  }
  struct Call {
    const std::string* id;
    std::string topic;
    int access;
  };
  std::vector<Call> mix;
  for (std::size_t i = 0; i < std::min<std::size_t>(robots, 10000); ++i) {
    const std::string& id = ids[(i * 7919) % robots];
    mix.push_back({&id, "k8s4r/robots/" + id + "/heartbeat", auth::kWrite});
    mix.push_back({&id, "k8s4r/robots/" + id + "/tasks/0a0a0a0a-0000-4000-8000-00000000beef/status", auth::kWrite});
    mix.push_back({&id, "k8s4r/robots/" + id + "/tasks/dispatch", auth::kRead});
  }
  const auth::Users users{{"k8s4r-bridge"}, {"k8s4r-operator"}};
  std::vector<double> ns_per_call;
  std::size_t allowed = 0;
  for (std::size_t run = 0; run < runs; ++run) {
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < calls; ++i) {
      const Call& call = mix[i % mix.size()];
      allowed += auth::decide_access(users, table, call.id->c_str(), call.id->c_str(), call.topic, call.access) ==
                 auth::Verdict::allow;
    }
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    ns_per_call.push_back(took.count() / static_cast<double>(calls));
  }
  if (allowed != calls * runs) {
    std::fprintf(stderr, "%zu of %zu calls allowed: the mix is wrong\n", allowed, calls * runs);
    return 1;
  }
  std::printf("decide_access, %zu logins: median %.0f ns per call", robots, bench::median(ns_per_call));
  bench::print_runs(ns_per_call);
}
