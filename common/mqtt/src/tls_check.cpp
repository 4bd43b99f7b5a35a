#include "k8s4r/mqtt/tls_check.h"

#include "broker_address.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace k8s4r::mqtt {

namespace {

using Clock = std::chrono::steady_clock;

struct Free {
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(SSL_CTX* p) const { SSL_CTX_free(p); }
  void operator()(SSL* p) const { SSL_free(p); }
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
};
template <typename T>
using Owned = std::unique_ptr<T, Free>;

// A key file with a passphrase would make OpenSSL ask for it on the
// terminal; a daemon has none, so no passphrase is given.
int no_passphrase(char*, int, int, void*) { return 0; }

Owned<X509> read_certificate(const std::string& path) {
  Owned<BIO> file(BIO_new_file(path.c_str(), "r"));
  if (!file) return nullptr;
  return Owned<X509>(PEM_read_bio_X509(file.get(), nullptr, no_passphrase, nullptr));
}

std::string rfc3339(const ASN1_TIME* time) {
  std::tm parts{};
  if (time == nullptr || ASN1_TIME_to_tm(time, &parts) != 1) return "an unreadable time";
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

std::string name_of(const X509_NAME* name) {
  char common_name[256] = {};
  if (name != nullptr &&
      X509_NAME_get_text_by_NID(const_cast<X509_NAME*>(name), NID_commonName, common_name, sizeof common_name) > 0)
    return std::string("CN=") + common_name;
  return "no CN";
}

// "CN=broker, issued by CN=k8s4r-ca": enough to tell which certificate it was.
std::string describe(X509* certificate) {
  return name_of(X509_get_subject_name(certificate)) + ", issued by " + name_of(X509_get_issuer_name(certificate));
}

// The names a certificate is for: its subject alternative names.
std::string names_of(X509* certificate) {
  Owned<GENERAL_NAMES> names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(certificate, NID_subject_alt_name, nullptr, nullptr)));
  std::string listed;
  const auto add = [&listed](const std::string& name) { listed += (listed.empty() ? "" : ", ") + name; };
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type == GEN_DNS) {
      const auto* text = ASN1_STRING_get0_data(name->d.dNSName);
      add("DNS:" + std::string(reinterpret_cast<const char*>(text),
                               static_cast<std::size_t>(std::max(0, ASN1_STRING_length(name->d.dNSName)))));
    } else if (name->type == GEN_IPADD) {
      const int length = ASN1_STRING_length(name->d.iPAddress);
      char text[INET6_ADDRSTRLEN] = {};
      if (length == 4 || length == 16)
        inet_ntop(length == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(name->d.iPAddress), text, sizeof text);
      add(std::string("IP:") + text);
    }
  }
  return listed.empty() ? "no subject alternative name (only " + name_of(X509_get_subject_name(certificate)) + ")"
                        : listed;
}

