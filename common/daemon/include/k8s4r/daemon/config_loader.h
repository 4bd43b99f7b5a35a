// How every k8s4r daemon reads its configuration: one table of settings, each
// with one name used everywhere (`heartbeat-interval` in the YAML file,
// K8S4R_HEARTBEAT_INTERVAL in the environment, --heartbeat-interval on the
// command line), applied in that order over the daemon's defaults: the file
// (--config, else K8S4R_CONFIG, else the daemon's default path when it
// exists), then the environment, then flags. Every error, from every source,
// is reported together, each naming where the value came from.
//
// A daemon describes its settings by what each does to its own config
// struct (Setting::apply); the loader knows nothing of any daemon. The
// parse_* helpers are the value checks the daemons share.
//
// Flags read like Kubernetes' (pflag's): a bool setting is a switch
// (--leader-elect alone is true, --leader-elect=false turns it off; the
// environment and the file take true or false as strconv.ParseBool does),
// and --help names each setting's type.
//
// Thread-safety: pure functions over values (the file is read once).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::daemon {

// An error message, or nullopt when the value was applied.
using ApplyResult = std::optional<std::string>;

// What a setting's value is, as --help shows it. Bool makes the flag a
// switch; KeyValues also takes a YAML mapping in the file, handed to apply as
// k=v,k2=v2.
enum class ValueType { String, Bool, Duration, Count, HostPort, Url, Path, KeyValues, Level, Choice };

// The name --help shows: "bool", "duration", "host:port", ...
const char* type_name(ValueType type);

struct Setting {
  std::string name;  // file key and flag name
  ValueType type;
  std::string help;
  std::function<ApplyResult(const std::string& value)> apply;
};

struct Program {
  std::string name;         // k8s4r-agent
  std::string description;  // the first line of --help
  std::string version;
  std::string default_config_file;  // read when it exists and no other file is named
};

struct LoadOutcome {
  bool run = false;         // false: print `output`, exit with exit_code
  std::string output;       // --help or --version text, or every error
  int exit_code = 0;        // 0 for --help and --version, 2 for errors
  std::string config_file;  // the file read, if any
};

// Applies `settings` from the file, the environment and `args` (without the
// program name), then calls `validate` (when given) to add the errors only
// the whole config shows, such as a required setting missing. `env` returns
// "" for an unset variable. Never throws.
LoadOutcome load_settings(const Program& program, const std::vector<Setting>& settings,
                          const std::vector<std::string>& args,
                          const std::function<std::string(const std::string&)>& env,
                          const std::function<void(std::vector<std::string>& errors)>& validate = {});

// K8S4R_ + the name in upper case with '-' as '_'.
std::string env_name(const std::string& setting_name);

// A variable of this process's environment, "" when unset: what every
// daemon's main() hands its config parser.
std::string process_environment(const std::string& name);

// The value checks the daemons share; each names what it expected.
ApplyResult parse_positive_duration(const std::string& text, std::chrono::nanoseconds& target);
ApplyResult parse_non_negative_duration(const std::string& text, std::chrono::nanoseconds& target);  // "0s" allowed
ApplyResult parse_positive_size(const std::string& text, std::size_t& target);
ApplyResult parse_log_level(const std::string& text, std::string& target);
// true or false, as Go's strconv.ParseBool reads them: 1, t, T, TRUE, true,
// True, 0, f, F, FALSE, false, False.
ApplyResult parse_bool(const std::string& text, bool& target);
ApplyResult parse_broker_url(const std::string& text, std::string& target);
ApplyResult parse_labels(const std::string& text, std::map<std::string, std::string>& target);
ApplyResult parse_existing_file(const std::string& text, std::string& target);
// Reads a credential from the file at `text` into `target`: at most 64 KiB,
// one line (trailing CR/LF dropped), not empty. Errors name the file, never
// its content.
ApplyResult parse_secret_file(const std::string& text, std::string& target);
// host:port, with a port from 0 (any free port) to 65535.
ApplyResult parse_bind_address(const std::string& text, std::string& target);

}  // namespace k8s4r::daemon
