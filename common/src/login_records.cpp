#include "k8s4r/common/login_records.h"

#include "k8s4r/common/hashing.h"
#include "k8s4r/common/identifiers.h"
#include "k8s4r/common/slots.h"

#include <charconv>
#include <set>

namespace k8s4r::logins {

namespace {

constexpr std::string_view kBatchMagic = "k8s4r-logins";
constexpr std::string_view kVersion = "1";
constexpr std::string_view kDigestPrefix = "sha256:";

// `text` cut at each `separator`. Empty pieces are kept (two spaces, an
// empty line), so whatever reads them refuses them.
std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> pieces;
  for (std::size_t start = 0;;) {
    const std::size_t end = text.find(separator, start);
    pieces.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return pieces;
    start = end + 1;
  }
}

// One final newline is allowed; an empty line elsewhere is not.
std::vector<std::string_view> lines_of(std::string_view text) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  return split(text, '\n');
}

std::vector<std::string_view> words_of(std::string_view line) { return split(line, ' '); }

Error at_line(std::size_t index, std::string message) {
  return Error{"line " + std::to_string(index + 1), std::move(message)};
}

// A decimal number in its one canonical spelling (no sign, no leading zero),
// so that formatting what was parsed gives the same bytes.
std::optional<std::uint64_t> decimal(std::string_view word) {
  if (word.empty() || word.size() > 20 || (word.size() > 1 && word.front() == '0')) return std::nullopt;
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), value);
  if (error != std::errc() || end != word.data() + word.size()) return std::nullopt;
  return value;
}

std::optional<std::uint32_t> slot_number(std::string_view word) {
  const auto value = decimal(word);
  if (!value || *value >= kSlots) return std::nullopt;
  return static_cast<std::uint32_t>(*value);
}

Result<void> validate_correlation(std::string_view correlation) {
  if (correlation.empty() || correlation.size() > kMaxCorrelationLength)
    return Error{"correlation", "must be 1 to " + std::to_string(kMaxCorrelationLength) + " characters"};
  for (const char c : correlation) {
    const bool allowed =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    if (!allowed) return Error{"correlation", "may hold only letters, digits, '-', '_' and '.'"};
  }
  return ok();
}

Result<std::string> robot_id_word(std::string_view word) {
  if (auto valid = validate_identifier(word, "robot id"); !valid) return valid.error();
  return std::string(word);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // upper case too: one spelling per digest
}

}  // namespace

Result<Digest> parse_digest(std::string_view text) {
  if (text.substr(0, kDigestPrefix.size()) != kDigestPrefix || text.size() != kDigestPrefix.size() + 64)
    return Error{"digest", "must be sha256: and 64 lowercase hex digits"};
  Digest digest{};
  for (std::size_t i = 0; i < digest.size(); ++i) {
    const int high = hex_value(text[kDigestPrefix.size() + 2 * i]);
    const int low = hex_value(text[kDigestPrefix.size() + 2 * i + 1]);
    if (high < 0 || low < 0) return Error{"digest", "must be sha256: and 64 lowercase hex digits"};
    digest[i] = static_cast<std::uint8_t>(high * 16 + low);
  }
  return digest;
}

