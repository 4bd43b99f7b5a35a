#include "k8s4r/manager/placement.h"

#include "k8s4r/common/messages.h"
#include "k8s4r/crd/quantity.h"
#include "k8s4r/crd/resources.h"

#include <re2/re2.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <tuple>

namespace k8s4r::manager {

using nlohmann::json;

namespace {

std::optional<double> as_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size()) return std::nullopt;
  return value;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator)) {
    const auto first = part.find_first_not_of(' ');
    const auto last = part.find_last_not_of(' ');
    if (first != std::string::npos) parts.push_back(part.substr(first, last - first + 1));
  }
  return parts;
}

// "1.2.3", "v1.2", "5.10.0-28-amd64": the leading dotted numbers.
std::optional<std::vector<long>> parse_version(std::string text) {
  if (!text.empty() && (text[0] == 'v' || text[0] == 'V')) text.erase(0, 1);
  std::vector<long> parts;
  std::size_t at = 0;
  while (at < text.size()) {
    if (text[at] < '0' || text[at] > '9') break;
    long part = 0;
    for (; at < text.size() && text[at] >= '0' && text[at] <= '9'; ++at) {
      part = part * 10 + (text[at] - '0');
      if (part > 1'000'000'000) return std::nullopt;
    }
    parts.push_back(part);
    if (at < text.size() && text[at] == '.') {
      ++at;
    } else {
      break;
    }
  }
  if (parts.empty()) return std::nullopt;
  return parts;
}

int compare_versions(const std::vector<long>& a, const std::vector<long>& b) {
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const long left = i < a.size() ? a[i] : 0, right = i < b.size() ? b[i] : 0;
    if (left != right) return left < right ? -1 : 1;
  }
  return 0;
}

bool ordered(int comparison, const std::string& op) {
  if (op == "=" || op == "==") return comparison == 0;
  if (op == "!=") return comparison != 0;
  if (op == "<") return comparison < 0;
  if (op == "<=") return comparison <= 0;
  if (op == ">") return comparison > 0;
  return comparison >= 0;  // ">="
}

constexpr const char* kOperands[] = {"=", "!=", ">", ">=", "<", "<=", "regexp", "set_contains", "version"};

std::string plural(int count, const char* one, const char* many) { return count == 1 ? one : many; }

std::string cpu_text(std::int64_t milli) {
  return milli % 1000 == 0 ? std::to_string(milli / 1000) : std::to_string(milli) + "m";
}

std::string memory_text(std::int64_t bytes) {
  for (const auto& [unit, size] :
       {std::pair{"Gi", 1LL << 30}, std::pair{"Mi", 1LL << 20}, std::pair{"Ki", 1LL << 10}}) {
    if (bytes >= size && bytes % size == 0) return std::to_string(bytes / size) + unit;
  }
  return std::to_string(bytes);
}

}  // namespace

struct Constraint::Compiled {
  std::unique_ptr<re2::RE2> pattern;                                // regexp
  std::vector<std::string> items;                                   // set_contains
  std::vector<std::pair<std::string, std::vector<long>>> versions;  // version
};

Result<Constraint> Constraint::make(std::string ltarget, std::string operand, std::string rtarget) {
  if (std::find(std::begin(kOperands), std::end(kOperands), operand) == std::end(kOperands)) {
    return Error{"operand", "'" + operand + "' is not one of = != > >= < <= regexp set_contains version"};
  }
  if (ltarget.rfind("${", 0) == 0 && (ltarget.size() < 4 || ltarget.back() != '}')) {
    return Error{"ltarget", "'" + ltarget + "' opens ${ without closing it"};
  }
  auto compiled = std::make_shared<Compiled>();
  if (operand == "regexp") {
    re2::RE2::Options options;
    options.set_log_errors(false);
    options.set_max_mem(1 << 20);
    compiled->pattern = std::make_unique<re2::RE2>(rtarget, options);
    if (!compiled->pattern->ok()) return Error{"rtarget", "not a regular expression: " + compiled->pattern->error()};
  } else if (operand == "set_contains") {
    compiled->items = split(rtarget, ',');
  } else if (operand == "version") {
    for (const std::string& clause : split(rtarget, ',')) {
      std::size_t op_end = 0;
      while (op_end < clause.size() && std::string_view("=!<>").find(clause[op_end]) != std::string_view::npos) {
        ++op_end;
      }
      std::string op = op_end == 0 ? "=" : clause.substr(0, op_end);
      if (op != "=" && op != "==" && op != "!=" && op != "<" && op != "<=" && op != ">" && op != ">=") {
        return Error{"rtarget", "'" + clause + "': '" + op + "' is no version comparison"};
      }
      const std::string number = split(clause.substr(op_end), ' ').empty() ? "" : split(clause.substr(op_end), ' ')[0];
      auto version = parse_version(number);
      if (!version) return Error{"rtarget", "'" + clause + "' holds no version"};
      compiled->versions.emplace_back(op, *version);
    }
    if (compiled->versions.empty()) return Error{"rtarget", "names no version"};
  }
  Constraint constraint;
  constraint.ltarget_ = std::move(ltarget);
  constraint.operand_ = std::move(operand);
  constraint.rtarget_ = std::move(rtarget);
  constraint.compiled_ = std::move(compiled);
  return constraint;
}

