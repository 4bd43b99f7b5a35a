// The slot table: which bridge replica owns each of the kSlots slots
// (common/slots.h), under which epoch, and to whom a slot is being handed.
// It lives in the ConfigMap k8s4r-bridge-slots, where every replica and
// operator reads it (docs/bridge.md#replicas):
//
//   data:
//     epoch: "1795834512345"          the newest epoch given out
//     members: "bridge-0,bridge-1"    the live replicas when it was written
//     slots: |                        one line per slot
//       0 bridge-1 1795834512345
//       1 bridge-0 1795834500012 -> bridge-1
//
// `1 bridge-0 E -> bridge-1`: bridge-0 owns slot 1 under epoch E and is to
// hand it to bridge-1. It stops serving the slot first (the drain), then
// writes `1 bridge-1 E'` with a new epoch E' > E: a slot never has two
// owners, and every dispatch carries its owner's epoch, which an agent
// compares with the newest it has seen (fencing).
//
// Epochs only grow: a new one is max(table epoch + 1, the wall clock in
// milliseconds), so even a table deleted and made again gives epochs above
// those robots have seen.
//
// Everything here is pure: the coordinator (slot_coordinator.h) reads,
// decides with these functions, and writes conditionally on the
// resourceVersion it read.
#pragma once

#include "k8s4r/common/result.h"
#include "k8s4r/common/slots.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::bridge {

inline constexpr const char* kSlotTableName = "k8s4r-bridge-slots";
// Replica identities are DNS labels of at most this many characters: each
// names a Lease, k8s4r-bridge-replica-<id>.
inline constexpr std::size_t kMaxReplicaIdLength = 42;
inline constexpr const char* kReplicaLeasePrefix = "k8s4r-bridge-replica-";
// Epochs are JSON-safe integers: beyond 2^53 a table is damaged.
inline constexpr std::int64_t kMaxEpoch = std::int64_t{1} << 53;

struct SlotEntry {
  std::string owner;  // empty: nobody (a table being made)
  std::int64_t epoch = 0;
  std::string next;  // the replica it is being handed to; empty when none
  bool operator==(const SlotEntry&) const = default;
};

struct SlotTable {
  std::int64_t epoch = 0;            // the newest epoch given out
  std::vector<std::string> members;  // informational: the live replicas when written
  std::vector<SlotEntry> slots = std::vector<SlotEntry>(kSlots);
  bool operator==(const SlotTable&) const = default;
};

// Epoch per slot of the slots a replica serves; 0 where it serves none.
using ServedSlots = std::vector<std::int64_t>;

// A replica id: a DNS-1123 label of at most kMaxReplicaIdLength characters.
Result<void> validate_replica_id(std::string_view id);

// The ConfigMap's data. An error names the line and what is wrong; a table
// that does not parse is owned by nobody until it is written again.
Result<SlotTable> parse_slot_table(const nlohmann::json& data);
nlohmann::json slot_table_data(const SlotTable& table);
// data.epoch of a table that may be damaged elsewhere, when it reads.
std::optional<std::int64_t> readable_epoch(const nlohmann::json& data);

// The slots `self` serves under `table`: its own, less those it is handing over.
ServedSlots served_by(const SlotTable& table, const std::string& self);

// The table as the `live` replicas should share it (rendezvous hashing over
// them), or the same table when it already is: a slot whose owner is not
// live goes to its new owner at once under a new epoch; one whose live owner
// is no longer the one it should be is marked to be handed over (`next`),
// which its owner does (hand_over). A slot with no owner at all (a table
// being made, or damaged) is given only when `take_ownerless`: whoever served
// it under the table before must have stopped first. `now_ms`: the wall
// clock in milliseconds.
SlotTable rebalance(SlotTable table, const std::vector<std::string>& live, std::int64_t now_ms,
                    bool take_ownerless = true);

// `self` gives each slot it is handing over to its next owner, under a new
// epoch. Call only once it serves none of them any more.
SlotTable hand_over(SlotTable table, const std::string& self, std::int64_t now_ms);

// The label selector of the Robots and Tasks of the slots served (those
// with a non-zero epoch), in its shortest form: `robot.k8s4r.io/slot in
// (...)`, or, for more than half of them, `robot.k8s4r.io/slot,
// robot.k8s4r.io/slot notin (...)`; all of them: the label present; none:
// `robot.k8s4r.io/slot=none`, which nothing has. At most about 2.5 KiB.
std::string slot_selector(const ServedSlots& served);
// Objects without a slot label (made before slots existed): to label.
inline constexpr const char* kUnlabelledSelector = "!robot.k8s4r.io/slot";

// `self`'s slots under a new epoch: a replica starting (again) fences off any
// earlier process of its own identity.
SlotTable reclaim(SlotTable table, const std::string& self, std::int64_t now_ms);

// `self` is leaving: each of its slots goes to its owner among `live` less
// `self` under a new epoch, and no slot is to be handed to it any more
// (unchanged when no other replica is live).
SlotTable give_away(SlotTable table, const std::string& self, const std::vector<std::string>& live,
                    std::int64_t now_ms);

}  // namespace k8s4r::bridge
