#include "k8s4r/kube/bearer_token.h"

#include <cctype>
#include <fstream>
#include <sstream>

namespace k8s4r::kube {

std::string read_token_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
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
    if (std::string fresh = read_token_file(file_); !fresh.empty()) token_ = std::move(fresh);
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
