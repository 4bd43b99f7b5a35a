#include "k8s4r/daemon/config_loader.h"

#include "k8s4r/common/duration.h"

#include <yaml-cpp/yaml.h>
#include <CLI/CLI.hpp>
#include <cstdlib>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

namespace k8s4r::daemon {

std::string process_environment(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  return value ? value : "";
}

std::string env_name(const std::string& setting_name) {
  std::string upper = "K8S4R_";
  for (char c : setting_name) {
    upper += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return upper;
}

const char* type_name(ValueType type) {
  switch (type) {
    case ValueType::String:
      return "string";
    case ValueType::Bool:
      return "bool";
    case ValueType::Duration:
      return "duration";
    case ValueType::Count:
      return "count";
    case ValueType::HostPort:
      return "host:port";
    case ValueType::Url:
      return "url";
    case ValueType::Path:
      return "path";
    case ValueType::KeyValues:
      return "k=v,...";
    case ValueType::Level:
      return "level";
    case ValueType::Choice:
      return "choice";
  }
  return "string";
}

namespace {

const Setting* find(const std::vector<Setting>& settings, const std::string& name) {
  for (const Setting& setting : settings) {
    if (setting.name == name) return &setting;
  }
  return nullptr;
}

void read_file(const std::string& file, const std::vector<Setting>& settings, std::vector<std::string>& errors) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::Exception& error) {
    errors.push_back(file + ": " + error.what());
    return;
  }
  if (!root || root.IsNull()) return;
  if (!root.IsMap()) {
    errors.push_back(file + ": must be a mapping of settings");
    return;
  }
  for (const auto& entry : root) {
    if (!entry.first.IsScalar()) {
      errors.push_back(file + ": setting names must be strings");
      continue;
    }
    const std::string name = entry.first.Scalar();
    const Setting* setting = find(settings, name);
    if (!setting) {
      errors.push_back(file + ": unknown setting '" + name + "'");
      continue;
    }
    std::string value;
    if (entry.second.IsScalar()) {
      value = entry.second.Scalar();
    } else if (setting->type == ValueType::KeyValues && entry.second.IsMap()) {
      bool scalars = true;
      for (const auto& item : entry.second) {
        if (!item.first.IsScalar() || !item.second.IsScalar()) {
          scalars = false;
          break;
        }
        value += (value.empty() ? "" : ",") + item.first.Scalar() + "=" + item.second.Scalar();
      }
      if (!scalars) {
        errors.push_back(file + ": " + name + ": must map names to single values");
        continue;
      }
    } else {
      errors.push_back(file + ": " + name + ": must be a single value");
      continue;
    }
    if (auto problem = setting->apply(value)) errors.push_back(file + ": " + name + ": " + *problem);
  }
}

}  // namespace

LoadOutcome load_settings(const Program& program, const std::vector<Setting>& settings,
                          const std::vector<std::string>& args,
                          const std::function<std::string(const std::string&)>& env,
                          const std::function<void(std::vector<std::string>& errors)>& validate) {
  CLI::App app{program.description +
                   "\nEvery option can also be set in the config file (same name) or as K8S4R_<NAME> in the "
                   "environment; flags win over the environment, which wins over the file. A bool option alone "
                   "means true (--name, --name=false); a duration is Go's (300ms, 90s, 1h30m).",
               program.name};
  app.set_version_flag("--version", program.name + " " + program.version);
  std::string config_flag;
  app.add_option("--config", config_flag,
                 "YAML config file (default " + program.default_config_file + " if it exists) [K8S4R_CONFIG]")
      ->type_name("path");
  std::map<std::string, std::string> flags;
  for (const Setting& setting : settings) {
    CLI::Option* option =
        app.add_option("--" + setting.name, flags[setting.name], setting.help + " [" + env_name(setting.name) + "]");
    option->type_name(type_name(setting.type));
    if (setting.type == ValueType::Bool) option->expected(0, 1);  // a switch; its value only after '='
  }
  // CLI11 reads a bare switch and "--name=" alike; pflag refuses the latter, and so do we, since an
  // empty $VARIABLE behind '=' must not turn a switch on.
  for (const std::string& arg : args) {
    if (arg.size() > 3 && arg.rfind("--", 0) == 0 && arg.back() == '=') {
      const std::string name = arg.substr(2, arg.size() - 3);
      if (const Setting* setting = find(settings, name); setting && setting->type == ValueType::Bool)
        return {false, program.name + ": --" + name + "=: needs true or false after '=' (or --" + name + " alone)\n", 2,
                ""};
    }
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 wants them reversed
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return {false, app.help(), 0, ""};
  } catch (const CLI::CallForVersion&) {
    return {false, app.version() + "\n", 0, ""};
  } catch (const CLI::ParseError& error) {
    return {false, program.name + ": " + error.what() + "\n", 2, ""};
  }

  LoadOutcome outcome;
  std::vector<std::string> errors;
  // 1. The file.
  std::string file = !config_flag.empty() ? config_flag : env("K8S4R_CONFIG");
  if (file.empty() && !program.default_config_file.empty() && std::filesystem::exists(program.default_config_file))
    file = program.default_config_file;
  if (!file.empty()) {
    outcome.config_file = file;
    read_file(file, settings, errors);
  }
  // 2. The environment, 3. the flags.
  for (const Setting& setting : settings) {
    const std::string variable = env_name(setting.name);
    if (const std::string value = env(variable); !value.empty()) {
      if (auto problem = setting.apply(value)) errors.push_back(variable + ": " + setting.name + ": " + *problem);
    }
  }
  for (const Setting& setting : settings) {
    if (app.count("--" + setting.name) == 0) continue;
    std::string& value = flags[setting.name];
    if (setting.type == ValueType::Bool && value.empty()) value = "true";  // the bare switch
    if (auto problem = setting.apply(value))
      errors.push_back("--" + setting.name + ": " + setting.name + ": " + *problem);
  }
  if (validate) validate(errors);

  if (!errors.empty()) {
    outcome.output = program.name + ": invalid configuration:\n";
    for (const std::string& error : errors) outcome.output += "  " + error + "\n";
    outcome.exit_code = 2;
    return outcome;
  }
  outcome.run = true;
  return outcome;
}

