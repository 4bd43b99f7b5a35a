// A set of field paths, as structured-merge-diff keeps them for server-side
// apply: which fields of an object one field manager owns. Stored in
// metadata.managedFields[].fieldsV1 as a trie of JSON objects:
//   {"f:data":{"f:k":{}},"f:spec":{"f:ports":{"k:{\"port\":80}":{".":{},"f:port":{}}}}}
// Path elements keep that encoding: "f:<field or map key>", "k:<compact JSON
// of an associative list item's keys>", "v:<JSON of a set item>", "i:<index>".
// A path is in the set when it is a member; a node may also only lead to
// members below it ("f:spec" above), and "." marks a node that is both.
//
// Thread-safety: a plain value. Private to kube_sim.
#pragma once

#include "k8s4r/common/result.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace k8s4r::kube_sim {

using FieldPath = std::vector<std::string>;

class FieldSet {
 public:
  // Adds `path` as a member (the empty path, the object itself, is never one).
  void insert(const FieldPath& path);
  // Whether `path` is a member.
  bool has(const FieldPath& path) const;
  // Whether `path` is a member or leads to one.
  bool touches(const FieldPath& path) const;
  bool empty() const { return root_.children.empty(); }

  void add(const FieldSet& other);       // union
  void subtract(const FieldSet& other);  // members of `other` stop being members
  FieldSet intersection(const FieldSet& other) const;
  // Drops `path` and everything under it.
  void erase_subtree(const FieldPath& path);
  // The topmost paths of this set (members, or nodes leading to them) that
  // `keep` does not touch: what an applier stops owning and nobody else holds.
  FieldSet untouched_by(const FieldSet& keep) const;

  // Every member, depth first in key order.
  std::vector<FieldPath> paths() const;

  nlohmann::json to_fields_v1() const;
  // Unknown prefixes are ignored, as structured-merge-diff does; anything
  // but an object of objects is an error.
  static Result<FieldSet> from_fields_v1(const nlohmann::json& fields);

  bool operator==(const FieldSet&) const = default;

 private:
  struct Node {
    bool member = false;
    std::map<std::string, Node> children;
    bool operator==(const Node&) const = default;
  };
  const Node* find(const FieldPath& path) const;  // the node at `path`, or null
  static void add(Node& into, const Node& from);
  static bool subtract(Node& from, const Node& remove);  // true when `from` is left empty
  static Node intersect(const Node& a, const Node& b);
  static void untouched(const Node& mine, const Node* keep, FieldPath& at, FieldSet& out);
  static void collect(const Node& node, FieldPath& at, std::vector<FieldPath>& out);
  static nlohmann::json encode(const Node& node);
  static Result<Node> decode(const nlohmann::json& fields, std::size_t depth);

  Node root_;
};

// A path as conflicts name it: .spec.containers[name="nginx"].image,
// .metadata.finalizers[="x"], .spec.items[3].
std::string path_string(const FieldPath& path);

}  // namespace k8s4r::kube_sim
