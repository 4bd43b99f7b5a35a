#include "k8s4r/manager/artifact_caches.h"

#include "k8s4r/common/messages.h"
#include "k8s4r/crd/resources.h"

#include <algorithm>
#include <cctype>

namespace k8s4r::manager {

using nlohmann::json;

namespace {

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// The valid caches, by name.
std::vector<CachedArtifact> valid_caches(const std::vector<json>& caches) {
  std::vector<CachedArtifact> out;
  for (const json& cache : caches) {
    if (!crd::value_at(cache, {"metadata", "deletionTimestamp"}).is_null()) continue;
    if (auto read = read_artifact_cache(cache)) out.push_back(std::move(read).value());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

// How `robot` stands with `cache`: state, reason, message.
json robot_state(const CachedArtifact& cache, const json& robot, bool beyond_limit) {
  const std::string name = crd::string_at(robot, {"metadata", "name"});
  json entry = {{"name", name}};
  if (beyond_limit) {
    entry["state"] = "Failed";
    entry["reason"] = "TooMany";
    entry["message"] = "the robot keeps at most " + std::to_string(kMaxPrefetched) +
                       " artifacts ahead of need; caches before this one by name take its room";
    return entry;
  }
  // What the robot says of it, when it says anything: it holds it for this
  // cache's URL or not (its store serves by URL; `held` is by checksum only).
  for (const json& reported : crd::value_at(robot, {"status", "artifacts", "prefetch"})) {
    if (crd::string_at(reported, {"checksum"}) != cache.checksum) continue;
    const std::string state = crd::string_at(reported, {"state"});
    if (state != "Downloaded" && state != "Failed" && state != "Downloading") break;
    entry["state"] = state;
    if (const std::string reason = crd::string_at(reported, {"reason"}); !reason.empty()) entry["reason"] = reason;
    if (const std::string message = crd::string_at(reported, {"message"}); !message.empty()) entry["message"] = message;
    return entry;
  }
  for (const json& held : crd::value_at(robot, {"status", "artifacts", "held"})) {
    if (held.is_string() && held.get<std::string>() == cache.checksum) {
      entry["state"] = "Downloaded";
      entry.erase("reason");
      entry.erase("message");
      return entry;
    }
  }
  entry["state"] = "Downloading";
  if (!entry.contains("message")) {
    const auto phase = crd::read_robot(robot).phase;
    entry["message"] = phase == crd::RobotPhase::online
                           ? "told to fetch it; no word from the robot yet"
                           : "the robot is " + std::string(crd::to_string(*phase)) + "; it fetches it once it is back";
  }
  return entry;
}

}  // namespace

Result<CachedArtifact> read_artifact_cache(const json& cache) {
  CachedArtifact read;
  read.name = crd::string_at(cache, {"metadata", "name"});
  const json& spec = crd::value_at(cache, {"spec"});
  read.source = crd::string_at(spec, {"source"});
  if (read.source.rfind("http://", 0) != 0 && read.source.rfind("https://", 0) != 0)
    return Error{"spec.source", "must be an http or https URL, got '" + read.source + "'"};
  read.checksum = lower(crd::string_at(spec, {"checksum"}));
  if (auto checked = check_artifact_digest(read.checksum); !checked)
    return Error{"spec.checksum", "must be sha256: and 64 hex digits or sha512: and 128"};
  // What the robot would refuse in the list it is sent (a newline, a space).
  Prefetch probe{"r", {PrefetchArtifact{read.source, read.checksum, std::nullopt}}, std::nullopt};
  if (auto parsed = parse_prefetch(encode(probe)); !parsed) return Error{"spec.source", parsed.error().message};
  if (const json& size = crd::value_at(spec, {"size"}); !size.is_null()) {
    if (!size.is_number_integer() || size.get<std::int64_t>() < 0)
      return Error{"spec.size", "must be a whole number of bytes"};
    read.size = size.get<std::int64_t>();
  }
  if (const json& selector = crd::value_at(spec, {"robotSelector"}); selector.is_object()) {
    for (const auto& [key, value] : selector.items()) {
      if (!value.is_string()) return Error{"spec.robotSelector." + key, "must be a string"};
      read.selector[key] = value.get<std::string>();
    }
  }
  return read;
}

bool selects(const CachedArtifact& cache, const json& robot) {
  const auto phase = crd::read_robot(robot).phase;
  if (!phase || *phase == crd::RobotPhase::pending || *phase == crd::RobotPhase::rejected) return false;
  if (!crd::value_at(robot, {"metadata", "deletionTimestamp"}).is_null()) return false;
  const json& labels = crd::value_at(robot, {"spec", "labels"});
  return std::all_of(cache.selector.begin(), cache.selector.end(), [&](const auto& wanted) {
    const json& value = crd::value_at(labels, {wanted.first.c_str()});
    return value.is_string() && value.get<std::string>() == wanted.second;
  });
}

json prefetch_for_robot(const json& robot, const std::vector<json>& caches) {
  json list = json::array();
  for (const CachedArtifact& cache : valid_caches(caches)) {
    if (list.size() >= kMaxPrefetched) break;
    if (!selects(cache, robot)) continue;
    json item = {{"source", cache.source}, {"checksum", cache.checksum}, {"cache", cache.name}};
    if (cache.size) item["size"] = *cache.size;
    list.push_back(std::move(item));
  }
  return list;
}

json artifact_cache_status(const json& cache, const std::vector<json>& robots, Timestamp now) {
  json status = json::object();
  if (const json& generation = crd::value_at(cache, {"metadata", "generation"}); generation.is_number_integer())
    status["observedGeneration"] = generation;
  auto read = read_artifact_cache(cache);
  if (!read) {
    status["total"] = status["available"] = status["downloading"] = status["failed"] = 0;
    status["robots"] = json::array();
    status["conditions"] = crd::set_condition(cache, {"Ready", "False", "Invalid", read.error().to_string()}, now);
    return status;
  }
  const CachedArtifact& me = read.value();
  const std::string ns = crd::string_at(cache, {"metadata", "namespace"});
  std::vector<const json*> selected;
  for (const json& robot : robots) {
    if (crd::string_at(robot, {"metadata", "namespace"}) != ns) continue;
    if (selects(me, robot)) selected.push_back(&robot);
  }
  std::sort(selected.begin(), selected.end(), [](const json* a, const json* b) {
    return crd::string_at(*a, {"metadata", "name"}) < crd::string_at(*b, {"metadata", "name"});
  });
  int available = 0, downloading = 0, failed = 0;
  json listed = json::array();
  for (const json* robot : selected) {
    // Beyond the robot's limit when its status.prefetch, as the manager
    // wrote it, does not name this cache and already holds kMaxPrefetched.
    const json& told = crd::value_at(*robot, {"status", "prefetch"});
    bool named = false;
    for (const json& item : told) named = named || crd::string_at(item, {"cache"}) == me.name;
    const bool beyond = !named && told.is_array() && told.size() >= kMaxPrefetched;
    json entry = robot_state(me, *robot, beyond);
    const std::string state = entry["state"];
    ++(state == "Downloaded" ? available : state == "Failed" ? failed : downloading);
    if (listed.size() < kMaxListedRobots) listed.push_back(std::move(entry));
  }
  status["total"] = static_cast<int>(selected.size());
  status["available"] = available;
  status["downloading"] = downloading;
  status["failed"] = failed;
  status["robots"] = std::move(listed);
  // Only when true: a null would be removed by the merge patch and read as
  // a change on every pass.
  if (selected.size() > kMaxListedRobots) status["robotsTruncated"] = true;
  const bool ready = !selected.empty() && available == static_cast<int>(selected.size());
  crd::Condition condition{"Ready", "False", "NoRobots", "no approved robot matches robotSelector"};
  if (ready) {
    condition = {"Ready", "True", "Available",
                 "every robot selected (" + std::to_string(selected.size()) + ") holds it"};
  } else if (!selected.empty()) {
    condition = {"Ready", "False", failed > 0 ? "Failed" : "Downloading",
                 std::to_string(available) + " of " + std::to_string(selected.size()) + " robots hold it, " +
                     std::to_string(failed) + " failed"};
  }
  status["conditions"] = crd::set_condition(cache, condition, now);
  return status;
}

}  // namespace k8s4r::manager
