#include "structured_merge.h"

#include <map>
#include <set>

namespace k8s4r::kube_sim {

using nlohmann::json;

const json& object_meta_schema();  // apply_schemas.cpp

namespace {

const json kString = {{"type", "string"}};

bool flag(const json* schema, const char* key) {
  return schema != nullptr && schema->contains(key) && (*schema)[key].is_boolean() && (*schema)[key].get<bool>();
}

std::string text(const json* schema, const char* key) {
  return schema != nullptr && schema->contains(key) && (*schema)[key].is_string() ? (*schema)[key].get<std::string>()
                                                                                  : "";
}

// JSON as jsoniter writes it in path elements: compact, with <, > and & escaped.
std::string element_json(const json& value) {
  std::string out;
  for (char c : value.dump()) {
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else {
      out += c;
    }
  }
  return out;
}

// Structured-merge-diff recurses without a limit; the stand-in stops at a
// depth no real object reaches, so a hostile one cannot exhaust the stack.
constexpr std::size_t kMaxDepth = 1000;

// Above this depth, compare() checks a subtree for equality before walking it.
constexpr std::size_t kCompareWholeAbove = 6;

// One step down `at`, undone when it goes out of scope: the walks share one
// path instead of copying it at every level.
struct Descend {
  FieldPath& at;
  Descend(FieldPath& path, std::string element) : at(path) { at.push_back(std::move(element)); }
  ~Descend() { at.pop_back(); }
  Descend(const Descend&) = delete;
  Descend& operator=(const Descend&) = delete;
};

Error too_deep(const FieldPath& at) {
  return Error{path_string(at), "nested deeper than " + std::to_string(kMaxDepth) + " levels"};
}

enum class Kind { object, array, scalar };
Kind kind_of(const json& value) {
  if (value.is_object()) return Kind::object;
  if (value.is_array()) return Kind::array;
  return Kind::scalar;
}

// A set or map list's items by path element, first occurrence kept.
Result<std::map<std::string, const json*>> index_items(const json* schema, ApplySchema::Shape shape, const json& list,
                                                       std::vector<std::string>* order) {
  std::map<std::string, const json*> items;
  for (const json& item : list) {
    auto element = ApplySchema::item_element(schema, shape, item);
    if (!element) return element.error();
    if (items.emplace(element.value(), &item).second && order != nullptr) order->push_back(element.value());
  }
  return items;
}

}  // namespace

ApplySchema::ApplySchema(std::shared_ptr<const json> root, bool strict)
    // Without a schema the root is still told apart from deduced nodes.
    : root_(root ? std::move(root) : std::make_shared<const json>(json::object())), strict_(strict) {}

Result<ApplySchema::Child> ApplySchema::child(const json* schema, const std::string& key) const {
  const bool at_root = schema == root_.get();
  const bool embedded = flag(schema, "x-kubernetes-embedded-resource");
  if (at_root || embedded) {
    if (key == "apiVersion" || key == "kind") return Child{&kString, true};
    if (key == "metadata") return Child{&object_meta_schema(), true};
  }
  if (schema == nullptr) return Child{nullptr, at_root};
  auto properties = schema->find("properties");
  if (properties != schema->end() && properties->is_object()) {
    auto field = properties->find(key);
    if (field != properties->end()) return Child{&*field, true};
  }
  if (schema->contains("additionalProperties")) {
    const json& additional = (*schema)["additionalProperties"];
    if (additional.is_object()) return Child{&additional, false};
    if (additional.is_boolean() && additional.get<bool>()) return Child{nullptr, false};
  }
  if (flag(schema, "x-kubernetes-preserve-unknown-fields")) return Child{nullptr, false};
  // metadata holds what the store keeps there, known to ObjectMeta or not:
  // tracking must not fail on it.
  if (strict_ && schema != &object_meta_schema()) return Error{"", "field not declared in schema"};
  return Child{nullptr, at_root};
}

ApplySchema::Shape ApplySchema::shape_of(const json* schema, const json& value) {
  if (value.is_object())
    return text(schema, "x-kubernetes-map-type") == "atomic" ? Shape::atomic_map : Shape::granular_map;
  if (value.is_array()) {
    const std::string list_type = text(schema, "x-kubernetes-list-type");
    if (list_type == "set") return Shape::set_list;
    if (list_type == "map") return Shape::map_list;
    return Shape::atomic_list;
  }
  return Shape::scalar;
}

const json* ApplySchema::items_of(const json* schema) {
  if (schema == nullptr || !schema->contains("items") || !(*schema)["items"].is_object()) return nullptr;
  return &(*schema)["items"];
}

Result<std::string> ApplySchema::item_element(const json* schema, Shape shape, const json& item) {
  if (shape == Shape::set_list) {
    if (item.is_object() || item.is_array()) return Error{"", "set items must be scalars, got " + item.dump()};
    return "v:" + element_json(item);
  }
  json key = json::object();
  const json& names = schema != nullptr && schema->contains("x-kubernetes-list-map-keys")
                          ? (*schema)["x-kubernetes-list-map-keys"]
                          : json::array();
  for (const json& name : names) {
    if (!name.is_string()) continue;
    const std::string field = name.get<std::string>();
    if (!item.is_object() || !item.contains(field) || item[field].is_null()) {
      return Error{"", "associative list with keys has an element that omits key field \"" + field +
                           "\" (and doesn't have default value)"};
    }
    if (item[field].is_object() || item[field].is_array())
      return Error{"", "key field \"" + field + "\" must be a scalar"};
    key[field] = item[field];
  }
  return "k:" + element_json(key);
}

// ---- field_set_of

namespace {

struct Walk {
  const ApplySchema& schema;

