#include "k8s4r/agent/process.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

namespace k8s4r::agent {
namespace {

TEST(ProcessIdentityTest, RecognisesTheSameProcessAndNotAReusedPid) {
  const auto start = process_start_time(::getpid());
  ASSERT_TRUE(start);
  EXPECT_TRUE(same_process_running(::getpid(), *start));
  EXPECT_FALSE(same_process_running(::getpid(), *start + 1));  // a pid reused by another process
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  EXPECT_FALSE(process_start_time(child));  // gone
  EXPECT_FALSE(same_process_running(child, 0));
}

}  // namespace
}  // namespace k8s4r::agent
