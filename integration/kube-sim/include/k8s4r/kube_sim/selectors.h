// Label and field selectors, parsed and matched as
// k8s.io/apimachinery/pkg/labels and pkg/fields do.
//
// Label selectors: comma-separated requirements `key`, `!key`, `key=value`,
// `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key>N`,
// `key<N`. `!=` and `notin` also match objects without the key.
// Field selectors: `path=value`, `path==value`, `path!=value`, with `\,`,
// `\=` and `\\` escapes; which paths a resource supports is the caller's
// business (see ResourceType::selectable_fields).
//
// Thread-safety: immutable after parsing.
#pragma once

#include "k8s4r/common/result.h"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace k8s4r::kube_sim {

class LabelSelector {
 public:
  enum class Operator { exists, not_exists, equals, not_equals, in, not_in, greater_than, less_than };
  struct Requirement {
    std::string key;
    Operator op;
    std::vector<std::string> values;
  };

  // An empty selector matches everything.
  static Result<LabelSelector> parse(std::string_view text);

  // `labels` is metadata.labels (an object of strings, or null).
  bool matches(const nlohmann::json& labels) const;
  bool empty() const { return requirements_.empty(); }

 private:
  std::vector<Requirement> requirements_;
};

class FieldSelector {
 public:
  struct Requirement {
    std::string path;  // e.g. metadata.name, involvedObject.uid
    bool equals;       // false for !=
    std::string value;
  };

  static Result<FieldSelector> parse(std::string_view text);

  // Compares the value at each path of `object` (a missing value reads as "").
  bool matches(const nlohmann::json& object) const;
  const std::vector<Requirement>& requirements() const { return requirements_; }
  bool empty() const { return requirements_.empty(); }

 private:
  std::vector<Requirement> requirements_;
};

// The value at a dotted path as a field selector compares it: strings as
// they are, numbers and booleans printed, anything else "".
std::string field_value(const nlohmann::json& object, std::string_view dotted_path);

}  // namespace k8s4r::kube_sim
