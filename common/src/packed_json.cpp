#include "k8s4r/common/packed_json.h"

namespace k8s4r {

PackedJson::PackedJson(const nlohmann::json& value) {
  if (value.is_null()) return;
  nlohmann::json::to_msgpack(value, bytes_);
  bytes_.shrink_to_fit();
}

nlohmann::json PackedJson::get() const {
  return empty() ? nlohmann::json(nullptr) : nlohmann::json::from_msgpack(bytes_);
}

}  // namespace k8s4r
