#include "k8s4r/kube_sim/selectors.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace k8s4r::kube_sim {
namespace {

using nlohmann::json;

bool is_space(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

// Characters allowed in label keys (with an optional DNS prefix and '/') and
// values: alphanumerics, '-', '_', '.', and '/' in keys.
bool valid_label_part(std::string_view text, bool key) {
  if (text.size() > (key ? 316u : 63u)) return false;
  if (key && text.empty()) return false;
  return std::all_of(text.begin(), text.end(), [key](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || (key && c == '/');
  });
}

Error selector_error(std::string_view text, std::string_view why) {
  return Error{"labelSelector", "unable to parse requirement: " + std::string(why) + " in '" + std::string(text) + "'"};
}

// Splits at commas that are not inside parentheses.
std::vector<std::string_view> split_requirements(std::string_view text) {
  std::vector<std::string_view> parts;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    if (text[i] == ')') --depth;
    if (text[i] == ',' && depth == 0) {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(text.substr(start));
  return parts;
}

std::optional<long long> as_integer(std::string_view text) {
  long long value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

Result<LabelSelector> LabelSelector::parse(std::string_view text) {
  LabelSelector selector;
  if (trim(text).empty()) return selector;
  for (std::string_view raw : split_requirements(text)) {
    const std::string_view part = trim(raw);
    if (part.empty()) return selector_error(text, "empty requirement");
    Requirement requirement;
    if (part.front() == '!') {
      requirement.key = std::string(trim(part.substr(1)));
      requirement.op = Operator::not_exists;
    } else if (auto paren = part.find('('); paren != std::string_view::npos) {
      // key in (a,b) / key notin (a,b)
      if (part.back() != ')') return selector_error(text, "expected ')'");
      const std::string_view head = trim(part.substr(0, paren));
      const auto space = head.find_last_of(" \t");
      if (space == std::string_view::npos) return selector_error(text, "expected 'in' or 'notin'");
      const std::string_view op = head.substr(space + 1);
      if (op == "in") {
        requirement.op = Operator::in;
      } else if (op == "notin") {
        requirement.op = Operator::not_in;
      } else {
        return selector_error(text, "unknown operator '" + std::string(op) + "'");
      }
      requirement.key = std::string(trim(head.substr(0, space)));
      std::string_view list = part.substr(paren + 1, part.size() - paren - 2);
      std::size_t start = 0;
      while (true) {
        const auto comma = list.find(',', start);
        const std::string_view value = trim(list.substr(start, comma - start));
        if (!valid_label_part(value, false))
          return selector_error(text, "invalid label value '" + std::string(value) + "'");
        requirement.values.emplace_back(value);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
    } else if (auto at = part.find("!="); at != std::string_view::npos) {
      requirement = {
          std::string(trim(part.substr(0, at))), Operator::not_equals, {std::string(trim(part.substr(at + 2)))}};
    } else if (auto at2 = part.find("=="); at2 != std::string_view::npos) {
      requirement = {
          std::string(trim(part.substr(0, at2))), Operator::equals, {std::string(trim(part.substr(at2 + 2)))}};
    } else if (auto at3 = part.find('='); at3 != std::string_view::npos) {
      requirement = {
          std::string(trim(part.substr(0, at3))), Operator::equals, {std::string(trim(part.substr(at3 + 1)))}};
    } else if (auto gt = part.find_first_of("<>"); gt != std::string_view::npos) {
      const std::string_view number = trim(part.substr(gt + 1));
      if (!as_integer(number)) return selector_error(text, "for 'gt', 'lt' operators, the value must be an integer");
      requirement = {std::string(trim(part.substr(0, gt))),
                     part[gt] == '>' ? Operator::greater_than : Operator::less_than,
                     {std::string(number)}};
    } else {
      requirement = {std::string(part), Operator::exists, {}};
    }
    if (!valid_label_part(requirement.key, true)) {
      return selector_error(text, "invalid label key '" + requirement.key + "'");
    }
    for (const auto& value : requirement.values) {
      if (!valid_label_part(value, false)) return selector_error(text, "invalid label value '" + value + "'");
    }
    selector.requirements_.push_back(std::move(requirement));
  }
  return selector;
}

bool LabelSelector::matches(const json& labels) const {
  for (const Requirement& requirement : requirements_) {
    const bool has = labels.is_object() && labels.contains(requirement.key) && labels[requirement.key].is_string();
    const std::string value = has ? labels[requirement.key].get<std::string>() : "";
    const auto listed = [&] {
      return std::find(requirement.values.begin(), requirement.values.end(), value) != requirement.values.end();
    };
    bool ok = false;
    switch (requirement.op) {
      case Operator::exists:
        ok = has;
        break;
      case Operator::not_exists:
        ok = !has;
        break;
      case Operator::equals:
        ok = has && value == requirement.values.front();
        break;
      case Operator::not_equals:
        ok = !has || value != requirement.values.front();
        break;
      case Operator::in:
        ok = has && listed();
        break;
      case Operator::not_in:
        ok = !has || !listed();
        break;
      case Operator::greater_than:
      case Operator::less_than: {
        const auto mine = as_integer(value);
        const auto theirs = as_integer(requirement.values.front());
        ok = has && mine && theirs && (requirement.op == Operator::greater_than ? *mine > *theirs : *mine < *theirs);
        break;
      }
    }
    if (!ok) return false;
  }
  return true;
}

Result<FieldSelector> FieldSelector::parse(std::string_view text) {
  FieldSelector selector;
  if (trim(text).empty()) return selector;
  // Unescape while splitting on unescaped ',' and finding the operator.
  std::vector<std::string> parts(1);
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      parts.back() += '\\';
      parts.back() += text[++i];
    } else if (text[i] == ',') {
      parts.emplace_back();
    } else {
      parts.back() += text[i];
    }
  }
  for (const std::string& part : parts) {
    // Find the first unescaped operator.
    std::size_t op_at = std::string::npos;
    std::size_t op_length = 0;
    bool equals = true;
    for (std::size_t i = 0; i < part.size(); ++i) {
      if (part[i] == '\\') {
        ++i;
        continue;
      }
      if (part.compare(i, 2, "!=") == 0) {
        op_at = i, op_length = 2, equals = false;
        break;
      }
      if (part.compare(i, 2, "==") == 0) {
        op_at = i, op_length = 2;
        break;
      }
      if (part[i] == '=') {
        op_at = i, op_length = 1;
        break;
      }
    }
    if (op_at == std::string::npos) {
      return Error{"fieldSelector", "invalid selector: '" + std::string(text) + "'; can't understand '" + part + "'"};
    }
    const auto unescape = [](std::string_view escaped) {
      std::string plain;
      for (std::size_t i = 0; i < escaped.size(); ++i) {
        if (escaped[i] == '\\' && i + 1 < escaped.size()) ++i;
        plain += escaped[i];
      }
      return plain;
    };
    selector.requirements_.push_back(
        {std::string(trim(unescape(part.substr(0, op_at)))), equals, unescape(part.substr(op_at + op_length))});
  }
  return selector;
}

std::string field_value(const json& object, std::string_view dotted_path) {
  const json* node = &object;
  std::size_t start = 0;
  while (start <= dotted_path.size()) {
    const auto dot = dotted_path.find('.', start);
    const std::string key(dotted_path.substr(start, dot - start));
    if (!node->is_object() || !node->contains(key)) return "";
    node = &(*node)[key];
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  if (node->is_string()) return node->get<std::string>();
  if (node->is_number() || node->is_boolean()) return node->dump();
  return "";
}

bool FieldSelector::matches(const json& object) const {
  return std::all_of(requirements_.begin(), requirements_.end(), [&](const Requirement& requirement) {
    return (field_value(object, requirement.path) == requirement.value) == requirement.equals;
  });
}

}  // namespace k8s4r::kube_sim
