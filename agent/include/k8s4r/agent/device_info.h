// What the agent tells the bridge about its robot when it registers: host
// name, OS and kernel, CPU and memory, read from uname(2), /etc/os-release,
// /proc/cpuinfo and /proc/meminfo. Fields that cannot be read stay empty.
#pragma once

#include "k8s4r/common/messages.h"

namespace k8s4r::agent {

DeviceInfo collect_device_info();

}  // namespace k8s4r::agent
