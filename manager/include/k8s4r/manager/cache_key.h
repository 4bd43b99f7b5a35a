// The task result cache's key (docs/caching.md): a Task that asks for caching
// (spec.cache) is keyed by a SHA-256 over a canonical encoding of everything
// that determines its result, so two Tasks with the same key may share one
// successful run:
//
//   driver, config    the whole driver config (command and args for exec)
//   env, user         as the task's process gets them
//   artifacts         each one's content checksum (getterOptions.checksum),
//                     where it goes and how it is fetched (dir or file); never
//                     its URL: content, not names, so changed content behind
//                     the same URL is a new key. An artifact without a
//                     checksum makes the task not cacheable, and says so.
//   robot class       the placed robot's os and arch (deviceInfo.platform),
//                     and the values of the robot labels spec.cache.keyLabels
//                     names (absent labels count as absent, not as "")
//   salt              spec.cache.salt: bumped by a user to force a new run
//
// Names, timeouts, restart and reschedule policies, resources and placement
// constraints are not in the key: they decide where and whether a run
// happens, not what a successful run produces.
//
// The encoding is JSON with object keys sorted, no whitespace, UTF-8, with a
// version ("v": 1); the key is "sha256:" and 64 lowercase hex digits. A
// change to the encoding bumps the version, so old entries never match.
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/common/result.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace k8s4r::manager {

// spec.cache of a Task (or of a task in a TaskGroup's template).
struct CacheRequest {
  // How old a cached result may be and still be used; 0 turns reuse off (a
  // successful run is still stored).
  std::chrono::nanoseconds max_staleness{0};
  std::string salt;
  std::vector<std::string> key_labels;  // robot labels whose values are part of the key
  bool operator==(const CacheRequest&) const = default;
};

inline constexpr std::size_t kMaxCacheSaltCharacters = 253;
inline constexpr std::size_t kMaxCacheKeyLabels = 16;

// What the Task's spec.cache asks: nullopt when it has none; an error (with
// its field, under "spec.cache") when it is malformed.
Result<std::optional<CacheRequest>> cache_request(const nlohmann::json& task);

// The canonical encoding the key is a digest of (for operators and tests: it
// says what went into a key), or why the Task cannot be cached.
Result<std::string> cache_key_material(const nlohmann::json& task, const CacheRequest& request,
                                       const nlohmann::json& robot);

// "sha256:<hex>" of cache_key_material.
Result<std::string> cache_key(const nlohmann::json& task, const CacheRequest& request, const nlohmann::json& robot);

}  // namespace k8s4r::manager
