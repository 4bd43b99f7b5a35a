// What the CONNECT of every daemon asks the broker for, read back from the
// options Paho would send.
#include "k8s4r/mqtt/connect_options.h"

#include <gtest/gtest.h>

namespace k8s4r::mqtt {
namespace {

LinkSettings robot() {
  LinkSettings settings;
  settings.broker_url = "tcp://127.0.0.1:1883";
  settings.client_id = "robot-001";
  return settings;
}

TEST(ConnectOptions, AskForAPersistentSessionThatOutlivesTheConnection) {
  LinkSettings settings = robot();
  settings.session_expiry = std::chrono::hours(24);
  settings.keep_alive = std::chrono::seconds(15);
  const auto options = make_connect_options(settings);
  EXPECT_EQ(options.get_mqtt_version(), MQTTVERSION_5);
  EXPECT_FALSE(options.is_clean_start());
  EXPECT_EQ(::mqtt::get<std::uint32_t>(options.get_properties(), ::mqtt::property::SESSION_EXPIRY_INTERVAL), 86400u);
  EXPECT_EQ(options.get_keep_alive_interval(), std::chrono::seconds(15));
  // The daemon, not Paho, decides when to reconnect.
  EXPECT_FALSE(options.get_automatic_reconnect());
}

TEST(ConnectOptions, SendCredentialsOnlyWhenSet) {
  EXPECT_EQ(make_connect_options(robot()).get_user_name(), "");
  EXPECT_EQ(make_connect_options(robot()).get_password_str(), "");
  LinkSettings settings = robot();
  settings.username = "robot-001";
  settings.password = "s3cret";
  const auto options = make_connect_options(settings);
  EXPECT_EQ(options.get_user_name(), "robot-001");
  EXPECT_EQ(options.get_password_str(), "s3cret");
}

TEST(ConnectOptions, SetTheLastWillRetainedAtQos1) {
  EXPECT_EQ(make_connect_options(robot()).get_will_topic(), "");  // no will
  LinkSettings settings = robot();
  settings.will_topic = "k8s4r/robots/robot-001/presence";
  settings.will_payload = R"({"robotId":"robot-001","online":false})";
  const auto will = make_connect_options(settings).get_will_message();
  ASSERT_NE(will, nullptr);
  EXPECT_EQ(will->get_topic(), settings.will_topic);
  EXPECT_EQ(will->get_payload_str(), settings.will_payload);
  EXPECT_EQ(will->get_qos(), 1);
  EXPECT_TRUE(will->is_retained());
}

TEST(ConnectOptions, VerifyTheServerOfATlsBroker) {
  for (const char* url : {"ssl://broker:8883", "mqtts://broker:8883"}) {
    LinkSettings settings = robot();
    settings.broker_url = url;
    settings.ca_file = "/etc/k8s4r/ca.pem";
    EXPECT_TRUE(is_tls_url(url));
    const auto options = make_connect_options(settings);
    EXPECT_TRUE(options.get_ssl_options().get_enable_server_cert_auth()) << url;
    EXPECT_TRUE(options.get_ssl_options().get_verify()) << url;  // the host name checked too
    EXPECT_EQ(options.get_ssl_options().get_trust_store(), "/etc/k8s4r/ca.pem") << url;
  }
  EXPECT_FALSE(is_tls_url("tcp://broker:1883"));
  EXPECT_FALSE(is_tls_url("mqtt://ssl://"));
}

TEST(ConnectOptions, AClientCertificateGoesWithItsKeyAndOnlyOverTls) {
  LinkSettings settings = robot();
  settings.broker_url = "ssl://broker:8883";
  settings.cert_file = "/etc/k8s4r/robot.crt";
  settings.key_file = "/etc/k8s4r/robot.key";
  const auto options = make_connect_options(settings);
  EXPECT_EQ(options.get_ssl_options().get_key_store(), "/etc/k8s4r/robot.crt");
  EXPECT_EQ(options.get_ssl_options().get_private_key(), "/etc/k8s4r/robot.key");
  EXPECT_TRUE(tls_setting_errors("ssl://broker:8883", {"ca.crt", "a.crt", "a.key"}).empty());
  EXPECT_TRUE(tls_setting_errors("tcp://broker:1883", {}).empty());
  EXPECT_EQ(tls_setting_errors("ssl://broker:8883", {"", "a.crt", ""}).size(), 1u);  // a certificate without its key
  EXPECT_EQ(tls_setting_errors("ssl://broker:8883", {"", "", "a.key"}).size(), 1u);
  // Never a silent downgrade: a certificate or a CA for a plain TCP broker is an error, not ignored.
  const auto plain = tls_setting_errors("tcp://broker:1883", {"ca.crt", "a.crt", "a.key"});
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_NE(plain[0].find("never sent over plain TCP"), std::string::npos);
  EXPECT_NE(plain[1].find("neither encrypted nor verified"), std::string::npos);
}

}  // namespace
}  // namespace k8s4r::mqtt
