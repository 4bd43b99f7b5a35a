// A JSON document kept as MessagePack until it is read again. Parsed,
// nlohmann::json costs about six bytes per byte of JSON text (a tree node,
// a key string and a value per member); packed, a little under one. For
// what a daemon holds by the thousand and reads now and then: the
// informer's packed cache, the bridge's pending writes.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace k8s4r {

class PackedJson {
 public:
  PackedJson() = default;
  explicit PackedJson(const nlohmann::json& value);  // null: empty
  bool empty() const { return bytes_.empty(); }
  nlohmann::json get() const;  // a fresh parse; null when empty
  void clear() { bytes_ = {}; }
  std::size_t size() const { return bytes_.size(); }

 private:
  std::string bytes_;
};

}  // namespace k8s4r
