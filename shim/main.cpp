// k8s4r-task-shim: the parent of one task's process (shim.h). Started by
// k8s4r-agent, never by hand.
#include "k8s4r/shim/shim.h"

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  std::string error;
  const auto options = k8s4r::shim::parse_shim_args(std::vector<std::string>(argv + 1, argv + argc), error);
  if (!options) {
    std::fprintf(stderr,
                 "k8s4r-task-shim: %s\nusage: k8s4r-task-shim --exit-file FILE [--cgroup DIR] [--report-fd N] -- "
                 "COMMAND [ARG...]\n",
                 error.c_str());
    return 64;
  }
  return k8s4r::shim::run_shim(*options);
}