bool Constraint::operator()(const std::map<std::string, std::string>& attributes) const {
  std::optional<std::string> value;
  if (ltarget_.rfind("${", 0) == 0) {
    auto found = attributes.find(ltarget_.substr(2, ltarget_.size() - 3));
    if (found != attributes.end()) value = found->second;
  } else {
    value = ltarget_;
  }
  if (operand_ == "!=") return !value || *value != rtarget_;
  if (!value) return false;
  if (operand_ == "=") return *value == rtarget_;
  if (operand_ == "regexp") return re2::RE2::PartialMatch(*value, *compiled_->pattern);
  if (operand_ == "set_contains") {
    const std::vector<std::string> have = split(*value, ',');
    return std::all_of(compiled_->items.begin(), compiled_->items.end(), [&](const std::string& item) {
      return std::find(have.begin(), have.end(), item) != have.end();
    });
  }
  if (operand_ == "version") {
    auto version = parse_version(*value);
    return version && std::all_of(compiled_->versions.begin(), compiled_->versions.end(), [&](const auto& clause) {
             return ordered(compare_versions(*version, clause.second), clause.first);
           });
  }
  const auto left = as_number(*value), right = as_number(rtarget_);
  const int comparison = left && right ? (*left < *right ? -1 : *left > *right ? 1 : 0) : value->compare(rtarget_);
  return ordered(comparison < 0 ? -1 : comparison > 0 ? 1 : 0, operand_);
}

std::string Constraint::describe() const { return ltarget_ + " " + operand_ + " " + rtarget_; }

Result<std::vector<Constraint>> read_constraints(const json& constraints) {
  std::vector<Constraint> out;
  if (constraints.is_null()) return out;
  if (!constraints.is_array()) return Error{"constraints", "must be a list"};
  for (std::size_t i = 0; i < constraints.size(); ++i) {
    const json& item = constraints[i];
    const std::string where = "constraints[" + std::to_string(i) + "]";
    auto text = [&](const char* key) -> std::optional<std::string> {
      const json& value = crd::value_at(item, {key});
      if (value.is_string()) return value.get<std::string>();
      return std::nullopt;
    };
    // A Task's constraints spell ltarget and rtarget; a TaskGroup's (Go
    // K8s4r's Constraint type) lTarget and rTarget.
    const auto ltarget = item.contains("lTarget") ? text("lTarget") : text("ltarget");
    const auto rtarget = item.contains("rTarget") ? text("rTarget") : text("rtarget");
    const auto operand = text("operand");
    if (!ltarget || !operand || !rtarget) return Error{where, "needs ltarget, operand and rtarget, as strings"};
    auto made = Constraint::make(*ltarget, *operand, *rtarget);
    if (!made) return made.error().within(where);
    out.push_back(std::move(made).value());
  }
  return out;
}

