// WORK_DIR/contact: when the robot was last in contact with the bridge, as
// the CLOCK_MONOTONIC time in nanoseconds (20 digits and a newline), which every
// task's shim reads once a second to stop its task once its robot has been
// cut off longer than the task's disconnect.stopOnRobotAfter (shim.h). The
// file outlives the agent: a killed, hung or stopped agent stops renewing it,
// and its tasks stop all the same; a restarted one renews it only once the
// bridge answers one of its heartbeats.
//
// In contact as of T means the bridge has the heartbeat the robot sent at T:
// an Ack echoes its timestamp; with legacy-topics (a Go K8s4r server, which
// sends no Ack) the broker acknowledged it. A message that merely arrives (a
// dispatch, an Ack of reports) proves nothing: it may have waited in the
// network or the broker for any time, and the bridge may not hear this robot
// at all (a link cut one way).
//
// Threading: the agent's loop thread only.
#pragma once

#include "k8s4r/common/clock.h"

#include <optional>
#include <string>

namespace k8s4r::agent {

std::string contact_file(const std::string& work_dir);

class ContactLease {
 public:
  explicit ContactLease(const std::string& work_dir);
  ~ContactLease();
  ContactLease(const ContactLease&) = delete;
  ContactLease& operator=(const ContactLease&) = delete;

  // In contact as of `sent`: written, unless an as recent time was.
  void heard(SteadyTime sent);
  // The newest contact this agent has had; none since it started.
  std::optional<SteadyTime> last() const { return last_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::optional<SteadyTime> last_;
  bool warned_ = false;
};

}  // namespace k8s4r::agent