bool is_ip_address(const std::string& host) {
  unsigned char buffer[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 || inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

// The last reason OpenSSL queued, as words ("tlsv13 alert certificate required").
std::string openssl_reason() {
  const unsigned long error = ERR_peek_last_error();
  const char* reason = error != 0 ? ERR_reason_error_string(error) : nullptr;
  return reason != nullptr ? reason : "";
}

std::chrono::milliseconds left(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

void set_timeouts(int fd, std::chrono::milliseconds timeout) {
  timeval value{};
  value.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  value.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, sizeof value);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &value, sizeof value);
}

class Socket {
 public:
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  // Connects to host:port within the deadline; "" or why not.
  std::string connect_to(const BrokerAddress& address, Clock::time_point deadline) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* resolved = nullptr;
    if (const int status = getaddrinfo(address.host.c_str(), address.port.c_str(), &hints, &resolved); status != 0)
      return std::string("cannot resolve ") + address.host + ": " + gai_strerror(status);
    std::string why = "no address";
    for (const addrinfo* candidate = resolved; candidate != nullptr && fd_ < 0; candidate = candidate->ai_next) {
      const int fd = socket(candidate->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) continue;
      int error = ::connect(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 ? 0 : errno;
      if (error == EINPROGRESS) {
        pollfd wait{fd, POLLOUT, 0};
        const int ready = poll(&wait, 1, static_cast<int>(left(deadline).count()));
        socklen_t length = sizeof error;
        if (ready <= 0)
          error = ETIMEDOUT;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0)
          error = errno;
      }
      if (error == 0) {
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        fd_ = fd;
      } else {
        why = std::strerror(error);
        close(fd);
      }
    }
    freeaddrinfo(resolved);
    return fd_ >= 0 ? "" : "cannot reach " + address.host + ":" + address.port + ": " + why;
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

std::string trust_of(const TlsFiles& files) { return files.ca_file.empty() ? "the system's CA store" : files.ca_file; }

// Why the broker's certificate would fail Paho's checks (the chain, then the
// host name), or "".
std::string judge_certificate(SSL* ssl, X509* peer, const BrokerAddress& address, const TlsFiles& files) {
  const long verdict = SSL_get_verify_result(ssl);
  const std::string which = "the broker's certificate (" + describe(peer) + ")";
  if (verdict == X509_V_ERR_CERT_HAS_EXPIRED) return which + " expired at " + rfc3339(X509_get0_notAfter(peer));
  if (verdict == X509_V_ERR_CERT_NOT_YET_VALID) {
    return which + " is not valid before " + rfc3339(X509_get0_notBefore(peer)) + " (is this machine's clock right?)";
  }
  if (verdict != X509_V_OK) {
    return which + " cannot be verified with " + trust_of(files) + ": " + X509_verify_cert_error_string(verdict);
  }
  const bool names_host = is_ip_address(address.host)
                              ? X509_check_ip_asc(peer, address.host.c_str(), 0) == 1
                              : X509_check_host(peer, address.host.c_str(), address.host.size(), 0, nullptr) == 1;
  if (!names_host) return which + " is for " + names_of(peer) + ", not " + address.host;
  return "";
}

}  // namespace

std::vector<std::string> tls_file_errors(const TlsFiles& files) {
  std::vector<std::string> errors;
  if (!files.ca_file.empty() && !read_certificate(files.ca_file))
    errors.push_back("ca-file '" + files.ca_file + "' holds no PEM certificate");
  if (files.cert_file.empty() || files.key_file.empty()) return errors;
  const Owned<X509> certificate = read_certificate(files.cert_file);
  if (!certificate) errors.push_back("cert-file '" + files.cert_file + "' holds no PEM certificate");
  Owned<BIO> key_bio(BIO_new_file(files.key_file.c_str(), "r"));
  const Owned<EVP_PKEY> key(key_bio ? PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_passphrase, nullptr)
                                    : nullptr);
  if (!key) {
    errors.push_back("key-file '" + files.key_file +
                     "' holds no unencrypted PEM private key (a daemon cannot type a passphrase)");
  }
  if (certificate && key && X509_check_private_key(certificate.get(), key.get()) != 1)
    errors.push_back("key-file '" + files.key_file + "' is not the private key of cert-file '" + files.cert_file + "'");
  ERR_clear_error();
  return errors;
}

std::vector<std::string> tls_file_warnings(const TlsFiles& files) {
  std::vector<std::string> warnings;
  if (files.cert_file.empty()) return warnings;
  const Owned<X509> certificate = read_certificate(files.cert_file);
  if (!certificate) return warnings;
  const std::string which = "cert-file '" + files.cert_file + "' (" + describe(certificate.get()) + ")";
  std::time_t in_a_week = std::time(nullptr) + 7 * 24 * 3600;
  if (X509_cmp_current_time(X509_get0_notBefore(certificate.get())) > 0) {
    warnings.push_back(which + " is not valid before " + rfc3339(X509_get0_notBefore(certificate.get())) +
                       " (is this machine's clock right?)");
  } else if (X509_cmp_current_time(X509_get0_notAfter(certificate.get())) < 0) {
    warnings.push_back(which + " expired at " + rfc3339(X509_get0_notAfter(certificate.get())));
  } else if (X509_cmp_time(X509_get0_notAfter(certificate.get()), &in_a_week) < 0) {
    warnings.push_back(which + " expires at " + rfc3339(X509_get0_notAfter(certificate.get())) + ": renew it");
  }
  ERR_clear_error();
  return warnings;
}

