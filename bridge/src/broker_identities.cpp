// Robot identities in the broker, from Kubernetes (--dynamic-security): for
// each robot Secret (crd/robot_secret.h), whatever its Robot's phase, a
// client in Mosquitto's dynamic-security plugin that logs the robot in with
// its token and confines it to its own topics (dynsec_commands.h); none for
// any other robot. Driven by the Secret and Robot informers, never polled.
//
// On each connection the bridge lists the clients it manages (their token
// digests in their descriptions), then changes only what differs, so a
// restart disconnects nobody. Commands for one robot are never in flight
// twice: a change that arrives meanwhile is reconciled when they are
// answered. An unanswered or failed command lists everything again after a
// pause. At most a few commands are in flight at once: the plugin runs in
// the broker's thread. Deleting a client disconnects the robot at once, and the broker
// then skips its last will: the bridge publishes the robot's offline
// presence (retained) itself, which also marks the Robot disconnected.
//
// Tokens go to the broker and nowhere else: never a log line, an Event, a
// metric or a status.
#include "k8s4r/bridge/bridge.h"

#include "k8s4r/crd/resources.h"
#include "k8s4r/crd/robot_secret.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace k8s4r::bridge {

using nlohmann::json;

namespace {
constexpr std::chrono::seconds kAnswerTimeout{10};
constexpr std::chrono::seconds kRelistAfterTrouble{5};
// A few commands at a time. The link hands Paho at most 100 publishes and
// keeps the rest in order behind them, so a thousand commands at once would
// hold every dispatch back until they were through; and the plugin, which
// rewrites its whole file after each command, got through 1,000 robots in
// 26 s this way against 50 s all at once (bench/dynsec_bench.py).
constexpr std::size_t kMaxInFlight = 4;
}  // namespace

std::optional<dynsec::Desired> Bridge::desired_identity(const std::string& robot_id) const {
  if (!secrets_) return std::nullopt;
  if (robot_id == config_.username) return std::nullopt;  // the bridge's own user is never a robot's
  const kube::ObjectPtr secret = secrets_->get(namespace_, crd::robot_secret_name(robot_id));
  if (!secret) return std::nullopt;
  auto token = crd::robot_secret_token(*secret, robot_id);
  if (!token) return std::nullopt;
  const std::string digest = crd::token_digest(*token);
  // The Secret alone decides: a Robot's phase never removes a login, so no
  // message (a forged register that gets a Robot Rejected) can shut a robot
  // out of the broker. A Rejected robot keeps its login and gets no work.
  return dynsec::Desired{std::move(*token), digest};
}

void Bridge::identities_on_connected() {
  if (!config_.dynamic_security) return;
  identities_.listed = identities_listed_ = false;
  identities_.in_flight.clear();
  identities_.busy.clear();
  identities_.again.clear();
  request_identity_list();
}

void Bridge::request_identity_list() {
  if (!secrets_ || stopping_ || !mqtt_connected_) return;
  if (identities_.list_timer) loop_.cancel(identities_.list_timer);
  identities_.list_correlation = identities_.prefix + std::to_string(identities_.next++);
  publish(std::string(dynsec::kCommandTopic), dynsec::list_clients_command(identities_.list_correlation).dump());
  identities_.list_timer = loop_.after(kAnswerTimeout, [this, asked = identities_.list_correlation] {
    identities_.list_timer = 0;
    if (identities_.list_correlation != asked || !mqtt_connected_) return;
    metrics_.add("k8s4r_bridge_broker_identity_errors_total", {{"kind", "timeout"}});
    spdlog::error(
        "no answer from Mosquitto's dynamic-security plugin on {} in {} s: is the plugin loaded, and may user '{}' "
        "publish to and subscribe to $CONTROL/dynamic-security/#? (docs/security.md); asking again",
        dynsec::kCommandTopic, kAnswerTimeout.count(), config_.username);
    request_identity_list();
  });
}

