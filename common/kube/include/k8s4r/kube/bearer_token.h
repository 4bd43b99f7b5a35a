// A bearer token that follows its file, as client-go's BearerTokenFile does.
//
// A ServiceAccount token mounted into a Pod is projected: the kubelet rewrites
// the file before the token expires (an hour by default), and the API server
// refuses an expired one with 401. A daemon that read its token once at start
// would lose the cluster after about an hour; this one re-reads the file at
// most once per period (a minute, client-go's) and before the first request
// after a 401. A file that cannot be read, or is empty, keeps the last token:
// the kubelet writes it atomically, so that is a moment, not a state.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include "k8s4r/common/result.h"

#include <chrono>
#include <functional>
#include <mutex>
#include <string>

namespace k8s4r::kube {

class BearerToken {
 public:
  using Clock = std::chrono::steady_clock;
  using Now = std::function<Clock::time_point()>;

  // `token` as read at start; `file` empty: the token never changes.
  BearerToken(std::string token, std::string file, Clock::duration period = std::chrono::minutes(1),
              Now now = Clock::now);

  // The token to send now.
  std::string current();
  // The server answered 401: read the file again before the next request.
  void rejected();

 private:
  std::mutex mutex_;
  std::string token_;
  const std::string file_;
  const Clock::duration period_;
  const Now now_;
  Clock::time_point read_at_;
  bool stale_ = false;
};

// The file's token: its content without trailing whitespace (the newline
// `kubectl create token > file` leaves). `what` names the setting in the error.
Result<std::string> read_token_file(const std::string& path, const std::string& what);

}  // namespace k8s4r::kube
