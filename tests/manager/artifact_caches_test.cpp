// ArtifactCache as pure functions: what each robot is to keep, and each
// cache's status from what its robots say.
#include "k8s4r/manager/artifact_caches.h"

#include "k8s4r/common/messages.h"

#include <gtest/gtest.h>

namespace k8s4r::manager {
namespace {

using nlohmann::json;

const std::string kModel = "sha256:" + std::string(64, 'a');
const Timestamp kNow = parse_rfc3339("2026-11-27T22:30:00Z").value();

json cache(const std::string& name, const std::string& checksum = kModel, json selector = {{"site", "s4"}}) {
  return {
      {"metadata", {{"name", name}, {"namespace", "default"}, {"generation", 2}}},
      {"spec",
       {{"source", "https://models.example/" + name + ".bin"}, {"checksum", checksum}, {"robotSelector", selector}}}};
}

json robot(const std::string& name, const std::string& phase = "Online", json labels = {{"site", "s4"}}) {
  return {{"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", {{"labels", labels}}},
          {"status", {{"phase", phase}}}};
}

TEST(ArtifactCaches, ASpecIsReadOrRefusedNamingItsField) {
  auto read = read_artifact_cache(cache("nav", "SHA256:" + std::string(64, 'A')));
  ASSERT_TRUE(read) << read.error().to_string();
  EXPECT_EQ(read.value().checksum, kModel);  // as robots report it
  EXPECT_EQ(read.value().selector, (std::map<std::string, std::string>{{"site", "s4"}}));
  json bad = cache("nav");
  bad["spec"]["source"] = "file:///etc/shadow";
  EXPECT_EQ(read_artifact_cache(bad).error().field, "spec.source");
  bad = cache("nav", "md5:00");
  EXPECT_EQ(read_artifact_cache(bad).error().field, "spec.checksum");
  bad = cache("nav");
  bad["spec"]["source"] = "https://models.example/a b";
  EXPECT_EQ(read_artifact_cache(bad).error().field, "spec.source");
  bad = cache("nav");
  bad["spec"]["size"] = -1;
  EXPECT_EQ(read_artifact_cache(bad).error().field, "spec.size");
}

TEST(ArtifactCaches, ARobotKeepsWhatSelectsItWhileApprovedByNameAtMostSixteen) {
  const CachedArtifact nav = read_artifact_cache(cache("nav")).value();
  EXPECT_TRUE(selects(nav, robot("a")));
  EXPECT_TRUE(selects(nav, robot("a", "Offline")));  // it fetches when it is back
  EXPECT_FALSE(selects(nav, robot("a", "Pending")));
  EXPECT_FALSE(selects(nav, robot("a", "Rejected")));
  EXPECT_FALSE(selects(nav, robot("a", "Online", {{"site", "s9"}})));
  EXPECT_TRUE(selects(read_artifact_cache(cache("all", kModel, json::object())).value(), robot("b", "Online", {})));

  std::vector<json> caches;
  for (int i = 0; i < 20; ++i) {
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", i);
    caches.push_back(
        cache("c" + std::string(i < 10 ? "0" : "") + std::to_string(i), "sha256:" + std::string(62, 'b') + hex));
  }
  caches.push_back(cache("other-site", kModel, {{"site", "s9"}}));
  json invalid = cache("broken", "md5:00");
  caches.push_back(invalid);
  const json list = prefetch_for_robot(robot("a"), caches);
  ASSERT_EQ(list.size(), kMaxPrefetched);
  EXPECT_EQ(list[0]["cache"], "c00");
  EXPECT_EQ(list[15]["cache"], "c15");
  EXPECT_EQ(list[0]["source"], "https://models.example/c00.bin");
  EXPECT_TRUE(prefetch_for_robot(robot("a", "Pending"), caches).empty());
}

TEST(ArtifactCaches, AStatusSaysHowEachSelectedRobotStandsAndCountsThem) {
  json downloaded = robot("a");
  downloaded["status"]["artifacts"] = {{"held", {kModel}}};
  json failed = robot("b");
  failed["status"]["artifacts"] = {
      {"prefetch", {{{"checksum", kModel}, {"state", "Failed"}, {"reason", "NoRoom"}, {"message", "too big"}}}}};
  json told = robot("c", "Offline");
  json elsewhere = robot("d", "Online", {{"site", "s9"}});
  const json status = artifact_cache_status(cache("nav"), {told, failed, downloaded, elsewhere}, kNow);
  EXPECT_EQ(status["observedGeneration"], 2);
  EXPECT_EQ(status["total"], 3);
  EXPECT_EQ(status["available"], 1);
  EXPECT_EQ(status["failed"], 1);
  EXPECT_EQ(status["downloading"], 1);
  ASSERT_EQ(status["robots"].size(), 3u);
  EXPECT_EQ(status["robots"][0], json({{"name", "a"}, {"state", "Downloaded"}}));
  EXPECT_EQ(status["robots"][1],
            json({{"name", "b"}, {"state", "Failed"}, {"reason", "NoRoom"}, {"message", "too big"}}));
  EXPECT_EQ(status["robots"][2]["state"], "Downloading");
  EXPECT_EQ(status["robots"][2]["message"], "the robot is Offline; it fetches it once it is back");
  EXPECT_EQ(status["conditions"][0]["type"], "Ready");
  EXPECT_EQ(status["conditions"][0]["status"], "False");
  EXPECT_EQ(status["conditions"][0]["reason"], "Failed");

  const json ready = artifact_cache_status(cache("nav"), {downloaded}, kNow);
  EXPECT_EQ(ready["conditions"][0]["status"], "True");
  EXPECT_FALSE(ready.contains("robotsTruncated"));  // written only when true: the same status is the same patch
  // Held by checksum, but the robot says it is still fetching it for this
  // cache's URL (its store serves by URL): not available yet.
  json fetching = downloaded;
  fetching["status"]["artifacts"]["prefetch"] = {{{"checksum", kModel}, {"state", "Downloading"}}};
  EXPECT_EQ(artifact_cache_status(cache("nav"), {fetching}, kNow)["available"], 0);
  // Selecting nothing is not ready: a mistyped selector says so.
  const json none = artifact_cache_status(cache("nav", kModel, {{"site", "nowhere"}}), {downloaded}, kNow);
  EXPECT_EQ(none["conditions"][0]["reason"], "NoRobots");
  // A robot whose list is full of caches named before this one cannot keep it.
  json full = robot("e");
  full["status"]["prefetch"] = json::array();
  for (std::size_t i = 0; i < kMaxPrefetched; ++i)
    full["status"]["prefetch"].push_back({{"cache", "a" + std::to_string(i)}});
  EXPECT_EQ(artifact_cache_status(cache("nav"), {full}, kNow)["robots"][0]["reason"], "TooMany");
  // An invalid spec: nothing selected, and Ready says why.
  const json invalid = artifact_cache_status(cache("nav", "md5:00"), {downloaded}, kNow);
  EXPECT_EQ(invalid["total"], 0);
  EXPECT_EQ(invalid["conditions"][0]["reason"], "Invalid");
}

}  // namespace
}  // namespace k8s4r::manager
