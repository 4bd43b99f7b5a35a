// Who a request comes from, as kube-apiserver's authenticators decide it:
// a static token (--token-auth-file CSV: token,user,uid,"group1,group2"), a
// ServiceAccount token the stand-in issued through TokenRequest (a JWT whose
// ServiceAccount must still exist with the same uid), or a client
// certificate verified against the client CA (CN = user, O = groups).
// Every authenticated user also gets system:authenticated; a request with
// no credentials is system:anonymous when anonymous requests are allowed.
// A credential that is presented and fails is always 401.
//
// Threading: authenticate() and issue_token() may be called from any thread;
// the token table is fixed at construction.
#pragma once

#include "k8s4r/common/result.h"
#include "k8s4r/common/rfc3339.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::kube_sim {

struct UserInfo {
  std::string name, uid;
  std::vector<std::string> groups;
  std::map<std::string, std::vector<std::string>> extra;

  nlohmann::json to_json() const;  // authentication.k8s.io/v1 UserInfo
};

struct AuthenticationOptions {
  // token -> user, from --token and --token-auth-file.
  std::map<std::string, UserInfo> static_tokens;
  bool anonymous = true;
  std::string issuer = "https://kubernetes.default.svc.cluster.local";
  std::vector<std::string> audiences;  // empty: the issuer
};

// What the authenticator needs of a ServiceAccount: its uid, or nullopt when
// it does not exist (or is being deleted).
using ServiceAccountLookup =
    std::function<std::optional<std::string>(const std::string& namespace_, const std::string& name)>;

// The identity a verified client certificate carries.
struct ClientCertificate {
  std::string common_name;
  std::vector<std::string> organizations;
  std::string sha256_hex;  // of the DER encoding
};

class Authenticator {
 public:
  Authenticator(AuthenticationOptions options, ServiceAccountLookup lookup, std::function<Timestamp()> clock);

  // The user, or an Error whose message says why the credentials failed
  // (the caller answers 401). `authorization` is the Authorization header.
  Result<UserInfo> authenticate(const std::string& authorization, const std::optional<ClientCertificate>& cert) const;

  // A signed ServiceAccount token (JWT) and its expiry.
  struct IssuedToken {
    std::string token;
    Timestamp expires;
  };
  IssuedToken issue_token(const std::string& namespace_, const std::string& name, const std::string& uid,
                          const std::vector<std::string>& audiences, std::int64_t seconds) const;
  const std::vector<std::string>& audiences() const { return audiences_; }

 private:
  Result<UserInfo> service_account_user(const std::string& token) const;

  AuthenticationOptions options_;
  ServiceAccountLookup lookup_;
  std::function<Timestamp()> clock_;
  std::vector<std::string> audiences_;
  std::string signing_key_;  // HMAC-SHA256 key, random per process
};

// Parses a --token-auth-file; every bad line is reported.
Result<std::map<std::string, UserInfo>> parse_token_file(const std::string& text);

// Adds system:authenticated last, as kube-apiserver's group adder does.
void add_authenticated_group(UserInfo& user);

}  // namespace k8s4r::kube_sim
