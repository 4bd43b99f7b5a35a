#include "k8s4r/kube_sim/table.h"

namespace k8s4r::kube_sim {

using nlohmann::json;

std::string human_duration(std::chrono::nanoseconds duration) {
  using namespace std::chrono;
  const long long seconds = duration_cast<std::chrono::seconds>(duration).count();
  if (seconds < -1) return "<invalid>";
  if (seconds < 0) return "0s";
  if (seconds < 60 * 2) return std::to_string(seconds) + "s";
  const long long minutes = seconds / 60;
  if (minutes < 10) {
    const long long rest = seconds % 60;
    return rest == 0 ? std::to_string(minutes) + "m" : std::to_string(minutes) + "m" + std::to_string(rest) + "s";
  }
  if (minutes < 60 * 3) return std::to_string(minutes) + "m";
  const long long hours = minutes / 60;
  if (hours < 8) {
    const long long rest = minutes % 60;
    return rest == 0 ? std::to_string(hours) + "h" : std::to_string(hours) + "h" + std::to_string(rest) + "m";
  }
  if (hours < 48) return std::to_string(hours) + "h";
  if (hours < 24 * 8) {
    const long long rest = hours % 24;
    return rest == 0 ? std::to_string(hours / 24) + "d" : std::to_string(hours / 24) + "d" + std::to_string(rest) + "h";
  }
  if (hours < 24 * 365 * 2) return std::to_string(hours / 24) + "d";
  if (hours < 24 * 365 * 8) {
    const long long days = (hours / 24) % 365;
    return days == 0 ? std::to_string(hours / 24 / 365) + "y"
                     : std::to_string(hours / 24 / 365) + "y" + std::to_string(days) + "d";
  }
  return std::to_string(hours / 24 / 365) + "y";
}

json json_path_value(const json& object, const std::string& raw_path) {
  std::string path = raw_path;
  if (path.size() >= 2 && path.front() == '{' && path.back() == '}') path = path.substr(1, path.size() - 2);
  const json* node = &object;
  std::size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '.') {
      ++i;
      std::size_t end = i;
      while (end < path.size() && path[end] != '.' && path[end] != '[') ++end;
      const std::string key = path.substr(i, end - i);
      if (key.empty()) {
        i = end;
        continue;
      }
      if (!node->is_object() || !node->contains(key)) return nullptr;
      node = &(*node)[key];
      i = end;
    } else if (path[i] == '[') {
      const std::size_t close = path.find(']', i);
      if (close == std::string::npos || !node->is_array()) return nullptr;
      const std::string index_text = path.substr(i + 1, close - i - 1);
      long long index = 0;
      try {
        index = std::stoll(index_text);
      } catch (...) {
        return nullptr;
      }
      if (index < 0) index += static_cast<long long>(node->size());
      if (index < 0 || static_cast<std::size_t>(index) >= node->size()) return nullptr;
      node = &(*node)[static_cast<std::size_t>(index)];
      i = close + 1;
    } else {
      return nullptr;
    }
  }
  return *node;
}

namespace {

json cell(const PrinterColumn& column, const json& value, Timestamp now) {
  if (value.is_null()) return nullptr;
  if (column.type == "date") {
    if (!value.is_string()) return nullptr;
    auto time = parse_rfc3339(value.get<std::string>());
    if (!time) return "<invalid>";
    return human_duration(now - time.value());
  }
  if (column.type == "integer" && value.is_number()) return value.get<long long>();
  if (column.type == "number" && value.is_number()) return value;
  if (column.type == "boolean" && value.is_boolean()) return value;
  if (value.is_string()) return value;
  // Objects and lists print as JSON, numbers and booleans as text.
  return value.dump();
}

json partial_metadata(const json& object) {
  json metadata = object.value("metadata", json::object());
  metadata.erase("managedFields");
  return {{"kind", "PartialObjectMetadata"}, {"apiVersion", "meta.k8s.io/v1"}, {"metadata", metadata}};
}

}  // namespace

json to_table(const ResourceType& type, const std::vector<json>& objects, const std::string& resource_version,
              const std::string& continue_token, Timestamp now, IncludeObject include, bool column_definitions) {
  json table = {
      {"kind", "Table"}, {"apiVersion", "meta.k8s.io/v1"}, {"metadata", {{"resourceVersion", resource_version}}}};
  if (!continue_token.empty()) table["metadata"]["continue"] = continue_token;
  json definitions = json::array();
  definitions.push_back(
      {{"name", "Name"},
       {"type", "string"},
       {"format", "name"},
       {"description",
        "Name must be unique within a namespace. Is required when creating resources, although some resources may "
        "allow a client to request the generation of an appropriate name automatically. Name is primarily intended for "
        "creation idempotence and configuration definition. Cannot be updated. More info: "
        "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"},
       {"priority", 0}});
  for (const PrinterColumn& column : type.columns) {
    definitions.push_back({{"name", column.name},
                           {"type", column.type},
                           {"format", column.format},
                           {"description", column.description},
                           {"priority", column.priority}});
  }
  // In a watch, only the first event carries the columns (kube-apiserver sets
  // NoHeaders on the rest, which encodes as null).
  table["columnDefinitions"] = column_definitions ? definitions : json();
  json rows = json::array();
  for (const json& object : objects) {
    json cells = json::array({json_path_value(object, ".metadata.name")});
    for (const PrinterColumn& column : type.columns) {
      json value = column.compute ? column.compute(object) : json_path_value(object, column.json_path);
      cells.push_back(column.raw ? value : cell(column, value, now));
    }
    json row = {{"cells", cells}};
    if (include == IncludeObject::metadata) row["object"] = partial_metadata(object);
    if (include == IncludeObject::object) row["object"] = object;
    rows.push_back(std::move(row));
  }
  table["rows"] = rows;
  return table;
}

}  // namespace k8s4r::kube_sim