ApplyResult parse_positive_duration(const std::string& text, std::chrono::nanoseconds& target) {
  auto parsed = parse_non_negative_go_duration(text);
  if (!parsed) return parsed.error().message;
  if (parsed.value().count() == 0) return "must be more than 0";
  target = parsed.value();
  return std::nullopt;
}

ApplyResult parse_non_negative_duration(const std::string& text, std::chrono::nanoseconds& target) {
  auto parsed = parse_non_negative_go_duration(text);
  if (!parsed) return parsed.error().message;
  target = parsed.value();
  return std::nullopt;
}

ApplyResult parse_bool(const std::string& text, bool& target) {
  static const std::set<std::string> yes = {"1", "t", "T", "TRUE", "true", "True"};
  static const std::set<std::string> no = {"0", "f", "F", "FALSE", "false", "False"};
  if (yes.count(text)) {
    target = true;
  } else if (no.count(text)) {
    target = false;
  } else {
    return "must be true or false, got '" + text + "'";
  }
  return std::nullopt;
}

ApplyResult parse_positive_size(const std::string& text, std::size_t& target) {
  const std::string problem = "must be a positive whole number, got '" + text + "'";
  if (text.empty() || text.size() > 19) return problem;
  std::size_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return problem;
    value = value * 10 + static_cast<std::size_t>(c - '0');
  }
  if (value == 0) return problem;
  target = value;
  return std::nullopt;
}

ApplyResult parse_log_level(const std::string& text, std::string& target) {
  static const std::set<std::string> levels = {"trace", "debug", "info", "warn", "error"};
  if (!levels.count(text)) return "must be one of trace, debug, info, warn, error, got '" + text + "'";
  target = text;
  return std::nullopt;
}

ApplyResult parse_broker_url(const std::string& text, std::string& target) {
  for (const char* scheme : {"tcp://", "ssl://", "mqtt://", "mqtts://"}) {
    if (text.rfind(scheme, 0) == 0 && text.size() > std::string(scheme).size()) {
      target = text;
      return std::nullopt;
    }
  }
  return "must be tcp://, ssl://, mqtt:// or mqtts:// followed by host:port, got '" + text + "'";
}

ApplyResult parse_labels(const std::string& text, std::map<std::string, std::string>& target) {
  std::map<std::string, std::string> labels;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto comma = text.find(',', start);
    const std::string pair = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto equals = pair.find('=');
    if (equals == std::string::npos || equals == 0) return "must be k=v pairs separated by ',', got '" + pair + "'";
    labels[pair.substr(0, equals)] = pair.substr(equals + 1);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  target = std::move(labels);
  return std::nullopt;
}

ApplyResult parse_existing_file(const std::string& text, std::string& target) {
  if (!std::filesystem::is_regular_file(text)) return "no such file: '" + text + "'";
  target = text;
  return std::nullopt;
}

ApplyResult parse_secret_file(const std::string& text, std::string& target) {
  constexpr std::size_t kMaxSecret = 64 * 1024;
  std::error_code error;
  if (!std::filesystem::is_regular_file(text, error)) return "no such file: '" + text + "'";
  const auto size = std::filesystem::file_size(text, error);
  if (error) return "cannot read '" + text + "': " + error.message();
  if (size > kMaxSecret) return "'" + text + "' is larger than 64 KiB: not a credential";
  std::ifstream file(text, std::ios::binary);
  std::string content((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (!file.good() && !file.eof()) return "cannot read '" + text + "'";
  while (!content.empty() && (content.back() == '\n' || content.back() == '\r')) content.pop_back();
  if (content.empty()) return "'" + text + "' is empty";
  if (content.find_first_of("\r\n") != std::string::npos) return "'" + text + "' holds more than one line";
  target = std::move(content);
  return std::nullopt;
}

ApplyResult parse_bind_address(const std::string& text, std::string& target) {
  const auto colon = text.rfind(':');
  const std::string problem = "must be host:port with a port from 0 to 65535, got '" + text + "'";
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size() || text.size() - colon - 1 > 5)
    return problem;
  unsigned port = 0;
  for (std::size_t i = colon + 1; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return problem;
    port = port * 10 + static_cast<unsigned>(text[i] - '0');
  }
  if (port > 65535) return problem;
  target = text;
  return std::nullopt;
}

}  // namespace k8s4r::daemon
