#include "k8s4r/bridge/slot_coordinator.h"

#include "k8s4r/crd/resources.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <random>

namespace k8s4r::bridge {

using nlohmann::json;

namespace {

std::string text_at(const json& object, const char* key) {
  const auto found = object.is_object() ? object.find(key) : object.end();
  return found != object.end() && found->is_string() ? found->get<std::string>() : "";
}

std::size_t count_served(const ServedSlots& slots) {
  return static_cast<std::size_t>(std::count_if(slots.begin(), slots.end(), [](std::int64_t e) { return e != 0; }));
}

}  // namespace

SlotCoordinator::SlotCoordinator(kube::Client& client, SlotCoordinatorConfig config, const Clock& clock)
    : client_(client), config_(std::move(config)), clock_(clock), served_(kSlots, 0) {
  std::random_device random;
  char incarnation[9];
  std::snprintf(incarnation, sizeof incarnation, "%08x", static_cast<unsigned>(random()));
  holder_ = config_.replica_id + "/" + incarnation;
  kube::LeaderElectionConfig lease{config_.namespace_,
                                   kReplicaLeasePrefix + config_.replica_id,
                                   holder_,
                                   config_.lease_duration,
                                   config_.renew_deadline,
                                   config_.retry_period};
  lease.on_stopped_leading = [this] {
    // First stop acting (serving() is false from now on, on every thread),
    // then tell the daemon, then drop the slots in the loop.
    lost_ = true;
    spdlog::critical("replica {}: could not renew its Lease for {} s: serving no robot", config_.replica_id,
                     std::chrono::duration_cast<std::chrono::seconds>(config_.renew_deadline).count());
    if (config_.on_lost_lease) config_.on_lost_lease();
    serve(ServedSlots(kSlots, 0));
  };
  lease.on_new_leader = [this](const std::string& holder) {
    if (holder != holder_)
      spdlog::warn("replica {}: its Lease is held by {}, another process of this id: waiting for it to run out",
                   config_.replica_id, holder);
  };
  elector_ = std::make_unique<kube::LeaderElector>(client_, std::move(lease), clock_);
}

SlotCoordinator::~SlotCoordinator() { stop(); }

void SlotCoordinator::start() {
  spdlog::info("replica {}: joining the bridge replicas (Lease {}{}, slot table {})", config_.replica_id,
               kReplicaLeasePrefix, config_.replica_id, kSlotTableName);
  elector_->start();
  thread_ = std::thread([this] { run(); });
}

void SlotCoordinator::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  elector_->stop();
}

std::string SlotCoordinator::not_ready_reason() const {
  if (!ready_) return "the slot table not written since this replica started";
  if (!serving()) return "its Lease not renewed within the renew deadline";
  return "";
}

std::int64_t SlotCoordinator::now_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_.wall().time_since_epoch()).count();
}

void SlotCoordinator::run() {
  const auto interval = std::max<std::chrono::nanoseconds>(std::chrono::milliseconds(100), config_.retry_period / 4);
  while (!stopping_) {
    poll();
    after_poll();
    const SteadyTime until = clock_.steady() + std::chrono::duration_cast<SteadyTime::duration>(interval);
    std::unique_lock lock(mutex_);
    while (!stopping_ && clock_.steady() < until) clock_.wait_until(wake_, lock, until);
  }
}

bool SlotCoordinator::serve(const ServedSlots& slots) {
  std::lock_guard lock(serve_mutex_);                  // the poll's thread, and the elector's when the Lease is lost
  if (lost_ && count_served(slots) > 0) return false;  // a poll under way when the Lease was lost
  if (slots == served_) return true;
  if (!config_.serve || !config_.serve(slots)) return false;  // told again on the next poll
  const std::size_t before = count_served(served_), after = count_served(slots);
  served_ = slots;
  served_count_ = after;
  if (before != after) spdlog::info("replica {}: serving {} slot(s) (was {})", config_.replica_id, after, before);
  return true;
}

