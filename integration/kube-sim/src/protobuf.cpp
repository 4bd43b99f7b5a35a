#include "k8s4r/kube_sim/protobuf.h"
#include "k8s4r/common/json_depth.h"

#include "store_util.h"

#include "k8s4r/common/base64.h"
#include "k8s4r/common/rfc3339.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

// ---- wire format ----------------------------------------------------------------------

struct WireField {
  std::uint64_t number = 0;
  std::uint64_t wire_type = 0;
  std::uint64_t varint = 0;  // wire type 0
  std::string_view bytes;    // wire type 2
};

// Every field of a message in order; false when the message is malformed.
bool read_fields(std::string_view message, std::vector<WireField>& fields) {
  std::size_t at = 0;
  const auto varint = [&](std::uint64_t& value) {
    value = 0;
    for (int shift = 0; shift < 64 && at < message.size(); shift += 7) {
      const auto byte = static_cast<unsigned char>(message[at++]);
      value |= static_cast<std::uint64_t>(byte & 0x7Fu) << shift;
      if ((byte & 0x80u) == 0) return true;
    }
    return false;
  };
  while (at < message.size()) {
    WireField field;
    std::uint64_t key = 0;
    if (!varint(key)) return false;
    field.number = key >> 3;
    field.wire_type = key & 7u;
    if (field.number == 0) return false;
    switch (field.wire_type) {
      case 0:
        if (!varint(field.varint)) return false;
        break;
      case 1:
        if (message.size() - at < 8) return false;
        at += 8;
        break;
      case 2: {
        std::uint64_t length = 0;
        if (!varint(length) || length > message.size() - at) return false;
        field.bytes = message.substr(at, static_cast<std::size_t>(length));
        at += static_cast<std::size_t>(length);
        break;
      }
      case 5:
        if (message.size() - at < 4) return false;
        at += 4;
        break;
      default:
        return false;
    }
    fields.push_back(field);
  }
  return true;
}

// ---- message tables ---------------------------------------------------------------------

enum class Kind {
  string,
  bytes,  // raw bytes; base64 in JSON
  int64,
  boolean,
  time,        // meta/v1.Time: RFC 3339 seconds
  micro_time,  // meta/v1.MicroTime: RFC 3339 microseconds
  message,
  string_map,
  bytes_map,
  extra_map,   // map<string, ExtraValue{1 items}>
  json_bytes,  // FieldsV1: raw JSON
};

struct Message;
struct Field {
  const char* name;
  Kind kind;
  bool repeated = false;
  bool optional = false;  // a Go pointer: present even when zero
  const Message* message = nullptr;
};
struct Message {
  std::map<std::uint64_t, Field> fields;
};

const Message kTime{};  // decoded by Kind::time
const Message kOwnerReference{{{1, {"kind", Kind::string}},
                               {3, {"name", Kind::string}},
                               {4, {"uid", Kind::string}},
                               {5, {"apiVersion", Kind::string}},
                               {6, {"controller", Kind::boolean, false, true}},
                               {7, {"blockOwnerDeletion", Kind::boolean, false, true}}}};
const Message kManagedFields{{{1, {"manager", Kind::string}},
                              {2, {"operation", Kind::string}},
                              {3, {"apiVersion", Kind::string}},
                              {4, {"time", Kind::time, false, true}},
                              {6, {"fieldsType", Kind::string}},
                              {7, {"fieldsV1", Kind::json_bytes, false, true}},
                              {8, {"subresource", Kind::string}}}};
const Message kObjectMeta{{{1, {"name", Kind::string}},
                           {2, {"generateName", Kind::string}},
                           {3, {"namespace", Kind::string}},
                           {4, {"selfLink", Kind::string}},
                           {5, {"uid", Kind::string}},
                           {6, {"resourceVersion", Kind::string}},
                           {7, {"generation", Kind::int64}},
                           {8, {"creationTimestamp", Kind::time}},
                           {9, {"deletionTimestamp", Kind::time, false, true}},
                           {10, {"deletionGracePeriodSeconds", Kind::int64, false, true}},
                           {11, {"labels", Kind::string_map}},
                           {12, {"annotations", Kind::string_map}},
                           {13, {"ownerReferences", Kind::message, true, false, &kOwnerReference}},
                           {14, {"finalizers", Kind::string, true}},
                           {17, {"managedFields", Kind::message, true, false, &kManagedFields}}}};
