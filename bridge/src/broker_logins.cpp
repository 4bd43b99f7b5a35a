// Robot logins in the broker's k8s4r-auth plugin (--login-plugin; the
// plugin is broker-plugin/, the lines common/login_records.h): for each
// robot Secret the bridge serves, its token's digest, and nothing for any
// other robot. Driven by the Secret informer, never polled; the token
// itself never leaves the bridge.
//
// On every connection, and for slots a replica gains, the bridge sends each
// slot whole ("these logins and no others"): the plugin changes only what
// differs, so a restarted bridge disconnects nobody and appends nothing to
// the plugin's file. Then each changed Secret is sent alone, batched for
// 20 ms. A slot is in at most one batch in flight; at most eight batches
// are. A batch not answered within 10 s, refused, or not delivered sends its
// slots whole again after 5 s. Every section carries its slot's epoch: a
// replica's for the slot, a single bridge's start time; the plugin refuses a
// section older than the newest it has seen (a deposed replica). Readiness
// waits until every slot served was answered whole.
//
// Removing or changing a login disconnects the robot at once; the broker
// skips its will, so the plugin publishes its offline presence itself.
#include "k8s4r/bridge/bridge.h"

#include "k8s4r/common/identifiers.h"
#include "k8s4r/common/login_records.h"
#include "k8s4r/crd/resources.h"
#include "k8s4r/crd/robot_secret.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace k8s4r::bridge {

namespace {
constexpr std::chrono::milliseconds kBatchWindow{20};
constexpr std::size_t kMaxBatchesInFlight = 8;
constexpr std::chrono::seconds kAnswerTimeout{10};
constexpr std::chrono::seconds kRetryAfterTrouble{5};
}  // namespace

std::optional<std::uint64_t> Bridge::login_epoch(std::uint32_t slot) const {
  if (!coordinator_) return logins_.epochs[slot];
  if (!coordinator_->serving() || served_[slot] <= 0) return std::nullopt;
  return static_cast<std::uint64_t>(served_[slot]);
}

void Bridge::logins_on_connected() {
  if (!config_.login_plugin || !secrets_) return;
  for (auto& [correlation, batch] : logins_.in_flight) loop_.cancel(batch.timer);
  logins_.in_flight.clear();
  logins_.busy.assign(kSlots, false);
  logins_.changed.clear();
  logins_.whole.clear();
  logins_.robots_of_whole.clear();
  logins_.unsynced.clear();
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    if (!login_epoch(slot)) continue;
    logins_.whole.insert(slot);
    logins_.unsynced.insert(slot);
  }
  logins_synced_ = logins_.unsynced.empty();
  spdlog::info("sending the broker's k8s4r-auth plugin the logins of {} robot Secret(s) in {} slot(s)",
               secrets_->list().size(), logins_.whole.size());
  pump_logins();
}

void Bridge::logins_on_slots_gained(const std::vector<std::uint32_t>& slots) {
  if (!config_.login_plugin || !secrets_ || !mqtt_connected_) return;
  for (const std::uint32_t slot : slots) {
    logins_.whole.insert(slot);
    logins_.unsynced.insert(slot);
  }
  logins_synced_ = logins_.unsynced.empty();
  pump_logins();
}

// A robot id the plugin would refuse (a Secret named for an id with a dot,
// say) would make it refuse the whole batch, every time: left out, and said.
bool Bridge::login_id_usable(const std::string& robot_id) {
  if (robot_id.empty() || robot_id == config_.username) return false;
  if (validate_identifier(robot_id)) return true;
  refuse("robot Secret " + crd::robot_secret_name(robot_id),
         {"InvalidRobotId", "its robot id cannot be a broker login (it must be a DNS-1123 label): no login for it"});
  return false;
}

void Bridge::queue_login(const std::string& robot_id) {
  if (!config_.login_plugin || !login_id_usable(robot_id) || !serves(robot_id)) return;
  logins_.changed.insert(robot_id);
  // A slot waiting to be sent whole was listed before this Secret changed:
  // whole, it must name this robot too (a new Secret would otherwise be
  // sent alone and then removed by the whole slot).
  if (auto listed = logins_.robots_of_whole.find(slot_of(robot_id)); listed != logins_.robots_of_whole.end()) {
    if (std::find(listed->second.begin(), listed->second.end(), robot_id) == listed->second.end())
      listed->second.push_back(robot_id);
  }
  if (logins_.flush_timer) return;
  logins_.flush_timer = loop_.after(kBatchWindow, [this] {
    logins_.flush_timer = 0;
    pump_logins();
  });
}

