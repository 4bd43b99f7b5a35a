#include "k8s4r/kube/leader_election.h"

#include "k8s4r/common/duration.h"
#include "k8s4r/common/rfc3339.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

namespace k8s4r::kube {

using nlohmann::json;
namespace {

long long whole_seconds(std::chrono::nanoseconds duration) {
  return std::max<long long>(1, std::chrono::duration_cast<std::chrono::seconds>(duration).count());
}

std::string text_of(const json& spec, const char* key) {
  return spec.is_object() && spec.contains(key) && spec[key].is_string() ? spec[key].get<std::string>() : "";
}

}  // namespace

ClientConfig lease_client_config(ClientConfig base, std::chrono::nanoseconds retry_period) {
  base.max_attempts = 1;
  base.request_timeout =
      std::max(std::chrono::milliseconds(1000), std::chrono::duration_cast<std::chrono::milliseconds>(retry_period));
  return base;
}

std::vector<std::string> lease_timing_errors(const std::string& prefix, std::chrono::nanoseconds lease_duration,
                                             std::chrono::nanoseconds renew_deadline,
                                             std::chrono::nanoseconds retry_period) {
  std::vector<std::string> errors;
  // Written as whole seconds (leaseDurationSeconds), which is what others judge by.
  if (std::chrono::seconds(whole_seconds(lease_duration)) <= renew_deadline) {
    errors.push_back(prefix + "lease-duration (" + format_go_duration(lease_duration) +
                     ", in whole seconds) must be longer than " + prefix + "renew-deadline (" +
                     format_go_duration(renew_deadline) + ")");
  }
  if (renew_deadline <= retry_period * 12 / 10) {
    errors.push_back(prefix + "renew-deadline (" + format_go_duration(renew_deadline) + ") must be longer than 1.2 x " +
                     prefix + "retry-period (" + format_go_duration(retry_period) + ")");
  }
  return errors;
}

LeaderElector::LeaderElector(Client& client, LeaderElectionConfig config, const Clock& clock)
    : client_(client), config_(std::move(config)), clock_(clock) {}

LeaderElector::~LeaderElector() { stop(); }

bool LeaderElector::renewed_within(std::chrono::nanoseconds deadline) const {
  if (!leading_) return false;
  const SteadyTime renewed{SteadyTime::duration(renewed_at_.load())};
  return clock_.steady() - renewed < deadline;
}

void LeaderElector::start() {
  spdlog::info("leader election: campaigning for Lease {}/{} as {}", config_.namespace_, config_.name,
               config_.identity);
  thread_ = std::thread([this] { run(); });
}

bool LeaderElector::wait(std::chrono::nanoseconds delay) {
  const SteadyTime until = clock_.steady() + std::chrono::duration_cast<SteadyTime::duration>(delay);
  std::unique_lock lock(mutex_);
  while (!stopping_ && clock_.steady() < until) clock_.wait_until(wake_, lock, until);
  return !stopping_;
}

void LeaderElector::run() {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  const auto jittered = [this] {
    // client-go's wait.JitterUntil with factor 1.2: up to a fifth longer.
    const double factor = std::uniform_real_distribution<double>(1.0, 1.2)(random);
    return std::chrono::duration_cast<std::chrono::nanoseconds>(config_.retry_period * factor);
  };
  // Follow until the Lease is ours.
  while (!stopping_) {
    acquired_at_ = clock_.steady();
    if (try_acquire_or_renew() == Attempt::acquired) break;
    if (!wait(jittered())) return;
  }
  if (stopping_) return;
  leading_ = true;
  last_renewed_ = acquired_at_;
  renewed_at_ = acquired_at_.time_since_epoch().count();
  spdlog::info("leader election: {} is the leader", config_.identity);
  if (config_.on_started_leading) config_.on_started_leading();
  // Lead until a renewal cannot be made within the renew deadline.
  while (!stopping_) {
    if (!wait(config_.retry_period)) return;
    // The renewal counts from before its request: a slow answer must not
    // stretch the lease this leader believes it holds.
    const auto attempted = clock_.steady();
    if (try_acquire_or_renew() == Attempt::acquired) {
      last_renewed_ = attempted;
      renewed_at_ = attempted.time_since_epoch().count();
      continue;
    }
    ++failed_renewals_;
    if (clock_.steady() - last_renewed_ >= config_.renew_deadline) {
      leading_ = false;
      spdlog::error("leader election: could not renew Lease {}/{} within {} s; no longer the leader",
                    config_.namespace_, config_.name,
                    std::chrono::duration_cast<std::chrono::seconds>(config_.renew_deadline).count());
      if (config_.on_stopped_leading) config_.on_stopped_leading();
      return;
    }
  }
}

LeaderElector::Attempt LeaderElector::try_acquire_or_renew() {
  const std::string now = format_rfc3339(clock_.wall(), TimePrecision::microseconds);
  json spec = {{"holderIdentity", config_.identity},
               {"leaseDurationSeconds", whole_seconds(config_.lease_duration)},
               {"acquireTime", now},
               {"renewTime", now},
               {"leaseTransitions", 0}};
  auto current = client_.get(kLeases, config_.namespace_, config_.name);
  if (!current) {
    if (!current.error().not_found()) {
      spdlog::warn("leader election: reading Lease {}/{}: {}", config_.namespace_, config_.name,
                   current.error().to_string());
      return Attempt::failed;
    }
    json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", config_.name}, {"namespace", config_.namespace_}}},
                  {"spec", spec}};
    auto created = client_.create(kLeases, config_.namespace_, lease);
    if (!created) {
      spdlog::warn("leader election: creating Lease {}/{}: {}", config_.namespace_, config_.name,
                   created.error().to_string());
      return Attempt::failed;
    }
    observed_record_ = created.value()["spec"].dump();
    observed_at_ = clock_.steady();
    observed_holder_ = config_.identity;
    return Attempt::acquired;
  }
  json lease = std::move(current.value());
  const json old_spec = lease.contains("spec") ? lease["spec"] : json::object();
  const std::string record = old_spec.dump();
  const std::string holder = text_of(old_spec, "holderIdentity");
  if (record != observed_record_) {
    observed_record_ = record;
    observed_at_ = clock_.steady();
    if (holder != observed_holder_) {
      observed_holder_ = holder;
      if (!holder.empty() && config_.on_new_leader) config_.on_new_leader(holder);
    }
  }
  long long duration_seconds = whole_seconds(config_.lease_duration);
  if (old_spec.contains("leaseDurationSeconds") && old_spec["leaseDurationSeconds"].is_number_integer())
    duration_seconds = old_spec["leaseDurationSeconds"].get<long long>();
  if (!holder.empty() && holder != config_.identity &&
      clock_.steady() < observed_at_ + std::chrono::seconds(duration_seconds)) {
    return Attempt::held_by_other;
  }
  long long transitions = 0;
  if (old_spec.contains("leaseTransitions") && old_spec["leaseTransitions"].is_number_integer())
    transitions = old_spec["leaseTransitions"].get<long long>();
  if (holder == config_.identity) {
    if (old_spec.contains("acquireTime")) spec["acquireTime"] = old_spec["acquireTime"];
    spec["leaseTransitions"] = transitions;
  } else {
    spec["leaseTransitions"] = transitions + 1;
  }
  lease["spec"] = spec;  // metadata.resourceVersion as read: the update is conditional on it
  auto updated = client_.replace(kLeases, config_.namespace_, config_.name, lease);
  if (!updated) {
    if (!updated.error().conflict())
      spdlog::warn("leader election: updating Lease {}/{}: {}", config_.namespace_, config_.name,
                   updated.error().to_string());
    return Attempt::failed;
  }
  observed_record_ = updated.value()["spec"].dump();
  observed_at_ = clock_.steady();
  if (holder != config_.identity) {
    observed_holder_ = config_.identity;
    spdlog::info("leader election: took Lease {}/{} from {}", config_.namespace_, config_.name,
                 holder.empty() ? "nobody" : holder);
  }
  return Attempt::acquired;
}

void LeaderElector::stop() {
  {
    std::lock_guard lock(mutex_);  // a waiter between its check and its wait still hears it
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LeaderElector::release() {
  stop();
  if (!leading_.exchange(false)) return;
  auto current = client_.get(kLeases, config_.namespace_, config_.name);
  if (!current) return;
  json lease = std::move(current.value());
  if (text_of(lease["spec"], "holderIdentity") != config_.identity) return;
  const std::string now = format_rfc3339(clock_.wall(), TimePrecision::microseconds);
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = now;
  lease["spec"]["acquireTime"] = now;
  if (auto released = client_.replace(kLeases, config_.namespace_, config_.name, lease); released)
    spdlog::info("leader election: released Lease {}/{}", config_.namespace_, config_.name);
  else
    spdlog::warn("leader election: releasing Lease {}/{}: {}", config_.namespace_, config_.name,
                 released.error().to_string());
}

}  // namespace k8s4r::kube
