#include "dispatch_intake.h"

#include "k8s4r/common/duration.h"
#include "k8s4r/common/identifiers.h"

#include <spdlog/spdlog.h>

#include <array>

namespace k8s4r::agent {

namespace {

// Finds task.metadata.uid by a SAX pass that keeps nothing but the path to
// it, so even a payload nesting far deeper than any message may is read
// without building (and recursing through) its tree.
class TaskUidReader final : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::optional<std::string> uid;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool string(string_t& value) override {
    if (at_uid()) uid = value;
    return true;
  }
  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& value) override {
    if (depth_ <= kPath.size()) keys_[depth_ - 1] = value;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  static constexpr std::array<std::string_view, 3> kPath{"task", "metadata", "uid"};
  bool open(bool object) {
    ++depth_;
    if (depth_ <= kPath.size()) {
      objects_[depth_ - 1] = object;
      keys_[depth_ - 1].clear();
    }
    return true;
  }
  bool close() {
    --depth_;
    return true;
  }
  bool at_uid() const {
    if (depth_ != kPath.size()) return false;
    for (std::size_t i = 0; i < kPath.size(); ++i) {
      if (!objects_[i] || keys_[i] != kPath[i]) return false;
    }
    return true;
  }
  std::size_t depth_ = 0;
  std::array<bool, 3> objects_{};
  std::array<std::string, 3> keys_;
};

}  // namespace

std::optional<std::string> readable_task_uid(const std::string& payload) {
  if (payload.size() > kMaxPayloadBytes) return std::nullopt;
  TaskUidReader reader;
  if (!nlohmann::json::sax_parse(payload, &reader) || !reader.uid || !validate_identifier(*reader.uid)) {
    return std::nullopt;
  }
  return reader.uid;
}

void DispatchIntake::on_dispatch(const std::string& payload) {
  auto parsed = parse_dispatch(payload);
  if (!parsed) {
    const Error& error = parsed.error();
    const std::string why = error.field.empty() ? error.message : error.field + ": " + error.message;
    spdlog::warn("refused a dispatch: {}", why);
    const auto uid = readable_task_uid(payload);
    if (!uid || tasks_.count(*uid) || store_.find(*uid)) return;  // a task we hold keeps its state
    lifecycle_.refuse_unreadable(*uid, why);
    return;
  }
  const Dispatch& dispatch = parsed.value();
  const std::string& uid = dispatch.task.metadata.uid;
  if (dispatch.epoch) {
    // Fencing (docs/bridge.md#replicas): a replica that lost this robot's
    // slot, and does not know it yet, cannot act on it. Nothing is reported:
    // the Task is its new owner's to send.
    if (*dispatch.epoch < store_.epoch()) {
      spdlog::warn(
          "refused a {} of task {}: epoch {} is below {}, from a bridge replica that no longer serves this "
          "robot",
          to_string(dispatch.action), uid, *dispatch.epoch, store_.epoch());
      return;
    }
    raise_epoch(*dispatch.epoch, "a dispatch");
  }
  // Taken once this call returns (the loop builds no heartbeat meanwhile):
  // its task is held, answered or refused with a report.
  if (dispatch.timestamp && (!newest_dispatch_ || *dispatch.timestamp > *newest_dispatch_))
    newest_dispatch_ = dispatch.timestamp;
  // The bridge holds a report of this robot's with this seq: whatever the
  // agent says next, of this task or any other, is drawn above it (a state
  // restored from an older copy has a lower counter, and its reports would be
  // dropped as stale).
  if (dispatch.reported_seq) store_.raise_last_seq(*dispatch.reported_seq);
  auto known = tasks_.find(uid);
  if (known == tasks_.end() && retention_.recall(uid)) known = tasks_.find(uid);

  if (dispatch.action == DispatchAction::remove) {
    if (known == tasks_.end()) {
      // Remembered (for the finished-task retention), so the create this
      // delete overtook never runs when it comes.
      spdlog::info("delete for task {}, which this robot does not have: recorded as cancelled before it arrived", uid);
      lifecycle_.cancel_unarrived(uid);
      return;
    }
    if (!known->second.active()) {
      lifecycle_.report_again(known->second);
      retention_.prune();  // a task recalled from the store goes back to it
      return;
    }
    spdlog::info("task {}: cancelled", uid);
    lifecycle_.stop(known->second, StopReason::cancelled);
    return;
  }

  if (known != tasks_.end()) {
    // QoS 1 redelivery or a resend: never a second process.
    spdlog::info("task {}: dispatched again; re-reporting its state", uid);
    lifecycle_.report_again(known->second);
    retention_.prune();  // a task recalled from the store goes back to it
    return;
  }
  if (dispatch.reported_seq) {
    // This robot reported on it (the bridge says) and has no record of it:
    // its state was lost. Whatever became of the run, it is not run again.
    lifecycle_.state_lost(uid, *dispatch.reported_seq);
    return;
  }
  lifecycle_.create(dispatch);
}

void DispatchIntake::note_epoch(std::optional<std::int64_t> epoch) {
  if (epoch) raise_epoch(*epoch, "an Ack");
}

void DispatchIntake::raise_epoch(std::int64_t epoch, const char* from) {
  if (epoch <= store_.epoch()) return;
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_.wall().time_since_epoch()).count();
  const auto lead_ms = std::chrono::duration_cast<std::chrono::milliseconds>(kMaxEpochLead).count();
  if (epoch - now_ms > lead_ms) {
    // Once a minute at most, as a flood of them may come.
    if (!epoch_warned_at_ || clock_.steady() - *epoch_warned_at_ >= std::chrono::minutes(1)) {
      spdlog::warn(
          "not keeping epoch {} from {}: it is more than {} ahead of this robot's clock (epochs are a bridge "
          "replica's clock in ms); a forgery on a broker without per-robot ACLs, or this robot's clock is far "
          "behind (is it set?)",
          epoch, from, format_go_duration(kMaxEpochLead));
      epoch_warned_at_ = clock_.steady();
    }
    return;
  }
  store_.raise_epoch(epoch);
}

}  // namespace k8s4r::agent
