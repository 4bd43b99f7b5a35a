#include "k8s4r/bridge/slot_table.h"

#include "k8s4r/common/identifiers.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <string_view>

namespace k8s4r::bridge {

using nlohmann::json;

namespace {

constexpr std::size_t kMaxTableBytes = 256 * 1024;  // 1,024 lines of at most ~110 characters

// The epoch a change is made under: one per table write, above every earlier one.
class NewEpoch {
 public:
  NewEpoch(SlotTable& table, std::int64_t now_ms) : table_(table), now_ms_(now_ms) {}
  std::int64_t get() {
    if (epoch_ == 0) {
      epoch_ = std::min(std::max(table_.epoch + 1, now_ms_), kMaxEpoch);
      table_.epoch = epoch_;
    }
    return epoch_;
  }

 private:
  SlotTable& table_;
  std::int64_t now_ms_;
  std::int64_t epoch_ = 0;
};

std::optional<std::int64_t> parse_epoch(std::string_view text) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value < 1 || value > kMaxEpoch) return std::nullopt;
  return value;
}

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t at = 0;
  while (at < line.size()) {
    while (at < line.size() && line[at] == ' ') ++at;
    const std::size_t start = at;
    while (at < line.size() && line[at] != ' ') ++at;
    if (at > start) out.push_back(line.substr(start, at - start));
  }
  return out;
}

Error table_error(const std::string& where, const std::string& what) {
  return Error{std::string(kSlotTableName) + " " + where, what};
}

}  // namespace

Result<void> validate_replica_id(std::string_view id) {
  if (auto valid = validate_identifier(id); !valid) return valid;
  if (id.size() > kMaxReplicaIdLength)
    return Error{"", "longer than " + std::to_string(kMaxReplicaIdLength) + " characters"};
  return ok();
}

Result<SlotTable> parse_slot_table(const json& data) {
  if (!data.is_object()) return table_error("data", "is not an object");
  const auto text_of = [&](const char* key) -> Result<std::string> {
    const auto found = data.find(key);
    if (found == data.end()) return Error{std::string(kSlotTableName) + " data." + key, "is missing"};
    if (!found->is_string()) return Error{std::string(kSlotTableName) + " data." + key, "is not a string"};
    return found->get<std::string>();
  };
  SlotTable table;
  auto epoch_text = text_of("epoch");
  if (!epoch_text) return epoch_text.error();
  const auto epoch = parse_epoch(epoch_text.value());
  if (!epoch) return table_error("data.epoch", "is not an integer from 1 to 2^53");
  table.epoch = *epoch;
  if (auto members = text_of("members"); members) {
    std::string_view rest = members.value();
    while (!rest.empty()) {
      const std::size_t comma = rest.find(',');
      const std::string_view member = rest.substr(0, comma);
      if (!member.empty()) table.members.emplace_back(member);
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    }
  }
  auto slots = text_of("slots");
  if (!slots) return slots.error();
  const std::string& text = slots.value();
  if (text.size() > kMaxTableBytes) return table_error("data.slots", "is larger than 256 KiB");
  std::vector<bool> seen(kSlots, false);
  std::size_t at = 0, line_number = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line(text.data() + at, end - at);
    at = end + 1;
    ++line_number;
    const auto parts = words(line);
    if (parts.empty()) continue;
    const std::string where = "data.slots line " + std::to_string(line_number);
    if (parts.size() != 3 && !(parts.size() == 5 && parts[3] == "->"))
      return table_error(where, "is not `SLOT OWNER EPOCH` or `SLOT OWNER EPOCH -> NEXT`");
    std::uint32_t slot = 0;
    const auto [slot_end, slot_error] = std::from_chars(parts[0].data(), parts[0].data() + parts[0].size(), slot);
    if (slot_error != std::errc{} || slot_end != parts[0].data() + parts[0].size() || slot >= kSlots)
      return table_error(where, "slot is not an integer from 0 to " + std::to_string(kSlots - 1));
    if (seen[slot]) return table_error(where, "slot " + std::to_string(slot) + " appears twice");
    seen[slot] = true;
    if (!validate_replica_id(parts[1])) return table_error(where, "owner is not a replica id");
    const auto slot_epoch = parse_epoch(parts[2]);
    if (!slot_epoch || *slot_epoch > table.epoch)
      return table_error(where, "epoch is not an integer from 1 to data.epoch");
    SlotEntry& entry = table.slots[slot];
    entry.owner = std::string(parts[1]);
    entry.epoch = *slot_epoch;
    if (parts.size() == 5) {
      if (!validate_replica_id(parts[4])) return table_error(where, "next owner is not a replica id");
      entry.next = std::string(parts[4]);
    }
  }
  return table;
}

