// Robot logins for the broker's k8s4r-auth plugin (broker-plugin/,
// docs/security.md "Robot logins at fleet scale"): the lines the bridge
// publishes to $CONTROL/k8s4r-logins/v1, the plugin's answers, and the
// records of the plugin's state file. One parser and one formatter, used by
// the bridge, the plugin and the fuzzer.
//
// A batch is text, one record a line:
//
//   k8s4r-logins 1 <correlation>
//   slot <0..1023> <epoch> [replace]      starts a section: the lines below are of this slot
//   set <robot-id> sha256:<64 lowercase hex>
//   del <robot-id>
//
// Every robot id in a section falls in its slot (slot_of); a slot is at most
// once in a batch; a `replace` section holds `set` lines only and means
// "these and no others" for its slot. The epoch fences writers: the plugin
// keeps the highest epoch each slot has seen and refuses a section with a
// lower one (a deposed replica). The answer:
//
//   k8s4r-logins 1 <correlation> ok held=<n> changed=<n> kicked=<n> durable=yes|no
//   stale <slot> <held-epoch>             one line per refused section; the others were applied
// or
//   k8s4r-logins 1 <correlation> error <reason>     nothing was applied
//
// Digests are crd::token_digest's form ("sha256:" and the lowercase hex of
// SHA-256(token)); a token itself never appears.
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/common/result.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace k8s4r::logins {

inline constexpr std::string_view kControlTopic = "$CONTROL/k8s4r-logins/v1";
inline constexpr std::string_view kResponseTopic = "$CONTROL/k8s4r-logins/v1/response";
// Lines in one batch, header and slot lines included: a batch is applied in
// one go inside the broker's only thread, so it stays short.
inline constexpr std::size_t kMaxBatchLines = 4000;
inline constexpr std::size_t kMaxCorrelationLength = 64;
// Bytes, checked before a payload is split: the longest valid line is a set
// line (139 bytes with a 63-character robot id) and its newline. An answer
// is one line and a stale line per slot at most.
inline constexpr std::size_t kMaxBatchBytes = kMaxBatchLines * 140;
inline constexpr std::size_t kMaxResponseBytes = 64 * 1024;

using Digest = std::array<std::uint8_t, 32>;  // SHA-256 of a token

// "sha256:<64 lowercase hex>" ⇄ the 32 bytes. Fails for anything else.
Result<Digest> parse_digest(std::string_view text);
std::string format_digest(const Digest& digest);

struct Change {
  std::string robot_id;
  std::optional<Digest> digest;  // none: del
  bool operator==(const Change&) const = default;
};

struct Section {
  std::uint32_t slot = 0;
  std::uint64_t epoch = 0;
  bool replace = false;
  std::vector<Change> changes;
  bool operator==(const Section&) const = default;
};

struct Batch {
  std::string correlation;
  std::vector<Section> sections;
  bool operator==(const Batch&) const = default;
};

// Refuses, naming the line and the rule, anything but a whole valid batch:
// nothing of a bad batch is ever applied.
Result<Batch> parse_batch(std::string_view text);
std::string format_batch(const Batch& batch);

struct Stale {
  std::uint32_t slot = 0;
  std::uint64_t held_epoch = 0;
  bool operator==(const Stale&) const = default;
};

struct Response {
  std::string correlation;
  std::string error;  // "" when the batch was applied (stale sections aside)
  std::uint64_t held = 0, changed = 0, kicked = 0;
  bool durable = true;
  std::vector<Stale> stale;
  bool operator==(const Response&) const = default;
};

Result<Response> parse_response(std::string_view text);
std::string format_response(const Response& response);

// The plugin's state file: a header line, then records appended as batches
// are applied.
//
//   k8s4r-auth-state 1
//   epoch <slot> <epoch>
//   set <robot-id> sha256:<hex>
//   del <robot-id>
inline constexpr std::string_view kStateHeader = "k8s4r-auth-state 1";

struct StateRecord {
  enum class Kind { epoch, set, del } kind = Kind::set;
  std::uint32_t slot = 0;   // epoch only
  std::uint64_t epoch = 0;  // epoch
  std::string robot_id;     // set, del
  Digest digest{};          // set
  bool operator==(const StateRecord&) const = default;
};

// One record line (without its newline).
Result<StateRecord> parse_state_record(std::string_view line);
std::string format_state_record(const StateRecord& record);

}  // namespace k8s4r::logins