void Bridge::relist_identities_later() {
  if (identities_.relist_timer) return;
  identities_.relist_timer = loop_.after(kRelistAfterTrouble, [this] {
    identities_.relist_timer = 0;
    identities_.listed = identities_listed_ = false;
    request_identity_list();
  });
}

void Bridge::reconcile_identity(const std::string& robot_id) {
  if (robot_id.empty() || !secrets_ || stopping_ || !mqtt_connected_ || !identities_.listed)
    return;                                  // listing reconciles all
  if (robot_id == config_.username) return;  // the bridge's own login is never made, changed or removed here
  if (identities_.busy.count(robot_id) || identities_.in_flight.size() >= kMaxInFlight) {
    identities_.again.insert(robot_id);
    return;
  }
  const std::optional<dynsec::Desired> desired = desired_identity(robot_id);
  const auto managed = identities_.managed.find(robot_id);
  const dynsec::Action action =
      dynsec::decide(desired, managed == identities_.managed.end() ? std::nullopt : std::optional(managed->second));
  if (action == dynsec::Action::none) return;
  const std::string correlation = identities_.prefix + std::to_string(identities_.next++);
  json commands =
      dynsec::commands_for(action, robot_id, desired, correlation,
                           managed == identities_.managed.end() ? std::nullopt : std::optional(managed->second));
  if (commands.empty()) return;
  identities_.in_flight[correlation] = {robot_id, action, desired ? desired->digest : std::string(),
                                        managed == identities_.managed.end() ? std::string() : managed->second.digest};
  identities_.busy.insert(robot_id);
  publish(std::string(dynsec::kCommandTopic), json{{"commands", std::move(commands)}}.dump(),
          [this, correlation](bool ok) {
            if (!ok) identity_answered(correlation, "the command was not delivered to the broker");
          });
  loop_.after(kAnswerTimeout, [this, correlation] {
    if (identities_.in_flight.count(correlation)) identity_answered(correlation, "no answer in time");
  });
}

void Bridge::on_dynsec_response(const std::string& payload) {
  if (!config_.dynamic_security) return;
  auto responses = dynsec::parse_responses(payload);
  if (!responses) {
    refuse("a message on " + std::string(dynsec::kResponseTopic), {"InvalidPayload", responses.error().to_string()});
    return;
  }
  // One message answers one of our requests (or someone else's: an admin's
  // mosquitto_ctrl shares the topic); its entries share our correlation.
  std::map<std::string, std::string> errors;  // by correlation: the first error
  for (const dynsec::Response& response : responses.value()) {
    if (response.correlation.rfind(identities_.prefix, 0) != 0) continue;
    if (response.correlation == identities_.list_correlation && response.command == "listClients") {
      on_identity_list(response);
      continue;
    }
    std::string& error = errors[response.correlation];
    // Harmless leftovers of a half-done change: a role made before a crash,
    // a client already gone, a topic an interrupted upgrade already added.
    const bool harmless = (response.command == "createRole" && response.error == "Role already exists") ||
                          (response.command == "deleteClient" && response.error == "Client not found") ||
                          (response.command == "deleteRole" && response.error == "Role not found") ||
                          (response.command == "addRoleACL" && response.error == "ACL with this topic already exists");
    if (error.empty() && !response.error.empty() && !harmless) error = response.command + ": " + response.error;
  }
  for (const auto& [correlation, error] : errors) identity_answered(correlation, error);
}