std::string diagnose_tls(const std::string& broker_url, const TlsFiles& files, std::chrono::milliseconds timeout) {
  const auto address = broker_address(broker_url);
  if (!address) return "";
  const auto deadline = Clock::now() + timeout;
  const std::string where = address->host + ":" + address->port;
  Socket socket;
  if (std::string why = socket.connect_to(*address, deadline); !why.empty()) return why;

  ERR_clear_error();
  const Owned<SSL_CTX> context(SSL_CTX_new(TLS_client_method()));
  if (!context) return "";
  const bool trusted = files.ca_file.empty()
                           ? SSL_CTX_set_default_verify_paths(context.get()) == 1
                           : SSL_CTX_load_verify_locations(context.get(), files.ca_file.c_str(), nullptr) == 1;
  if (!trusted) return "cannot load the CA certificates of " + trust_of(files) + ": " + openssl_reason();
  if (!files.cert_file.empty() && !files.key_file.empty()) {
    SSL_CTX_set_default_passwd_cb(context.get(), no_passphrase);
    if (SSL_CTX_use_certificate_chain_file(context.get(), files.cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(context.get(), files.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
      return "cannot load the client certificate " + files.cert_file + ": " + openssl_reason();
  }
  // Completed without verification, so the certificate can be judged after.
  SSL_CTX_set_verify(context.get(), SSL_VERIFY_NONE, nullptr);
  const Owned<SSL> ssl(SSL_new(context.get()));
  if (!ssl) return "";
  SSL_set_fd(ssl.get(), socket.fd());
  // SSL_set_tlsext_host_name is a macro with a C cast; its function form:
  if (!is_ip_address(address->host))
    SSL_ctrl(ssl.get(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
             const_cast<char*>(address->host.c_str()));
  set_timeouts(socket.fd(), left(deadline));
  ERR_clear_error();
  errno = 0;
  if (SSL_connect(ssl.get()) != 1) {
    const int saved_errno = errno;
    const std::string reason = openssl_reason();
    if (reason == "wrong version number" || reason == "packet length too long" || reason == "record layer failure")
      return where + " does not speak TLS (a plain tcp:// listener?)";
    if (reason.find("alert") != std::string::npos) {
      return "the broker refused the TLS handshake: " + reason +
             (files.cert_file.empty() ? "" : " (our client certificate " + files.cert_file + "?)");
    }
    if (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK)
      return "no TLS answer from " + where + " within " + std::to_string(timeout.count()) + " ms";
    if (!reason.empty()) return "the TLS handshake with " + where + " failed: " + reason;
    // Mosquitto's plain listener closes without a word when a ClientHello
    // comes instead of a CONNECT.
    return where + " closed the connection without answering the TLS handshake (a plain tcp:// listener?)";
  }
  Owned<X509> peer(SSL_get1_peer_certificate(ssl.get()));
  if (!peer) return "the broker at " + where + " showed no certificate";
  if (std::string why = judge_certificate(ssl.get(), peer.get(), *address, files); !why.empty()) return why;

  // Under TLS 1.3 the server judges the client's certificate after the
  // handshake has completed on the client's side: its refusal comes as an
  // alert on the first read.
  pollfd wait{socket.fd(), POLLIN, 0};
  const auto patience = std::min(left(deadline), std::chrono::milliseconds(1000));
  if (poll(&wait, 1, static_cast<int>(patience.count())) > 0) {
    set_timeouts(socket.fd(), patience);
    char byte = 0;
    ERR_clear_error();
    if (SSL_peek(ssl.get(), &byte, 1) <= 0) {
      const std::string reason = openssl_reason();
      if (reason.find("alert") != std::string::npos) {
        return files.cert_file.empty() ? "the broker refused us without a client certificate: " + reason +
                                             " (it asks for one: cert-file, key-file)"
                                       : "the broker refused our client certificate " + files.cert_file + ": " + reason;
      }
    }
  }
  ERR_clear_error();
  return "";
}

}  // namespace k8s4r::mqtt