  Result<void> owned(const json* node, const json& value, FieldPath& at, FieldSet& out) const {
    if (at.size() > kMaxDepth) return too_deep(at);
    switch (ApplySchema::shape_of(node, value)) {
      case ApplySchema::Shape::scalar:
      case ApplySchema::Shape::atomic_map:
      case ApplySchema::Shape::atomic_list:
        out.insert(at);
        return ok();
      case ApplySchema::Shape::set_list:
      case ApplySchema::Shape::map_list: {
        const auto shape = ApplySchema::shape_of(node, value);
        for (const json& item : value) {
          auto element = ApplySchema::item_element(node, shape, item);
          if (!element) return Error{path_string(at), element.error().message};
          Descend item_at(at, element.value());
          if (auto result = owned(ApplySchema::items_of(node), item, at, out); !result) return result;
          out.insert(at);
        }
        return ok();
      }
      case ApplySchema::Shape::granular_map:
        for (const auto& [key, child_value] : value.items()) {
          Descend child_at(at, "f:" + key);
          auto child = schema.child(node, key);
          if (!child) return Error{path_string(at), child.error().message};
          if (auto result = owned(child.value().schema, child_value, at, out); !result) return result;
          if (child_value.is_null() || (child_value.is_object() && child_value.empty()) || !child.value().declared)
            out.insert(at);
        }
        return ok();
    }
    return ok();
  }

  // lhs and rhs may be null (absent).
  Result<void> diff(const json* node, const json* lhs, const json* rhs, FieldPath& at, Comparison& out) const {
    // null beside a map or list counts as absent (structured-merge-diff
    // dereferences it to no map), so the children are compared one by one.
    if (lhs != nullptr && rhs != nullptr && lhs->is_null() != rhs->is_null()) {
      const json& other = lhs->is_null() ? *rhs : *lhs;
      if (other.is_object() || other.is_array()) (lhs->is_null() ? lhs : rhs) = nullptr;
    }
    if (lhs == nullptr && rhs == nullptr) return ok();
    // An unchanged subtree adds nothing; most writes change a few leaves.
    // Only near the top: every level's check reads the subtree below it, so
    // checking at every level of a deep document would cost depth x size.
    if (at.size() < kCompareWholeAbove && lhs != nullptr && rhs != nullptr && *lhs == *rhs) return ok();
    if (at.size() > kMaxDepth) return too_deep(at);
    const json& some = rhs != nullptr ? *rhs : *lhs;
    const auto leaf = [&] {
      if (lhs == nullptr) {
        out.added.insert(at);
      } else if (rhs == nullptr) {
        out.removed.insert(at);
      } else if (*lhs != *rhs) {
        out.modified.insert(at);
      }
    };
    if (lhs != nullptr && rhs != nullptr && kind_of(*lhs) != kind_of(*rhs)) {
      out.modified.insert(at);
      return ok();
    }
    const auto shape = ApplySchema::shape_of(node, some);
    switch (shape) {
      case ApplySchema::Shape::scalar:
      case ApplySchema::Shape::atomic_map:
      case ApplySchema::Shape::atomic_list:
        leaf();
        return ok();
      case ApplySchema::Shape::set_list:
      case ApplySchema::Shape::map_list: {
        if (lhs == nullptr) out.added.insert(at);
        if (rhs == nullptr) out.removed.insert(at);
        const json empty = json::array();
        auto left = index_items(node, shape, lhs != nullptr ? *lhs : empty, nullptr);
        if (!left) return Error{path_string(at), left.error().message};
        auto right = index_items(node, shape, rhs != nullptr ? *rhs : empty, nullptr);
        if (!right) return Error{path_string(at), right.error().message};
        std::map<std::string, std::pair<const json*, const json*>> both;
        for (const auto& [element, item] : left.value()) both[element].first = item;
        for (const auto& [element, item] : right.value()) both[element].second = item;
        for (const auto& [element, pair] : both) {
          Descend item_at(at, element);
          if (auto result = diff(ApplySchema::items_of(node), pair.first, pair.second, at, out); !result) return result;
        }
        return ok();
      }
      case ApplySchema::Shape::granular_map: {
        if (lhs == nullptr) out.added.insert(at);
        if (rhs == nullptr) out.removed.insert(at);
        std::map<std::string, std::pair<const json*, const json*>> both;
        if (lhs != nullptr) {
          for (const auto& [key, value] : lhs->items()) both[key].first = &value;
        }
        if (rhs != nullptr) {
          for (const auto& [key, value] : rhs->items()) both[key].second = &value;
        }
        for (const auto& [key, pair] : both) {
          Descend child_at(at, "f:" + key);
          auto child = schema.child(node, key);
          if (!child) return Error{path_string(at), child.error().message};
          if (auto result = diff(child.value().schema, pair.first, pair.second, at, out); !result) return result;
        }
        return ok();
      }
    }
    return ok();
  }

