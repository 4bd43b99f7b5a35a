// The result cache's key: what changes a result changes the key, what does
// not leaves it alone, and what cannot be keyed by content says why.
#include "k8s4r/manager/cache_key.h"

#include <gtest/gtest.h>

namespace k8s4r::manager {
namespace {

using nlohmann::json;

json task() {
  return json::parse(R"({
    "metadata": {"name": "build-map-0", "namespace": "default", "uid": "u-1"},
    "spec": {
      "name": "build-map", "jobName": "maps", "taskGroupName": "g", "targetRobot": "robot-1",
      "driver": "exec",
      "config": {"execConfig": {"command": "/usr/bin/build-map", "args": ["--floor", "2"]}},
      "env": {"QUALITY": "high"},
      "user": "mapper",
      "timeout": "1h",
      "artifacts": [{"getterSource": "https://maps.example/floor2.bag",
                     "getterOptions": {"checksum": "sha256:0f3c"}, "relativeDest": "local/floor2.bag"}],
      "cache": {"maxStaleness": "24h", "salt": "v1", "keyLabels": ["lidar"]}
    }})");
}

json robot(const std::string& arch = "arm64", const std::string& lidar = "vlp16") {
  json r = {{"metadata", {{"name", "robot-1"}}},
            {"spec", {{"labels", {{"zone", "lab-a"}}}}},
            {"status", {{"deviceInfo", {{"platform", {{"os", "linux"}, {"arch", arch}}}}}}}};
  if (!lidar.empty()) r["spec"]["labels"]["lidar"] = lidar;
  return r;
}

std::string key_of(const json& t, const json& r = robot()) {
  const auto request = cache_request(t);
  EXPECT_TRUE(request) << request.error().to_string();
  EXPECT_TRUE(request.value());
  const auto key = cache_key(t, *request.value(), r);
  EXPECT_TRUE(key) << key.error().to_string();
  return key ? key.value() : std::string();
}

TEST(CacheKey, IsASha256OfAVersionedSortedEncodingOfWhatDeterminesTheResult) {
  const auto request = cache_request(task()).value();
  ASSERT_TRUE(request);
  EXPECT_EQ(request->max_staleness, std::chrono::hours(24));
  EXPECT_EQ(request->salt, "v1");
  const std::string material = cache_key_material(task(), *request, robot()).value();
  EXPECT_EQ(material,
            R"({"artifacts":[{"checksum":"sha256:0f3c","relativeDest":"local/floor2.bag"}],)"
            R"("config":{"execConfig":{"args":["--floor","2"],"command":"/usr/bin/build-map"}},"driver":"exec",)"
            R"("env":{"QUALITY":"high"},"robotClass":{"arch":"arm64","labels":{"lidar":"vlp16"},"os":"linux"},)"
            R"("salt":"v1","user":"mapper","v":1})");
  const std::string key = key_of(task());
  EXPECT_EQ(key.rfind("sha256:", 0), 0u);
  EXPECT_EQ(key.size(), 7u + 64u);
  EXPECT_EQ(key, key_of(task())) << "stable";
}

TEST(CacheKey, NamesTimeoutsAndTheArtifactsUrlAreNotPartOfIt) {
  json other = task();
  other["metadata"] = {{"name", "build-map-7"}, {"namespace", "default"}, {"uid", "u-2"}};
  other["spec"]["name"] = "another";
  other["spec"]["jobName"] = "maps-again";
  other["spec"]["targetRobot"] = "robot-9";
  other["spec"]["timeout"] = "2h";
  other["spec"]["artifacts"][0]["getterSource"] = "https://mirror.example/floor2.bag";  // same content
  other["spec"]["resources"] = {{"cpu", "2"}};
  EXPECT_EQ(key_of(other), key_of(task()));
  // Labels the key does not name, and key labels listed twice or in another order, change nothing.
  json relabelled = robot();
  relabelled["spec"]["labels"]["zone"] = "lab-b";
  EXPECT_EQ(key_of(task(), relabelled), key_of(task()));
  other = task();
  other["spec"]["cache"]["keyLabels"] = {"lidar", "lidar"};
  other["spec"]["cache"]["maxStaleness"] = "1h";  // how old a result may be is not what it is
  EXPECT_EQ(key_of(other), key_of(task()));
}

TEST(CacheKey, EachInputThatCanChangeTheResultChangesIt) {
  const std::string base = key_of(task());
  const auto changed = [&](auto&& edit) {
    json t = task();
    edit(t);
    return key_of(t);
  };
  EXPECT_NE(changed([](json& t) { t["spec"]["config"]["execConfig"]["command"] = "/usr/bin/other"; }), base);
  EXPECT_NE(changed([](json& t) { t["spec"]["config"]["execConfig"]["args"][1] = "3"; }), base);
  EXPECT_NE(changed([](json& t) { t["spec"]["env"]["QUALITY"] = "low"; }), base);
  EXPECT_NE(changed([](json& t) { t["spec"]["env"]["EXTRA"] = ""; }), base);
  EXPECT_NE(changed([](json& t) { t["spec"]["user"] = "root"; }), base);
  EXPECT_NE(changed([](json& t) { t["spec"]["driver"] = "raw_exec"; }), base);
  EXPECT_NE(changed([](json& t) { t["spec"]["artifacts"][0]["getterOptions"]["checksum"] = "sha256:0f3d"; }), base);
  EXPECT_NE(changed([](json& t) { t["spec"]["artifacts"][0]["relativeDest"] = "local/other.bag"; }), base);
  EXPECT_NE(changed([](json& t) { t["spec"]["cache"]["salt"] = "v2"; }), base);
  EXPECT_NE(changed([](json& t) { t["spec"]["cache"].erase("keyLabels"); }), base);
  EXPECT_NE(key_of(task(), robot("amd64")), base);
  EXPECT_NE(key_of(task(), robot("arm64", "os1-64")), base);
  EXPECT_NE(key_of(task(), robot("arm64", "")), base) << "an absent label is not an empty one";
}

TEST(CacheKey, ATaskWithoutACacheSectionAsksNothingAndAMalformedOneSaysWhere) {
  json plain = task();
  plain["spec"].erase("cache");
  EXPECT_FALSE(cache_request(plain).value());
  const auto error_of = [](const json& cache) {
    json t = task();
    t["spec"]["cache"] = cache;
    const auto request = cache_request(t);
    return request ? std::string("accepted") : request.error().field;
  };
  EXPECT_EQ(error_of(json::object()), "spec.cache.maxStaleness");
  EXPECT_EQ(error_of({{"maxStaleness", 3600}}), "spec.cache.maxStaleness");
  EXPECT_EQ(error_of({{"maxStaleness", "-1h"}}), "spec.cache.maxStaleness");
  EXPECT_EQ(error_of({{"maxStaleness", "1h"}, {"salt", 7}}), "spec.cache.salt");
  EXPECT_EQ(error_of({{"maxStaleness", "1h"}, {"salt", std::string(254, 's')}}), "spec.cache.salt");
  EXPECT_EQ(error_of({{"maxStaleness", "1h"}, {"keyLabels", "lidar"}}), "spec.cache.keyLabels");
  EXPECT_EQ(error_of({{"maxStaleness", "1h"}, {"keyLabels", {"lidar", ""}}}), "spec.cache.keyLabels[1]");
  EXPECT_EQ(error_of("24h"), "spec.cache");
  EXPECT_EQ(error_of({{"maxStaleness", "0s"}}), "accepted");  // stores, never reuses
}

TEST(CacheKey, AnArtifactWithoutAChecksumMakesTheTaskNotCacheableAndSaysWhich) {
  json t = task();
  t["spec"]["artifacts"].push_back({{"getterSource", "https://maps.example/latest.yaml"}});
  const auto request = cache_request(t).value();
  const auto key = cache_key(t, *request, robot());
  ASSERT_FALSE(key);
  EXPECT_EQ(key.error().field, "spec.artifacts[1].getterOptions.checksum");
  EXPECT_NE(key.error().message.find("not cacheable"), std::string::npos);
}

// A robot that has not said its os and arch would share one class with every
// other such robot, whatever they are: not keyed there.
TEST(CacheKey, ARobotThatHasNotReportedItsPlatformGivesNoKey) {
  const auto request = cache_request(task()).value();
  for (const char* missing : {"os", "arch"}) {
    json r = robot();
    r["status"]["deviceInfo"]["platform"].erase(missing);
    const auto key = cache_key(task(), *request, r);
    ASSERT_FALSE(key) << missing;
    EXPECT_EQ(key.error().field, "status.deviceInfo.platform");
  }
  json bare = robot();
  bare.erase("status");
  EXPECT_FALSE(cache_key(task(), *request, bare));
  json empty = robot();
  empty["status"]["deviceInfo"]["platform"]["arch"] = "";
  EXPECT_FALSE(cache_key(task(), *request, empty));
}

}  // namespace
}  // namespace k8s4r::manager
