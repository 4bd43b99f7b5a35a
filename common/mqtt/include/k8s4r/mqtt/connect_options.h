// The MQTT 5 CONNECT a daemon sends, built from its LinkSettings: a
// persistent session (clean start off, the session expiry), the keep-alive,
// credentials when set, the last will (QoS 1, retained) when set, and for
// ssl:// and mqtts:// brokers server verification (the chain and the host
// name) and the client certificate when set. Paho's automatic reconnect
// stays off: the daemon decides when to reconnect, so the first connection
// and every later one follow the same backoff.
//
// A pure function over values, so a unit test can read back what would be
// sent without a broker.
#pragma once

#include "k8s4r/mqtt/link.h"
#include "k8s4r/mqtt/tls_check.h"

#include <mqtt/connect_options.h>

#include <string>
#include <vector>

namespace k8s4r::mqtt {

::mqtt::connect_options make_connect_options(const LinkSettings& settings);

// Whether a broker URL asks for TLS (ssl:// or mqtts://).
bool is_tls_url(const std::string& broker_url);

// What is wrong with a daemon's TLS settings, for its config validation: a
// certificate without its key (or the reverse), a CA or a certificate for a
// plain tcp:// broker (TLS settings are never dropped silently). Reads no
// file: a daemon's validation adds tls_file_errors.
std::vector<std::string> tls_setting_errors(const std::string& broker_url, const TlsFiles& files);

}  // namespace k8s4r::mqtt
