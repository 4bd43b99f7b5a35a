// The host and port of a broker URL, for the link's own sockets (tcp_nodelay,
// tls_check). Private to k8s4r_mqtt.
#pragma once

#include <optional>
#include <string>

namespace k8s4r::mqtt {

struct BrokerAddress {
  std::string host;  // a name or an address, without the [] of an IPv6 one
  std::string port;
};

// tcp://, ssl://, mqtt:// or mqtts://, then host:port or [IPv6]:port.
std::optional<BrokerAddress> broker_address(const std::string& url);

}  // namespace k8s4r::mqtt
