// k8s4r-auth: robot logins for Mosquitto 2.0 at fleet scale (docs/security.md
// "Robot logins at fleet scale"). The glue between the broker and the pure
// parts: the options, the three callbacks, and nothing the tests cannot
// reach through login_table.h, access.h and state_file.h. The only file that
// includes Mosquitto's headers.
//
//   plugin /usr/lib/<triplet>/k8s4r/k8s4r_auth.so
//   plugin_opt_state_file /var/lib/mosquitto/k8s4r-auth.db     (required)
//   plugin_opt_bridge_users k8s4r-bridge                       (required)
//   plugin_opt_defer_users k8s4r-operator
//
// Needs `per_listener_settings false`. Options are read at start only: a
// reload changes nothing (Mosquitto 2.0.11 hands reload callbacks no
// options, and taking that for empty lists would shut the bridge out). Everything runs in the broker's one
// thread; no exception crosses into the broker (a broken invariant refuses
// the login or the access, and says so in the broker's log).
#include "k8s4r/auth/access.h"
#include "k8s4r/auth/login_table.h"
#include "k8s4r/auth/state_file.h"
#include "k8s4r/common/login_records.h"
#include "k8s4r/common/messages.h"
#include "k8s4r/common/slots.h"
#include "k8s4r/common/topics.h"

