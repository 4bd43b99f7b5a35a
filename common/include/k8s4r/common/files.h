// Reading a whole file the way daemons must: with read(2), never throwing.
// A /proc file of a process that just exited fails mid-read with ESRCH, which
// iostreams turn into an exception; here it is an Error like any other.
#pragma once

#include "k8s4r/common/result.h"

#include <string>

namespace k8s4r {

// The whole content of `path`. The Error's message names the path and why
// ("cannot open /proc/42/stat: No such file or directory").
Result<std::string> read_file(const std::string& path);

}  // namespace k8s4r
