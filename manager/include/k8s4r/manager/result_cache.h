// The task result cache's two decisions (docs/caching.md), as pure
// functions over resources:
//
//   store   a Task that asked for caching and completed with exit code 0
//           becomes a TaskCacheEntry under the key the manager recorded in
//           its status at placement (status.cacheKey, which only the
//           manager and the bridge may write). Nothing else is stored: a
//           failed, cancelled, timed-out or lost run, or a result that
//           itself came from the cache. Its time is when the robot says the
//           run ended, but never later than the manager's now, so a robot's
//           clock set ahead cannot make an entry that never grows old.
//   reuse   a later Task with the same key, placed in the same namespace,
//           completes from the entry without being dispatched, if the
//           entry is no older than its spec.cache.maxStaleness ("0s": never
//           reused). Its status says where the result came from
//           (status.cachedFrom).
//
// An entry is named after its key ("sha256-" and the hex digits), so one key
// has at most one entry per namespace, and looking one up is reading a name.
//
// Thread-safety: pure functions.
#pragma once

#include "k8s4r/common/result.h"
#include "k8s4r/common/rfc3339.h"
#include "k8s4r/manager/cache_key.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace k8s4r::manager {

// The largest log tail an entry keeps (the end of the Task's status.logs).
inline constexpr std::size_t kMaxCacheEntryLogBytes = 16 * 1024;

// "sha256-<hex>" for "sha256:<hex>"; an error for what is not a key.
Result<std::string> cache_entry_name(const std::string& key);

// The TaskCacheEntry that stores `task`'s run under `key` at `now`, or why
// the run is not stored (its field says which part of the Task decided).
Result<nlohmann::json> cache_entry_for(const nlohmann::json& task, const std::string& key, Timestamp now);

// When an entry's run ended (spec.completedAt); nullopt when it does not say.
std::optional<Timestamp> cache_entry_completed_at(const nlohmann::json& entry);

// The status of a Task that reuses `entry` (found under `key`) at `now`, or
// nullopt when it may not: reuse off (maxStaleness 0), the entry older than
// maxStaleness, or an entry that is not one for `key`.
std::optional<nlohmann::json> cache_hit_status(const nlohmann::json& entry, const std::string& key,
                                               const CacheRequest& request, Timestamp now);

}  // namespace k8s4r::manager
