// BearerToken over a real file and a fake clock: re-read once a period and
// after a 401, never left without a token by a file caught mid-rotation.
#include "k8s4r/kube/bearer_token.h"

#include "k8s4r/testing/temp_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace k8s4r::kube {
namespace {

using namespace std::chrono_literals;

class BearerTokenTest : public ::testing::Test {
 protected:
  void rotate(const std::string& token) { std::ofstream(file_) << token; }
  BearerToken make() {
    return BearerToken(read_token_file(file_, "token").value(), file_, 1min, [this] { return now_; });
  }

  k8s4r::testing::TempDir dir_;
  std::string file_ = (dir_ / "token").string();
  BearerToken::Clock::time_point now_{};
};

TEST_F(BearerTokenTest, ReReadOncePerPeriod) {
  rotate("first\n");
  BearerToken token = make();
  EXPECT_EQ(token.current(), "first");
  rotate("second");
  now_ += 59s;
  EXPECT_EQ(token.current(), "first");  // not yet: at most once a minute
  now_ += 1s;
  EXPECT_EQ(token.current(), "second");
}

TEST_F(BearerTokenTest, ReReadAtOnceAfterA401) {
  rotate("first");
  BearerToken token = make();
  rotate("second");
  token.rejected();
  EXPECT_EQ(token.current(), "second");
}

TEST_F(BearerTokenTest, AMissingOrEmptyFileKeepsTheLastToken) {
  rotate("first");
  BearerToken token = make();
  std::filesystem::remove(file_);
  token.rejected();
  EXPECT_EQ(token.current(), "first");
  rotate("  \n");
  now_ += 2min;
  EXPECT_EQ(token.current(), "first");
  rotate("third");
  token.rejected();
  EXPECT_EQ(token.current(), "third");
}

TEST_F(BearerTokenTest, WithoutAFileTheTokenIsFixed) {
  BearerToken token("fixed", "", 1min, [this] { return now_; });
  now_ += 1h;
  token.rejected();
  EXPECT_EQ(token.current(), "fixed");
}

}  // namespace
}  // namespace k8s4r::kube
