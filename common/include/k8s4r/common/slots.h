// Robots fall into a fixed number of slots, and slots are shared out among
// bridge replicas (docs/bridge.md, issue 32). A robot's slot is a stable
// hash of its id, so it never changes: the bridge labels a Robot with it
// when it makes the Robot, the manager labels a Task with its robot's, and a
// replica watches only the Robots and Tasks of the slots it owns (a label
// selector). Slots go to replicas by rendezvous hashing (highest random
// weight): every replica computes the same owner from the same member list,
// and a member joining or leaving moves only the slots it takes or held.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace k8s4r {

// Fixed for the life of a fleet: changing it moves most robots.
inline constexpr std::uint32_t kSlots = 1024;
// The label that carries a Robot's or Task's slot, as a decimal string.
inline constexpr std::string_view kSlotLabel = "robot.k8s4r.io/slot";

// The slot of a robot id, in [0, kSlots).
std::uint32_t slot_of(std::string_view robot_id);

// The member (a replica's identity) that owns `slot` among `members`; none
// when there are none. Order and duplicates in `members` do not matter.
std::optional<std::string> slot_owner(std::uint32_t slot, const std::vector<std::string>& members);

// Every slot `member` owns among `members`, ascending.
std::vector<std::uint32_t> slots_owned_by(std::string_view member, const std::vector<std::string>& members);

}  // namespace k8s4r
