#include "k8s4r/mqtt/connect_options.h"

namespace k8s4r::mqtt {

bool is_tls_url(const std::string& broker_url) {
  return broker_url.rfind("ssl://", 0) == 0 || broker_url.rfind("mqtts://", 0) == 0;
}

std::vector<std::string> tls_setting_errors(const std::string& broker_url, const TlsFiles& files) {
  std::vector<std::string> errors;
  if (files.cert_file.empty() != files.key_file.empty())
    errors.push_back("cert-file and key-file go together: a client certificate needs its private key");
  const bool plain = !broker_url.empty() && !is_tls_url(broker_url);
  if (!files.cert_file.empty() && plain)
    errors.push_back("cert-file needs an ssl:// or mqtts:// broker-url, not " + broker_url +
                     ": a client certificate is never sent over plain TCP");
  if (!files.ca_file.empty() && plain)
    errors.push_back("ca-file needs an ssl:// or mqtts:// broker-url, not " + broker_url +
                     ": a tcp:// broker is neither encrypted nor verified");
  return errors;
}

::mqtt::connect_options make_connect_options(const LinkSettings& settings) {
  // Set in place rather than through connect_options_builder: Paho C++ 1.2's
  // builder copies leave the CONNECT properties pointing into a destroyed
  // copy, which crashed MQTTAsync_connect.
  ::mqtt::connect_options options;
  options.set_mqtt_version(MQTTVERSION_5);
  options.set_clean_start(false);
  options.set_keep_alive_interval(settings.keep_alive);
  options.set_connect_timeout(std::chrono::seconds(10));
  options.set_automatic_reconnect(false);
  if (!settings.username.empty()) options.set_user_name(settings.username);
  if (!settings.password.empty()) options.set_password(settings.password);
  if (!settings.will_topic.empty()) {
    options.set_will_message(::mqtt::message(settings.will_topic, settings.will_payload, 1, true));
  }
  if (is_tls_url(settings.broker_url)) {
    ::mqtt::ssl_options ssl;
    ssl.set_enable_server_cert_auth(true);
    // And that the certificate names the host in the URL: Paho's default
    // (verify off) accepts any certificate the CA signed, and with the
    // system's store, one for any site at all.
    ssl.set_verify(true);
    if (!settings.ca_file.empty()) ssl.set_trust_store(settings.ca_file);
    if (!settings.cert_file.empty()) ssl.set_key_store(settings.cert_file);
    if (!settings.key_file.empty()) ssl.set_private_key(settings.key_file);
    options.set_ssl(std::move(ssl));
  }
  ::mqtt::properties properties;
  properties.add(
      ::mqtt::property(::mqtt::property::SESSION_EXPIRY_INTERVAL, static_cast<int>(settings.session_expiry.count())));
  options.set_properties(std::move(properties));
  return options;
}

}  // namespace k8s4r::mqtt