RobotFacts robot_facts(const json& robot) {
  RobotFacts facts;
  if (const json& name = crd::value_at(robot, {"metadata", "name"}); name.is_string())
    facts.name = name.get<std::string>();
  if (const json& phase = crd::value_at(robot, {"status", "phase"}); phase.is_string())
    facts.phase = phase.get<std::string>();
  // A drain cordons too, whatever spec.unschedulable says (robot_drain.h).
  facts.unschedulable =
      crd::value_at(robot, {"spec", "unschedulable"}) == true || crd::value_at(robot, {"spec", "drain"}).is_object();
  if (const json& labels = crd::value_at(robot, {"spec", "labels"}); labels.is_object()) {
    for (const auto& [key, value] : labels.items()) {
      if (!value.is_string()) continue;
      facts.labels[key] = value.get<std::string>();
      facts.attributes["robot.labels." + key] = facts.attributes["meta." + key] = value.get<std::string>();
    }
  }
  facts.attributes["robot.name"] = facts.attributes["node.unique.name"] = facts.name;
  for (const json& checksum : crd::value_at(robot, {"status", "artifacts", "held"}))
    if (checksum.is_string()) facts.artifacts.insert(checksum.get<std::string>());
  const json& device = crd::value_at(robot, {"status", "deviceInfo"});
  for (const auto& [attribute, path] :
       std::initializer_list<std::pair<const char*, std::pair<const char*, const char*>>>{
           {"attr.os", {"platform", "os"}},
           {"attr.arch", {"platform", "arch"}},
           {"attr.platform", {"platform", "platform"}},
           {"attr.platform.version", {"platform", "platformVersion"}},
           {"attr.kernel.version", {"platform", "kernelVersion"}},
           {"attr.cpu.cores", {"cpu", "logicalCores"}},
           {"attr.memory.total", {"memory", "total"}}}) {
    const json& value = crd::value_at(device, {path.first, path.second});
    if (value.is_string()) facts.attributes[attribute] = value.get<std::string>();
    if (value.is_number_integer()) facts.attributes[attribute] = std::to_string(value.get<std::int64_t>());
  }
  if (const json& cores = crd::value_at(device, {"cpu", "logicalCores"}); cores.is_number_integer()) {
    const auto count = cores.get<std::int64_t>();
    if (count > 0 && count < 1'000'000) facts.cpu_milli = count * 1000;
  }
  if (const json& total = crd::value_at(device, {"memory", "total"}); total.is_number_integer()) {
    const auto bytes = total.get<std::int64_t>();
    if (bytes > 0) facts.memory_bytes = bytes;
  }
  return facts;
}

