// k8s4r-task-shim: the parent of one task's process (shim.h). Started by
// k8s4r-agent, never by hand.
#include "k8s4r/shim/shim.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::printf("k8s4r-task-shim %s\n", K8S4R_VERSION);
    return 0;
  }
  if (argc == 3 && std::string(argv[1]) == "--spare-fd") {
    char* end = nullptr;
    const long fd = std::strtol(argv[2], &end, 10);
    if (end != argv[2] && *end == '\0' && fd >= 0 && fd < 1'000'000)
      return k8s4r::shim::run_spare(static_cast<int>(fd));
  }
  std::string error;
  const auto options = k8s4r::shim::parse_shim_args(std::vector<std::string>(argv + 1, argv + argc), error);
  if (!options) {
    std::fprintf(stderr,
                 "k8s4r-task-shim: %s\nusage: k8s4r-task-shim --exit-file FILE [--cgroup DIR] [--report-fd N] "
                 "[--stdout FILE] [--stderr FILE] [--output truncate|append] [--chdir DIR] "
                 "[--user UID:GID[:GROUP,...]] -- COMMAND [ARG...]\n       k8s4r-task-shim --spare-fd N\n"
                 "       k8s4r-task-shim --version\n",
                 error.c_str());
    return 64;
  }
  return k8s4r::shim::run_shim(*options);
}
