// The robot's store of downloaded artifacts, by content: WORK_DIR/artifacts/
// holds one file per checksum ("sha256-HEX", "sha512-HEX"), the agent's alone
// (0700, the agent's user's), beside it the URLs it was fetched from
// ("….sources"). An artifact downloaded over http or https with a checksum
// is kept there once verified; a later task that names the same checksum and
// one of those URLs (Match::url, the default; Match::checksum: any URL) gets
// a copy instead of a download, verified by checksum as it is copied (a
// corrupt entry is dropped and the artifact downloaded again). Knowing a
// checksum is not being allowed the content: with Match::url, a Job author
// who knows a checksum but not a URL that serves it gets nothing from the
// store. A task gets a copy, never a link: its user owns its files and may
// change them, and the entry must stay what its name says.
//
// Bounded by max_bytes: before an entry is added, the least recently used
// go until it fits, never one that is pinned (the artifacts of the task
// being fetched); when it cannot fit it is not kept. Recency is the entry's
// modification time, set on each use to a value that only grows, so the
// order survives restarts and clock steps; an entry half-written by a crash
// is never under an entry's name (written aside, renamed when whole) and is
// removed at the next start.
//
// Threading: confined to the artifact worker's thread, except held() and
// summary(), which any thread may call.
#pragma once

#include "k8s4r/common/messages.h"
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
  hit,        // copied from the store, verified
  corrupt,    // the entry did not match its name: dropped
  miss,       // not held (or not from that URL), or it could not be copied
  cancelled,  // the copy was stopped
};

class ArtifactStore {
 public:
  // Which tasks an entry serves: those naming a URL it came from, or any.
  enum class Match { url, checksum };

  // Creates `dir` (0700) when missing; removes what a crash left; reads the
  // entries there. Throws std::runtime_error when `dir` is unusable (not a
  // directory of the agent's own user).
  ArtifactStore(std::string dir, std::uint64_t max_bytes, Match match = Match::url);

  // Copies the entry for `digest` to `target` (a new file, created as the
  // agent's downloads are), hashing as it copies, for a task that names it
  // from `source`; on a mismatch or a short copy, `target` is removed and,
  // for a mismatch, the entry dropped. Setting `*cancel` stops the copy.
  StoreUse copy_out(const ContentDigest& digest, const std::string& source, const std::string& target,
                    const std::atomic<bool>* cancel);

  // Keeps a copy of `verified` (a file whose content matches `digest`,
  // fetched from `source`) as the entry, making room as above. False when it
  // does not fit beside the pinned entries, or cannot be written (the disk
  // is full: the task runs anyway).
  bool keep(const ContentDigest& digest, const std::string& verified, const std::string& source,
            const std::set<ContentDigest>& pinned);

  // Whether it holds `digest` for a task naming `source` (as copy_out would serve it).
  bool holds(const ContentDigest& digest, const std::string& source) const;
  // Entries kept from eviction besides the pinned ones: what the robot was
  // told to keep ahead of need (a Prefetch). Replaces the previous set.
  void set_wanted(std::set<ContentDigest> wanted) { wanted_ = std::move(wanted); }

  std::uint64_t bytes() const { return bytes_; }
  std::uint64_t max_bytes() const { return max_bytes_; }
  // The entries held, newest use first.
  std::vector<ContentDigest> held() const;
  // What a heartbeat says of the store: its fingerprint, count and size,
  // and the `max_listed` most recently used checksums. Any thread.
  ArtifactsHeld summary(std::size_t max_listed) const;

 private:
  struct Entry {
    std::uint64_t size = 0;
    std::int64_t used_ns = 0;          // its modification time
    std::vector<std::string> sources;  // the URLs it was fetched from, oldest first
  };
  std::int64_t used_now(std::int64_t wall_ns);
  void drop(const ContentDigest& digest);
  // Evicts until `size` more bytes fit; false when they cannot.
  bool evict_for(std::uint64_t size, const std::set<ContentDigest>& pinned);
  void remember_source(const ContentDigest& digest, const std::string& source);
  std::string path_of(const ContentDigest& digest) const { return dir_ + "/" + digest.entry_name(); }

  std::string dir_;
  std::uint64_t max_bytes_;
  Match match_;
  std::uint64_t bytes_ = 0;
  mutable std::mutex mutex_;  // guards entries_ for held()
  std::map<ContentDigest, Entry> entries_;
  std::set<ContentDigest> wanted_;
  std::uint64_t incoming_ = 0;   // names the files being written
  std::int64_t newest_use_ = 0;  // the latest used_ns given
};

}  // namespace k8s4r::agent
