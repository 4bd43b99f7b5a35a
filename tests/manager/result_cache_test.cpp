// The result cache's store and reuse decisions: only a successful run the
// robot reported is stored; a stored run is reused within maxStaleness, and
// says where it came from; anything else runs.
#include "k8s4r/manager/result_cache.h"

#include <gtest/gtest.h>

namespace k8s4r::manager {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::string kKey = "sha256:" + std::string(64, 'a');

json completed_task() {
  return json::parse(R"({
    "metadata": {"name": "build-map-0", "namespace": "lab", "uid": "u-1"},
    "spec": {"name": "build-map", "jobName": "maps", "targetRobot": "robot-1", "driver": "exec",
             "cache": {"maxStaleness": "24h"}},
    "status": {"state": "completed", "exitCode": 0, "finishedAt": "2026-11-27T10:00:00.250Z",
               "logs": "map written\n"}
  })");
}

Timestamp at(const std::string& text) { return parse_rfc3339(text).value(); }

const Timestamp kNow = at("2026-11-27T10:00:05Z");  // the manager's clock as it stores

TEST(ResultCache, AnEntryIsNamedAfterItsKeyAndNothingElseNamesOne) {
  EXPECT_EQ(cache_entry_name(kKey).value(), "sha256-" + std::string(64, 'a'));
  for (const std::string& bad : std::vector<std::string>{
           "", "sha256:", "sha256:" + std::string(63, 'a'), "sha256:" + std::string(64, 'A'),
           "sha1:" + std::string(64, 'a'), "sha256:" + std::string(63, 'a') + "/", "sha256:" + std::string(65, 'a')}) {
    EXPECT_FALSE(cache_entry_name(bad)) << bad;
  }
}

TEST(ResultCache, ASuccessfulRunIsStoredWithWhereAndWhenItRan) {
  const auto entry = cache_entry_for(completed_task(), kKey, kNow);
  ASSERT_TRUE(entry) << entry.error().to_string();
  EXPECT_EQ(entry.value(), json::parse(R"({
    "apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "TaskCacheEntry",
    "metadata": {"name": "sha256-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "namespace": "lab",
                 "labels": {"app.kubernetes.io/managed-by": "k8s4r-manager"}},
    "spec": {"key": "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
             "task": {"name": "build-map-0", "uid": "u-1"}, "job": "maps", "robot": "robot-1",
             "completedAt": "2026-11-27T10:00:00.250Z", "exitCode": 0, "logs": "map written\n"}
  })"))
      << entry.value().dump(2);
}

TEST(ResultCache, OnlyASuccessfulRunOfItsOwnIsStored) {
  auto field_of = [](const json& task) {
    const auto entry = cache_entry_for(task, kKey, kNow);
    return entry ? std::string("stored") : entry.error().field;
  };
  json task = completed_task();
  task["status"]["state"] = "failed";
  task["status"]["reason"] = "Timeout";
  EXPECT_EQ(field_of(task), "status.state");
  task = completed_task();
  task["status"]["state"] = "running";
  EXPECT_EQ(field_of(task), "status.state");
  task = completed_task();
  task["status"]["exitCode"] = 3;
  EXPECT_EQ(field_of(task), "status.exitCode");
  task["status"].erase("exitCode");
  EXPECT_EQ(field_of(task), "status.exitCode");
  task = completed_task();
  task["status"]["exitCode"] = "0";
  EXPECT_EQ(field_of(task), "status.exitCode");
  task = completed_task();
  task["status"]["cachedFrom"] = {{"task", "earlier"}};
  EXPECT_EQ(field_of(task), "status.cachedFrom");
  task = completed_task();
  task["status"].erase("finishedAt");
  EXPECT_EQ(field_of(task), "status.finishedAt");
  task = completed_task();
  task["spec"].erase("cache");  // never asked for caching
  EXPECT_EQ(field_of(task), "spec.cache");
  task["spec"]["cache"] = {{"salt", "v1"}};  // malformed: no maxStaleness
  EXPECT_EQ(field_of(task), "spec.cache.maxStaleness");
  EXPECT_EQ(cache_entry_for(completed_task(), "sha256:nothex", kNow).error().field, "key");
}

// A robot's clock set ahead must not make an entry that never grows old (or
// that no honest run could replace): no entry is newer than its store.
TEST(ResultCache, AnEntryIsNeverDatedAfterItWasStored) {
  json task = completed_task();
  task["status"]["finishedAt"] = "2200-01-01T00:00:00Z";
  EXPECT_EQ(cache_entry_for(task, kKey, kNow).value()["spec"]["completedAt"], "2026-11-27T10:00:05.000Z");
}

