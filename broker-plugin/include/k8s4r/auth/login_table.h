// The robot logins the k8s4r-auth plugin holds: robot id → SHA-256 of its
// token, kept by slot, with the highest epoch each slot has seen. Batches
// from the bridge (common/login_records.h) change it; the state file
// (state_file.h) records every change it reports.
//
// Thread-safety: none; the broker calls its plugins from its one thread.
#pragma once

#include "k8s4r/common/login_records.h"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace k8s4r::auth {

struct Applied {
  std::uint64_t changed = 0;                 // logins made, changed or removed
  std::vector<std::string> kick;             // robots whose login went or changed: disconnect them
  std::vector<logins::Stale> stale;          // sections refused: an older epoch than the slot's
  std::vector<logins::StateRecord> records;  // what to append to the state file, in order
};

class LoginTable {
 public:
  LoginTable();

  // Applies every section whose epoch is at least its slot's; a section's
  // higher epoch becomes the slot's.
  Applied apply(const logins::Batch& batch);
  // One record of the state file, as it was written (no epoch check).
  void restore(const logins::StateRecord& record);

  // The digest of a robot's token, or null when it may not log in.
  const logins::Digest* find(std::string_view robot_id) const;
  std::size_t size() const { return size_; }
  std::uint64_t epoch(std::uint32_t slot) const { return epochs_[slot]; }

  // The records that rebuild this table: epochs, then every login.
  std::vector<logins::StateRecord> snapshot() const;

 private:
  bool put(const std::string& robot_id, const logins::Digest& digest, Applied& applied);
  bool erase(const std::string& robot_id, Applied& applied);

  // Looked up by a view (a user name from the broker) without a copy.
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view id) const { return std::hash<std::string_view>{}(id); }
  };
  std::vector<std::unordered_map<std::string, logins::Digest, Hash, std::equal_to<>>> slots_;
  std::vector<std::uint64_t> epochs_;
  std::size_t size_ = 0;
};

}  // namespace k8s4r::auth
