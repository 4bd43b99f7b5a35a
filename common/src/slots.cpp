#include "k8s4r/common/slots.h"

#include "k8s4r/common/hashing.h"

namespace k8s4r {

namespace {

// MurmurHash3's 64-bit finalizer: FNV-1a alone leaves its low bits, which
// `% kSlots` keeps, poorly mixed across ids that differ in one character.
std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

std::uint64_t weight(std::uint32_t slot, std::string_view member) {
  return mix(Fnv1a64().update(member).value() ^ (0x9e3779b97f4a7c15ULL * (slot + 1ULL)));
}

}  // namespace

std::uint32_t slot_of(std::string_view robot_id) {
  return static_cast<std::uint32_t>(mix(Fnv1a64().update(robot_id).value()) % kSlots);
}

std::optional<std::string> slot_owner(std::uint32_t slot, const std::vector<std::string>& members) {
  const std::string* best = nullptr;
  std::uint64_t best_weight = 0;
  for (const std::string& member : members) {
    const std::uint64_t w = weight(slot, member);
    // Ties (astronomically rare) go to the smaller name, so every replica agrees.
    if (!best || w > best_weight || (w == best_weight && member < *best)) {
      best = &member;
      best_weight = w;
    }
  }
  if (!best) return std::nullopt;
  return *best;
}

std::vector<std::uint32_t> slots_owned_by(std::string_view member, const std::vector<std::string>& members) {
  std::vector<std::uint32_t> owned;
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    if (const auto owner = slot_owner(slot, members); owner && *owner == member) owned.push_back(slot);
  }
  return owned;
}

}  // namespace k8s4r
