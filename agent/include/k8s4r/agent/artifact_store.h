// The robot's store of downloaded artifacts, by content: WORK_DIR/artifacts/
// holds one file per checksum ("sha256-HEX", "sha512-HEX"), the agent's alone
// (0700, root's). An artifact downloaded over http or https with a checksum
// is kept there once verified; a later task that names the same checksum,
// from any URL, gets a copy instead of a download, verified by checksum as it
// is copied (a corrupt entry is dropped and the artifact downloaded again).
// A task gets a copy, never a link to the entry: its user owns its files and
// may change them, and the entry must stay what its name says.
//
// Bounded by max_bytes: after an entry is added, the least recently used
// ones go until the store fits, never one that is pinned (the artifacts of
// the task being fetched). Recency is the entry's modification time,
// touched on each use, so it survives restarts with nothing else to keep;
// an entry left half-written by a crash is never under an entry's name
// (written aside, renamed when whole) and is removed at the next start.
//
// Threading: confined to the artifact worker's thread, except held(), which
// any thread may call.
#pragma once

#include "k8s4r/common/result.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace k8s4r::agent {

// A checksum as getterOptions says it: "sha256:HEX" or "sha512:HEX", HEX
// lower-cased.
struct ContentDigest {
  std::string algorithm;  // sha256 or sha512
  std::string hex;
  std::string entry_name() const { return algorithm + "-" + hex; }
  std::string text() const { return algorithm + ":" + hex; }
  auto operator<=>(const ContentDigest&) const = default;
};
// An Error for anything else, in the words fetch_artifact reports.
Result<ContentDigest> parse_content_digest(const std::string& checksum);

// What the store did for one artifact.
enum class StoreUse {
  hit,      // copied from the store, verified
  corrupt,  // the entry did not match its name: dropped
  miss,     // not held
};

class ArtifactStore {
 public:
  // Creates `dir` (0700) when missing; removes what a crash left; reads the
  // entries there. Throws std::runtime_error when `dir` is unusable.
  ArtifactStore(std::string dir, std::uint64_t max_bytes);

  // Copies the entry for `digest` to `target` (a new file, created as the
  // agent's downloads are), hashing as it copies; on a mismatch or a short
  // copy, `target` is removed and, for a mismatch, the entry dropped.
  // Setting `*cancel` stops the copy (miss).
  StoreUse copy_out(const ContentDigest& digest, const std::string& target, const std::atomic<bool>* cancel);

  // Keeps a copy of `verified` (a file whose content matches `digest`) as
  // the entry, then evicts as above. False when it is larger than the whole
  // store, or cannot be written (the disk is full: the task runs anyway).
  bool keep(const ContentDigest& digest, const std::string& verified, const std::set<ContentDigest>& pinned);

  std::uint64_t bytes() const { return bytes_; }
  std::uint64_t max_bytes() const { return max_bytes_; }
  // The entries held, newest use first.
  std::vector<ContentDigest> held() const;

 private:
  struct Entry {
    std::uint64_t size = 0;
    std::int64_t used_ns = 0;  // its modification time
  };
  std::int64_t used_now(std::int64_t file_time);
  void drop(const ContentDigest& digest);
  void evict(const std::set<ContentDigest>& pinned);
  std::string path_of(const ContentDigest& digest) const { return dir_ + "/" + digest.entry_name(); }

  std::string dir_;
  std::uint64_t max_bytes_;
  std::uint64_t bytes_ = 0;
  mutable std::mutex mutex_;  // guards entries_ for held()
  std::map<ContentDigest, Entry> entries_;
  std::uint64_t incoming_ = 0;   // names the files being written
  std::int64_t newest_use_ = 0;  // the latest used_ns given
};

}  // namespace k8s4r::agent