const Message kObjectReference{{{1, {"kind", Kind::string}},
                                {2, {"namespace", Kind::string}},
                                {3, {"name", Kind::string}},
                                {4, {"uid", Kind::string}},
                                {5, {"apiVersion", Kind::string}},
                                {6, {"resourceVersion", Kind::string}},
                                {7, {"fieldPath", Kind::string}}}};
const Message kLocalObjectReference{{{1, {"name", Kind::string}}}};
const Message kNamespaceSpec{{{1, {"finalizers", Kind::string, true}}}};
const Message kNamespaceStatus{{{1, {"phase", Kind::string}}}};
const Message kNamespace{{{1, {"metadata", Kind::message, false, false, &kObjectMeta}},
                          {2, {"spec", Kind::message, false, false, &kNamespaceSpec}},
                          {3, {"status", Kind::message, false, false, &kNamespaceStatus}}}};
const Message kSecret{{{1, {"metadata", Kind::message, false, false, &kObjectMeta}},
                       {2, {"data", Kind::bytes_map}},
                       {3, {"type", Kind::string}},
                       {4, {"stringData", Kind::string_map}},
                       {5, {"immutable", Kind::boolean, false, true}}}};
const Message kConfigMap{{{1, {"metadata", Kind::message, false, false, &kObjectMeta}},
                          {2, {"data", Kind::string_map}},
                          {3, {"binaryData", Kind::bytes_map}},
                          {4, {"immutable", Kind::boolean, false, true}}}};
const Message kServiceAccount{{{1, {"metadata", Kind::message, false, false, &kObjectMeta}},
                               {2, {"secrets", Kind::message, true, false, &kObjectReference}},
                               {3, {"imagePullSecrets", Kind::message, true, false, &kLocalObjectReference}},
                               {4, {"automountServiceAccountToken", Kind::boolean, false, true}}}};
const Message kBoundObjectReference{{{1, {"kind", Kind::string}},
                                     {2, {"apiVersion", Kind::string}},
                                     {3, {"name", Kind::string}},
                                     {4, {"uid", Kind::string}}}};
const Message kTokenRequestSpec{{{1, {"audiences", Kind::string, true}},
                                 {3, {"boundObjectRef", Kind::message, false, true, &kBoundObjectReference}},
                                 {4, {"expirationSeconds", Kind::int64, false, true}}}};
const Message kTokenRequest{{{1, {"metadata", Kind::message, false, false, &kObjectMeta}},
                             {2, {"spec", Kind::message, false, false, &kTokenRequestSpec}}}};
const Message kSelector{{{1, {"rawSelector", Kind::string}}}};
const Message kResourceAttributes{{{1, {"namespace", Kind::string}},
                                   {2, {"verb", Kind::string}},
                                   {3, {"group", Kind::string}},
                                   {4, {"version", Kind::string}},
                                   {5, {"resource", Kind::string}},
                                   {6, {"subresource", Kind::string}},
                                   {7, {"name", Kind::string}},
                                   {8, {"fieldSelector", Kind::message, false, true, &kSelector}},
                                   {9, {"labelSelector", Kind::message, false, true, &kSelector}}}};
const Message kNonResourceAttributes{{{1, {"path", Kind::string}}, {2, {"verb", Kind::string}}}};
const Message kAccessReviewSpec{{{1, {"resourceAttributes", Kind::message, false, true, &kResourceAttributes}},
                                 {2, {"nonResourceAttributes", Kind::message, false, true, &kNonResourceAttributes}}}};
const Message kSelfSubjectAccessReview{{{1, {"metadata", Kind::message, false, false, &kObjectMeta}},
                                        {2, {"spec", Kind::message, false, false, &kAccessReviewSpec}}}};
const Message kRulesReviewSpec{{{1, {"namespace", Kind::string}}}};
const Message kSelfSubjectRulesReview{{{1, {"metadata", Kind::message, false, false, &kObjectMeta}},
                                       {2, {"spec", Kind::message, false, false, &kRulesReviewSpec}}}};
const Message kSelfSubjectReview{{{1, {"metadata", Kind::message, false, false, &kObjectMeta}}}};
const Message kTokenReviewSpec{{{1, {"token", Kind::string}}, {2, {"audiences", Kind::string, true}}}};
const Message kTokenReview{{{1, {"metadata", Kind::message, false, false, &kObjectMeta}},
                            {2, {"spec", Kind::message, false, false, &kTokenReviewSpec}}}};
