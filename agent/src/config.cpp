#include "k8s4r/agent/config.h"

#include "k8s4r/common/duration.h"
#include "k8s4r/common/identifiers.h"

#include <yaml-cpp/yaml.h>
#include <CLI/CLI.hpp>

#include <filesystem>
#include <set>

namespace k8s4r::agent {

namespace {

#ifndef K8S4R_VERSION
#define K8S4R_VERSION "0.0.0"
#endif

// One setting: its name (file key and flag), what it means, and how a text
// value is applied. The environment variable is K8S4R_ + the name in upper
// case with '-' as '_'.
struct Setting {
  std::string name;
  std::string help;
  std::function<std::optional<std::string>(AgentConfig&, const std::string&)> apply;  // an error, or nullopt
};

std::optional<std::string> set_duration(std::chrono::nanoseconds& target, const std::string& text) {
  auto parsed = parse_non_negative_go_duration(text);
  if (!parsed) return parsed.error().message;
  if (parsed.value().count() == 0) return "must be more than 0";
  target = parsed.value();
  return std::nullopt;
}

std::optional<std::string> set_size(std::size_t& target, const std::string& text) {
  try {
    std::size_t used = 0;
    const unsigned long long value = std::stoull(text, &used);
    if (used != text.size() || value == 0) return "must be a positive whole number, got '" + text + "'";
    target = static_cast<std::size_t>(value);
    return std::nullopt;
  } catch (...) {
    return "must be a positive whole number, got '" + text + "'";
  }
}

std::vector<Setting> settings() {
  return {
      {"broker-url", "MQTT broker, tcp://HOST:PORT or ssl://HOST:PORT",
       [](AgentConfig& c, const std::string& v) -> std::optional<std::string> {
         if (v.rfind("tcp://", 0) != 0 && v.rfind("ssl://", 0) != 0 && v.rfind("mqtt://", 0) != 0 &&
             v.rfind("mqtts://", 0) != 0) {
           return "must start with tcp://, ssl://, mqtt:// or mqtts://, got '" + v + "'";
         }
         c.broker_url = v;
         return std::nullopt;
       }},
      {"robot-id", "this robot's id: a DNS-1123 label, also the MQTT client id",
       [](AgentConfig& c, const std::string& v) -> std::optional<std::string> {
         if (auto checked = validate_identifier(v); !checked) return checked.error().message;
         c.robot_id = v;
         return std::nullopt;
       }},
      {"token", "credential: sent in register and heartbeat, and as the MQTT password (user name: the robot id)",
       [](AgentConfig& c, const std::string& v) -> std::optional<std::string> {
         c.token = v;
         return std::nullopt;
       }},
      {"ca-file", "PEM CA bundle to verify an ssl:// broker (default: the system's)",
       [](AgentConfig& c, const std::string& v) -> std::optional<std::string> {
         if (!std::filesystem::exists(v)) return "no such file: '" + v + "'";
         c.ca_file = v;
         return std::nullopt;
       }},
      {"work-dir", "state: journal, queued reports, task directories",
       [](AgentConfig& c, const std::string& v) -> std::optional<std::string> {
         if (v.empty() || v.front() != '/') return "must be an absolute path, got '" + v + "'";
         c.work_dir = v;
         return std::nullopt;
       }},
      {"heartbeat-interval", "time between heartbeats, a Go duration (30s)",
       [](AgentConfig& c, const std::string& v) { return set_duration(c.heartbeat_interval, v); }},
      {"labels", "labels for scheduling: k=v,k2=v2",
       [](AgentConfig& c, const std::string& v) -> std::optional<std::string> {
         std::map<std::string, std::string> labels;
         std::size_t start = 0;
         while (start < v.size()) {
           const auto comma = v.find(',', start);
           const std::string pair = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
           const auto equals = pair.find('=');
           if (equals == std::string::npos || equals == 0)
             return "must be k=v pairs separated by ',', got '" + pair + "'";
           labels[pair.substr(0, equals)] = pair.substr(equals + 1);
           if (comma == std::string::npos) break;
           start = comma + 1;
         }
         c.labels = labels;
         return std::nullopt;
       }},
      {"kill-timeout", "grace between SIGTERM and SIGKILL when a task sets none (5s)",
       [](AgentConfig& c, const std::string& v) { return set_duration(c.default_kill_timeout, v); }},
      {"max-log-bytes", "cap on each task's stdout and stderr files",
       [](AgentConfig& c, const std::string& v) { return set_size(c.max_log_bytes, v); }},
      {"max-queued-reports", "status reports held on disk while the broker is unreachable",
       [](AgentConfig& c, const std::string& v) { return set_size(c.max_queued_reports, v); }},
      {"log-level", "trace, debug, info, warn or error",
       [](AgentConfig& c, const std::string& v) -> std::optional<std::string> {
         static const std::set<std::string> levels = {"trace", "debug", "info", "warn", "error"};
         if (!levels.count(v)) return "must be one of trace, debug, info, warn, error, got '" + v + "'";
         c.log_level = v;
         return std::nullopt;
       }},
  };
}

std::string env_name(const std::string& name) {
  std::string upper = "K8S4R_";
  for (char c : name) upper += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return upper;
}

}  // namespace

AgentConfigOutcome parse_agent_config(const std::vector<std::string>& args,
                                      const std::function<std::string(const std::string&)>& env,
                                      const std::string& default_config_file) {
  const std::vector<Setting> table = settings();
  CLI::App app{
      "k8s4r-agent: runs k8s4r tasks on this robot.\nEvery option can also be set in the config file "
      "(same name) or as K8S4R_<NAME> in the environment; flags win over the environment, which wins over "
      "the file."};
  app.set_version_flag("--version", std::string("k8s4r-agent ") + K8S4R_VERSION);
  std::string config_flag;
  app.add_option("--config", config_flag, "YAML config file (default " + default_config_file + " if it exists)");
  std::map<std::string, std::string> flags;
  for (const Setting& setting : table) {
    app.add_option("--" + setting.name, flags[setting.name], setting.help + " [" + env_name(setting.name) + "]");
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 wants them reversed
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return {std::nullopt, app.help(), 0};
  } catch (const CLI::CallForVersion&) {
    return {std::nullopt, app.version() + "\n", 0};
  } catch (const CLI::ParseError& error) {
    return {std::nullopt, std::string("k8s4r-agent: ") + error.what() + "\n", 2};
  }

  AgentConfig config;
  std::vector<std::string> errors;
  const auto apply = [&](const std::string& name, const std::string& value, const std::string& where) {
    for (const Setting& setting : table) {
      if (setting.name == name) {
        if (auto problem = setting.apply(config, value)) errors.push_back(where + ": " + name + ": " + *problem);
        return;
      }
    }
    errors.push_back(where + ": unknown setting '" + name + "'");
  };

  // 1. The file.
  std::string file = !config_flag.empty() ? config_flag : env("K8S4R_CONFIG");
  const bool explicit_file = !file.empty();
  if (!explicit_file && std::filesystem::exists(default_config_file)) file = default_config_file;
  if (!file.empty()) {
    config.config_file = file;
    try {
      const YAML::Node root = YAML::LoadFile(file);
      if (root && !root.IsNull() && !root.IsMap()) {
        errors.push_back(file + ": must be a mapping of settings");
      } else if (root && root.IsMap()) {
        for (const auto& entry : root) {
          const std::string name = entry.first.as<std::string>();
          if (name == "labels" && entry.second.IsMap()) {
            std::string joined;
            for (const auto& label : entry.second) {
              joined +=
                  (joined.empty() ? "" : ",") + label.first.as<std::string>() + "=" + label.second.as<std::string>();
            }
            apply(name, joined, file);
          } else if (entry.second.IsScalar()) {
            apply(name, entry.second.Scalar(), file);
          } else {
            errors.push_back(file + ": " + name + ": must be a single value");
          }
        }
      }
    } catch (const YAML::Exception& error) {
      errors.push_back(file + ": " + error.what());
    }
  }
  // 2. The environment, 3. the flags.
  for (const Setting& setting : table) {
    if (const std::string value = env(env_name(setting.name)); !value.empty())
      apply(setting.name, value, env_name(setting.name));
  }
  for (const Setting& setting : table) {
    if (app.count("--" + setting.name) > 0) apply(setting.name, flags[setting.name], "--" + setting.name);
  }
  // Required settings, once everything is in.
  if (config.broker_url.empty())
    errors.push_back("broker-url is required (--broker-url, K8S4R_BROKER_URL or the config file)");
  if (config.robot_id.empty()) errors.push_back("robot-id is required (--robot-id, K8S4R_ROBOT_ID or the config file)");

  if (!errors.empty()) {
    std::string text = "k8s4r-agent: invalid configuration:\n";
    for (const std::string& error : errors) text += "  " + error + "\n";
    return {std::nullopt, text, 2};
  }
  return {config, "", 0};
}

}  // namespace k8s4r::agent
