#include "k8s4r/kube_sim/authentication.h"

#include "k8s4r/common/base64.h"

#include "store_util.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <random>
#include <sstream>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

constexpr const char* kServiceAccountPrefix = "system:serviceaccount:";

std::string hmac_sha256(const std::string& key, const std::string& data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), digest, &length);
  return std::string(reinterpret_cast<const char*>(digest), length);
}

std::string random_bytes(std::size_t count) {
  std::string bytes(count, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), static_cast<int>(count)) != 1) {
    std::random_device device;
    for (char& byte : bytes) byte = static_cast<char>(device() & 0xFFu);
  }
  return bytes;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator)) parts.push_back(part);
  if (!text.empty() && text.back() == separator) parts.emplace_back();
  return parts;
}

// One CSV record with double quotes, as Go's encoding/csv reads it.
std::optional<std::vector<std::string>> csv_record(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false, was_quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"' && field.empty() && !was_quoted) {
      quoted = was_quoted = true;
    } else if (c == ',') {
      fields.push_back(field);
      field.clear();
      was_quoted = false;
    } else if (c == '"') {
      return std::nullopt;  // a bare quote in an unquoted field
    } else {
      field += c;
    }
  }
  if (quoted) return std::nullopt;
  fields.push_back(field);
  return fields;
}

}  // namespace

json UserInfo::to_json() const {
  json user = {{"username", name}, {"groups", groups}};
  if (!uid.empty()) user["uid"] = uid;
  if (!extra.empty()) user["extra"] = extra;
  return user;
}

void add_authenticated_group(UserInfo& user) {
  if (user.name == "system:anonymous") return;
  for (const std::string& group : user.groups) {
    if (group == "system:authenticated" || group == "system:unauthenticated") return;
  }
  user.groups.push_back("system:authenticated");
}

Result<std::map<std::string, UserInfo>> parse_token_file(const std::string& text) {
  std::map<std::string, UserInfo> tokens;
  std::string problems;
  std::size_t number = 0;
  for (std::string line : split(text, '\n')) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.front() == '#') continue;
    auto record = csv_record(line);
    if (!record) {
      problems += (problems.empty() ? "" : "; ") + ("line " + std::to_string(number) + ": bad quoting");
      continue;
    }
    if (record->size() < 3) {
      problems +=
          (problems.empty() ? "" : "; ") +
          ("line " + std::to_string(number) + ": must have at least 3 columns (token, user name, user uid), found " +
           std::to_string(record->size()));
      continue;
    }
    if ((*record)[0].empty()) continue;  // as kube-apiserver: skipped
    UserInfo user{(*record)[1], (*record)[2], {}, {}};
    if (record->size() > 3 && !(*record)[3].empty()) user.groups = split((*record)[3], ',');
    tokens[(*record)[0]] = user;
  }
  if (!problems.empty()) return Error{"token-auth-file", problems};
  return tokens;
}

Authenticator::Authenticator(AuthenticationOptions options, ServiceAccountLookup lookup,
                             std::function<Timestamp()> clock)
    : options_(std::move(options)), lookup_(std::move(lookup)), clock_(std::move(clock)) {
  audiences_ = options_.audiences.empty() ? std::vector<std::string>{options_.issuer} : options_.audiences;
  signing_key_ = random_bytes(32);
}

