// Who may log in and what each may touch, as the k8s4r-auth plugin decides
// it: pure functions of the user classes, the login table and the request,
// so every rule is tested without a broker.
//
// Users fall in three classes, from the plugin's options:
// - bridge (plugin_opt_bridge_users): may send login batches and read their
//   answers; everything else is left to the broker's other checks (the
//   password and ACL files), which hold the bridge's own login;
// - deferred (plugin_opt_defer_users: operators, an admin): left to the other
//   checks entirely, except that they may never send login batches;
// - robot: everyone else. Fail closed and never deferred: a robot logs in
//   only with the token whose digest the table holds, only under its own id
//   as client id (so it cannot take over another robot's session), and may
//   touch only its own topics: publish register, heartbeat, presence (its
//   will too) and its tasks' status; subscribe to and receive its response,
//   dispatch, acks and artifacts topics (docs/security.md).
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/auth/login_table.h"

#include <set>
#include <string>
#include <string_view>

namespace k8s4r::auth {

enum class Verdict { allow, deny, defer };

// Mosquitto's MOSQ_ACL_* values (plugin.cpp checks they agree).
enum Access : int { kRead = 0x01, kWrite = 0x02, kSubscribe = 0x04, kUnsubscribe = 0x08 };

struct Users {
  std::set<std::string, std::less<>> bridge;
  std::set<std::string, std::less<>> deferred;
};

// "a, b,c" → {a, b, c}: the plugin options' lists.
std::set<std::string, std::less<>> parse_user_list(std::string_view list);

// A CONNECT with a user name and password (either may be null).
Verdict decide_login(const Users& users, const LoginTable& table, const char* username, const char* password,
                     const char* client_id);

// A publish, a delivery, a subscribe or an unsubscribe on `topic`.
Verdict decide_access(const Users& users, const LoginTable& table, const char* username, const char* client_id,
                      std::string_view topic, int access);

}  // namespace k8s4r::auth
