// The TLS checks with real files made by the openssl command, and the
// diagnosis against real sockets: a port nobody listens on, a listener that
// does not speak TLS, and `openssl s_server` with certificates that are wrong
// in each way Paho would refuse. (The daemons' black-box tests see the same
// words in their logs, against Mosquitto.)
#include "k8s4r/mqtt/tls_check.h"

#include "k8s4r/testing/temp_dir.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <thread>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace k8s4r::mqtt {
namespace {

using namespace std::chrono_literals;

class TlsCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A CA, a server certificate for 127.0.0.1 it signed, a client
    // certificate it signed, and a second CA that signed nothing here.
    openssl("req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=test-ca");
    openssl("req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.crt -days 2 -subj /CN=other-ca");
    sign("server", "127.0.0.1", "subjectAltName=IP:127.0.0.1", 30);
    sign("elsewhere", "elsewhere", "subjectAltName=DNS:other.example", 30);
    sign("client", "robot-1", "extendedKeyUsage=clientAuth", 1);
  }
  ~TlsCheckTest() override {
    if (server_ > 0) {
      kill(server_, SIGKILL);
      waitpid(server_, nullptr, 0);
    }
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void openssl(const std::string& arguments) const {
    const std::string command = "cd '" + dir_.path().string() + "' && openssl " + arguments + " >/dev/null 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  void sign(const std::string& name, const std::string& cn, const std::string& extension, int days) const {
    std::ofstream(dir_ / (name + ".ext")) << extension << "\n";
    openssl("req -newkey rsa:2048 -nodes -keyout " + name + ".key -out " + name + ".csr -subj /CN=" + cn);
    openssl("x509 -req -in " + name + ".csr -CA ca.crt -CAkey ca.key -CAcreateserial -out " + name + ".crt -days " +
            std::to_string(days) + " -extfile " + name + ".ext");
  }
  static int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    socklen_t length = sizeof address;
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
    close(fd);
    return ntohs(address.sin_port);
  }
  // `openssl s_server` on a free port, serving `name`.crt; waits until it
  // accepts connections.
  std::string serve(const std::string& name, const std::string& more = "") {
    const int port = free_port();
    server_ = fork();
    if (server_ == 0) {
      const std::string command = "exec openssl s_server -quiet -accept 127.0.0.1:" + std::to_string(port) + " -cert " +
                                  path(name + ".crt") + " -key " + path(name + ".key") + " " + more +
                                  " </dev/null >/dev/null 2>&1";
      execl("/bin/sh", "sh", "-c", command.c_str(), nullptr);
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      address.sin_port = htons(static_cast<uint16_t>(port));
      const bool up = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
      close(fd);
      if (up) return "ssl://127.0.0.1:" + std::to_string(port);  // s_server drops the probe and serves the next
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "openssl s_server did not listen";
    return "";
  }

  testing::TempDir dir_;
  pid_t server_ = -1;
};

TEST_F(TlsCheckTest, FilesThatCannotWorkAreNamedAndWorkingOnesPass) {
  EXPECT_TRUE(tls_file_errors({path("ca.crt"), path("client.crt"), path("client.key")}).empty());
  std::ofstream(dir_ / "garbage.pem") << "not a certificate\n";
  auto errors = tls_file_errors({path("garbage.pem"), path("client.crt"), path("server.key")});
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[0].find("ca-file '" + path("garbage.pem") + "' holds no PEM certificate"), std::string::npos);
  EXPECT_NE(errors[1].find("is not the private key of cert-file"), std::string::npos) << errors[1];
  openssl("pkey -in client.key -aes256 -passout pass:secret -out encrypted.key");
  errors = tls_file_errors({"", path("client.crt"), path("encrypted.key")});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("no unencrypted PEM private key"), std::string::npos) << errors[0];
}

TEST_F(TlsCheckTest, ACertificateNearItsEndIsWarnedAbout) {
  EXPECT_TRUE(tls_file_warnings({"", path("server.crt"), path("server.key")}).empty());  // 30 days left
  const auto warnings = tls_file_warnings({"", path("client.crt"), path("client.key")});
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("CN=robot-1, issued by CN=test-ca"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("renew it"), std::string::npos) << warnings[0];
}

TEST_F(TlsCheckTest, SaysWhyABrokerCannotBeReachedOrDoesNotSpeakTls) {
  const int port = free_port();
  EXPECT_EQ(diagnose_tls("ssl://127.0.0.1:" + std::to_string(port), {path("ca.crt")}, 2s),
            "cannot reach 127.0.0.1:" + std::to_string(port) + ": Connection refused");
  // A plain listener that answers the ClientHello with bytes that are not TLS.
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  socklen_t length = sizeof address;
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  listen(listener, 1);
  std::thread plain([listener] {
    const int peer = accept(listener, nullptr, nullptr);
    char buffer[512];
    (void)!read(peer, buffer, sizeof buffer);
    const char answer[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
    (void)!write(peer, answer, sizeof answer - 1);
    close(peer);
  });
  const std::string where = "127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  EXPECT_EQ(diagnose_tls("ssl://" + where, {path("ca.crt")}, 2s),
            where + " does not speak TLS (a plain tcp:// listener?)");
  plain.join();
  close(listener);
}

TEST_F(TlsCheckTest, SaysWhichCheckTheBrokersCertificateFails) {
  std::string url = serve("server");
  EXPECT_EQ(diagnose_tls(url, {path("ca.crt")}, 3s), "");  // nothing wrong: the failure was elsewhere
  kill(server_, SIGKILL);
  waitpid(server_, nullptr, 0);

  url = serve("server");
  EXPECT_EQ(diagnose_tls(url, {path("other-ca.crt")}, 3s),
            "the broker's certificate (CN=127.0.0.1, issued by CN=test-ca) cannot be verified with " +
                path("other-ca.crt") + ": unable to get local issuer certificate");
  kill(server_, SIGKILL);
  waitpid(server_, nullptr, 0);

  url = serve("elsewhere");
  EXPECT_EQ(diagnose_tls(url, {path("ca.crt")}, 3s),
            "the broker's certificate (CN=elsewhere, issued by CN=test-ca) is for DNS:other.example, not 127.0.0.1");
}

TEST_F(TlsCheckTest, SaysTheBrokerWantsAClientCertificateOrRefusesOurs) {
  std::string url = serve("server", "-Verify 1 -verify_return_error -CAfile " + path("ca.crt"));
  const std::string without = diagnose_tls(url, {path("ca.crt")}, 3s);
  EXPECT_NE(without.find("the broker refused us without a client certificate"), std::string::npos) << without;
  kill(server_, SIGKILL);
  waitpid(server_, nullptr, 0);

  // A certificate from a CA the broker does not trust.
  openssl("req -x509 -newkey rsa:2048 -nodes -keyout stranger.key -out stranger.crt -days 1 -subj /CN=robot-1");
  url = serve("server", "-Verify 1 -verify_return_error -CAfile " + path("ca.crt"));
  const std::string refused = diagnose_tls(url, {path("ca.crt"), path("stranger.crt"), path("stranger.key")}, 3s);
  EXPECT_NE(refused.find("the broker refused our client certificate " + path("stranger.crt")), std::string::npos)
      << refused;
  kill(server_, SIGKILL);
  waitpid(server_, nullptr, 0);

  url = serve("server", "-Verify 1 -verify_return_error -CAfile " + path("ca.crt"));
  EXPECT_EQ(diagnose_tls(url, {path("ca.crt"), path("client.crt"), path("client.key")}, 3s), "");
}

}  // namespace
}  // namespace k8s4r::mqtt
