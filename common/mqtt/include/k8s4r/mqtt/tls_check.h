// Why TLS to the broker fails, in words an operator can act on.
//
// Paho MQTT C 1.3.12 reports every failed handshake alike: a CA that does not
// sign the broker's certificate, an expired certificate, one for another
// host, a client certificate the broker refuses, a plain-TCP listener and a
// refused TCP connection all end as "TCP/TLS connect failure" (return code
// -1). Its error callback cannot help: Paho C++ 1.2.0 hands it a pointer into
// a connect_options already destroyed, and OpenSSL 3 puts only "certificate
// verify failed" in the error queue, never which check failed. So after such
// a failure the link makes one handshake of its own with the same trust and
// the same certificate, completes it without verification, and then checks
// what Paho's verification checks, naming the one that fails.
//
// The file checks run once at start, so a file that can never work (no
// certificate in it, a key that is not the certificate's) is a configuration
// error reported with the others. Expiry is only warned about then: a robot
// without a real-time clock may boot in 1970 and be right a minute later.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace k8s4r::mqtt {

struct TlsFiles {
  std::string ca_file;    // "": the system's CA store
  std::string cert_file;  // client certificate (PEM), optional
  std::string key_file;   // its private key (PEM, unencrypted)
};

// Files that cannot work: a CA file without a PEM certificate, a client
// certificate or key that does not parse, a key that is not the
// certificate's. Each error names the setting and the file.
std::vector<std::string> tls_file_errors(const TlsFiles& files);

// Files that work now but not for long, or not yet: a client certificate
// outside its validity, or within 7 days of its end. For a warning at start.
std::vector<std::string> tls_file_warnings(const TlsFiles& files);

// One handshake with the broker of `broker_url` (ssl:// or mqtts://) with
// the trust and client certificate of `files`, and the reason it would fail
// Paho's verification: "cannot reach 10.0.0.5:8883: Connection refused",
// "the broker's certificate (CN=broker, issued by CN=other-ca) is not signed
// by a CA in /etc/k8s4r/ca.pem: unable to get local issuer certificate",
// "the broker's certificate (CN=broker) expired at 2026-11-01T00:00:00Z",
// "the broker's certificate names DNS:broker.lab, not 10.0.0.5", "the broker
// refused our client certificate: tlsv13 alert certificate required",
// "10.0.0.5:8883 does not speak TLS (a plain tcp:// listener?)", "10.0.0.5:1883
// closed the connection without answering the TLS handshake (a plain tcp://
// listener?)" (Mosquitto's plain listener says nothing). "" when the
// handshake and every check pass (the failure was elsewhere). Blocks up to
// `timeout`; never throws.
std::string diagnose_tls(const std::string& broker_url, const TlsFiles& files, std::chrono::milliseconds timeout);

}  // namespace k8s4r::mqtt
