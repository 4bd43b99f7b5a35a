#include "k8s4r/manager/result_cache.h"

#include "k8s4r/common/duration.h"
#include "k8s4r/crd/resources.h"

#include <algorithm>

namespace k8s4r::manager {

using nlohmann::json;

namespace {

constexpr std::string_view kKeyPrefix = "sha256:";
constexpr std::size_t kKeyDigits = 64;

bool is_key(const std::string& key) {
  return key.size() == kKeyPrefix.size() + kKeyDigits && key.compare(0, kKeyPrefix.size(), kKeyPrefix) == 0 &&
         std::all_of(key.begin() + static_cast<std::ptrdiff_t>(kKeyPrefix.size()), key.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The last `limit` bytes of `text` at most, starting on a UTF-8 character.
std::string tail(const std::string& text, std::size_t limit) {
  if (text.size() <= limit) return text;
  std::size_t start = text.size() - limit;
  while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
  return text.substr(start);
}

}  // namespace

Result<std::string> cache_entry_name(const std::string& key) {
  if (!is_key(key)) return Error{"key", "is not sha256: and 64 lowercase hex digits"};
  return "sha256-" + key.substr(kKeyPrefix.size());
}

Result<json> cache_entry_for(const json& task, const std::string& key, Timestamp now) {
  auto name = cache_entry_name(key);
  if (!name) return name.error();
  auto request = cache_request(task);
  if (!request) return request.error();
  if (!request.value()) return Error{"spec.cache", "is not set: the task did not ask for caching"};
  const json& status = crd::value_at(task, {"status"});
  const std::string state = crd::string_at(status, {"state"});
  if (state != "completed") return Error{"status.state", "is " + state + ": only a completed run is stored"};
  const json& exit_code = crd::value_at(status, {"exitCode"});
  if (!exit_code.is_number_integer() || exit_code.get<long long>() != 0) {
    return Error{"status.exitCode", "is not 0: only a successful run is stored"};
  }
  if (!crd::value_at(status, {"cachedFrom"}).is_null()) {
    return Error{"status.cachedFrom", "the result came from the cache: it is stored already"};
  }
  const std::string finished = crd::string_at(status, {"finishedAt"});
  auto finished_at = parse_rfc3339(finished);
  if (!finished_at) return Error{"status.finishedAt", "is not an RFC 3339 time: " + finished_at.error().message};
  json spec = {{"key", key},
               {"task", {{"name", crd::string_at(task, {"metadata", "name"})}}},
               {"completedAt", format_rfc3339(std::min(finished_at.value(), now), TimePrecision::milliseconds)},
               {"exitCode", 0}};
  if (const std::string uid = crd::string_at(task, {"metadata", "uid"}); !uid.empty()) spec["task"]["uid"] = uid;
  if (const std::string job = crd::string_at(task, {"spec", "jobName"}); !job.empty()) spec["job"] = job;
  if (const std::string robot = crd::string_at(task, {"spec", "targetRobot"}); !robot.empty()) spec["robot"] = robot;
  if (const json& logs = crd::value_at(status, {"logs"}); logs.is_string()) {
    spec["logs"] = tail(logs.get<std::string>(), kMaxCacheEntryLogBytes);
  }
  if (const json& outputs = crd::value_at(status, {"outputs"}); outputs.is_object()) spec["outputs"] = outputs;
  return json{{"apiVersion", crd::kApiVersion},
              {"kind", "TaskCacheEntry"},
              {"metadata",
               {{"name", name.value()},
                {"namespace", crd::string_at(task, {"metadata", "namespace"})},
                {"labels", {{"app.kubernetes.io/managed-by", "k8s4r-manager"}}}}},
              {"spec", std::move(spec)}};
}

std::optional<Timestamp> cache_entry_completed_at(const json& entry) {
  auto parsed = parse_rfc3339(crd::string_at(entry, {"spec", "completedAt"}));
  if (!parsed) return std::nullopt;
  return parsed.value();
}

std::optional<json> cache_hit_status(const json& entry, const std::string& key, const CacheRequest& request,
                                     Timestamp now) {
  if (request.max_staleness <= std::chrono::nanoseconds::zero()) return std::nullopt;
  const json& spec = crd::value_at(entry, {"spec"});
  if (crd::string_at(spec, {"key"}) != key || !is_key(key)) return std::nullopt;
  const json& exit_code = crd::value_at(spec, {"exitCode"});
  if (!exit_code.is_null() && (!exit_code.is_number_integer() || exit_code.get<long long>() != 0)) return std::nullopt;
  const std::string completed = crd::string_at(spec, {"completedAt"});
  const auto completed_at = cache_entry_completed_at(entry);
  if (!completed_at) return std::nullopt;
  // An entry from later than now (a clock set back) is as fresh as can be.
  if (completed_at.value() < now && elapsed(completed_at.value(), now) > request.max_staleness) return std::nullopt;
  const std::string producer = crd::string_at(spec, {"task", "name"});
  const std::string robot = crd::string_at(spec, {"robot"});
  json from = {{"key", key}, {"task", producer}, {"completedAt", completed}};
  if (const std::string uid = crd::string_at(spec, {"task", "uid"}); !uid.empty()) from["uid"] = uid;
  if (!robot.empty()) from["robot"] = robot;
  json status = {{"state", "completed"},
                 {"exitCode", 0},
                 {"finishedAt", format_rfc3339(now, TimePrecision::milliseconds)},
                 {"message", "not run: the result of Task " + producer + " (completed " + completed +
                                 (robot.empty() ? "" : " on robot " + robot) + ") is reused, within maxStaleness " +
                                 format_go_duration(request.max_staleness)},
                 {"cachedFrom", std::move(from)}};
  if (const json& logs = crd::value_at(spec, {"logs"}); logs.is_string()) status["logs"] = logs;
  if (const json& outputs = crd::value_at(spec, {"outputs"}); outputs.is_object()) status["outputs"] = outputs;
  return status;
}

}  // namespace k8s4r::manager
