#include "k8s4r/kube/config.h"

#include "k8s4r/common/base64.h"

#include "k8s4r/testing/temp_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace k8s4r::kube {
namespace {

namespace fs = std::filesystem;

class ConfigTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& content) {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << content;
    return path.string();
  }

  testing::TempDir dir_;
};

const std::string kCa = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n";

std::string kubeconfig(const std::string& cluster_extra, const std::string& user_extra) {
  return "apiVersion: v1\nkind: Config\ncurrent-context: robots\n"
         "contexts:\n- name: other\n  context: {cluster: nowhere, user: nobody}\n"
         "- name: robots\n  context: {cluster: lab, user: operator, namespace: fleet}\n"
         "clusters:\n- name: lab\n  cluster:\n    server: https://10.0.0.1:6443\n" +
         cluster_extra + "users:\n- name: operator\n  user:\n" + user_extra;
}

TEST_F(ConfigTest, KubeconfigWithEmbeddedData) {
  const std::string path = write("config", kubeconfig("    certificate-authority-data: " + base64_encode(kCa) + "\n",
                                                      "    client-certificate-data: " + base64_encode("CERT") + "\n" +
                                                          "    client-key-data: " + base64_encode("KEY") + "\n"));
  auto config = load_kubeconfig(path);
  ASSERT_TRUE(config) << config.error().to_string();
  EXPECT_EQ(config.value().server, "https://10.0.0.1:6443");
  EXPECT_EQ(config.value().ca_pem, kCa);
  EXPECT_EQ(config.value().client_certificate_pem, "CERT");
  EXPECT_EQ(config.value().client_key_pem, "KEY");
  EXPECT_EQ(config.value().namespace_, "fleet");
}

TEST_F(ConfigTest, KubeconfigWithFilePathsRelativeToIt) {
  write("pki/ca.crt", kCa);
  write("pki/client.crt", "CERT");
  write("pki/client.key", "KEY");
  write("token", "abc.def\n");
  const std::string path = write("config", kubeconfig("    certificate-authority: pki/ca.crt\n",
                                                      "    client-certificate: pki/client.crt\n"
                                                      "    client-key: " +
                                                          (dir_ / "pki/client.key").string() +
                                                          "\n"
                                                          "    tokenFile: token\n"));
  auto config = load_kubeconfig(path);
  ASSERT_TRUE(config) << config.error().to_string();
  EXPECT_EQ(config.value().ca_pem, kCa);
  EXPECT_EQ(config.value().client_certificate_pem, "CERT");
  EXPECT_EQ(config.value().client_key_pem, "KEY");
  EXPECT_EQ(config.value().token, "abc.def");
  EXPECT_EQ(config.value().token_file, (dir_ / "token").string());  // re-read as it rotates
}

TEST_F(ConfigTest, InClusterFromTheServiceAccountDirectory) {
  write("sa/token", "in-cluster-token\n");
  write("sa/ca.crt", kCa);
  write("sa/namespace", "k8s4r-system");
  ConfigSources sources;
  sources.service_host = "10.96.0.1";
  sources.service_port = "443";
  sources.service_account_dir = (dir_ / "sa").string();
  auto config = load_client_config(sources);
  ASSERT_TRUE(config) << config.error().to_string();
  EXPECT_EQ(config.value().server, "https://10.96.0.1:443");
  EXPECT_EQ(config.value().token, "in-cluster-token");
  EXPECT_EQ(config.value().token_file, (dir_ / "sa/token").string());
  EXPECT_EQ(config.value().ca_pem, kCa);
  EXPECT_EQ(config.value().namespace_, "k8s4r-system");
}

TEST_F(ConfigTest, PrecedenceFlagsThenKubeconfigThenInCluster) {
  write("sa/token", "in-cluster-token");
  write("sa/ca.crt", kCa);
  const std::string from_env = write("env-config", kubeconfig("", "    token: env-token\n"));
  const std::string from_flag = write("flag-config", kubeconfig("", "    token: flag-token\n"));
  ConfigSources sources;
  sources.service_host = "10.96.0.1";
  sources.service_port = "443";
  sources.service_account_dir = (dir_ / "sa").string();
  sources.kubeconfig_env = "/does/not/exist:" + from_env;
  EXPECT_EQ(load_client_config(sources).value().token, "env-token");  // $KUBECONFIG beats in-cluster
  sources.kubeconfig_flag = from_flag;
  EXPECT_EQ(load_client_config(sources).value().token, "flag-token");  // --kubeconfig beats $KUBECONFIG
  sources.server = "http://127.0.0.1:8080";
  sources.token = "explicit";
  sources.ca_file = write("explicit-ca.crt", "EXPLICIT CA");
  auto config = load_client_config(sources).value();  // flags override field by field
  EXPECT_EQ(config.server, "http://127.0.0.1:8080");
  EXPECT_EQ(config.token, "explicit");
  EXPECT_EQ(config.ca_pem, "EXPLICIT CA");
  EXPECT_EQ(config.namespace_, "fleet");
}

TEST_F(ConfigTest, SaysWhatIsMissing) {
  ConfigSources nothing;
  nothing.service_account_dir = (dir_ / "absent").string();
  auto config = load_client_config(nothing);
  ASSERT_FALSE(config);
  EXPECT_NE(config.error().message.find("no configuration found"), std::string::npos);

  const std::string broken = write("broken", "current-context: x\ncontexts: []\n");
  EXPECT_NE(load_kubeconfig(broken).error().message.find("context 'x' not found"), std::string::npos);
  ConfigSources bad_server;
  bad_server.server = "10.0.0.1:6443";
  EXPECT_EQ(load_client_config(bad_server).error().field, "kube-server");
}

}  // namespace
}  // namespace k8s4r::kube
