#include "field_set.h"

#include "go_text.h"

namespace k8s4r::kube_sim {

using nlohmann::json;

void FieldSet::insert(const FieldPath& path) {
  if (path.empty()) return;
  Node* node = &root_;
  for (const std::string& element : path) node = &node->children[element];
  node->member = true;
}

const FieldSet::Node* FieldSet::find(const FieldPath& path) const {
  const Node* node = &root_;
  for (const std::string& element : path) {
    auto found = node->children.find(element);
    if (found == node->children.end()) return nullptr;
    node = &found->second;
  }
  return node;
}

bool FieldSet::has(const FieldPath& path) const {
  const Node* node = path.empty() ? nullptr : find(path);
  return node != nullptr && node->member;
}

bool FieldSet::touches(const FieldPath& path) const {
  const Node* node = find(path);
  return node != nullptr && (node != &root_ || !root_.children.empty());
}

void FieldSet::add(Node& into, const Node& from) {
  into.member = into.member || from.member;
  for (const auto& [element, child] : from.children) add(into.children[element], child);
}

void FieldSet::add(const FieldSet& other) { add(root_, other.root_); }

bool FieldSet::subtract(Node& from, const Node& remove) {
  if (remove.member) from.member = false;
  for (const auto& [element, child] : remove.children) {
    auto found = from.children.find(element);
    if (found != from.children.end() && subtract(found->second, child)) from.children.erase(found);
  }
  return !from.member && from.children.empty();
}

void FieldSet::subtract(const FieldSet& other) { subtract(root_, other.root_); }

FieldSet::Node FieldSet::intersect(const Node& a, const Node& b) {
  Node out;
  out.member = a.member && b.member;
  for (const auto& [element, child] : a.children) {
    auto found = b.children.find(element);
    if (found == b.children.end()) continue;
    Node both = intersect(child, found->second);
    if (both.member || !both.children.empty()) out.children.emplace(element, std::move(both));
  }
  return out;
}

FieldSet FieldSet::intersection(const FieldSet& other) const {
  FieldSet out;
  out.root_ = intersect(root_, other.root_);
  out.root_.member = false;
  return out;
}

void FieldSet::erase_subtree(const FieldPath& path) {
  if (path.empty()) {
    root_.children.clear();
    return;
  }
  // Walk down, remembering the way, so nodes left empty go too.
  std::vector<std::pair<Node*, std::string>> way;
  Node* node = &root_;
  for (const std::string& element : path) {
    auto found = node->children.find(element);
    if (found == node->children.end()) return;
    way.emplace_back(node, element);
    node = &found->second;
  }
  for (auto it = way.rbegin(); it != way.rend(); ++it) {
    auto& [parent, element] = *it;
    if (it == way.rbegin()) {
      parent->children.erase(element);
    } else {
      const Node& child = parent->children.at(element);
      if (child.member || !child.children.empty()) break;
      parent->children.erase(element);
    }
  }
}

void FieldSet::untouched(const Node& mine, const Node* keep, FieldPath& at, FieldSet& out) {
  for (const auto& [element, child] : mine.children) {
    const Node* kept = nullptr;
    if (keep != nullptr) {
      auto found = keep->children.find(element);
      if (found != keep->children.end()) kept = &found->second;
    }
    at.push_back(element);
    // A list item this applier owned goes whole (key fields too) when no one
    // else owns the item itself, even if they own a field inside it: as
    // structured-merge-diff removes an item, never half of one.
    const bool item = element[0] == 'k' || element[0] == 'v' || element[0] == 'i';
    if (kept == nullptr || (item && child.member && !kept->member)) {
      out.insert(at);
    } else {
      untouched(child, kept, at, out);
    }
    at.pop_back();
  }
}

FieldSet FieldSet::untouched_by(const FieldSet& keep) const {
  FieldSet out;
  FieldPath at;
  untouched(root_, &keep.root_, at, out);
  return out;
}

void FieldSet::collect(const Node& node, FieldPath& at, std::vector<FieldPath>& out) {
  // A node's members first, then what is below them, as structured-merge-diff
  // iterates a set.
  for (const auto& [element, child] : node.children) {
    if (!child.member) continue;
    at.push_back(element);
    out.push_back(at);
    at.pop_back();
  }
  for (const auto& [element, child] : node.children) {
    at.push_back(element);
    collect(child, at, out);
    at.pop_back();
  }
}

std::vector<FieldPath> FieldSet::paths() const {
  std::vector<FieldPath> out;
  FieldPath at;
  collect(root_, at, out);
  return out;
}

json FieldSet::encode(const Node& node) {
  json out = json::object();
  if (node.member && !node.children.empty()) out["."] = json::object();
  for (const auto& [element, child] : node.children) out[element] = encode(child);
  return out;
}

json FieldSet::to_fields_v1() const { return encode(root_); }

Result<FieldSet::Node> FieldSet::decode(const json& fields, std::size_t depth) {
  // Deeper than any object the store tracks (structured_merge's limit).
  constexpr std::size_t kMaxDepth = 1000;
  if (!fields.is_object()) return Error{"", "expected an object of field paths"};
  if (depth > kMaxDepth) return Error{"", "nested deeper than " + std::to_string(kMaxDepth) + " levels"};
  Node node;
  node.member = fields.empty();
  for (const auto& [element, child] : fields.items()) {
    if (element == ".") {
      node.member = true;
      continue;
    }
    if (element.size() < 2 || element[1] != ':' || std::string("fkvi").find(element[0]) == std::string::npos)
      continue;  // an unknown prefix
    if (element[0] == 'k' || element[0] == 'v') {
      const json value = json::parse(element.substr(2), nullptr, false);
      if (value.is_discarded() || (element[0] == 'k' && !value.is_object()))
        return Error{element, "not a valid path element"};
    }
    auto decoded = decode(child, depth + 1);
    // The path is built only on the way out of an error.
    if (!decoded) return decoded.error().within(element);
    node.children.emplace(element, std::move(decoded).value());
  }
  return node;
}

Result<FieldSet> FieldSet::from_fields_v1(const json& fields) {
  auto root = decode(fields, 0);
  if (!root) return root.error().within("fieldsV1");
  FieldSet set;
  set.root_ = std::move(root).value();
  set.root_.member = false;
  return set;
}

namespace {

// value.ToString of structured-merge-diff: strings quoted as Go's %q, the rest as JSON.
std::string value_string(const json& value) {
  return value.is_string() ? go_quote(value.get<std::string>()) : value.dump();
}

}  // namespace

std::string path_string(const FieldPath& path) {
  std::string out;
  for (const std::string& element : path) {
    const std::string body = element.size() >= 2 ? element.substr(2) : "";
    switch (element.empty() ? ' ' : element[0]) {
      case 'f':
        out += "." + body;
        break;
      case 'k': {
        json key = json::parse(body, nullptr, false);
        out += "[";
        bool first = true;
        if (key.is_object()) {
          for (const auto& [name, value] : key.items()) {
            out += (first ? "" : ",") + name + "=" + value_string(value);
            first = false;
          }
        }
        out += "]";
        break;
      }
      case 'v': {
        json value = json::parse(body, nullptr, false);
        out += "[=" + (value.is_discarded() ? body : value_string(value)) + "]";
        break;
      }
      default:
        out += "[" + body + "]";
    }
  }
  return out;
}

}  // namespace k8s4r::kube_sim