std::string format_digest(const Digest& digest) {
  return std::string(kDigestPrefix) +
         hex_encode(std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

Result<Batch> parse_batch(std::string_view text) {
  if (text.size() > kMaxBatchBytes)
    return Error{"", "a batch holds at most " + std::to_string(kMaxBatchBytes) + " bytes, this one " +
                         std::to_string(text.size())};
  const std::vector<std::string_view> lines = lines_of(text);
  if (lines.size() > kMaxBatchLines)
    return Error{"", "a batch holds at most " + std::to_string(kMaxBatchLines) + " lines, this one " +
                         std::to_string(lines.size())};
  const std::vector<std::string_view> header = words_of(lines.front());
  if (header.size() != 3 || header[0] != kBatchMagic)
    return at_line(0, "must be 'k8s4r-logins <version> <correlation>'");
  if (header[1] != kVersion) return at_line(0, "version " + std::string(header[1]) + " is not understood (only 1)");
  if (auto valid = validate_correlation(header[2]); !valid) return valid.error().within("line 1");
  Batch batch{std::string(header[2]), {}};
  std::set<std::uint32_t> slots_seen;
  std::set<std::string_view> ids_in_section;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string_view> words = words_of(lines[i]);
    if (words[0] == "slot") {
      if (words.size() < 3 || words.size() > 4 || (words.size() == 4 && words[3] != "replace"))
        return at_line(i, "must be 'slot <slot> <epoch> [replace]'");
      const auto slot = slot_number(words[1]);
      if (!slot) return at_line(i, "the slot must be a number below " + std::to_string(kSlots));
      const auto epoch = decimal(words[2]);
      if (!epoch) return at_line(i, "the epoch must be an unsigned 64-bit number");
      if (!slots_seen.insert(*slot).second)
        return at_line(i, "slot " + std::to_string(*slot) + " is in the batch twice");
      batch.sections.push_back(Section{*slot, *epoch, words.size() == 4, {}});
      ids_in_section.clear();
      continue;
    }
    if (words[0] != "set" && words[0] != "del") return at_line(i, "must be a slot, set or del line");
    if (batch.sections.empty()) return at_line(i, "a " + std::string(words[0]) + " line before any slot line");
    Section& section = batch.sections.back();
    const bool set = words[0] == "set";
    if (words.size() != (set ? 3U : 2U))
      return at_line(i, set ? "must be 'set <robot-id> sha256:<hex>'" : "must be 'del <robot-id>'");
    auto robot_id = robot_id_word(words[1]);
    if (!robot_id) return robot_id.error().within("line " + std::to_string(i + 1));
    if (slot_of(robot_id.value()) != section.slot)
      return at_line(i, "robot " + robot_id.value() + " is in slot " + std::to_string(slot_of(robot_id.value())) +
                            ", not " + std::to_string(section.slot));
    if (!ids_in_section.insert(words[1]).second)
      return at_line(i, "robot " + robot_id.value() + " is in its section twice");
    if (!set) {
      if (section.replace) return at_line(i, "a replace section holds set lines only");
      section.changes.push_back(Change{std::move(robot_id).value(), std::nullopt});
      continue;
    }
    auto digest = parse_digest(words[2]);
    if (!digest) return digest.error().within("line " + std::to_string(i + 1));
    section.changes.push_back(Change{std::move(robot_id).value(), digest.value()});
  }
  return batch;
}

std::string format_batch(const Batch& batch) {
  std::string text = std::string(kBatchMagic) + " " + std::string(kVersion) + " " + batch.correlation + "\n";
  for (const Section& section : batch.sections) {
    text += "slot " + std::to_string(section.slot) + " " + std::to_string(section.epoch) +
            (section.replace ? " replace\n" : "\n");
    for (const Change& change : section.changes) {
      text += change.digest ? "set " + change.robot_id + " " + format_digest(*change.digest) + "\n"
                            : "del " + change.robot_id + "\n";
    }
  }
  return text;
}

Result<Response> parse_response(std::string_view text) {
  if (text.size() > kMaxResponseBytes)
    return Error{"", "an answer holds at most " + std::to_string(kMaxResponseBytes) + " bytes, this one " +
                         std::to_string(text.size())};
  const std::vector<std::string_view> lines = lines_of(text);
  if (lines.size() > kSlots + 1) return Error{"", "an answer holds at most one stale line per slot"};
  const std::vector<std::string_view> words = words_of(lines.front());
  if (words.size() < 4 || words[0] != kBatchMagic || words[1] != kVersion)
    return at_line(0, "must be 'k8s4r-logins 1 <correlation> ok|error ...'");
  if (auto valid = validate_correlation(words[2]); !valid) return valid.error().within("line 1");
  Response response{std::string(words[2])};
  if (words[3] == "error") {
    const std::size_t reason_at = lines.front().find(" error ");
    if (words.size() < 5 || reason_at == std::string_view::npos || lines.size() != 1)
      return at_line(0, "an error answer is one line: 'k8s4r-logins 1 <correlation> error <reason>'");
    response.error = std::string(lines.front().substr(reason_at + 7));
    for (const char c : response.error)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return at_line(0, "the reason holds a control character");
    return response;
  }
  if (words[3] != "ok" || words.size() != 8)
    return at_line(0, "must be '... ok held=<n> changed=<n> kicked=<n> durable=yes|no'");
  const auto field = [&](std::string_view word, std::string_view name) -> std::optional<std::uint64_t> {
    if (word.substr(0, name.size()) != name) return std::nullopt;
    return decimal(word.substr(name.size()));
  };
  const auto held = field(words[4], "held="), changed = field(words[5], "changed="),
             kicked = field(words[6], "kicked=");
  if (!held || !changed || !kicked || (words[7] != "durable=yes" && words[7] != "durable=no"))
    return at_line(0, "must be '... ok held=<n> changed=<n> kicked=<n> durable=yes|no'");
  response.held = *held;
  response.changed = *changed;
  response.kicked = *kicked;
  response.durable = words[7] == "durable=yes";
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string_view> stale = words_of(lines[i]);
    const auto slot = stale.size() == 3 && stale[0] == "stale" ? slot_number(stale[1]) : std::nullopt;
    const auto epoch = slot ? decimal(stale[2]) : std::nullopt;
    if (!epoch) return at_line(i, "must be 'stale <slot> <held-epoch>'");
    response.stale.push_back(Stale{*slot, *epoch});
  }
  return response;
}

