// disable_nagle_towards over real loopback sockets: it finds the process's
// sockets by their peer and leaves every other socket as it was.
#include "k8s4r/mqtt/tcp_nodelay.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

namespace k8s4r::mqtt {
namespace {

// A listening loopback socket on a free port.
struct Listener {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int port = 0;
  Listener() {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    listen(fd, 4);
    socklen_t length = sizeof address;
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
    port = ntohs(address.sin_port);
  }
  ~Listener() { close(fd); }
  int connect_to() const {
    const int client = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    return client;
  }
};

int nodelay(int fd) {
  int value = -1;
  socklen_t length = sizeof value;
  getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &value, &length);
  return value;
}

TEST(TcpNodelay, SetsItOnTheSocketToTheBrokerOnly) {
  Listener broker, other;
  const int to_broker = broker.connect_to();
  const int to_other = other.connect_to();
  ASSERT_EQ(nodelay(to_broker), 0);  // the kernel's default, which Paho C 1.3.12 keeps

  EXPECT_EQ(disable_nagle_towards("tcp://127.0.0.1:" + std::to_string(broker.port)), 1);
  EXPECT_NE(nodelay(to_broker), 0);
  EXPECT_EQ(nodelay(to_other), 0);
  close(to_broker);
  close(to_other);
}

TEST(TcpNodelay, ResolvesNamesAndTakesEveryTcpScheme) {
  Listener broker;
  const int first = broker.connect_to();
  EXPECT_EQ(disable_nagle_towards("ssl://localhost:" + std::to_string(broker.port)), 1);
  const int second = broker.connect_to();
  EXPECT_EQ(disable_nagle_towards("mqtt://127.0.0.1:" + std::to_string(broker.port)), 2);
  EXPECT_NE(nodelay(second), 0);
  close(first);
  close(second);
}

TEST(TcpNodelay, AnythingElseChangesNothing) {
  Listener broker;
  const int client = broker.connect_to();
  const std::string port = std::to_string(broker.port);
  for (const std::string& url :
       std::vector<std::string>{"ws://127.0.0.1:" + port, "127.0.0.1:" + port, "tcp://127.0.0.1", "tcp://:" + port,
                                "tcp://[::1:" + port, "tcp://no-such-host.invalid:" + port, ""}) {
    EXPECT_EQ(disable_nagle_towards(url), 0) << url;
  }
  EXPECT_EQ(nodelay(client), 0);
  close(client);
}

}  // namespace
}  // namespace k8s4r::mqtt