std::optional<SlotCoordinator::Members> SlotCoordinator::live_members() {
  auto leases = client_.list(kube::kLeases, config_.namespace_, {});
  if (!leases || !leases.value().contains("items") || !leases.value()["items"].is_array()) {
    const std::string why = leases ? "the answer has no items" : leases.error().to_string();
    if (last_error_ != why) {
      last_error_ = why;
      spdlog::warn("replica {}: listing Leases: {}", config_.replica_id, why);
    }
    return std::nullopt;
  }
  const SteadyTime now = clock_.steady();
  Members members{{config_.replica_id}, false};
  std::map<std::string, Observed> seen;
  for (const json& lease : leases.value()["items"]) {
    const std::string name = lease.contains("metadata") ? text_at(lease["metadata"], "name") : "";
    if (name.rfind(kReplicaLeasePrefix, 0) != 0) continue;
    const std::string id = name.substr(std::string_view(kReplicaLeasePrefix).size());
    if (id == config_.replica_id || !validate_replica_id(id)) continue;
    const json spec = lease.contains("spec") ? lease["spec"] : json::object();
    const std::string record = spec.dump();
    const auto known = observed_.find(id);
    Observed observed = known != observed_.end() ? known->second : Observed{record, now, false};
    if (observed.record != record) observed = Observed{record, now, true};
    seen[id] = observed;
    std::int64_t duration_s = 15;
    if (spec.contains("leaseDurationSeconds") && spec["leaseDurationSeconds"].is_number_integer())
      duration_s = std::clamp<std::int64_t>(spec["leaseDurationSeconds"].get<std::int64_t>(), 1, 3600);
    const bool held = text_at(spec, "holderIdentity").rfind(id + "/", 0) == 0;
    if (!held || now >= observed.at + std::chrono::seconds(duration_s)) continue;  // gone
    if (observed.proven)
      members.live.push_back(id);
    else
      members.unsure = true;  // renewing, or a leftover of a replica gone: a renewal or the duration tells
  }
  observed_ = std::move(seen);
  std::sort(members.live.begin(), members.live.end());
  live_count_ = members.live.size();
  return members;
}

void SlotCoordinator::poll() {
  if (!elector_->leading() || lost_) return;  // not a member yet (or no longer)
  const auto members = live_members();
  if (!members) return;
  auto got = client_.get(kConfigMaps, config_.namespace_, kSlotTableName);
  if (!got && !got.error().not_found()) {
    if (last_error_ != got.error().to_string()) {
      last_error_ = got.error().to_string();
      spdlog::warn("replica {}: reading ConfigMap {}: {}", config_.replica_id, kSlotTableName, last_error_);
    }
    return;  // serves on as it did: nothing says otherwise
  }
  last_error_.clear();
  const bool exists = static_cast<bool>(got);
  SlotTable current;
  json object = exists ? got.value()
                       : json{{"apiVersion", "v1"},
                              {"kind", "ConfigMap"},
                              {"metadata", {{"name", kSlotTableName}, {"namespace", config_.namespace_}}}};
  const json data = exists && object.contains("data") ? object["data"] : json::object();
  bool valid = true;
  if (exists) {
    auto parsed = parse_slot_table(data);
    if (parsed) {
      current = std::move(parsed.value());
    } else {
      // Owned by nobody until it is whole again (each replica stops serving
      // it as it reads it); its epoch, if that much can be read, still counts.
      spdlog::error("replica {}: {}; serving no robot until it is written again", config_.replica_id,
                    parsed.error().to_string());
      valid = false;
      current.epoch = readable_epoch(data).value_or(0);
    }
  }
  // Epochs never go back: not below any this replica has seen.
  high_water_ = std::max(high_water_, current.epoch);
  current.epoch = high_water_;
  table_epoch_ = high_water_;
  // Not told: it may still serve slots the table marks for hand-over, so
  // nothing is written.
  if (!serve(valid && reclaimed_ ? served_by(current, config_.replica_id) : ServedSlots(kSlots, 0))) return;
  if (stopping_ || lost_) return;
  if (members->unsure) return;  // who is live is not known yet: decide nothing

  const bool ownerless = std::any_of(current.slots.begin(), current.slots.end(),
                                     [](const SlotEntry& entry) { return entry.owner.empty(); });
  const SteadyTime now = clock_.steady();
  if (!ownerless) {
    ownerless_since_.reset();
  } else if (!ownerless_since_) {
    ownerless_since_ = now;
  }
  const bool take_ownerless =
      members->live.size() == 1 || (ownerless_since_ && now - *ownerless_since_ >= config_.renew_deadline);

  // Slots marked for hand-over in `current` are not served now (above):
  // given once the bridge's own writes to them are in.
  SlotTable wanted = current;
  std::vector<bool> handing(kSlots, false);
  bool any_handing = false;
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    const SlotEntry& entry = current.slots[slot];
    handing[slot] = entry.owner == config_.replica_id && !entry.next.empty();
    any_handing = any_handing || handing[slot];
  }
  if (any_handing && (!config_.drained || config_.drained(handing)))
    wanted = hand_over(wanted, config_.replica_id, now_ms());
  if (!reclaimed_) wanted = reclaim(std::move(wanted), config_.replica_id, now_ms());
  wanted = rebalance(std::move(wanted), members->live, now_ms(), take_ownerless);
  if (exists && valid && wanted == current) {
    ready_ = reclaimed_ = true;
    return;
  }
  if (!serving()) return;  // the Lease ran late meanwhile: write nothing
  object["data"] = slot_table_data(wanted);
  // Conditional on the resourceVersion read (metadata as got).
  auto written = exists ? client_.replace(kConfigMaps, config_.namespace_, kSlotTableName, object)
                        : client_.create(kConfigMaps, config_.namespace_, object);
  if (!written) {
    if (written.error().code != 409)
      spdlog::warn("replica {}: writing ConfigMap {}: {}", config_.replica_id, kSlotTableName,
                   written.error().to_string());
    return;  // another replica wrote first: decided again on the next poll
  }
  reclaimed_ = true;
  ready_ = true;
  high_water_ = std::max(high_water_, wanted.epoch);
  table_epoch_ = high_water_;
  spdlog::debug("replica {}: slot table written, epoch {}", config_.replica_id, wanted.epoch);
  serve(served_by(wanted, config_.replica_id));
}