Result<UserInfo> Authenticator::authenticate(const std::string& authorization,
                                             const std::optional<ClientCertificate>& cert) const {
  // "Bearer <token>": the scheme is case-insensitive; anything else is no credentials.
  const std::size_t space = authorization.find(' ');
  const std::string scheme = lowercase(authorization.substr(0, space));
  if (space != std::string::npos && scheme == "bearer") {
    const std::string token = authorization.substr(space + 1);
    if (!token.empty()) {
      UserInfo user;
      if (auto found = options_.static_tokens.find(token); found != options_.static_tokens.end()) {
        user = found->second;
      } else {
        auto account = service_account_user(token);
        if (!account) return account.error();
        user = account.value();
      }
      add_authenticated_group(user);
      return user;
    }
  }
  if (cert && !cert->common_name.empty()) {
    UserInfo user{cert->common_name, "", cert->organizations, {}};
    user.extra["authentication.kubernetes.io/credential-id"] = {"X509SHA256=" + cert->sha256_hex};
    add_authenticated_group(user);
    return user;
  }
  if (!options_.anonymous) return Error{"", "no credentials"};
  return UserInfo{"system:anonymous", "", {"system:unauthenticated"}, {}};
}

Authenticator::IssuedToken Authenticator::issue_token(const std::string& namespace_, const std::string& name,
                                                      const std::string& uid, const std::vector<std::string>& audiences,
                                                      std::int64_t seconds) const {
  const Timestamp now = clock_();
  const std::int64_t issued = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  const json header = {{"alg", "HS256"}, {"kid", base64_encode(hmac_sha256(signing_key_, "kid").substr(0, 16), true)}};
  const json claims = {
      {"aud", audiences.empty() ? audiences_ : audiences},
      {"exp", issued + seconds},
      {"iat", issued},
      {"iss", options_.issuer},
      {"jti", random_uid()},
      {"kubernetes.io", {{"namespace", namespace_}, {"serviceaccount", {{"name", name}, {"uid", uid}}}}},
      {"nbf", issued},
      {"sub", kServiceAccountPrefix + namespace_ + ":" + name}};
  const std::string signed_part = base64_encode(header.dump(), true) + "." + base64_encode(claims.dump(), true);
  return {signed_part + "." + base64_encode(hmac_sha256(signing_key_, signed_part), true),
          now + std::chrono::seconds(seconds)};
}

Result<UserInfo> Authenticator::service_account_user(const std::string& token) const {
  const Error invalid{"", "invalid bearer token"};
  const std::vector<std::string> parts = split(token, '.');
  if (parts.size() != 3) return invalid;
  const std::string expected = base64_encode(hmac_sha256(signing_key_, parts[0] + "." + parts[1]), true);
  if (expected.size() != parts[2].size() || CRYPTO_memcmp(expected.data(), parts[2].data(), expected.size()) != 0)
    return invalid;
  auto payload = base64_decode(parts[1]);
  if (!payload) return invalid;
  const json claims = json::parse(*payload, nullptr, false);
  if (!claims.is_object() || claims.value("iss", "") != options_.issuer) return invalid;
  const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(clock_().time_since_epoch()).count();
  if (!claims.contains("exp") || !claims["exp"].is_number_integer() || claims["exp"].get<std::int64_t>() < now)
    return Error{"", "service account token has expired"};
  bool audience_ok = false;
  for (const json& audience : claims.value("aud", json::array())) {
    audience_ok = audience_ok || std::find(audiences_.begin(), audiences_.end(), audience) != audiences_.end();
  }
  if (!audience_ok) return Error{"", "token audiences are invalid for the target audiences"};
  const json ref = claims.value("kubernetes.io", json::object());
  const std::string namespace_ = ref.value("namespace", "");
  const json account = ref.value("serviceaccount", json::object());
  const std::string name = account.value("name", ""), uid = account.value("uid", "");
  auto current = lookup_(namespace_, name);
  if (!current) return Error{"", "service account " + namespace_ + "/" + name + " has been deleted"};
  if (*current != uid) return Error{"", "service account UID (" + *current + ") does not match claim (" + uid + ")"};
  UserInfo user{kServiceAccountPrefix + namespace_ + ":" + name,
                uid,
                {"system:serviceaccounts", "system:serviceaccounts:" + namespace_},
                {}};
  user.extra["authentication.kubernetes.io/credential-id"] = {"JTI=" + claims.value("jti", "")};
  return user;
}

}  // namespace k8s4r::kube_sim