std::optional<std::int64_t> readable_epoch(const json& data) {
  if (!data.is_object() || !data.contains("epoch") || !data["epoch"].is_string()) return std::nullopt;
  return parse_epoch(data["epoch"].get<std::string>());
}

json slot_table_data(const SlotTable& table) {
  std::string members;
  for (const auto& member : table.members) members += (members.empty() ? "" : ",") + member;
  std::string slots;
  slots.reserve(kSlots * 40);
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    const SlotEntry& entry = table.slots[slot];
    if (entry.owner.empty()) continue;
    slots += std::to_string(slot) + ' ' + entry.owner + ' ' + std::to_string(entry.epoch);
    if (!entry.next.empty()) slots += " -> " + entry.next;
    slots += '\n';
  }
  return {{"epoch", std::to_string(table.epoch)}, {"members", members}, {"slots", slots}};
}

ServedSlots served_by(const SlotTable& table, const std::string& self) {
  ServedSlots served(kSlots, 0);
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    const SlotEntry& entry = table.slots[slot];
    if (entry.owner == self && entry.next.empty()) served[slot] = entry.epoch;
  }
  return served;
}

std::string slot_selector(const ServedSlots& served) {
  const std::string key(kSlotLabel);
  std::string in, out;
  std::size_t count = 0;
  for (std::uint32_t slot = 0; slot < kSlots && slot < served.size(); ++slot) {
    std::string& list = served[slot] != 0 ? in : out;
    list += (list.empty() ? "" : ",") + std::to_string(slot);
    count += served[slot] != 0;
  }
  if (count == 0) return key + "=none";
  if (count == kSlots) return key;
  if (count <= kSlots / 2) return key + " in (" + in + ")";
  return key + "," + key + " notin (" + out + ")";
}

SlotTable rebalance(SlotTable table, const std::vector<std::string>& live, std::int64_t now_ms, bool take_ownerless) {
  if (live.empty()) return table;
  std::vector<std::string> members = live;
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  const std::set<std::string> alive(members.begin(), members.end());
  NewEpoch epoch(table, now_ms);
  bool changed = false;
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    SlotEntry& entry = table.slots[slot];
    const std::string wanted = slot_owner(slot, members).value_or("");
    if (entry.owner.empty() && !take_ownerless) continue;
    if (entry.owner.empty() || !alive.count(entry.owner)) {
      // Its owner is gone (its Lease ran out: it stopped serving before
      // that): nobody to drain, taken over at once.
      entry = SlotEntry{wanted, epoch.get(), ""};
      changed = true;
    } else if (entry.owner == wanted) {
      if (!entry.next.empty()) {
        entry.next.clear();  // the replica it was going to left again
        changed = true;
      }
    } else if (entry.next != wanted) {
      entry.next = wanted;
      changed = true;
    }
  }
  if (changed) table.members = members;
  return table;
}

SlotTable hand_over(SlotTable table, const std::string& self, std::int64_t now_ms) {
  NewEpoch epoch(table, now_ms);
  for (SlotEntry& entry : table.slots) {
    if (entry.owner != self || entry.next.empty()) continue;
    entry = SlotEntry{entry.next, epoch.get(), ""};
  }
  return table;
}

SlotTable reclaim(SlotTable table, const std::string& self, std::int64_t now_ms) {
  NewEpoch epoch(table, now_ms);
  for (SlotEntry& entry : table.slots) {
    if (entry.owner == self) entry.epoch = epoch.get();
  }
  return table;
}

SlotTable give_away(SlotTable table, const std::string& self, const std::vector<std::string>& live,
                    std::int64_t now_ms) {
  std::vector<std::string> others;
  for (const auto& member : live)
    if (member != self) others.push_back(member);
  if (others.empty()) return table;
  NewEpoch epoch(table, now_ms);
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    SlotEntry& entry = table.slots[slot];
    if (entry.owner == self) {
      entry = SlotEntry{slot_owner(slot, others).value_or(""), epoch.get(), ""};
    } else if (entry.next == self) {
      entry.next.clear();  // its owner keeps it
    }
  }
  std::sort(others.begin(), others.end());
  others.erase(std::unique(others.begin(), others.end()), others.end());
  table.members = others;
  return table;
}

}  // namespace k8s4r::bridge