  Result<json> merged(const json* node, const json& lhs, const json& rhs, FieldPath& at) const {
    if (at.size() > kMaxDepth) return too_deep(at);
    // null in a configuration is an empty map or list to merge (it owns the
    // field but takes nothing away), as structured-merge-diff reads it.
    if (rhs.is_null() && (lhs.is_object() || lhs.is_array())) {
      const auto shape = ApplySchema::shape_of(node, lhs);
      if (shape == ApplySchema::Shape::granular_map || shape == ApplySchema::Shape::set_list ||
          shape == ApplySchema::Shape::map_list) {
        return lhs;
      }
    }
    if (kind_of(lhs) != kind_of(rhs)) return rhs;
    const auto shape = ApplySchema::shape_of(node, rhs);
    if (shape == ApplySchema::Shape::granular_map) {
      json out = json::object();
      for (const auto& [key, value] : lhs.items()) {
        if (!rhs.contains(key)) out[key] = value;
      }
      for (const auto& [key, value] : rhs.items()) {
        Descend child_at(at, "f:" + key);
        auto child = schema.child(node, key);
        if (!child) return Error{path_string(at), child.error().message};
        auto live = lhs.find(key);
        if (live == lhs.end()) {
          out[key] = value;
          continue;
        }
        auto item = merged(child.value().schema, *live, value, at);
        if (!item) return item;
        out[key] = std::move(item).value();
      }
      return out;
    }
    if (shape != ApplySchema::Shape::set_list && shape != ApplySchema::Shape::map_list) return rhs;
    return merged_list(node, shape, lhs, rhs, at);
  }