const Message kPolicyRule{{{1, {"verbs", Kind::string, true}},
                           {2, {"apiGroups", Kind::string, true}},
                           {3, {"resources", Kind::string, true}},
                           {4, {"resourceNames", Kind::string, true}},
                           {5, {"nonResourceURLs", Kind::string, true}}}};
const Message kRequirement{
    {{1, {"key", Kind::string}}, {2, {"operator", Kind::string}}, {3, {"values", Kind::string, true}}}};
const Message kLabelSelector{
    {{1, {"matchLabels", Kind::string_map}}, {2, {"matchExpressions", Kind::message, true, false, &kRequirement}}}};
const Message kAggregationRule{{{1, {"clusterRoleSelectors", Kind::message, true, false, &kLabelSelector}}}};
const Message kRole{{{1, {"metadata", Kind::message, false, false, &kObjectMeta}},
                     {2, {"rules", Kind::message, true, false, &kPolicyRule}}}};
const Message kClusterRole{{{1, {"metadata", Kind::message, false, false, &kObjectMeta}},
                            {2, {"rules", Kind::message, true, false, &kPolicyRule}},
                            {3, {"aggregationRule", Kind::message, false, true, &kAggregationRule}}}};
const Message kSubject{{{1, {"kind", Kind::string}},
                        {2, {"apiGroup", Kind::string}},
                        {3, {"name", Kind::string}},
                        {4, {"namespace", Kind::string}}}};
const Message kRoleRef{{{1, {"apiGroup", Kind::string}}, {2, {"kind", Kind::string}}, {3, {"name", Kind::string}}}};
const Message kBinding{{{1, {"metadata", Kind::message, false, false, &kObjectMeta}},
                        {2, {"subjects", Kind::message, true, false, &kSubject}},
                        {3, {"roleRef", Kind::message, false, false, &kRoleRef}}}};
const Message kPreconditions{
    {{1, {"uid", Kind::string, false, true}}, {2, {"resourceVersion", Kind::string, false, true}}}};
const Message kDeleteOptions{{{1, {"gracePeriodSeconds", Kind::int64, false, true}},
                              {2, {"preconditions", Kind::message, false, true, &kPreconditions}},
                              {3, {"orphanDependents", Kind::boolean, false, true}},
                              {4, {"propagationPolicy", Kind::string, false, true}},
                              {5, {"dryRun", Kind::string, true}}}};
const Message kLeaseSpec{{{1, {"holderIdentity", Kind::string, false, true}},
                          {2, {"leaseDurationSeconds", Kind::int64, false, true}},
                          {3, {"acquireTime", Kind::micro_time, false, true}},
                          {4, {"renewTime", Kind::micro_time, false, true}},
                          {5, {"leaseTransitions", Kind::int64, false, true}},
                          {6, {"strategy", Kind::string, false, true}},
                          {7, {"preferredHolder", Kind::string, false, true}}}};
const Message kLease{{{1, {"metadata", Kind::message, false, false, &kObjectMeta}},
                      {2, {"spec", Kind::message, false, false, &kLeaseSpec}}}};

const std::map<std::string, const Message*> kKinds = {
    {"Namespace", &kNamespace},
    {"Secret", &kSecret},
    {"ConfigMap", &kConfigMap},
    {"ServiceAccount", &kServiceAccount},
    {"TokenRequest", &kTokenRequest},
    {"TokenReview", &kTokenReview},
    {"SelfSubjectAccessReview", &kSelfSubjectAccessReview},
    {"SelfSubjectRulesReview", &kSelfSubjectRulesReview},
    {"SelfSubjectReview", &kSelfSubjectReview},
    {"Role", &kRole},
    {"ClusterRole", &kClusterRole},
    {"RoleBinding", &kBinding},
    {"ClusterRoleBinding", &kBinding},
    {"DeleteOptions", &kDeleteOptions},
    {"Lease", &kLease},
};

// ---- decoding -----------------------------------------------------------------------------

constexpr int kMaxDepth = 16;

