// Every daemon's one narrow view of MQTT, so the agent's and the bridge's
// logic can be driven by a fake in unit tests and by Paho (MQTT 5) for real.
//
// Threading: every method may be called from any thread and never blocks,
// except disconnect(), not even while a message callback waits (a daemon's
// inbox holding Paho's thread back). Callbacks run on the link's own threads
// (Paho's); a daemon posts them to its event loop and returns at once.
// Ownership: the link must outlive every callback it was given; destroying it
// drops the connection without a clean disconnect.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace k8s4r::mqtt {

struct LinkEvents {
  std::function<void()> connected;
  std::function<void(const std::string& cause)> connect_failed;
  std::function<void(const std::string& cause)> connection_lost;
  std::function<void(const std::string& topic, const std::string& payload)> message;
};

// Called once with whether the broker acknowledged (QoS 1: PUBACK or SUBACK).
using Completion = std::function<void(bool ok, const std::string& error)>;

// A topic filter and the largest QoS the broker may deliver it at (it
// downgrades messages published at a higher one).
struct Subscription {
  std::string filter;
  int qos = 1;
};

// What a link holds for the broker: calls not yet handed to the MQTT
// library, and completions not yet called (QoS 1: no PUBACK yet).
struct LinkBacklog {
  std::size_t queued = 0;
  std::size_t unacknowledged = 0;
};

class Link {
 public:
  virtual ~Link() = default;
  // One connection attempt; ends in events.connected or events.connect_failed.
  // The daemon, not the link, decides when to try again.
  virtual void connect() = 0;
  // One SUBSCRIBE for all of them: done(true) once the broker granted each.
  // Subscriptions and unsubscriptions keep their own order but go ahead of
  // publishes the link still queues.
  virtual void subscribe(const std::vector<Subscription>& subscriptions, Completion done) = 0;
  // One UNSUBSCRIBE for all of them: done(true) once the broker answered
  // (a filter it held no subscription for is not an error).
  virtual void unsubscribe(const std::vector<std::string>& filters, Completion done) = 0;
  virtual void publish(const std::string& topic, const std::string& payload, int qos, bool retain, Completion done) = 0;
  // A clean MQTT DISCONNECT (the broker then drops the last will), waiting at
  // most `timeout`.
  virtual void disconnect(std::chrono::milliseconds timeout) = 0;
  // Any thread; for metrics.
  virtual LinkBacklog backlog() const = 0;
};

struct LinkSettings {
  std::string broker_url;
  std::string client_id;
  std::string username, password;  // empty: none
  std::string will_topic, will_payload;
  std::chrono::seconds keep_alive{30};
  // A persistent session: the broker keeps the client's subscriptions and the
  // QoS 1 messages sent to it while it is away, for this long.
  std::chrono::seconds session_expiry{24 * 3600};
  std::string ca_file;  // for ssl:// brokers; empty: the system's CAs
  // A client certificate and its private key (PEM), for a broker that asks
  // for one (mutual TLS); empty: none.
  std::string cert_file, key_file;
};

// Throws std::invalid_argument for a URL or client id Paho refuses (startup).
std::unique_ptr<Link> make_paho_link(const LinkSettings& settings, LinkEvents events);

}  // namespace k8s4r::mqtt
