// Admission of a write: pruning, defaulting and validation against the
// type's schema, with the real server's Strict / Warn / Ignore field
// validation.
#include "k8s4r/kube_sim/store.h"

#include "store_util.h"

#include "k8s4r/kube_sim/schema.h"

namespace k8s4r::kube_sim {

using nlohmann::json;

ApiResponse Store::admit(const Target& target, json& object, const json* existing, const WriteOptions& options,
                         std::vector<std::string>& warnings) {
  const ResourceType& type = target.type;
  json& metadata = object["metadata"];
  const std::string name = string_at(metadata, "name");
  if (type.schema) {
    std::vector<std::string> pruned;
    const json as_sent = options.field_validation == "Strict" ? object : json();
    normalize(*type.schema, object, "", pruned, true);
    if (!pruned.empty()) {
      if (options.field_validation == "Strict") {
        std::string message = "strict decoding error: ";
        for (std::size_t i = 0; i < pruned.size(); ++i) {
          message += (i ? ", " : "") + std::string("unknown field \"") + pruned[i] + "\"";
        }
        // As kube-apiserver: a patch is 422 Invalid, a create or update 400.
        if (options.from_patch) {
          return invalid({"", "", ""}, "",
                         {{"FieldValueInvalid", "Invalid value: \"" + as_sent.dump() + "\": " + message, "patch"}});
        }
        return bad_request(type.kind + " in version \"" + type.version + "\" cannot be handled as a " + type.kind +
                           ": " + message);
      }
      if (options.field_validation != "Ignore") {
        for (const std::string& field : pruned) warnings.push_back("unknown field \"" + field + "\"");
      }
    }
    std::vector<FieldCause> causes;
    json to_check = object;
    to_check.erase("metadata");  // metadata is checked by the server's own rules
    validate(*type.schema, to_check, "", causes);
    if (!causes.empty()) return invalid(subject(type, name), type.qualified_kind(), causes);
  }
  (void)existing;
  return {200, nullptr, {}};
}

}  // namespace k8s4r::kube_sim