// clang-format off
#include <mosquitto.h>
#include <mosquitto_broker.h>
#include <mosquitto_plugin.h>
// clang-format on

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace {

using namespace k8s4r;

static_assert(auth::kRead == MOSQ_ACL_READ && auth::kWrite == MOSQ_ACL_WRITE &&
              auth::kSubscribe == MOSQ_ACL_SUBSCRIBE && auth::kUnsubscribe == MOSQ_ACL_UNSUBSCRIBE);

// The broker may keep this pointer for as long as the callback is registered:
// a literal lives as long as the plugin.
constexpr const char* kControlTopic = "$CONTROL/k8s4r-logins/v1";
static_assert(std::string_view(kControlTopic) == logins::kControlTopic);

struct Plugin {
  mosquitto_plugin_id_t* identifier = nullptr;
  auth::Users users;
  auth::LoginTable table;
  std::unique_ptr<auth::StateFile> file;
  // The table holds changes the file lacks (an append failed: a full disk):
  // the file is rewritten whole at a later batch, at most every 10 s (each
  // try writes the whole file in the broker's only thread), until it works.
  bool unsaved = false;
  std::chrono::steady_clock::time_point last_rewrite_try{};
};

// Rewrites the state file from the table; whether it did.
bool rewrite(Plugin& plugin) {
  const auto started = std::chrono::steady_clock::now();
  plugin.last_rewrite_try = started;
  auto compacted = plugin.file->compact(plugin.table);
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
  if (!compacted) {
    mosquitto_log_printf(MOSQ_LOG_ERR, "k8s4r-auth: rewriting the state file failed (it is kept as it was): %s",
                         compacted.error().to_string().c_str());
    return false;
  }
  mosquitto_log_printf(MOSQ_LOG_NOTICE, "k8s4r-auth: state file rewritten with %zu login(s) in %lld ms",
                       plugin.table.size(), static_cast<long long>(took));
  plugin.unsaved = false;
  return true;
}

int verdict_code(auth::Verdict verdict, int deny) {
  switch (verdict) {
    case auth::Verdict::allow:
      return MOSQ_ERR_SUCCESS;
    case auth::Verdict::defer:
      return MOSQ_ERR_PLUGIN_DEFER;
    case auth::Verdict::deny:
      return deny;
  }
  return deny;
}

int on_basic_auth(int, void* event_data, void* userdata) noexcept {
  try {
    auto* event = static_cast<mosquitto_evt_basic_auth*>(event_data);
    const auto& plugin = *static_cast<Plugin*>(userdata);
    return verdict_code(auth::decide_login(plugin.users, plugin.table, event->username, event->password,
                                           mosquitto_client_id(event->client)),
                        MOSQ_ERR_AUTH);
  } catch (const std::exception& e) {
    mosquitto_log_printf(MOSQ_LOG_ERR, "k8s4r-auth: a login refused on an internal error: %s", e.what());
    return MOSQ_ERR_AUTH;
  }
}

int on_acl_check(int, void* event_data, void* userdata) noexcept {
  try {
    auto* event = static_cast<mosquitto_evt_acl_check*>(event_data);
    const auto& plugin = *static_cast<Plugin*>(userdata);
    return verdict_code(
        auth::decide_access(plugin.users, plugin.table, mosquitto_client_username(event->client),
                            mosquitto_client_id(event->client), event->topic ? event->topic : "", event->access),
        MOSQ_ERR_ACL_DENIED);
  } catch (const std::exception& e) {
    mosquitto_log_printf(MOSQ_LOG_ERR, "k8s4r-auth: an access refused on an internal error: %s", e.what());
    return MOSQ_ERR_ACL_DENIED;
  }
}

void answer(const char* client_id, const logins::Response& response) {
  const std::string text = logins::format_response(response);
  mosquitto_broker_publish_copy(client_id, std::string(logins::kResponseTopic).c_str(), static_cast<int>(text.size()),
                                text.data(), 1, false, nullptr);
}

// Disconnects a robot whose login went or changed, if it is connected. By
// user name, which walks the live connections only: kicking by client id
// would also find a robot's offline persistent session, which Mosquitto
// 2.0.11 then puts on its session-expiry list twice. (A robot's user name is
// its client id, so this is the robot.) The broker skips the will of a
// client it disconnects itself, so the plugin says what the will would have:
// the robot's offline presence, retained (the bridge marks the Robot
// disconnected from it); true of an offline robot too.
void kick(const std::string& robot_id) {
  mosquitto_kick_client_by_username(robot_id.c_str(), false);
  if (auto topic = topics::presence(robot_id)) {
    const std::string offline = encode(Presence{robot_id, false, std::chrono::system_clock::now(), std::nullopt});
    mosquitto_broker_publish_copy(nullptr, topic.value().c_str(), static_cast<int>(offline.size()), offline.data(), 1,
                                  true, nullptr);
  }
}

// The correlation of a batch that did not parse, when its header has one.
std::string correlation_of(std::string_view payload) {
  auto header = logins::parse_batch(payload.substr(0, payload.find('\n')));
  return header ? header.value().correlation : "unknown";
}

int on_control(int, void* event_data, void* userdata) noexcept {
  auto* event = static_cast<mosquitto_evt_control*>(event_data);
  auto& plugin = *static_cast<Plugin*>(userdata);
  const char* client_id = mosquitto_client_id(event->client);
  try {
    const char* username = mosquitto_client_username(event->client);
    if (!username || !plugin.users.bridge.count(username)) return MOSQ_ERR_ACL_DENIED;  // the ACL already said so
    const std::string_view payload(static_cast<const char*>(event->payload), event->payloadlen);
    auto batch = logins::parse_batch(payload);
    if (!batch) {
      mosquitto_log_printf(MOSQ_LOG_WARNING, "k8s4r-auth: a login batch from %s refused, nothing applied: %s",
                           client_id, batch.error().to_string().c_str());
      answer(client_id, logins::Response{correlation_of(payload), batch.error().to_string()});
      return MOSQ_ERR_SUCCESS;
    }
    const auth::Applied applied = plugin.table.apply(batch.value());
    // On disk before anyone is kicked or answered. A full disk keeps the
    // change in memory (a revocation still takes effect), says so in the
    // answer (the bridge sends again until it is saved), and the whole
    // table is written at the next batch that finds room.
    bool durable = false;
    if (plugin.unsaved) {
      if (std::chrono::steady_clock::now() - plugin.last_rewrite_try >= std::chrono::seconds(10))
        durable = rewrite(plugin);
    } else {
      plugin.unsaved = true;  // until the append is in: an exception between here and there leaves it set
      if (auto written = plugin.file->append(applied.records); !written) {
        mosquitto_log_printf(MOSQ_LOG_ERR, "k8s4r-auth: %zu login change(s) applied but not saved: %s",
                             applied.records.size(), written.error().to_string().c_str());
      } else {
        plugin.unsaved = false;
        durable = true;
        if (plugin.file->wants_compaction(plugin.table.size() + k8s4r::kSlots)) (void)rewrite(plugin);
      }
    }
    for (const std::string& robot_id : applied.kick) kick(robot_id);
    logins::Response response{batch.value().correlation};
    response.held = plugin.table.size();
    response.changed = applied.changed;
    response.kicked = applied.kick.size();
    response.durable = durable;
    response.stale = applied.stale;
    answer(client_id, response);
    return MOSQ_ERR_SUCCESS;
  } catch (const std::exception& e) {
    mosquitto_log_printf(MOSQ_LOG_ERR, "k8s4r-auth: a login batch failed on an internal error: %s", e.what());
    return MOSQ_ERR_UNKNOWN;
  }
}

std::optional<std::string> option(const mosquitto_opt* options, int count, std::string_view key) {
  for (int i = 0; i < count; ++i)
    if (options[i].key && key == options[i].key) return std::string(options[i].value ? options[i].value : "");
  return std::nullopt;
}

auth::Users users_from(const mosquitto_opt* options, int count) {
  return auth::Users{auth::parse_user_list(option(options, count, "bridge_users").value_or("")),
                     auth::parse_user_list(option(options, count, "defer_users").value_or(""))};
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int mosquitto_plugin_version(int count, const int* versions) {
  for (int i = 0; i < count; ++i)
    if (versions[i] == 5) return 5;
  return -1;
}

__attribute__((visibility("default"))) int mosquitto_plugin_init(mosquitto_plugin_id_t* identifier, void** userdata,
                                                                 mosquitto_opt* options, int option_count) {
  try {
    auto plugin = std::make_unique<Plugin>();
    plugin->identifier = identifier;
    plugin->users = users_from(options, option_count);
    const std::optional<std::string> state_file = option(options, option_count, "state_file");
    if (!state_file || state_file->empty()) {
      mosquitto_log_printf(MOSQ_LOG_ERR,
                           "k8s4r-auth: plugin_opt_state_file is required (e.g. "
                           "/var/lib/mosquitto/k8s4r-auth.db)");
      return MOSQ_ERR_INVAL;
    }
    if (plugin->users.bridge.empty()) {
      mosquitto_log_printf(MOSQ_LOG_ERR,
                           "k8s4r-auth: plugin_opt_bridge_users is required: the bridge's user "
                           "name(s), comma-separated");
      return MOSQ_ERR_INVAL;
    }
    plugin->file = std::make_unique<auth::StateFile>(*state_file);
    auto loaded = plugin->file->load(plugin->table);
    if (!loaded) {
      mosquitto_log_printf(MOSQ_LOG_ERR, "k8s4r-auth: %s", loaded.error().to_string().c_str());
      return MOSQ_ERR_UNKNOWN;
    }
    if (!loaded.value().set_aside.empty())
      mosquitto_log_printf(MOSQ_LOG_ERR,
                           "k8s4r-auth: %s could not be read (%s); moved to %s, no robot may log in until the "
                           "bridge sends the logins again (it does on connecting)",
                           state_file->c_str(), loaded.value().why_set_aside.c_str(), loaded.value().set_aside.c_str());
    if (loaded.value().torn_tail)
      mosquitto_log_printf(MOSQ_LOG_WARNING, "k8s4r-auth: %s ended in a line cut short; it was dropped",
                           state_file->c_str());
    mosquitto_log_printf(MOSQ_LOG_NOTICE, "k8s4r-auth: %zu robot login(s) from %s", plugin->table.size(),
                         state_file->c_str());
    if (plugin->file->wants_compaction(plugin->table.size() + k8s4r::kSlots)) (void)rewrite(*plugin);
    int rc = mosquitto_callback_register(identifier, MOSQ_EVT_BASIC_AUTH, on_basic_auth, nullptr, plugin.get());
    if (rc == MOSQ_ERR_SUCCESS)
      rc = mosquitto_callback_register(identifier, MOSQ_EVT_ACL_CHECK, on_acl_check, nullptr, plugin.get());
    if (rc == MOSQ_ERR_SUCCESS)
      rc = mosquitto_callback_register(identifier, MOSQ_EVT_CONTROL, on_control, kControlTopic, plugin.get());
    if (rc != MOSQ_ERR_SUCCESS) {
      mosquitto_log_printf(MOSQ_LOG_ERR, "k8s4r-auth: registering with the broker failed (%d)", rc);
      return rc;
    }
    *userdata = plugin.release();
    return MOSQ_ERR_SUCCESS;
  } catch (const std::exception& e) {
    mosquitto_log_printf(MOSQ_LOG_ERR, "k8s4r-auth: starting failed: %s", e.what());
    return MOSQ_ERR_UNKNOWN;
  }
}

__attribute__((visibility("default"))) int mosquitto_plugin_cleanup(void* userdata, mosquitto_opt*, int) {
  std::unique_ptr<Plugin> plugin(static_cast<Plugin*>(userdata));
  if (!plugin) return MOSQ_ERR_SUCCESS;
  mosquitto_callback_unregister(plugin->identifier, MOSQ_EVT_BASIC_AUTH, on_basic_auth, nullptr);
  mosquitto_callback_unregister(plugin->identifier, MOSQ_EVT_ACL_CHECK, on_acl_check, nullptr);
  mosquitto_callback_unregister(plugin->identifier, MOSQ_EVT_CONTROL, on_control, kControlTopic);
  return MOSQ_ERR_SUCCESS;
}

}  // extern "C"
