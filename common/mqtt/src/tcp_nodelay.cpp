#include "k8s4r/mqtt/tcp_nodelay.h"

#include "broker_address.h"

#include <cstring>
#include <filesystem>
#include <vector>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

namespace k8s4r::mqtt {

namespace {

bool same_address(const sockaddr_storage& a, const sockaddr* b) {
  if (a.ss_family != b->sa_family) return false;
  if (a.ss_family == AF_INET) {
    const auto* x = reinterpret_cast<const sockaddr_in*>(&a);
    const auto* y = reinterpret_cast<const sockaddr_in*>(b);
    return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto* x = reinterpret_cast<const sockaddr_in6*>(&a);
    const auto* y = reinterpret_cast<const sockaddr_in6*>(b);
    return x->sin6_port == y->sin6_port && std::memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
  }
  return false;
}

}  // namespace

int disable_nagle_towards(const std::string& broker_url) {
  const auto peer = broker_address(broker_url);
  if (!peer) return 0;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  if (getaddrinfo(peer->host.c_str(), peer->port.c_str(), &hints, &resolved) != 0) return 0;
  int set = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", error)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    sockaddr_storage remote{};
    socklen_t length = sizeof remote;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &length) != 0) continue;
    int type = 0;
    socklen_t type_length = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_length) != 0 || type != SOCK_STREAM) continue;
    for (const addrinfo* candidate = resolved; candidate != nullptr; candidate = candidate->ai_next) {
      if (!same_address(remote, candidate->ai_addr)) continue;
      const int on = 1;
      if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) == 0) ++set;
      break;
    }
  }
  freeaddrinfo(resolved);
  return set;
}

}  // namespace k8s4r::mqtt
