// Benchmark of the agent's process monitor (agent/monitor.h) with real
// processes:
//  1. timeout precision: 200 concurrent tasks with staggered timeouts, half of
//     them ignoring SIGTERM; how late SIGTERM comes after each deadline and
//     SIGKILL after deadline + killTimeout (p50/p99/max);
//  2. threads and RSS of this process with 0, 100 and 1,000 running tasks;
//  3. spawn-exit-reap cycles per second, with a small heap and with a 2 GiB
//     touched heap, beside fork()+exec() doing the same.
// Results: docs/performance.md.
//
// Usage: agent_monitor_bench [--tasks 200] [--cycles 300] [--heap-mib 2048]
#include "statistics.h"

#include "k8s4r/agent/monitor.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

namespace {

using namespace std::chrono_literals;
using namespace k8s4r::agent;
using Steady = std::chrono::steady_clock;

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto index = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(index, values.size() - 1)];
}

long status_field(const std::string& name) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + ":", 0) == 0) return std::stol(line.substr(name.size() + 1));
  }
  return -1;
}

ProcessSpec program(std::vector<std::string> argv) {
  ProcessSpec spec;
  spec.command = argv.front();
  spec.args.assign(argv.begin() + 1, argv.end());
  spec.env = {{"PATH", "/usr/bin:/bin"}};
  spec.stdout_path = "/dev/null";
  spec.stderr_path = "/dev/null";
  return spec;
}

struct Exits {
  std::mutex mutex;
  std::condition_variable changed;
  std::size_t count = 0;
  void add() {
    std::lock_guard lock(mutex);
    ++count;
    changed.notify_all();
  }
  void wait_for(std::size_t total) {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return count >= total; });
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"k8s4r agent monitor benchmark"};
  int tasks = 200, cycles = 300;
  std::size_t heap_mib = 2048;
  app.add_option("--tasks", tasks, "concurrent tasks for the timeout measurement")->capture_default_str();
  app.add_option("--cycles", cycles, "spawn-exit-reap cycles per measurement")->capture_default_str();
  app.add_option("--heap-mib", heap_mib, "heap held during the second spawn measurement")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // ---- 1. timeout precision -------------------------------------------------------
  {
    std::mutex mutex;
    std::vector<double> term_late, kill_late;
    Exits exits;
    Monitor monitor({[&](const TaskExit&) { exits.add(); },
                     [&](const SignalAction& action, std::chrono::nanoseconds lateness) {
                       std::lock_guard lock(mutex);
                       (action.signal == SIGTERM ? term_late : kill_late)
                           .push_back(std::chrono::duration<double, std::micro>(lateness).count());
                     }});
    std::mt19937 random(42);
    std::uniform_int_distribution<int> timeout_ms(300, 1300);
    for (int i = 0; i < tasks; ++i) {
      // Half ignore SIGTERM (sleep inherits the ignored signal), so SIGKILL is needed.
      auto spec = i % 2 ? program({"/bin/sh", "-c", "trap '' TERM; exec sleep 1000"}) : program({"/bin/sleep", "1000"});
      if (!monitor.launch("t" + std::to_string(i), spec, std::nullopt, std::chrono::milliseconds(timeout_ms(random)),
                          300ms))
        return 1;
    }
    exits.wait_for(static_cast<std::size_t>(tasks));
    std::printf("timeout precision, %d concurrent tasks (half ignore SIGTERM), lateness in microseconds:\n", tasks);
    std::printf("  SIGTERM after the deadline:            p50 %7.0f   p99 %7.0f   max %7.0f   (n=%zu)\n",
                percentile(term_late, 0.5), percentile(term_late, 0.99), percentile(term_late, 1.0), term_late.size());
    std::printf("  SIGKILL after deadline + killTimeout:  p50 %7.0f   p99 %7.0f   max %7.0f   (n=%zu)\n",
                percentile(kill_late, 0.5), percentile(kill_late, 0.99), percentile(kill_late, 1.0), kill_late.size());
  }

  // ---- 2. threads and memory ----------------------------------------------------------
  {
    Exits exits;
    Monitor monitor({[&](const TaskExit&) { exits.add(); }, nullptr});
    std::printf("threads and RSS of the process holding the monitor:\n");
    int running = 0;
    for (int target : {0, 100, 1000}) {
      for (; running < target; ++running) {
        if (!monitor.launch("s" + std::to_string(running), program({"/bin/sleep", "1000"}), std::nullopt, std::nullopt,
                            1s))
          return 1;
      }
      std::this_thread::sleep_for(200ms);
      std::printf("  %4d running tasks: %ld threads, RSS %ld KiB\n", target, status_field("Threads"),
                  status_field("VmRSS"));
    }
    for (int i = 0; i < running; ++i) monitor.stop_task("s" + std::to_string(i), StopReason::shutdown);
    exits.wait_for(static_cast<std::size_t>(running));
  }

  // ---- 3. spawn cycles --------------------------------------------------------------
  const auto monitor_cycles = [&] {
    Exits exits;
    Monitor monitor({[&](const TaskExit&) { exits.add(); }, nullptr});
    const auto start = Steady::now();
    for (int i = 0; i < cycles; ++i) {
      if (!monitor.launch("c" + std::to_string(i), program({"/bin/true"}), std::nullopt, std::nullopt, 1s)) return 0.0;
      exits.wait_for(static_cast<std::size_t>(i + 1));
    }
    return cycles / std::chrono::duration<double>(Steady::now() - start).count();
  };
  const auto fork_cycles = [&] {
    const auto start = Steady::now();
    for (int i = 0; i < cycles; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        execl("/bin/true", "/bin/true", static_cast<char*>(nullptr));
        _exit(127);
      }
      waitpid(pid, nullptr, 0);
    }
    return cycles / std::chrono::duration<double>(Steady::now() - start).count();
  };
  std::printf("spawn-exit-reap cycles per second (/bin/true, %d cycles):\n", cycles);
  const double small_monitor = monitor_cycles(), small_fork = fork_cycles();
  std::printf("  small heap:      monitor (posix_spawn) %6.0f /s   fork+exec %6.0f /s\n", small_monitor, small_fork);
  {
    std::vector<char> heap(heap_mib * 1024 * 1024);
    std::memset(heap.data(), 1, heap.size());  // touched, so fork must copy its page tables
    const double big_monitor = monitor_cycles(), big_fork = fork_cycles();
    std::printf("  %zu MiB heap:   monitor (posix_spawn) %6.0f /s   fork+exec %6.0f /s\n", heap_mib, big_monitor,
                big_fork);
    std::printf("  posix_spawn keeps %.0f%% of its rate with the heap; fork+exec keeps %.0f%%\n",
                100 * big_monitor / small_monitor, 100 * big_fork / small_fork);
  }
  return 0;
}
