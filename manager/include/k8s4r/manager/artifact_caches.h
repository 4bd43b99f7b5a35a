// ArtifactCache, after KServe's LocalModelCache: "keep this artifact
// (source, checksum) on the robots this selector matches", as pure
// functions. The manager writes what each robot is to keep into the Robot's
// status.prefetch (prefetch_for_robot); the bridge tells the robot
// (k8s4r/robots/{id}/artifacts); the robot fetches ahead of need into its
// artifact store and says how each stands in its heartbeats
// (status.artifacts.prefetch), from which each ArtifactCache's status is
// rolled up (artifact_cache_status). docs/caching.md.
//
// A robot is selected while it is approved (not Pending or Rejected) and
// has every label of robotSelector (spec.labels). A robot keeps at most
// kMaxPrefetched artifacts ahead of need: the caches that select it, by
// name; those beyond say Failed (TooMany) for it.
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/common/result.h"
#include "k8s4r/common/rfc3339.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::manager {

struct CachedArtifact {
  std::string name;
  std::string source, checksum;  // checksum lower-cased, as robots report it
  std::optional<std::int64_t> size;
  std::map<std::string, std::string> selector;
};
// An ArtifactCache's spec, or an Error naming the field.
Result<CachedArtifact> read_artifact_cache(const nlohmann::json& cache);

// Whether `cache` selects `robot`.
bool selects(const CachedArtifact& cache, const nlohmann::json& robot);

// What `robot` is to keep ahead of need, as its status.prefetch: the valid
// caches of its namespace that select it, by name, at most kMaxPrefetched;
// each {source, checksum, size?, cache}.
nlohmann::json prefetch_for_robot(const nlohmann::json& robot, const std::vector<nlohmann::json>& caches);

// The cache's status from the Robots of its namespace: counts, each
// selected robot's state (by name, at most kMaxListedRobots), the Ready
// condition (set on `previous_conditions` at `now`), observedGeneration.
inline constexpr std::size_t kMaxListedRobots = 1000;
nlohmann::json artifact_cache_status(const nlohmann::json& cache, const std::vector<nlohmann::json>& robots,
                                     Timestamp now);

}  // namespace k8s4r::manager
