// WORK_DIR/contact: when the agent last heard from the bridge, as the
// CLOCK_MONOTONIC time in nanoseconds (20 digits and a newline), which every
// task's shim reads once a second to stop its task once its robot has been
// cut off longer than the task's disconnect.stopOnRobotAfter (shim.h). The
// file outlives the agent: a killed, hung or stopped agent stops renewing it,
// and its tasks stop all the same; a restarted one renews it only once it
// hears from the bridge again.
//
// Heard means an Ack, a dispatch or a register response from the bridge;
// with legacy-topics (a Go K8s4r server, which sends no Ack) a heartbeat the
// broker acknowledged.
//
// Threading: the agent's loop thread only.
#pragma once

#include "k8s4r/common/clock.h"

#include <string>

namespace k8s4r::agent {

std::string contact_file(const std::string& work_dir);

class ContactLease {
 public:
  ContactLease(const std::string& work_dir, const Clock& clock);
  ~ContactLease();
  ContactLease(const ContactLease&) = delete;
  ContactLease& operator=(const ContactLease&) = delete;

  // The bridge was heard from: written now, unless it was less than a second ago.
  void heard();

 private:
  std::string path_;
  const Clock& clock_;
  int fd_ = -1;
  SteadyTime written_{};
  bool warned_ = false;
};

}  // namespace k8s4r::agent
