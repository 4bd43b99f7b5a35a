// A task's artifacts, fetched before its process starts: each getterSource
// (http, https or file URL) is downloaded with libcurl, its checksum verified
// when getterOptions has one ("sha256:HEX" or "sha512:HEX"), and only then
// moved into place under the task directory. A failure leaves no partial file
// behind and names the artifact and the cause.
//
// With the robot's store (artifact_store.h), an artifact with a checksum
// downloaded over http or https is kept there, and one the store holds is
// copied from it, verified, instead of downloaded.
//
// A file URL of a task that runs as another user (spec.user) is read as that
// user, by `setpriv … cat` (util-linux, coreutils), so a task can never get
// a file through its artifacts that its user could not read itself.
//
// Threading: the functions are blocking and hold no state; the agent runs
// them on its one download thread (ArtifactWorker) so its loop never waits on
// the network.
#pragma once

#include "k8s4r/agent/artifact_store.h"
#include "k8s4r/common/messages.h"
#include "k8s4r/common/result.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <sys/types.h>

namespace k8s4r::agent {

// Where an artifact lands. With getterMode "file" relativeDest is the file
// itself; otherwise (Nomad's default) a directory the file goes into under its
// own name. An absolute path or a ".." that leaves the task directory is
// refused.
Result<std::string> artifact_destination(const Artifact& artifact, const std::string& task_dir);

// Downloads `artifact` into the task directory and verifies it. Setting
// `*cancel` aborts a transfer in progress.
// Whose permissions a file URL is read with; none: the agent's own.
struct ReadAs {
  uid_t uid;
  gid_t gid;
};
enum class ArtifactSource { download, store };
// `store` may be null (no store); `pinned`: entries not to evict for it.
Result<ArtifactSource> fetch_artifact(const Artifact& artifact, const std::string& task_dir,
                                      const std::atomic<bool>* cancel = nullptr,
                                      std::optional<ReadAs> read_as = std::nullopt, ArtifactStore* store = nullptr,
                                      const std::set<ContentDigest>& pinned = {});

// One thread that fetches tasks' artifacts in order. `done` runs on that
// thread with the first error, if any.
class ArtifactWorker {
 public:
  static constexpr std::chrono::minutes kPrefetchRetry{5};
  // `store`: the robot's artifact store, used on the worker's thread only; none for no store.
  // `scratch_dir`: where artifacts fetched ahead of need land before the store keeps them.
  explicit ArtifactWorker(std::unique_ptr<ArtifactStore> store = nullptr, std::string scratch_dir = "");
  ~ArtifactWorker();  // aborts the fetch in progress (its `done` still runs), drops the rest
  ArtifactWorker(const ArtifactWorker&) = delete;
  ArtifactWorker& operator=(const ArtifactWorker&) = delete;

  void fetch(std::vector<Artifact> artifacts, std::string task_dir, std::optional<ReadAs> read_as,
             std::function<void(Result<void>)> done);
  // What the robot is to keep ahead of need: the whole list (a Prefetch).
  // What the store does not hold is fetched into it, after the tasks'
  // artifacts that wait, one at a time; all of it is kept from eviction.
  // Without a store, each is Failed (NoStore). Any thread.
  void prefetch(std::vector<PrefetchArtifact> wanted);
  // What heartbeats say of the store and of each artifact wanted (its
  // fingerprint covers both); none without a store, unless artifacts were
  // wanted (then each says Failed, NoStore). Any thread.
  std::optional<ArtifactsHeld> summary(std::size_t max_listed) const;
  // The robot's store; none without one.
  const ArtifactStore* store() const { return store_.get(); }

 private:
  struct Job {
    std::vector<Artifact> artifacts;
    std::string task_dir;
    std::optional<ReadAs> read_as;
    std::function<void(Result<void>)> done;
  };
  void loop();

  // Fetches one wanted artifact into the store; the state it ends in.
  PrefetchState fetch_ahead(const PrefetchArtifact& wanted);

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  std::vector<PrefetchArtifact> wanted_;                                    // the newest Prefetch's list
  std::map<std::string, PrefetchState> states_;                             // by checksum, of wanted_
  std::optional<std::vector<PrefetchArtifact>> new_wanted_;                 // a list the worker has not taken yet
  std::deque<PrefetchArtifact> to_fetch_;                                   // the worker's: wanted, not held
  std::map<std::string, std::chrono::steady_clock::time_point> failed_at_;  // downloads of wanted_ that failed
  bool stopping_ = false;
  std::atomic<bool> cancel_{false};
  std::unique_ptr<ArtifactStore> store_;
  std::string scratch_dir_;
  std::thread thread_;
};

}  // namespace k8s4r::agent