std::string format_response(const Response& response) {
  std::string text = std::string(kBatchMagic) + " " + std::string(kVersion) + " " + response.correlation;
  if (!response.error.empty()) {
    std::string reason = response.error;  // one line, whatever it says
    for (char& c : reason)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    return text + " error " + reason + "\n";
  }
  text += " ok held=" + std::to_string(response.held) + " changed=" + std::to_string(response.changed) +
          " kicked=" + std::to_string(response.kicked) + (response.durable ? " durable=yes\n" : " durable=no\n");
  for (const Stale& stale : response.stale)
    text += "stale " + std::to_string(stale.slot) + " " + std::to_string(stale.held_epoch) + "\n";
  return text;
}

Result<StateRecord> parse_state_record(std::string_view line) {
  const std::vector<std::string_view> words = words_of(line);
  StateRecord record;
  if (words[0] == "epoch" && words.size() == 3) {
    const auto slot = slot_number(words[1]);
    const auto epoch = decimal(words[2]);
    if (!slot || !epoch) return Error{"", "must be 'epoch <slot> <epoch>'"};
    record.kind = StateRecord::Kind::epoch;
    record.slot = *slot;
    record.epoch = *epoch;
    return record;
  }
  if ((words[0] == "set" && words.size() == 3) || (words[0] == "del" && words.size() == 2)) {
    auto robot_id = robot_id_word(words[1]);
    if (!robot_id) return robot_id.error();
    record.robot_id = std::move(robot_id).value();
    if (words[0] == "del") {
      record.kind = StateRecord::Kind::del;
      return record;
    }
    auto digest = parse_digest(words[2]);
    if (!digest) return digest.error();
    record.digest = digest.value();
    return record;
  }
  return Error{"", "must be an epoch, set or del record"};
}

std::string format_state_record(const StateRecord& record) {
  switch (record.kind) {
    case StateRecord::Kind::epoch:
      return "epoch " + std::to_string(record.slot) + " " + std::to_string(record.epoch);
    case StateRecord::Kind::set:
      return "set " + record.robot_id + " " + format_digest(record.digest);
    case StateRecord::Kind::del:
      return "del " + record.robot_id;
  }
  return {};
}

}  // namespace k8s4r::logins
