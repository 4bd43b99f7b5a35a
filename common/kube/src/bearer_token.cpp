#include "k8s4r/kube/bearer_token.h"

#include <cctype>
#include <fstream>
#include <sstream>

namespace k8s4r::kube {

Result<std::string> read_token_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{what, "cannot read " + path};
  std::ostringstream content;
  content << in.rdbuf();
  std::string token = content.str();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  return token;
}

BearerToken::BearerToken(std::string token, std::string file, Clock::duration period, Now now)
    : token_(std::move(token)), file_(std::move(file)), period_(period), now_(std::move(now)), read_at_(now_()) {}

std::string BearerToken::current() {
  std::lock_guard lock(mutex_);
  if (file_.empty()) return token_;
  const Clock::time_point now = now_();
  if (stale_ || now - read_at_ >= period_) {
    if (auto fresh = read_token_file(file_, "tokenFile"); fresh && !fresh.value().empty()) token_ = fresh.value();
    read_at_ = now;
    stale_ = false;
  }
  return token_;
}

void BearerToken::rejected() {
  std::lock_guard lock(mutex_);
  stale_ = true;
}

}  // namespace k8s4r::kube