void Bridge::pump_logins() {
  if (!config_.login_plugin || !secrets_ || stopping_ || !mqtt_connected_) return;
  const auto digest_of = [this](const std::string& robot_id) -> std::optional<logins::Digest> {
    const auto desired = desired_identity(robot_id);
    if (!desired) return std::nullopt;
    auto digest = logins::parse_digest(desired->digest);
    return digest ? std::optional(digest.value()) : std::nullopt;
  };
  // The robots of slots newly to be sent whole, read from the cache in one
  // pass (a list of 100,000 packed Secrets takes a fraction of a second).
  std::set<std::uint32_t> unread;
  for (const std::uint32_t slot : logins_.whole)
    if (!logins_.robots_of_whole.count(slot)) unread.insert(slot);
  if (!unread.empty()) {
    for (const std::uint32_t slot : unread) logins_.robots_of_whole[slot];
    for (const auto& secret : secrets_->list()) {
      std::string robot_id = crd::robot_of_secret(*secret);
      if (!login_id_usable(robot_id)) continue;
      const std::uint32_t slot = slot_of(robot_id);
      if (unread.count(slot)) logins_.robots_of_whole[slot].push_back(std::move(robot_id));
    }
  }
  while (logins_.in_flight.size() < kMaxBatchesInFlight) {
    logins::Batch batch{logins_.prefix + std::to_string(logins_.next++), {}};
    LoginBatch sent;
    std::map<std::uint32_t, std::size_t> section_of;  // this batch's sections by slot
    std::size_t lines = 1;
    for (auto it = logins_.whole.begin(); it != logins_.whole.end();) {
      const std::uint32_t slot = *it;
      const auto epoch = login_epoch(slot);
      if (!epoch) {  // no longer ours
        logins_.unsynced.erase(slot);
        logins_.robots_of_whole.erase(slot);
        it = logins_.whole.erase(it);
        continue;
      }
      if (logins_.busy[slot]) {
        ++it;
        continue;
      }
      logins::Section section{slot, *epoch, true, {}};
      for (const std::string& robot_id : logins_.robots_of_whole[slot])
        if (auto digest = digest_of(robot_id)) section.changes.push_back({robot_id, *digest});
      if (lines + 1 + section.changes.size() > logins::kMaxBatchLines) {
        if (!batch.sections.empty()) break;  // the next batch
        spdlog::error("slot {} holds {} robot logins, more than one batch carries ({}): its logins are not sent", slot,
                      section.changes.size(), logins::kMaxBatchLines - 2);
        logins_.unsynced.erase(slot);  // nothing to wait for: readiness must not hang on it
        logins_.robots_of_whole.erase(slot);
        it = logins_.whole.erase(it);
        continue;
      }
      lines += 1 + section.changes.size();
      section_of[slot] = batch.sections.size();
      batch.sections.push_back(std::move(section));
      sent.slots.push_back(slot);
      sent.whole.push_back(slot);
      logins_.busy[slot] = true;
      logins_.robots_of_whole.erase(slot);
      it = logins_.whole.erase(it);
    }
    for (auto it = logins_.changed.begin(); it != logins_.changed.end() && lines + 2 <= logins::kMaxBatchLines;) {
      const std::string robot_id = *it;
      const std::uint32_t slot = slot_of(robot_id);
      const auto epoch = login_epoch(slot);
      const auto in_batch = section_of.find(slot);
      if (!epoch || (in_batch != section_of.end() && batch.sections[in_batch->second].replace)) {
        it = logins_.changed.erase(it);  // not ours, or sent whole in this batch anyway
        continue;
      }
      if (in_batch == section_of.end() && logins_.busy[slot]) {
        ++it;  // after the batch in flight with this slot is answered
        continue;
      }
      if (in_batch == section_of.end()) {
        section_of[slot] = batch.sections.size();
        batch.sections.push_back(logins::Section{slot, *epoch, false, {}});
        sent.slots.push_back(slot);
        logins_.busy[slot] = true;
        ++lines;
      }
      const auto digest = digest_of(robot_id);
      batch.sections[section_of[slot]].changes.push_back({robot_id, digest});
      if (!digest) sent.removed.push_back(robot_id);
      ++lines;
      it = logins_.changed.erase(it);
    }
    if (batch.sections.empty()) break;
    const std::string correlation = batch.correlation;
    publish(std::string(logins::kControlTopic), logins::format_batch(batch), [this, correlation](bool ok) {
      if (!ok) login_batch_done(correlation, "it was not delivered to the broker");
    });
    sent.timer = loop_.after(kAnswerTimeout, [this, correlation] {
      if (auto found = logins_.in_flight.find(correlation); found != logins_.in_flight.end()) {
        found->second.timer = 0;
        login_batch_done(correlation, "no answer in " + std::to_string(kAnswerTimeout.count()) +
                                          " s: does the broker load the k8s4r-auth plugin, and is user '" +
                                          config_.username + "' among its plugin_opt_bridge_users?");
      }
    });
    logins_.in_flight.emplace(correlation, std::move(sent));
  }
  logins_synced_ = logins_.unsynced.empty();  // slots dropped above count as answered
}

