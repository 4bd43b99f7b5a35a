#include "k8s4r/auth/login_table.h"

#include "k8s4r/common/slots.h"

#include <unordered_set>

namespace k8s4r::auth {

using logins::StateRecord;

LoginTable::LoginTable() : slots_(kSlots), epochs_(kSlots, 0) {}

bool LoginTable::put(const std::string& robot_id, const logins::Digest& digest, Applied& applied) {
  auto& slot = slots_[slot_of(robot_id)];
  const auto [entry, inserted] = slot.try_emplace(robot_id, digest);
  if (!inserted) {
    if (entry->second == digest) return false;
    entry->second = digest;
    applied.kick.push_back(robot_id);  // the old token must not stay logged in
  } else {
    ++size_;
  }
  applied.records.push_back(StateRecord{StateRecord::Kind::set, 0, 0, robot_id, digest});
  ++applied.changed;
  return true;
}

bool LoginTable::erase(const std::string& robot_id, Applied& applied) {
  if (slots_[slot_of(robot_id)].erase(robot_id) == 0) return false;
  --size_;
  applied.kick.push_back(robot_id);
  applied.records.push_back(StateRecord{StateRecord::Kind::del, 0, 0, robot_id, {}});
  ++applied.changed;
  return true;
}

Applied LoginTable::apply(const logins::Batch& batch) {
  Applied applied;
  for (const logins::Section& section : batch.sections) {
    std::uint64_t& held = epochs_[section.slot];
    if (section.epoch < held) {
      applied.stale.push_back(logins::Stale{section.slot, held});
      continue;
    }
    if (section.epoch > held) {
      held = section.epoch;
      applied.records.push_back(StateRecord{StateRecord::Kind::epoch, section.slot, held, {}, {}});
    }
    for (const logins::Change& change : section.changes) {
      if (change.digest)
        put(change.robot_id, *change.digest, applied);
      else
        erase(change.robot_id, applied);
    }
    if (!section.replace) continue;
    // "These and no others": whoever the section left out loses its login.
    std::unordered_set<std::string_view> kept;
    for (const logins::Change& change : section.changes) kept.insert(change.robot_id);
    std::vector<std::string> gone;
    for (const auto& [robot_id, digest] : slots_[section.slot])
      if (!kept.count(robot_id)) gone.push_back(robot_id);
    for (const std::string& robot_id : gone) erase(robot_id, applied);
  }
  return applied;
}

void LoginTable::restore(const StateRecord& record) {
  Applied ignored;
  switch (record.kind) {
    case StateRecord::Kind::epoch:
      epochs_[record.slot] = record.epoch;
      return;
    case StateRecord::Kind::set:
      put(record.robot_id, record.digest, ignored);
      return;
    case StateRecord::Kind::del:
      erase(record.robot_id, ignored);
      return;
  }
}

const logins::Digest* LoginTable::find(std::string_view robot_id) const {
  const auto& slot = slots_[slot_of(robot_id)];
  const auto found = slot.find(robot_id);
  return found == slot.end() ? nullptr : &found->second;
}

std::vector<StateRecord> LoginTable::snapshot() const {
  std::vector<StateRecord> records;
  records.reserve(size_ + kSlots);
  for (std::uint32_t slot = 0; slot < kSlots; ++slot)
    if (epochs_[slot] != 0) records.push_back(StateRecord{StateRecord::Kind::epoch, slot, epochs_[slot], {}, {}});
  for (const auto& slot : slots_)
    for (const auto& [robot_id, digest] : slot)
      records.push_back(StateRecord{StateRecord::Kind::set, 0, 0, robot_id, digest});
  return records;
}

}  // namespace k8s4r::auth
