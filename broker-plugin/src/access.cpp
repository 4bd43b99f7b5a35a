#include "k8s4r/auth/access.h"

#include "k8s4r/common/identifiers.h"
#include "k8s4r/common/topics.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cstring>

namespace k8s4r::auth {

namespace {

bool is_robot(const Users& users, std::string_view username) {
  return !users.bridge.count(username) && !users.deferred.count(username);
}

// May this robot be who it says it is: a login in the table, and its client
// id its robot id.
bool robot_in_table(const LoginTable& table, const char* username, const char* client_id) {
  return username && client_id && std::strcmp(username, client_id) == 0 && table.find(username) != nullptr;
}

}  // namespace

std::set<std::string, std::less<>> parse_user_list(std::string_view list) {
  std::set<std::string, std::less<>> users;
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    std::string_view user = list.substr(0, comma);
    while (!user.empty() && user.front() == ' ') user.remove_prefix(1);
    while (!user.empty() && user.back() == ' ') user.remove_suffix(1);
    if (!user.empty()) users.emplace(user);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return users;
}

Verdict decide_login(const Users& users, const LoginTable& table, const char* username, const char* password,
                     const char* client_id) {
  if (!username) return Verdict::defer;  // anonymous: allow_anonymous decides (false in every deployment we ship)
  if (!is_robot(users, username)) return Verdict::defer;
  if (!validate_identifier(username) || !password) return Verdict::deny;
  // The digest first, whatever the lookup finds: the time taken says nothing
  // about which robots exist.
  logins::Digest offered{};
  unsigned int length = 0;
  const int hashed = EVP_Digest(password, std::strlen(password), offered.data(), &length, EVP_sha256(), nullptr);
  if (!robot_in_table(table, username, client_id) || hashed != 1 || length != offered.size()) return Verdict::deny;
  const logins::Digest* held = table.find(username);
  return CRYPTO_memcmp(held->data(), offered.data(), offered.size()) == 0 ? Verdict::allow : Verdict::deny;
}

Verdict decide_access(const Users& users, const LoginTable& table, const char* username, const char* client_id,
                      std::string_view topic, int access) {
  const bool control = topic == logins::kControlTopic;
  const bool control_answer = topic == logins::kResponseTopic;
  if (username && users.bridge.count(username)) {
    if (control) return access == kWrite ? Verdict::allow : Verdict::deny;
    if (control_answer) return access == kWrite ? Verdict::deny : Verdict::allow;
    return Verdict::defer;
  }
  if (username && users.deferred.count(username)) return control || control_answer ? Verdict::deny : Verdict::defer;
  // A robot, or a client without a user name (a certificate robot whose
  // certificate named no one): only a robot in the table, as itself.
  if (!robot_in_table(table, username, client_id)) return Verdict::deny;
  auto parsed = topics::parse_topic_view(topic);  // every delivery: allocates nothing
  if (!parsed || parsed.value().legacy || parsed.value().robot_id != username) return Verdict::deny;
  switch (parsed.value().kind) {
    case topics::TopicKind::register_robot:
    case topics::TopicKind::heartbeat:
    case topics::TopicKind::presence:
    case topics::TopicKind::task_status:
    case topics::TopicKind::log_chunk:  // its answers to whichever bridge asked
      return access == kWrite ? Verdict::allow : Verdict::deny;
    case topics::TopicKind::response:
    case topics::TopicKind::dispatch:
    case topics::TopicKind::acks:
    case topics::TopicKind::artifacts:
    case topics::TopicKind::log_request:
      return access == kWrite ? Verdict::deny : Verdict::allow;
  }
  return Verdict::deny;
}

}  // namespace k8s4r::auth
