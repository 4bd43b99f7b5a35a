// The agent's one download thread (artifacts.h): tasks' artifacts in order,
// and what the robot is to keep ahead of need (a Prefetch) after them.
#include "k8s4r/agent/artifacts.h"

#include "k8s4r/common/hashing.h"

#include <spdlog/spdlog.h>

#include <filesystem>

namespace k8s4r::agent {

ArtifactWorker::ArtifactWorker(std::unique_ptr<ArtifactStore> store, std::string scratch_dir)
    : store_(std::move(store)), scratch_dir_(std::move(scratch_dir)), thread_([this] { loop(); }) {}

ArtifactWorker::~ArtifactWorker() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cancel_ = true;
  wake_.notify_all();
  thread_.join();
}

void ArtifactWorker::fetch(std::vector<Artifact> artifacts, std::string task_dir, std::optional<ReadAs> read_as,
                           std::function<void(Result<void>)> done) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back({std::move(artifacts), std::move(task_dir), read_as, std::move(done)});
  }
  wake_.notify_one();
}

void ArtifactWorker::prefetch(std::vector<PrefetchArtifact> wanted) {
  {
    std::lock_guard lock(mutex_);
    new_wanted_ = std::move(wanted);
  }
  wake_.notify_one();
}

std::optional<ArtifactsHeld> ArtifactWorker::summary(std::size_t max_listed) const {
  ArtifactsHeld summary;
  if (store_) {
    summary = store_->summary(max_listed);
  } else {
    // No store: nothing to say, unless artifacts were asked for (each NoStore).
    std::lock_guard lock(mutex_);
    if (wanted_.empty()) return std::nullopt;
    summary.held.emplace();
    summary.fingerprint = "0000000000000000";
  }
  {
    std::lock_guard lock(mutex_);
    for (const PrefetchArtifact& wanted : wanted_) {
      if (auto state = states_.find(wanted.checksum); state != states_.end()) summary.prefetch.push_back(state->second);
    }
  }
  if (!summary.prefetch.empty()) {
    // One fingerprint for all a heartbeat lists: a state that changes is
    // listed again.
    Fnv1a64 hash;
    hash.update(summary.fingerprint);
    for (const PrefetchState& state : summary.prefetch)
      hash.update("\n").update(state.checksum).update(" ").update(state.state).update(" ").update(state.reason);
    summary.fingerprint = hash.hex();
  }
  return summary;
}

PrefetchState ArtifactWorker::fetch_ahead(const PrefetchArtifact& wanted) {
  PrefetchState state{wanted.checksum, "Failed", "", ""};
  auto digest = parse_content_digest(wanted.checksum);
  if (!digest) {
    state.reason = "InvalidChecksum";
    state.message = digest.error().message;
    return state;
  }
  if (store_->holds(digest.value(), wanted.source)) {
    state.state = "Downloaded";
    return state;
  }
  if (wanted.size && static_cast<std::uint64_t>(*wanted.size) > store_->max_bytes()) {
    state.reason = "NoRoom";
    state.message = std::to_string(*wanted.size) + " bytes do not fit in a store of " +
                    std::to_string(store_->max_bytes()) + " (artifact-store-bytes)";
    return state;
  }
  Artifact artifact;
  artifact.getter_source = wanted.source;
  artifact.getter_mode = "file";
  artifact.relative_dest = "artifact";
  artifact.getter_options["checksum"] = wanted.checksum;
  std::error_code error;
  std::filesystem::create_directories(scratch_dir_, error);
  std::set<ContentDigest> pinned{digest.value()};
  auto fetched = fetch_artifact(artifact, scratch_dir_, &cancel_, std::nullopt, store_.get(), pinned);
  std::filesystem::remove(std::filesystem::path(scratch_dir_) / "artifact", error);
  if (!fetched) {
    state.reason = "DownloadFailed";
    state.message = fetched.error().message;
  } else if (!store_->holds(digest.value(), wanted.source)) {
    state.reason = "NoRoom";
    state.message = "it does not fit in the store beside what it must keep (artifact-store-bytes " +
                    std::to_string(store_->max_bytes()) + ")";
  } else {
    state.state = "Downloaded";
  }
  return state;
}