void SlotCoordinator::after_poll() {
  if (config_.after_poll) {
    std::lock_guard lock(serve_mutex_);  // one call into the bridge at a time
    config_.after_poll();
  }
  const SteadyTime now = clock_.steady();
  {
    std::lock_guard lock(serve_mutex_);
    if (!serving() || served_[0] == 0) return;  // one replica does it: slot 0's
  }
  if (labelled_at_ && now - *labelled_at_ < config_.retry_period * 15) return;
  labelled_at_ = now;
  label_unlabelled();
}

void SlotCoordinator::label_unlabelled() {
  // A page at a time, at most a few hundred writes a run: the table is
  // polled between runs, and a stop ends one between two writes.
  constexpr std::size_t kMaxWritesPerRun = 300;
  std::size_t writes = 0;
  for (const kube::Resource* resource : {&crd::kRobots, &crd::kTasks}) {
    kube::ListOptions options;
    options.label_selector = kUnlabelledSelector;
    options.limit = 500;
    std::size_t labelled = 0;
    do {
      auto listed = client_.list(*resource, config_.namespace_, options);
      if (!listed || !listed.value().contains("items") || !listed.value()["items"].is_array()) {
        if (!listed)
          spdlog::warn("replica {}: listing {} without a slot label: {}", config_.replica_id, resource->plural,
                       listed.error().to_string());
        break;
      }
      for (const json& object : listed.value()["items"]) {
        if (stopping_ || writes >= kMaxWritesPerRun) break;
        const std::string name = crd::string_at(object, {"metadata", "name"});
        const std::string robot = resource == &crd::kRobots ? name : crd::string_at(object, {"spec", "targetRobot"});
        if (name.empty() || robot.empty()) continue;  // a Task not placed yet: the scheduler labels it
        const json patch = {{"metadata",
                             {{"resourceVersion", crd::string_at(object, {"metadata", "resourceVersion"})},
                              {"labels", {{std::string(kSlotLabel), std::to_string(slot_of(robot))}}}}}};
        ++writes;
        if (client_.merge_patch(*resource, config_.namespace_, name, patch)) ++labelled;
      }
      options.continue_token = crd::string_at(listed.value(), {"metadata", "continue"});
    } while (!options.continue_token.empty() && !stopping_ && writes < kMaxWritesPerRun);
    if (labelled > 0)
      spdlog::info("replica {}: labelled {} {} made before slot labels", config_.replica_id, labelled,
                   resource->plural);
  }
}

void SlotCoordinator::leave() {
  stop();
  serve(ServedSlots(kSlots, 0));
  // A few tries: another replica writing at the same moment is no reason to
  // leave the slots to the lease's expiry.
  for (int attempt = 0; attempt < 3 && elector_->leading() && !lost_; ++attempt) {
    const auto members = live_members();
    auto got = client_.get(kConfigMaps, config_.namespace_, kSlotTableName);
    if (!members || !got) break;
    json object = got.value();
    auto parsed = parse_slot_table(object.contains("data") ? object["data"] : json::object());
    if (!parsed) break;
    const SlotTable wanted = give_away(parsed.value(), config_.replica_id, members->live, now_ms());
    if (wanted == parsed.value()) break;  // alone, or owning nothing
    object["data"] = slot_table_data(wanted);
    auto written = client_.replace(kConfigMaps, config_.namespace_, kSlotTableName, object);
    if (written) {
      spdlog::info("replica {}: left; its slots went to {} other replica(s)", config_.replica_id,
                   members->live.size() - 1);
      break;
    }
    if (!written.error().conflict()) break;
  }
  elector_->release();
}

}  // namespace k8s4r::bridge