Placement place(const TaskNeeds& needs, const std::vector<RobotFacts>& robots) {
  const RobotFacts* best = nullptr;
  const auto held = [&](const RobotFacts& robot) {
    std::int64_t count = 0;
    for (const std::string& checksum : needs.artifacts) count += robot.artifacts.count(checksum) ? 1 : 0;
    return count;
  };
  auto better = [&](const RobotFacts& a, const RobotFacts& b) {
    const std::int64_t free_a = a.cpu_milli ? *a.cpu_milli - a.cpu_milli_used : INT64_MAX;
    const std::int64_t free_b = b.cpu_milli ? *b.cpu_milli - b.cpu_milli_used : INT64_MAX;
    // An artifact it holds counts as one task fewer: a robot that need not
    // download is preferred, but not until every task piles onto it.
    return std::tuple(a.tasks_of_group, a.tasks - held(a), -held(a), -free_a, a.name) <
           std::tuple(b.tasks_of_group, b.tasks - held(b), -held(b), -free_b, b.name);
  };
  std::map<std::string, int> why_not;  // reason (with its verb for one and for many) -> count
  std::map<std::string, std::pair<std::string, std::string>> wording;
  auto refuse = [&](const std::string& key, std::string one, std::string many) {
    ++why_not[key];
    wording.emplace(key, std::pair{std::move(one), std::move(many)});
  };
  for (const RobotFacts& robot : robots) {
    if (robot.phase != "Online") {
      const std::string phase = robot.phase.empty() ? "without a phase yet" : robot.phase;
      refuse("phase " + phase, phase, phase);
      continue;
    }
    if (robot.unschedulable) {
      refuse("cordoned", "is cordoned (spec.unschedulable)", "are cordoned (spec.unschedulable)");
      continue;
    }
    if (robot.rollout_full) {
      const std::string label = needs.rollout_label.empty() ? "label" : needs.rollout_label;
      refuse("rollout", "has its " + label + " at the rollout's most in flight (perLabel)",
             "have their " + label + " at the rollout's most in flight (perLabel)");
      continue;
    }
    if (needs.lost_after && robot.silent_for && *robot.silent_for >= *needs.lost_after) {
      refuse("silent", "has been out of contact longer than the tasks' lostAfter",
             "have been out of contact longer than the tasks' lostAfter");
      continue;
    }
    auto mismatch = std::find_if(needs.selector.begin(), needs.selector.end(), [&](const auto& wanted) {
      auto found = robot.labels.find(wanted.first);
      return found == robot.labels.end() || found->second != wanted.second;
    });
    if (mismatch != needs.selector.end()) {
      const std::string label = mismatch->first + "=" + mismatch->second;
      refuse("label " + label, "does not match " + label, "do not match " + label);
      continue;
    }
    auto unmet = std::find_if(needs.constraints.begin(), needs.constraints.end(),
                              [&](const Constraint& constraint) { return !constraint(robot.attributes); });
    if (unmet != needs.constraints.end()) {
      refuse("constraint " + unmet->describe(), "does not satisfy " + unmet->describe(),
             "do not satisfy " + unmet->describe());
      continue;
    }
    if (robot.cpu_milli && needs.cpu_milli > *robot.cpu_milli - robot.cpu_milli_used) {
      const std::string need = "cpu (the task needs " + cpu_text(needs.cpu_milli) + ")";
      refuse("cpu", "lacks " + need, "lack " + need);
      continue;
    }
    if (robot.memory_bytes && needs.memory_bytes > *robot.memory_bytes - robot.memory_bytes_used) {
      const std::string need = "memory (the task needs " + memory_text(needs.memory_bytes) + ")";
      refuse("memory", "lacks " + need, "lack " + need);
      continue;
    }
    if (!best || better(robot, *best)) best = &robot;
  }
  if (best) return Placement{best->name, "", static_cast<std::size_t>(held(*best)), needs.artifacts.size()};
  if (robots.empty()) return Placement{std::nullopt, "no robots"};
  std::vector<std::pair<int, std::string>> reasons;
  for (const auto& [key, count] : why_not) {
    const auto& [one, many] = wording.at(key);
    reasons.emplace_back(count, std::to_string(count) + " " + (count == 1 ? one : many));
  }
  std::sort(reasons.begin(), reasons.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  std::string why =
      std::to_string(robots.size()) + " " + plural(static_cast<int>(robots.size()), "robot", "robots") + ":";
  for (std::size_t i = 0; i < reasons.size(); ++i) why += (i == 0 ? " " : ", ") + reasons[i].second;
  return Placement{std::nullopt, why};
}

namespace {

// A resource quantity as the CRD allows it (an integer, or a quantity string), in milli-units.
Result<std::int64_t> quantity_milli(const json& value) {
  if (value.is_number_integer()) {
    const auto whole = value.get<std::int64_t>();
    if (whole < 0 || whole > INT64_MAX / 1000) return Error{"", "must be between 0 and 9223372036854775"};
    return whole * 1000;
  }
  if (value.is_string()) return crd::parse_quantity_milli(value.get<std::string>());
  return Error{"", "must be a number or a quantity such as \"500m\" or \"128Mi\""};
}

}  // namespace

Result<Resources> task_resources(const json& task_spec) {
  Resources resources;
  for (const auto& [key, amount] :
       {std::pair{"cpu", &resources.cpu_milli}, std::pair{"memory", &resources.memory_bytes}}) {
    const json& value = crd::value_at(task_spec, {"resources", key});
    if (value.is_null()) continue;
    auto milli = quantity_milli(value);
    if (!milli) return milli.error().within(std::string("resources.") + key);
    *amount = std::string_view(key) == "cpu" ? milli.value() : crd::whole_units(milli.value());
  }
  return resources;
}

Result<TaskNeeds> replica_needs(const json& job, const json& task_group) {
  TaskNeeds needs;
  const json& selector = crd::value_at(job, {"spec", "robotSelector"});
  if (selector.is_object()) {
    for (const auto& [key, value] : selector.items()) {
      if (!value.is_string()) return Error{"spec.robotSelector." + key, "must be a string"};
      needs.selector[key] = value.get<std::string>();
    }
  }
  auto group_constraints = read_constraints(crd::value_at(task_group, {"spec", "constraints"}));
  if (!group_constraints) return group_constraints.error().within("spec");
  needs.constraints = std::move(group_constraints).value();
  const json& tasks = crd::value_at(task_group, {"spec", "tasks"});
  if (!tasks.is_array()) return Error{"spec.tasks", "must be a list"};
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const std::string where = "spec.tasks[" + std::to_string(i) + "]";
    auto constraints = read_constraints(crd::value_at(tasks[i], {"constraints"}));
    if (!constraints) return constraints.error().within(where);
    for (Constraint& constraint : constraints.value()) needs.constraints.push_back(std::move(constraint));
    auto resources = task_resources(tasks[i]);
    if (!resources) return resources.error().within(where);
    if (resources.value().cpu_milli > INT64_MAX - needs.cpu_milli ||
        resources.value().memory_bytes > INT64_MAX - needs.memory_bytes) {
      return Error{where + ".resources", "the tasks together need too much"};
    }
    needs.cpu_milli += resources.value().cpu_milli;
    needs.memory_bytes += resources.value().memory_bytes;
    for (const json& artifact : crd::value_at(tasks[i], {"artifacts"})) {
      std::string checksum = crd::string_at(artifact, {"getterOptions", "checksum"});
      for (char& c : checksum) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (check_artifact_digest(checksum) &&
          std::find(needs.artifacts.begin(), needs.artifacts.end(), checksum) == needs.artifacts.end())
        needs.artifacts.push_back(std::move(checksum));
    }
  }
  return needs;
}

}  // namespace k8s4r::manager