void ArtifactWorker::loop() {
  for (;;) {
    std::optional<Job> job;
    std::optional<PrefetchArtifact> ahead;
    {
      std::unique_lock lock(mutex_);
      const auto ready = [this] { return stopping_ || !jobs_.empty() || new_wanted_ || !to_fetch_.empty(); };
      // A wanted artifact that failed to download is tried again after
      // kPrefetchRetry (a link that was down comes back), however busy the
      // worker is with tasks' artifacts.
      const auto now = std::chrono::steady_clock::now();
      for (const PrefetchArtifact& wanted : wanted_) {
        auto failed = failed_at_.find(wanted.checksum);
        if (failed == failed_at_.end() || now - failed->second < kPrefetchRetry) continue;
        failed_at_.erase(failed);
        states_[wanted.checksum] = {wanted.checksum, "Downloading", "", "trying again"};
        to_fetch_.push_back(wanted);
      }
      if (!wake_.wait_for(lock, kPrefetchRetry / 10, ready)) continue;
      if (stopping_) return;
      if (new_wanted_) {
        // A new list: what it no longer names may go; what it names stays,
        // and what is not held yet is fetched, after the tasks' artifacts.
        wanted_ = std::move(*new_wanted_);
        new_wanted_.reset();
        std::map<std::string, PrefetchState> states;
        std::set<ContentDigest> keep;
        to_fetch_.clear();
        for (const PrefetchArtifact& wanted : wanted_) {
          auto digest = parse_content_digest(wanted.checksum);
          if (digest) keep.insert(digest.value());
          if (!store_) {
            states[wanted.checksum] = {
                wanted.checksum, "Failed", "NoStore",
                "the robot keeps no artifacts (artifact-store-bytes 0, or its store is unusable)"};
            continue;
          }
          const bool held = digest && store_->holds(digest.value(), wanted.source);
          states[wanted.checksum] = {wanted.checksum, held ? "Downloaded" : "Downloading", "", ""};
          if (!held) to_fetch_.push_back(wanted);
        }
        states_ = std::move(states);
        failed_at_.clear();
        if (store_) store_->set_wanted(std::move(keep));
        continue;
      }
      if (!jobs_.empty()) {
        job = std::move(jobs_.front());
        jobs_.pop_front();
      } else {
        ahead = std::move(to_fetch_.front());
        to_fetch_.pop_front();
      }
    }
    if (ahead) {
      PrefetchState state = fetch_ahead(*ahead);
      if (state.state == "Failed") {
        spdlog::warn("artifact {} ({}), to keep ahead of need: {}: {}", ahead->source, ahead->checksum, state.reason,
                     state.message);
      } else {
        spdlog::info("artifact {} ({}) kept ahead of need", ahead->source, ahead->checksum);
      }
      std::lock_guard lock(mutex_);
      if (!states_.count(ahead->checksum)) continue;  // no longer wanted
      if (state.reason == "DownloadFailed") failed_at_[ahead->checksum] = std::chrono::steady_clock::now();
      states_[ahead->checksum] = std::move(state);
      continue;
    }
    // The task's own artifacts are never evicted to make room for each other.
    std::set<ContentDigest> pinned;
    for (const Artifact& artifact : job->artifacts) {
      if (auto checksum = artifact.getter_options.find("checksum"); checksum != artifact.getter_options.end())
        if (auto digest = parse_content_digest(checksum->second)) pinned.insert(digest.value());
    }
    Result<void> outcome = ok();
    for (const Artifact& artifact : job->artifacts) {
      auto fetched = fetch_artifact(artifact, job->task_dir, &cancel_, job->read_as, store_.get(), pinned);
      if (!fetched) {
        outcome = fetched.error();
        break;
      }
    }
    job->done(std::move(outcome));
  }
}

}  // namespace k8s4r::agent
