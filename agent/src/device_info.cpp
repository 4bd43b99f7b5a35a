#include "k8s4r/agent/device_info.h"

#include <sys/utsname.h>
#include <unistd.h>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace k8s4r::agent {

namespace {

std::map<std::string, std::string> os_release() {
  std::map<std::string, std::string> values;
  std::ifstream in("/etc/os-release");
  for (std::string line; std::getline(in, line);) {
    const auto equals = line.find('=');
    if (equals == std::string::npos) continue;
    std::string value = line.substr(equals + 1);
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'')) value = value.substr(1, value.size() - 2);
    values[line.substr(0, equals)] = value;
  }
  return values;
}

std::string go_arch(const std::string& machine) {
  if (machine == "x86_64") return "amd64";
  if (machine == "aarch64") return "arm64";
  if (machine.rfind("arm", 0) == 0) return "arm";
  if (machine == "i686" || machine == "i386") return "386";
  return machine;
}

}  // namespace

DeviceInfo collect_device_info() {
  DeviceInfo info;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) info.hostname = host;
  utsname names{};
  if (uname(&names) == 0) {
    info.platform.os = "linux";
    info.platform.kernel_version = names.release;
    info.platform.kernel_arch = names.machine;
    info.platform.arch = go_arch(names.machine);
  }
  const auto release = os_release();
  auto value_of = [&](const char* key) {
    auto found = release.find(key);
    return found == release.end() ? std::string() : found->second;
  };
  info.platform.platform = value_of("ID");
  info.platform.platform_family = value_of("ID_LIKE").empty() ? value_of("ID") : value_of("ID_LIKE");
  info.platform.platform_version = value_of("VERSION_ID");

  info.cpu.logical_cores = static_cast<std::int64_t>(std::thread::hardware_concurrency());
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && info.cpu.model_name.empty()) info.cpu.model_name = value;
    if (key == "vendor_id" && info.cpu.vendor.empty()) info.cpu.vendor = value;
  }

  std::ifstream meminfo("/proc/meminfo");
  std::map<std::string, std::int64_t> kib;
  for (std::string key, unit; meminfo >> key;) {
    std::int64_t value = 0;
    meminfo >> value;
    std::getline(meminfo, unit);
    if (!key.empty() && key.back() == ':') key.pop_back();
    kib[key] = value;
  }
  if (kib.count("MemTotal")) {
    const std::int64_t total = kib["MemTotal"] * 1024, available = kib["MemAvailable"] * 1024;
    info.memory.total = total;
    info.memory.available = available;
    info.memory.free = kib["MemFree"] * 1024;
    info.memory.buffers = kib["Buffers"] * 1024;
    info.memory.cached = kib["Cached"] * 1024;
    info.memory.used = total - available;
    if (total > 0)
      info.memory.usage_percent = 100.0 * static_cast<double>(total - available) / static_cast<double>(total);
  }
  return info;
}

}  // namespace k8s4r::agent
