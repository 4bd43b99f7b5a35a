// The robot-login lines (common/login_records.h) as the broker plugin and the
// bridge read them: a batch from the control topic, an answer, a state file
// record. Any bytes must parse or be refused, never crash, hang or leak; what
// parses must format back to bytes that parse to the same value; and the
// plugin's table, given any batch that parses, keeps its slots true (every
// login where slot_of puts it) and its count right.
#include "k8s4r/auth/login_table.h"
#include "k8s4r/common/login_records.h"
#include "k8s4r/common/slots.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

using namespace k8s4r;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto batch = logins::parse_batch(text)) {
    auto again = logins::parse_batch(logins::format_batch(batch.value()));
    if (!again || !(again.value() == batch.value())) std::abort();
    auth::LoginTable table;
    const auth::Applied applied = table.apply(batch.value());
    std::size_t held = 0;
    for (const auto& section : batch.value().sections)
      for (const auto& change : section.changes) {
        const logins::Digest* found = table.find(change.robot_id);
        if ((found != nullptr) != change.digest.has_value()) std::abort();
        if (found && slot_of(change.robot_id) != section.slot) std::abort();
        if (change.digest) ++held;
      }
    if (table.size() != held || applied.changed != held || !applied.kick.empty()) std::abort();
    auth::LoginTable replayed;
    for (const auto& record : applied.records) replayed.restore(record);
    if (replayed.size() != table.size()) std::abort();
  }
  if (auto response = logins::parse_response(text)) {
    auto again = logins::parse_response(logins::format_response(response.value()));
    if (!again || !(again.value() == response.value())) std::abort();
  }
  if (auto record = logins::parse_state_record(text)) {
    auto again = logins::parse_state_record(logins::format_state_record(record.value()));
    if (!again || !(again.value() == record.value())) std::abort();
  }
  return 0;
}
