#include "k8s4r/bridge/dynsec_commands.h"

#include "k8s4r/common/identifiers.h"
#include "k8s4r/common/json_depth.h"
#include "k8s4r/common/topics.h"

namespace k8s4r::bridge::dynsec {

using nlohmann::json;

namespace {

constexpr std::string_view kDigestPrefix = "k8s4r token ";
constexpr std::string_view kPreviousSeparator = " after ";
// A fleet's listClients answer: about 150 bytes a robot.
constexpr std::size_t kMaxResponseBytes = 32 * 1024 * 1024;

json acl(const char* type, const std::string& topic) { return {{"acltype", type}, {"topic", topic}, {"allow", true}}; }

// What receiving on one topic takes.
json receive_acls(const std::string& topic) {
  return json::array(
      {acl("subscribeLiteral", topic), acl("unsubscribeLiteral", topic), acl("publishClientReceive", topic)});
}

// Only its own topics; callers have checked the id (topics::* would refuse
// one that could change a topic).
json robot_acls(const std::string& robot_id) {
  json acls = json::array();
  for (const auto& topic : {topics::robot_register(robot_id), topics::robot_heartbeat(robot_id),
                            topics::presence(robot_id), topics::task_status_filter(robot_id)}) {
    acls.push_back(acl("publishClientSend", topic.value()));
  }
  for (const auto& topic : {topics::response(robot_id), topics::dispatch(robot_id), topics::acks(robot_id),
                            topics::artifacts(robot_id), topics::log_request(robot_id)}) {
    for (json& entry : receive_acls(topic.value())) acls.push_back(std::move(entry));
  }
  acls.push_back(acl("publishClientSend", topics::robot_log_chunks_filter(robot_id).value()));
  return acls;
}

json command(std::string name, const std::string& correlation) {
  return {{"command", std::move(name)}, {"correlationData", correlation}};
}

}  // namespace

std::string role_name(const std::string& robot_id) { return "k8s4r-robot-" + robot_id; }

const char* to_string(Action action) {
  switch (action) {
    case Action::none:
      return "none";
    case Action::create:
      return "create";
    case Action::rotate:
      return "rotate";
    case Action::remove:
      return "remove";
    case Action::upgrade:
      return "upgrade";
  }
  return "none";
}

Action decide(const std::optional<Desired>& desired, const std::optional<Managed>& managed) {
  if (desired && !managed) return Action::create;
  if (!desired && managed) return Action::remove;
  if (desired && managed && desired->digest != managed->digest) return Action::rotate;
  if (desired && managed && !managed->current) return Action::upgrade;
  return Action::none;
}

json commands_for(Action action, const std::string& robot_id, const std::optional<Desired>& desired,
                  const std::string& correlation, const std::optional<Managed>& managed) {
  json commands = json::array();
  if (!validate_identifier(robot_id)) return commands;
  const std::string role = role_name(robot_id);
  switch (action) {
    case Action::none:
      break;
    case Action::create: {
      if (!desired) break;
      // The role first: a client is created with its role in one command, so
      // it is never connected without it (adding a role later would kick it).
      json create_role = command("createRole", correlation);
      create_role["rolename"] = role;
      create_role["textname"] = std::string(kManagedMark);
      create_role["acls"] = robot_acls(robot_id);
      json create_client = command("createClient", correlation);
      create_client["username"] = robot_id;
      create_client["password"] = desired->token;
      create_client["textname"] = std::string(kManagedMark);
      create_client["textdescription"] = std::string(kDigestPrefix) + desired->digest;
      create_client["roles"] = json::array({{{"rolename", role}}});
      commands.push_back(std::move(create_role));
      commands.push_back(std::move(create_client));
      break;
    }
    case Action::rotate: {
      if (!desired) break;
      // Both disconnect the robot, which then logs in with the new token.
      json password = command("setClientPassword", correlation);
      password["username"] = robot_id;
      password["password"] = desired->token;
      json describe = command("modifyClient", correlation);
      describe["username"] = robot_id;
      std::string description = std::string(kDigestPrefix) + desired->digest;
      if (managed && !managed->digest.empty()) description.append(kPreviousSeparator).append(managed->digest);
      describe["textdescription"] = std::move(description);
      commands.push_back(std::move(password));
      commands.push_back(std::move(describe));
      break;
    }
    case Action::upgrade: {
      // The topics added to the role of a robot made before they existed
      // (neither disconnects the robot), then the client marked as current.
      std::vector<std::string> lacking;
      if (managed && managed->lacks_acks) lacking.push_back(topics::acks(robot_id).value());
      if (managed && managed->lacks_artifacts) lacking.push_back(topics::artifacts(robot_id).value());
      lacking.push_back(topics::log_request(robot_id).value());
      json added = json::array();
      for (const std::string& topic : lacking) {
        for (json& entry : receive_acls(topic)) added.push_back(std::move(entry));
      }
      added.push_back(acl("publishClientSend", topics::robot_log_chunks_filter(robot_id).value()));
      for (json& entry : added) {
        json add = command("addRoleACL", correlation);
        add["rolename"] = role;
        for (auto& [key, value] : entry.items()) add[key] = value;
        commands.push_back(std::move(add));
      }
      json mark = command("modifyClient", correlation);
      mark["username"] = robot_id;
      mark["textname"] = std::string(kManagedMark);
      commands.push_back(std::move(mark));
      break;
    }
    case Action::remove: {
      json remove_client = command("deleteClient", correlation);
      remove_client["username"] = robot_id;
      json remove_role = command("deleteRole", correlation);
      remove_role["rolename"] = role;
      commands.push_back(std::move(remove_client));
      commands.push_back(std::move(remove_role));
      break;
    }
  }
  return commands;
}

json list_clients_command(const std::string& correlation) {
  json list = command("listClients", correlation);
  list["verbose"] = true;
  list["count"] = -1;
  return {{"commands", json::array({list})}};
}

Result<std::vector<Response>> parse_responses(const std::string& payload) {
  const Error invalid{"responses", "not a dynamic-security response"};
  if (payload.size() > kMaxResponseBytes) return Error{"responses", "larger than 32 MiB"};
  if (json_nested_deeper_than(payload)) return Error{"responses", "nested too deeply"};
  const json parsed = json::parse(payload, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) return invalid;
  const auto list = parsed.find("responses");
  if (list == parsed.end() || !list->is_array()) return Error{"responses", "must be an array"};
  std::vector<Response> responses;
  for (const json& entry : *list) {
    if (!entry.is_object() || !entry.contains("command") || !entry["command"].is_string())
      return Error{"responses", "each response must be an object with a string command"};
    Response response;
    response.command = entry["command"].get<std::string>();
    if (const auto error = entry.find("error"); error != entry.end()) {
      if (!error->is_string()) return Error{"responses.error", "must be a string"};
      response.error = error->get<std::string>();
    }
    if (const auto correlation = entry.find("correlationData"); correlation != entry.end() && correlation->is_string())
      response.correlation = correlation->get<std::string>();
    if (const auto data = entry.find("data"); data != entry.end()) response.data = *data;
    responses.push_back(std::move(response));
  }
  return responses;
}

Result<std::map<std::string, Managed>> managed_clients(const json& data) {
  if (!data.is_object() || !data.contains("clients") || !data["clients"].is_array())
    return Error{"listClients", "data.clients must be an array"};
  std::map<std::string, Managed> managed;
  for (const json& client : data["clients"]) {
    if (!client.is_object()) return Error{"listClients", "ask for verbose clients: got a name where an object goes"};
    const auto text = [&client](const char* key) {
      const auto found = client.find(key);
      return found != client.end() && found->is_string() ? found->get<std::string>() : std::string();
    };
    const std::string username = text("username");
    const std::string mark = text("textname");
    if ((mark != kManagedMark && mark != kManagedMarkBeforeLogs && mark != kManagedMarkBeforeArtifacts &&
         mark != kManagedMarkBeforeAcks) ||
        !validate_identifier(username))
      continue;
    const std::string description = text("textdescription");
    Managed entry;
    entry.current = mark == kManagedMark;
    entry.lacks_acks = mark == kManagedMarkBeforeAcks;
    entry.lacks_artifacts = entry.lacks_acks || mark == kManagedMarkBeforeArtifacts;
    if (description.rfind(kDigestPrefix, 0) == 0) {
      entry.digest = description.substr(kDigestPrefix.size());
      if (const auto after = entry.digest.find(kPreviousSeparator); after != std::string::npos) {
        entry.previous = entry.digest.substr(after + kPreviousSeparator.size());
        entry.digest.resize(after);
      }
    }
    managed.emplace(username, std::move(entry));
  }
  return managed;
}

}  // namespace k8s4r::bridge::dynsec