// Protobuf strings are bytes; Go keeps them as they are and its JSON encoder
// writes each invalid UTF-8 sequence as U+FFFD. Doing that here keeps every
// string the store holds valid UTF-8.
std::string valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t i = 0;
  while (i < bytes.size()) {
    const auto lead = static_cast<unsigned char>(bytes[i]);
    std::size_t length = lead < 0x80           ? 1
                         : (lead >> 5) == 0x6  ? 2
                         : (lead >> 4) == 0xE  ? 3
                         : (lead >> 3) == 0x1E ? 4
                                               : 0;
    bool valid = length > 0 && i + length <= bytes.size();
    std::uint32_t code = length == 1 ? lead : length == 2 ? lead & 0x1Fu : length == 3 ? lead & 0x0Fu : lead & 0x07u;
    for (std::size_t k = 1; valid && k < length; ++k) {
      const auto next = static_cast<unsigned char>(bytes[i + k]);
      valid = (next & 0xC0u) == 0x80u;
      code = (code << 6) | (next & 0x3Fu);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid too.
    if (valid && ((length == 2 && code < 0x80) || (length == 3 && code < 0x800) || (length == 4 && code < 0x10000) ||
                  (code >= 0xD800 && code <= 0xDFFF) || code > 0x10FFFF))
      valid = false;
    if (valid) {
      out.append(bytes.substr(i, length));
      i += length;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::optional<json> decode_message(std::string_view bytes, const Message& message, int depth);

std::optional<std::string> decode_time(std::string_view bytes, bool micro) {
  std::vector<WireField> fields;
  if (!read_fields(bytes, fields)) return std::nullopt;
  std::int64_t seconds = 0, nanos = 0;
  for (const WireField& field : fields) {
    if (field.wire_type != 0) continue;
    if (field.number == 1) seconds = static_cast<std::int64_t>(field.varint);
    if (field.number == 2) nanos = static_cast<std::int32_t>(field.varint);
  }
  // Years 1..9999 only, as Go's time formatting allows.
  if (seconds < -62135596800LL || seconds > 253402300799LL || nanos < 0 || nanos > 999'999'999) return std::nullopt;
  if (!micro) nanos = 0;
  nanos -= nanos % 1000;
  const Timestamp time{std::chrono::seconds(seconds) + std::chrono::nanoseconds(nanos)};
  return format_rfc3339(time, micro ? TimePrecision::microseconds : TimePrecision::seconds);
}

std::optional<std::pair<std::string, std::string_view>> map_entry(std::string_view bytes) {
  std::vector<WireField> fields;
  if (!read_fields(bytes, fields)) return std::nullopt;
  std::pair<std::string, std::string_view> entry;
  for (const WireField& field : fields) {
    if (field.wire_type != 2) return std::nullopt;
    if (field.number == 1) entry.first = std::string(field.bytes);
    if (field.number == 2) entry.second = field.bytes;
  }
  return entry;
}

std::optional<json> decode_value(const WireField& wire, const Field& field, int depth) {
  const bool length_delimited = wire.wire_type == 2;
  switch (field.kind) {
    case Kind::string:
      if (!length_delimited) return std::nullopt;
      return valid_utf8(wire.bytes);
    case Kind::bytes:
      if (!length_delimited) return std::nullopt;
      return base64_encode(wire.bytes);
    case Kind::int64:
      if (wire.wire_type != 0) return std::nullopt;
      return static_cast<std::int64_t>(wire.varint);
    case Kind::boolean:
      if (wire.wire_type != 0) return std::nullopt;
      return wire.varint != 0;
    case Kind::time:
    case Kind::micro_time: {
      if (!length_delimited) return std::nullopt;
      if (wire.bytes.empty()) return json();  // the zero time
      auto text = decode_time(wire.bytes, field.kind == Kind::micro_time);
      if (!text) return std::nullopt;
      return *text;
    }
    case Kind::message:
      if (!length_delimited) return std::nullopt;
      return decode_message(wire.bytes, *field.message, depth + 1);
    case Kind::json_bytes: {
      if (!length_delimited) return std::nullopt;
      std::vector<WireField> inner;
      if (!read_fields(wire.bytes, inner)) return std::nullopt;
      for (const WireField& raw : inner) {
        if (raw.number == 1 && raw.wire_type == 2) {
          // Nested as deep as the JSON bodies may be, no deeper.
          if (json_nested_deeper_than(raw.bytes, kMaxJsonDepth)) return std::nullopt;
          json parsed = json::parse(raw.bytes, nullptr, false);
          if (parsed.is_discarded()) return std::nullopt;
          return parsed;
        }
      }
      return json::object();
    }
    case Kind::string_map:
    case Kind::bytes_map:
    case Kind::extra_map:
      return std::nullopt;  // handled by the caller, entry by entry
  }
  return std::nullopt;
}

bool is_zero(const json& value) {
  return value.is_null() || (value.is_string() && value.get_ref<const std::string&>().empty()) ||
         (value.is_number_integer() && value.get<std::int64_t>() == 0) || (value.is_boolean() && !value.get<bool>()) ||
         (value.is_object() && value.empty());
}

std::optional<json> decode_message(std::string_view bytes, const Message& message, int depth) {
  if (depth > kMaxDepth) return std::nullopt;
  std::vector<WireField> wire_fields;
  if (!read_fields(bytes, wire_fields)) return std::nullopt;
  json object = json::object();
  for (const WireField& wire : wire_fields) {
    auto found = message.fields.find(wire.number);
    if (found == message.fields.end()) continue;  // unknown fields are skipped, as proto2 does
    const Field& field = found->second;
    if (field.kind == Kind::string_map || field.kind == Kind::bytes_map || field.kind == Kind::extra_map) {
      if (wire.wire_type != 2) return std::nullopt;
      auto entry = map_entry(wire.bytes);
      if (!entry) return std::nullopt;
      json& map = object[field.name];
      if (!map.is_object()) map = json::object();
      if (field.kind == Kind::string_map) {
        map[valid_utf8(entry->first)] = valid_utf8(entry->second);
      } else if (field.kind == Kind::bytes_map) {
        map[valid_utf8(entry->first)] = base64_encode(entry->second);
      } else {
        std::vector<WireField> items;
        if (!read_fields(entry->second, items)) return std::nullopt;
        json values = json::array();
        for (const WireField& item : items) {
          if (item.number == 1 && item.wire_type == 2) values.push_back(valid_utf8(item.bytes));
        }
        map[valid_utf8(entry->first)] = values;
      }
      continue;
    }
    auto value = decode_value(wire, field, depth);
    if (!value) return std::nullopt;
    if (field.repeated) {
      object[field.name].push_back(std::move(*value));
    } else if (field.optional ? !value->is_null() : !is_zero(*value)) {
      // gogo writes every non-pointer field, zero or not; JSON omits zeros.
      object[field.name] = std::move(*value);
    } else {
      object.erase(field.name);
    }
  }
  return object;
}

}  // namespace

ProtobufResult decode_protobuf(std::string_view body) {
  constexpr std::string_view kMagic("k8s\0", 4);
  ProtobufResult result;
  if (body.substr(0, 4) != kMagic) {
    result.error = "the body does not start with the Kubernetes protobuf magic number";
    return result;
  }
  std::vector<WireField> envelope;
  if (!read_fields(body.substr(4), envelope)) {
    result.error = "the protobuf envelope is malformed";
    return result;
  }
  std::string api_version, kind;
  std::string_view raw;
  for (const WireField& field : envelope) {
    if (field.number == 1 && field.wire_type == 2) {
      std::vector<WireField> type_meta;
      if (!read_fields(field.bytes, type_meta)) {
        result.error = "the protobuf envelope is malformed";
        return result;
      }
      for (const WireField& item : type_meta) {
        if (item.wire_type != 2) continue;
        if (item.number == 1) api_version = valid_utf8(item.bytes);
        if (item.number == 2) kind = valid_utf8(item.bytes);
      }
    }
    if (field.number == 2 && field.wire_type == 2) raw = field.bytes;
  }
  auto table = kKinds.find(kind);
  if (table == kKinds.end()) {
    result.unsupported_kind = true;
    result.error = "k8s4r-kube-sim reads protobuf for built-in kinds only, not \"" + kind + "\"; send application/json";
    return result;
  }
  auto object = decode_message(raw, *table->second, 0);
  if (!object) {
    result.error = "unable to decode the protobuf " + kind;
    return result;
  }
  (*object)["apiVersion"] = api_version;
  (*object)["kind"] = kind;
  result.object = std::move(*object);
  return result;
}

}  // namespace k8s4r::kube_sim