  // structured-merge-diff's visitListItems, step for step: items in both
  // lists follow the configuration's order, live-only items stay next to the
  // live items they followed.
  Result<json> merged_list(const json* node, ApplySchema::Shape shape, const json& lhs, const json& rhs,
                           FieldPath& at) const {
    std::vector<std::string> left_order, right_order;
    auto left = index_items(node, shape, lhs, &left_order);
    if (!left) return Error{path_string(at), left.error().message};
    auto right = index_items(node, shape, rhs, &right_order);
    if (!right) return Error{path_string(at), right.error().message};
    const auto& in_left = left.value();
    const auto& in_right = right.value();
    const json* items = ApplySchema::items_of(node);

    std::vector<std::string> shared;
    for (const std::string& element : right_order) {
      if (in_left.count(element)) shared.push_back(element);
    }
    std::size_t next_shared = 0;  // shared[next_shared] is the next item both lists hold
    const auto is_next_shared = [&](const std::string& element) {
      return next_shared < shared.size() && shared[next_shared] == element;
    };
    std::set<std::string> merged_right;
    json out = json::array();
    const auto take = [&](const std::string& element, bool from_right) -> Result<void> {
      auto l = in_left.find(element);
      if (!from_right) {
        out.push_back(*l->second);
        return ok();
      }
      const json& config = *in_right.at(element);
      if (l == in_left.end()) {
        out.push_back(config);
        return ok();
      }
      Descend item_at(at, element);
      auto item = merged(items, *l->second, config, at);
      if (!item) return item.error();
      out.push_back(std::move(item).value());
      return ok();
    };
    const std::size_t left_size = left_order.size(), right_size = right_order.size();
    for (std::size_t li = 0, ri = 0; li < left_size || ri < right_size;) {
      if (li < left_size && ri < right_size) {
        const std::string& element = left_order[li];
        if (element == right_order[ri]) {
          merged_right.insert(element);
          if (auto result = take(element, true); !result) return result.error();
          ++li;
          ++ri;
          if (next_shared < shared.size()) ++next_shared;
          continue;
        }
        if (in_right.count(element) && next_shared < shared.size() && !is_next_shared(element)) {
          ++li;  // a shared item, but not the one wanted in this round
          continue;
        }
      }
      if (li < left_size) {
        const std::string& element = left_order[li];
        if (!in_right.count(element)) {
          if (auto result = take(element, false); !result) return result.error();
          ++li;
          continue;
        }
        if (merged_right.count(element)) ++li;  // merged already
      }
      if (ri < right_size) {
        const std::string& element = right_order[ri];
        merged_right.insert(element);
        if (auto result = take(element, true); !result) return result.error();
        ++ri;
        if (is_next_shared(element)) ++next_shared;
      }
    }
    return out;
  }
};

// The item of `list` at path element `element`, or end; `Json` is json or const json.
template <class Json>
auto find_item(Json& list, const std::string& element) -> decltype(list.begin()) {
  if (!list.is_array() || element.size() < 2) return list.end();
  const std::string body = element.substr(2);
  if (element[0] == 'i') {
    std::size_t index = 0;
    for (char c : body) {
      if (c < '0' || c > '9' || index > list.size()) return list.end();
      index = index * 10 + static_cast<std::size_t>(c - '0');
    }
    return index < list.size() ? list.begin() + static_cast<std::ptrdiff_t>(index) : list.end();
  }
  const json wanted = json::parse(body, nullptr, false);
  if (wanted.is_discarded()) return list.end();
  for (auto it = list.begin(); it != list.end(); ++it) {
    if (element[0] == 'v' && *it == wanted) return it;
    if (element[0] == 'k' && it->is_object() && wanted.is_object()) {
      bool match = true;
      for (const auto& [key, value] : wanted.items()) match = match && it->contains(key) && (*it)[key] == value;
      if (match) return it;
    }
  }
  return list.end();
}

void remove_path(json& value, const FieldPath& path, std::size_t depth) {
  if (depth >= path.size()) return;
  const std::string& element = path[depth];
  const bool last = depth + 1 == path.size();
  if (element.rfind("f:", 0) == 0) {
    if (!value.is_object()) return;
    auto found = value.find(element.substr(2));
    if (found == value.end()) return;
    if (last) {
      value.erase(found);
    } else {
      remove_path(*found, path, depth + 1);
    }
    return;
  }
  auto found = find_item(value, element);
  if (found == value.end()) return;
  if (last) {
    value.erase(found);
  } else {
    remove_path(*found, path, depth + 1);
  }
}

}  // namespace

Result<FieldSet> field_set_of(const ApplySchema& schema, const json& object) {
  FieldSet out;
  FieldPath at;
  if (auto result = Walk{schema}.owned(schema.root(), object, at, out); !result) return result.error();
  return out;
}

Result<Comparison> compare(const ApplySchema& schema, const json& live, const json& updated) {
  Comparison out;
  FieldPath at;
  if (auto result = Walk{schema}.diff(schema.root(), &live, &updated, at, out); !result) return result.error();
  return out;
}

Result<json> merge(const ApplySchema& schema, const json& live, const json& config) {
  FieldPath at;
  return Walk{schema}.merged(schema.root(), live, config, at);
}

const json* value_at(const json& object, const FieldPath& path) {
  const json* at = &object;
  for (const std::string& element : path) {
    if (element.rfind("f:", 0) == 0) {
      if (!at->is_object()) return nullptr;
      auto found = at->find(element.substr(2));
      if (found == at->end()) return nullptr;
      at = &*found;
      continue;
    }
    auto found = find_item(*at, element);
    if (found == at->end()) return nullptr;
    at = &*found;
  }
  return at;
}

void remove_fields(json& object, const FieldSet& paths) {
  for (const FieldPath& path : paths.paths()) remove_path(object, path, 0);
}

}  // namespace k8s4r::kube_sim
