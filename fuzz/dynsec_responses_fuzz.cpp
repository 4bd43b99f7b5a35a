// What the bridge reads back from the broker's dynamic-security plugin
// ($CONTROL/dynamic-security/v1/response), and robot Secrets as the API
// server may hand them: any bytes must give responses or a refusal, and the
// managed clients and the commands made from them must stay within robot ids
// (a topic-breaking user name is never made a role or a client), never
// crash, hang or leak.
#include "k8s4r/bridge/dynsec_commands.h"
#include "k8s4r/crd/resources.h"
#include "k8s4r/crd/robot_secret.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

using nlohmann::json;
using namespace k8s4r;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string payload(reinterpret_cast<const char*>(data), size);
  const auto responses = bridge::dynsec::parse_responses(payload);
  if (responses) {
    for (const auto& response : responses.value()) {
      const auto managed = bridge::dynsec::managed_clients(response.data);
      if (!managed) continue;
      for (const auto& [robot_id, entry] : managed.value()) {
        if (robot_id.find_first_of("+#/") != std::string::npos) std::abort();
        const bridge::dynsec::Desired desired{"token", entry.digest};
        for (auto action :
             {bridge::dynsec::Action::create, bridge::dynsec::Action::rotate, bridge::dynsec::Action::remove}) {
          const json commands = bridge::dynsec::commands_for(action, robot_id, desired, "c");
          if (commands.empty()) std::abort();  // a managed client is always a valid robot id
        }
      }
    }
  }
  // The same bytes as a Secret.
  if (const json secret = json::parse(payload, nullptr, false); !secret.is_discarded()) {
    json reduced = secret;
    crd::keep_robot_secret_fields(reduced);
    const std::string robot = crd::robot_of_secret(reduced);
    if (!robot.empty() && crd::robot_secret_name(robot) != crd::string_at(reduced, {"metadata", "name"})) std::abort();
    (void)crd::robot_secret_token(reduced, robot);
  }
  return 0;
}
