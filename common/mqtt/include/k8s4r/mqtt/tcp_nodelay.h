// Nagle's algorithm off on the connection to the broker.
//
// MQTT's packets are small and each waits on the peer's answer (PUBLISH and
// PUBACK), so with Nagle on, a packet sent while an earlier one is still
// unacknowledged waits for the peer's delayed ACK: up to 40 ms on Linux, seen
// as a 25-50 ms dispatch latency through the bridge. Paho MQTT C 1.3.12
// (Debian 12) never sets TCP_NODELAY and does not expose its socket (upstream
// added the option in 2026, eclipse-paho/paho.mqtt.c#530), so once connected
// the link finds its own socket among the process's descriptors by its peer
// and sets the option there.
#pragma once

#include <string>

namespace k8s4r::mqtt {

// Sets TCP_NODELAY on every TCP socket of this process whose peer is the
// host and port of `broker_url` (tcp://, ssl://, mqtt://, mqtts://; the host a
// name or an address). Returns how many sockets it set, 0 when none matched or
// the URL is not of those schemes. Harmless on any other socket to that peer.
int disable_nagle_towards(const std::string& broker_url);

}  // namespace k8s4r::mqtt