void Bridge::on_login_response(const std::string& payload) {
  if (!config_.login_plugin) return;
  auto response = logins::parse_response(payload);
  if (!response) {
    refuse("a message on " + std::string(logins::kResponseTopic), {"InvalidPayload", response.error().to_string()});
    return;
  }
  const auto found = logins_.in_flight.find(response.value().correlation);
  if (found == logins_.in_flight.end()) return;  // another bridge's, or answered late after a retry
  if (!response.value().error.empty())
    return login_batch_done(found->first, "the plugin refused it: " + response.value().error);
  metrics_.set("k8s4r_bridge_broker_logins", {}, static_cast<double>(response.value().held));
  const LoginBatch& batch = found->second;
  std::set<std::uint32_t> stale;
  for (const logins::Stale& refused : response.value().stale) {
    stale.insert(refused.slot);
    if (coordinator_) {
      // Another replica owns it now; the slot table will say so.
      spdlog::warn("slot {}: the broker holds logins from a newer owner (epoch {}); leaving them to it", refused.slot,
                   refused.held_epoch);
      logins_.unsynced.erase(refused.slot);
      continue;
    }
    // One bridge, and yet a newer epoch: another copy of it ran (or the
    // clock went back). Both send the same Secrets; take over the slot.
    spdlog::warn("slot {}: the broker holds logins under a newer epoch ({}) than this bridge's; sending it whole again",
                 refused.slot, refused.held_epoch);
    logins_.epochs[refused.slot] = refused.held_epoch + 1;
    logins_.whole.insert(refused.slot);
  }
  for (const std::uint32_t slot : batch.whole)
    if (!stale.count(slot)) logins_.unsynced.erase(slot);
  for (const std::string& robot_id : batch.removed) {
    if (stale.count(slot_of(robot_id))) continue;
    spdlog::warn(
        "robot {}: its broker login is removed (no Secret {} for it): the broker disconnected it and refuses "
        "it",
        robot_id, crd::robot_secret_name(robot_id));
  }
  if (!response.value().durable) {
    // Applied, so a revocation holds; but a broker restart would forget it
    // until the bridge is back: sent again until the plugin can save it.
    metrics_.add("k8s4r_bridge_broker_login_batches_total", {{"result", "not_durable"}});
    spdlog::error(
        "the broker's k8s4r-auth plugin applied {} login change(s) but could not save them (a full disk?); "
        "sending those slots whole again in {} s until it can",
        response.value().changed, kRetryAfterTrouble.count());
    send_whole_later(batch.slots);
  } else {
    metrics_.add("k8s4r_bridge_broker_login_batches_total", {{"result", stale.empty() ? "ok" : "stale"}});
  }
  if (response.value().changed > 0)
    spdlog::info("the broker's k8s4r-auth plugin changed {} login(s), disconnected {} robot(s); it holds {}",
                 response.value().changed, response.value().kicked, response.value().held);
  login_batch_done(found->first, "");
}

void Bridge::send_whole_later(const std::vector<std::uint32_t>& slots) {
  loop_.after(kRetryAfterTrouble, [this, slots] {
    if (!mqtt_connected_) return;  // connecting sends everything
    logins_.whole.insert(slots.begin(), slots.end());
    pump_logins();
  });
}

void Bridge::login_batch_done(const std::string& correlation, const std::string& trouble) {
  const auto found = logins_.in_flight.find(correlation);
  if (found == logins_.in_flight.end()) return;
  LoginBatch batch = std::move(found->second);
  logins_.in_flight.erase(found);
  if (batch.timer) loop_.cancel(batch.timer);
  for (const std::uint32_t slot : batch.slots) logins_.busy[slot] = false;
  if (!trouble.empty()) {
    metrics_.add("k8s4r_bridge_broker_login_batches_total", {{"result", "error"}});
    spdlog::error(
        "a batch of robot logins for the broker ({} slot(s)) failed: {}; sending those slots whole again in "
        "{} s",
        batch.slots.size(), trouble, kRetryAfterTrouble.count());
    send_whole_later(batch.slots);
  }
  const bool synced = logins_.unsynced.empty();
  if (synced && !logins_synced_)
    spdlog::info("the broker's k8s4r-auth plugin holds every robot login this bridge serves");
  logins_synced_ = synced;
  pump_logins();
}

}  // namespace k8s4r::bridge