void Bridge::on_identity_list(const dynsec::Response& response) {
  if (identities_.list_timer) loop_.cancel(identities_.list_timer);
  identities_.list_timer = 0;
  identities_.list_correlation.clear();
  auto managed = response.error.empty()
                     ? dynsec::managed_clients(response.data)
                     : Result<std::map<std::string, dynsec::Managed>>(Error{"listClients", response.error});
  if (!managed) {
    metrics_.add("k8s4r_bridge_broker_identity_errors_total", {{"kind", "list"}});
    spdlog::error("listing the broker's clients failed: {}; asking again in {} s", managed.error().to_string(),
                  kRelistAfterTrouble.count());
    return relist_identities_later();
  }
  identities_.managed = std::move(managed).value();
  identities_.listed = identities_listed_ = true;
  std::set<std::string> robots;
  for (const auto& [robot_id, entry] : identities_.managed) robots.insert(robot_id);
  for (const auto& secret : secrets_->list()) robots.insert(crd::robot_of_secret(*secret));
  robots.erase("");
  spdlog::info("the broker holds {} robot identit{} the bridge manages; {} robot Secret(s)", identities_.managed.size(),
               identities_.managed.size() == 1 ? "y" : "ies", secrets_->list().size());
  for (const std::string& robot_id : robots) reconcile_identity(robot_id);
}

void Bridge::identity_answered(const std::string& correlation, const std::string& error) {
  const auto found = identities_.in_flight.find(correlation);
  if (found == identities_.in_flight.end()) return;
  const InFlightIdentity change = found->second;
  identities_.in_flight.erase(found);
  identities_.busy.erase(change.robot_id);
  if (!error.empty()) {
    metrics_.add("k8s4r_bridge_broker_identity_errors_total", {{"kind", dynsec::to_string(change.action)}});
    spdlog::error("robot {}: {} of its broker identity failed: {}; listing the broker's clients again in {} s",
                  change.robot_id, dynsec::to_string(change.action), error, kRelistAfterTrouble.count());
    identities_.again.erase(change.robot_id);
    relist_identities_later();
    return pump_identities();
  }
  metrics_.add("k8s4r_bridge_broker_identity_changes_total", {{"action", dynsec::to_string(change.action)}});
  switch (change.action) {
    case dynsec::Action::create:
      identities_.managed[change.robot_id] = {change.digest, ""};
      spdlog::info("robot {}: may log in to the broker, confined to its own topics", change.robot_id);
      break;
    case dynsec::Action::rotate:
      identities_.managed[change.robot_id] = {change.digest, change.replaced};
      spdlog::info("robot {}: its token changed; the broker disconnected it to log in with the new one",
                   change.robot_id);
      break;
    case dynsec::Action::upgrade:
      identities_.managed[change.robot_id].current = true;
      spdlog::info("robot {}: its broker role may now receive acknowledgements ({})", change.robot_id,
                   topics::acks(change.robot_id).value());
      break;
    case dynsec::Action::remove: {
      identities_.managed.erase(change.robot_id);
      spdlog::warn(
          "robot {}: its broker identity is removed (no Secret {} for it): the broker "
          "disconnected it and refuses it",
          change.robot_id, crd::robot_secret_name(change.robot_id));
      say_offline(change.robot_id);
      break;
    }
    case dynsec::Action::none:
      break;
  }
  if (identities_.again.erase(change.robot_id)) reconcile_identity(change.robot_id);
  pump_identities();
}

void Bridge::say_offline(const std::string& robot_id) {
  if (auto topic = topics::presence(robot_id)) {
    const Presence offline{robot_id, false, now(), std::nullopt};
    link_->publish(topic.value(), encode(offline), 1, true, [](bool ok, const std::string& why) {
      if (!ok) spdlog::warn("publishing a revoked robot's offline presence failed: {}", why);
    });
  }
}

void Bridge::pump_identities() {
  // Robots that waited for a slot, while there is one (a robot with nothing
  // to change takes none).
  while (identities_.in_flight.size() < kMaxInFlight) {
    const auto waiting =
        std::find_if(identities_.again.begin(), identities_.again.end(),
                     [this](const std::string& robot_id) { return !identities_.busy.count(robot_id); });
    if (waiting == identities_.again.end()) return;
    const std::string robot_id = *waiting;
    identities_.again.erase(waiting);
    reconcile_identity(robot_id);
  }
}

}  // namespace k8s4r::bridge