TEST(ResultCache, AnEntryKeepsTheEndOfALongLogWholeCharacters) {
  json task = completed_task();
  task["status"]["logs"] = std::string(kMaxCacheEntryLogBytes, 'x') + "\xc3\xa9" + "end";  // é, then "end"
  const std::string logs = cache_entry_for(task, kKey, kNow).value()["spec"]["logs"];
  EXPECT_LE(logs.size(), kMaxCacheEntryLogBytes);
  EXPECT_EQ(logs.substr(logs.size() - 5),
            "\xc3\xa9"
            "end");
  task["status"]["logs"] = "\xc3\xa9" + std::string(kMaxCacheEntryLogBytes - 1, 'x');  // cut inside the é
  const std::string cut = cache_entry_for(task, kKey, kNow).value()["spec"]["logs"];
  EXPECT_EQ(cut, std::string(kMaxCacheEntryLogBytes - 1, 'x'));
}

TEST(ResultCache, AStoredRunIsReusedWithinMaxStalenessAndSaysWhereItCameFrom) {
  const json entry = cache_entry_for(completed_task(), kKey, kNow).value();
  const CacheRequest day{24h, "", {}};
  const auto hit = cache_hit_status(entry, kKey, day, at("2026-11-28T09:59:59Z"));
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit.value(), json::parse(R"({
    "state": "completed", "exitCode": 0, "finishedAt": "2026-11-28T09:59:59.000Z",
    "message": "not run: the result of Task build-map-0 (completed 2026-11-27T10:00:00.250Z on robot robot-1) is reused, within maxStaleness 24h0m0s",
    "logs": "map written\n",
    "cachedFrom": {"key": "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "task": "build-map-0",
                   "uid": "u-1", "robot": "robot-1", "completedAt": "2026-11-27T10:00:00.250Z"}
  })"))
      << hit.value().dump(2);
  // A clock set back makes an entry look newer than now: still a hit.
  EXPECT_TRUE(cache_hit_status(entry, kKey, day, at("2026-11-27T09:00:00Z")));
}

TEST(ResultCache, TheOutputsARunDeclaredAreStoredAndGivenToTheTaskThatReusesIt) {
  json task = completed_task();
  task["status"]["outputs"] = {{"mapDigest", "sha256:9f"}, {"cells", 1412}};
  const json entry = cache_entry_for(task, kKey, kNow).value();
  EXPECT_EQ(entry["spec"]["outputs"], task["status"]["outputs"]);
  const auto hit = cache_hit_status(entry, kKey, CacheRequest{24h, "", {}}, at("2026-11-27T11:00:00Z"));
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit.value()["outputs"], task["status"]["outputs"]);
  // A run that declared none stores none, and a reuse of it has none.
  EXPECT_FALSE(cache_entry_for(completed_task(), kKey, kNow).value()["spec"].contains("outputs"));
}

TEST(ResultCache, AStaleEntryReuseTurnedOffOrAnEntryOfAnotherKeyRunsTheTask) {
  const json entry = cache_entry_for(completed_task(), kKey, kNow).value();
  EXPECT_FALSE(cache_hit_status(entry, kKey, CacheRequest{24h, "", {}}, at("2026-11-28T10:00:01Z")));
  EXPECT_FALSE(cache_hit_status(entry, kKey, CacheRequest{0s, "", {}}, at("2026-11-27T10:00:01Z")));
  const std::string other = "sha256:" + std::string(64, 'b');
  EXPECT_FALSE(cache_hit_status(entry, other, CacheRequest{24h, "", {}}, at("2026-11-27T10:00:01Z")));
  json failed = entry;
  failed["spec"]["exitCode"] = 1;  // written by hand: never reused
  EXPECT_FALSE(cache_hit_status(failed, kKey, CacheRequest{24h, "", {}}, at("2026-11-27T10:00:01Z")));
  json undated = entry;
  undated["spec"]["completedAt"] = "yesterday";
  EXPECT_FALSE(cache_hit_status(undated, kKey, CacheRequest{24h, "", {}}, at("2026-11-27T10:00:01Z")));
  EXPECT_FALSE(cache_hit_status(json(nullptr), kKey, CacheRequest{24h, "", {}}, at("2026-11-27T10:00:01Z")));
  EXPECT_FALSE(cache_hit_status(json::array(), kKey, CacheRequest{24h, "", {}}, at("2026-11-27T10:00:01Z")));
}

}  // namespace
}  // namespace k8s4r::manager
