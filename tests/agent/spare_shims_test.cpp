// Spare task shims (spare_shims.h) with the real k8s4r-task-shim: a spare
// that loses its agent leaves, one killed while it waited is replaced, a
// malformed handoff runs nothing, and the handoff's encoding itself.
#include "k8s4r/agent/spare_shims.h"

#include "k8s4r/agent/process.h"
#include "k8s4r/shim/protocol.h"

#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace k8s4r::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class SpareShimsTest : public ::testing::Test {
 protected:
  SpareShimsTest() {
    dir_ = fs::temp_directory_path() / ("k8s4r-spare-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  ~SpareShimsTest() override { fs::remove_all(dir_); }

  ProcessSpec shell(const std::string& script) {
    ProcessSpec spec;
    spec.command = "/bin/sh";
    spec.args = {"-c", script};
    spec.env = {{"PATH", "/usr/bin:/bin"}, {"GREETING", "hello from the environment"}};
    spec.working_dir = dir_.string();
    spec.stdout_path = (dir_ / "stdout").string();
    spec.stderr_path = (dir_ / "stderr").string();
    return spec;
  }
  ShimSpec shim(SpareShims* spares = nullptr) {
    return ShimSpec{K8S4R_TASK_SHIM, (dir_ / "exit").string(), "", spares};
  }

  fs::path dir_;
};

// The exit status of a spare (our child) once it ends, or -1 after `limit`.
int exit_code_within(const SpareShim& spare, std::chrono::milliseconds limit) {
  pollfd ended{spare.pidfd, POLLIN, 0};
  if (poll(&ended, 1, static_cast<int>(limit.count())) != 1) return -1;
  siginfo_t info{};
  waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(spare.pidfd), &info, WEXITED);
  return info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status;
}

std::string read_report(int channel) {
  std::string text;
  char buffer[256];
  for (ssize_t got; (got = read(channel, buffer, sizeof buffer)) > 0;)
    text.append(buffer, static_cast<std::size_t>(got));
  return text;
}

std::string contents(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

// The children of this process named k8s4r-task-shim (zombies too, when asked).
std::vector<pid_t> our_shims(bool zombies = false) {
  std::vector<pid_t> pids;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos || line.find("(k8s4r-task-shim)") == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string state;
    pid_t parent = 0;
    rest >> state >> parent;
    if (parent == ::getpid() && (zombies || state != "Z")) pids.push_back(std::stoi(name));
  }
  return pids;
}

TEST_F(SpareShimsTest, ASpareWhoseAgentGoesAwayLeavesQuietlyAndRunsNothing) {
  auto spare = start_spare_shim(K8S4R_TASK_SHIM);
  ASSERT_TRUE(spare) << spare.error().message;
  ::close(spare.value().channel);  // what the kernel does when the agent dies
  EXPECT_EQ(exit_code_within(spare.value(), 5s), 0);
  ::close(spare.value().pidfd);
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(SpareShimsTest, ATaskStartsInAReadySpareWithItsEnvironmentDirectoryAndOutput) {
  SpareShims spares(K8S4R_TASK_SHIM);
  ASSERT_TRUE(spares.prepare());
  const std::vector<pid_t> ready = our_shims();
  ASSERT_EQ(ready.size(), 1u);
  int pidfd = -1;
  auto started = spawn_task(shell("echo \"$GREETING in $(pwd)\"; echo oops >&2; exit 3"), shim(&spares), pidfd);
  ASSERT_TRUE(started) << started.error().message;
  EXPECT_EQ(started.value().pid, ready.front());  // the ready one took it
  siginfo_t info{};
  waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED);
  ::close(pidfd);
  EXPECT_EQ(contents(dir_ / "stdout"), "hello from the environment in " + dir_.string() + "\n");
  EXPECT_EQ(contents(dir_ / "stderr"), "oops\n");
  auto record = shim::parse_exit_record(contents(dir_ / "exit"));
  ASSERT_TRUE(record) << record.error().to_string();
  EXPECT_EQ(record.value().exit_code, 3);
}

bool is_zombie(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  return close != std::string::npos && line.substr(close + 2, 1) == "Z";
}

// Killed and seen dead before the task came, and killed just as it comes
// (then the handoff may reach a spare that dies with it unread).
TEST_F(SpareShimsTest, ASpareKilledWhileItWaitedIsReplacedAndTheTaskStillStarts) {
  for (const bool seen_dead : {true, false}) {
    SpareShims spares(K8S4R_TASK_SHIM);
    ASSERT_TRUE(spares.prepare());
    const std::vector<pid_t> ready = our_shims();
    ASSERT_EQ(ready.size(), 1u);
    ASSERT_EQ(::kill(ready.front(), SIGKILL), 0);
    for (int i = 0; seen_dead && i < 500 && !is_zombie(ready.front()); ++i) std::this_thread::sleep_for(10ms);
    int pidfd = -1;
    fs::remove(dir_ / "stdout");
    auto started = spawn_task(shell("echo ran once"), shim(&spares), pidfd);
    ASSERT_TRUE(started) << (seen_dead ? "seen dead: " : "just killed: ") << started.error().message;
    EXPECT_NE(started.value().pid, ready.front());
    siginfo_t info{};
    waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED);
    ::close(pidfd);
    EXPECT_EQ(contents(dir_ / "stdout"), "ran once\n");
    EXPECT_TRUE(our_shims(true).empty()) << "the killed spare was not reaped";
  }
}

TEST_F(SpareShimsTest, AMalformedHandoffIsRefusedAndRunsNothing) {
  const std::string marker = (dir_ / "ran").string();
  shim::TaskHandoff good{{"--exit-file", (dir_ / "exit").string(), "--", "/bin/touch", marker}, {"PATH=/bin"}};
  const std::string whole = shim::format_task_handoff(good);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"an oversized length", std::string("\xff\xff\xff\xff", 4)},
      {"a cut-short handoff", whole.substr(0, whole.size() - 3)},
      {"no command", shim::format_task_handoff({{"--exit-file", (dir_ / "exit").string()}, {}})},
      {"a descriptor of its own",
       shim::format_task_handoff(
           {{"--exit-file", (dir_ / "exit").string(), "--report-fd", "1", "--", "/bin/touch", marker}, {}})},
      {"an environment entry without '='", shim::format_task_handoff({good.args, {"JUSTANAME"}})},
  };
  for (const auto& [what, bytes] : cases) {
    auto spare = start_spare_shim(K8S4R_TASK_SHIM);
    ASSERT_TRUE(spare) << spare.error().message;
    ASSERT_EQ(send(spare.value().channel, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
    shutdown(spare.value().channel, SHUT_WR);
    auto report = shim::parse_start_report(read_report(spare.value().channel));
    ASSERT_TRUE(report) << what << ": " << report.error().to_string();
    EXPECT_EQ(report.value().step, "handoff") << what;
    EXPECT_EQ(exit_code_within(spare.value(), 5s), 1) << what;
    ::close(spare.value().channel);
    ::close(spare.value().pidfd);
    EXPECT_FALSE(fs::exists(marker)) << what << " ran the command";
    EXPECT_FALSE(fs::exists(dir_ / "exit")) << what;
  }
}

// A task that replaced its log with a link (to /etc/shadow, say) must not
// get root, which opens the logs, to write through it on its restart.
TEST_F(SpareShimsTest, AnOutputFileThatIsALinkIsRefused) {
  const fs::path target = dir_ / "precious";
  std::ofstream(target) << "keep me\n";
  fs::create_symlink(target, dir_ / "stdout");
  ProcessSpec spec = shell("echo overwritten");
  spec.append_output = true;
  int pidfd = -1;
  auto started = spawn_task(spec, shim(), pidfd);
  ASSERT_FALSE(started);
  EXPECT_NE(started.error().message.find("stdout"), std::string::npos) << started.error().message;
  EXPECT_EQ(contents(target), "keep me\n");
  EXPECT_FALSE(fs::exists(dir_ / "exit"));
}

// A command without a '/' is looked up in the task's PATH, not the shim's
// (a spare's environment is the agent's PATH alone); a file without a binary
// format runs under /bin/sh, as execvp does.
TEST_F(SpareShimsTest, ACommandIsFoundInTheTasksOwnPath) {
  const fs::path bin = dir_ / "bin";
  fs::create_directories(bin);
  std::ofstream(bin / "greet") << "#!/bin/sh\necho \"greetings, $1\"\n";
  std::ofstream(bin / "plain") << "echo \"no interpreter line\"\n";
  for (const char* name : {"greet", "plain"}) {
    fs::permissions(bin / name, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
  }
  for (const auto& [command, expected] :
       {std::pair{"greet", "greetings, robot\n"}, std::pair{"plain", "no interpreter line\n"}}) {
    ProcessSpec spec = shell("");
    spec.command = command;
    spec.args = {"robot"};
    spec.env["PATH"] = "/nowhere:" + bin.string() + ":/usr/bin:/bin";
    int pidfd = -1;
    auto started = spawn_task(spec, shim(), pidfd);
    ASSERT_TRUE(started) << command << ": " << started.error().message;
    siginfo_t info{};
    waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED);
    ::close(pidfd);
    EXPECT_EQ(contents(dir_ / "stdout"), expected) << command;
  }
  ProcessSpec missing = shell("");
  missing.command = "greet";
  missing.env["PATH"] = "/usr/bin:/bin";  // not where greet is
  int pidfd = -1;
  auto refused = spawn_task(missing, shim(), pidfd);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("No such file or directory"), std::string::npos) << refused.error().message;
}

// Nor a FIFO (which would hold the shim until the agent gives up) nor a hard
// link to another file at a log's name: the task does not start, at once.
TEST_F(SpareShimsTest, ALogThatIsAFifoOrAHardLinkIsRefused) {
  ProcessSpec spec = shell("echo written");
  spec.append_output = true;
  ASSERT_EQ(::mkfifo((dir_ / "stdout").c_str(), 0600), 0);
  int pidfd = -1;
  const auto before = std::chrono::steady_clock::now();
  auto fifo = spawn_task(spec, shim(), pidfd);
  ASSERT_FALSE(fifo);
  EXPECT_LT(std::chrono::steady_clock::now() - before, 5s);
  // (With no reader, opening a FIFO to write fails at once, ENXIO; with one, it is no plain file.)
  EXPECT_NE(fifo.error().message.find("stdout"), std::string::npos) << fifo.error().message;
  fs::remove(dir_ / "stdout");
  const fs::path other = dir_ / "other";
  std::ofstream(other) << "keep\n";
  fs::create_hard_link(other, dir_ / "stdout");
  auto linked = spawn_task(spec, shim(), pidfd);
  ASSERT_FALSE(linked);
  EXPECT_NE(linked.error().message.find("stdout is not a plain file"), std::string::npos) << linked.error().message;
  EXPECT_EQ(contents(other), "keep\n");
}

TEST(TaskHandoff, RoundTripsAndRefusesWhatIsNotOne) {
  const shim::TaskHandoff handoff{{"--exit-file", "/x", "--", "echo", "", "two words"}, {"A=1", "B=", "C=x=y"}};
  const std::string bytes = shim::format_task_handoff(handoff);
  auto parsed = shim::parse_task_handoff(bytes);
  ASSERT_TRUE(parsed) << parsed.error().to_string();
  EXPECT_EQ(parsed.value().args, handoff.args);
  EXPECT_EQ(parsed.value().env, handoff.env);
  EXPECT_TRUE(shim::parse_task_handoff(shim::format_task_handoff({})));  // no arguments: refused by the shim, later
  EXPECT_FALSE(shim::parse_task_handoff(bytes + "x"));                   // bytes after it
  EXPECT_FALSE(shim::parse_task_handoff(bytes.substr(0, bytes.size() - 1)));
  EXPECT_FALSE(shim::parse_task_handoff(std::string("\x01\0\0\0x\0\0\0\0", 9)));  // a block not ending in NUL
  EXPECT_FALSE(shim::parse_handoff_length(std::string("\x01\0\0\x01", 4)));       // 16 MiB + 1
  EXPECT_EQ(shim::parse_handoff_length(std::string("\0\0\0\x01", 4)).value(), 16u << 20);
}

}  // namespace
}  // namespace k8s4r::agent

namespace k8s4r::agent {
namespace {

// The agent's contact file as ContactLease writes it: CLOCK_MONOTONIC now,
// or `shift` from now.
void write_contact(const fs::path& file, std::chrono::milliseconds shift = std::chrono::milliseconds(0)) {
  const long long ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           (std::chrono::steady_clock::now() + shift).time_since_epoch())
                           .count();
  char text[32];
  std::snprintf(text, sizeof text, "%020lld\n", ns);
  std::ofstream(file) << text;
}

bool ended_within(int pidfd, std::chrono::milliseconds limit) {
  pollfd ended{pidfd, POLLIN, 0};
  return poll(&ended, 1, static_cast<int>(limit.count())) == 1;
}

TEST_F(SpareShimsTest, ATaskIsStoppedByItsShimOnceTheBridgeWasNotHeardFromForItsWindowAgentOrNot) {
  for (const bool ignores_sigterm : {false, true}) {
    const fs::path contact = dir_ / "contact";
    write_contact(contact);
    ShimSpec spec = shim();
    spec.contact_file = contact.string();
    // A window well above a stall of a loaded 2-core machine (an ASan build
    // beside other builds stalled a 600 ms window's renewals past it).
    spec.stop_after = 1500ms;
    spec.kill_after = 300ms;
    int pidfd = -1;
    auto started = spawn_task(shell(ignores_sigterm ? "trap '' TERM; sleep 30" : "sleep 30"), spec, pidfd);
    ASSERT_TRUE(started) << started.error().message;
    // Heard from every 100 ms for twice its window: it runs on.
    const auto renewed_until = std::chrono::steady_clock::now() + 3000ms;
    while (std::chrono::steady_clock::now() < renewed_until) {
      write_contact(contact);
      ASSERT_FALSE(ended_within(pidfd, 100ms)) << "stopped although the bridge was heard from";
    }
    // Then nothing more, and nobody to stop it but its shim.
    ASSERT_TRUE(ended_within(pidfd, 5000ms)) << "still running 5 s after contact stopped";
    siginfo_t info{};
    waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED);
    ::close(pidfd);
    auto record = shim::parse_exit_record(contents(dir_ / "exit"));
    ASSERT_TRUE(record) << record.error().to_string();
    EXPECT_TRUE(record.value().disconnected);
    EXPECT_EQ(record.value().signal, ignores_sigterm ? SIGKILL : SIGTERM);
  }
}

TEST_F(SpareShimsTest, TheWindowCountsFromTheLastContactNotFromTheStartUnlessTheContactIsAhead) {
  // The manager counts from the robot's last heartbeat: a run that starts
  // late in a silence stops when the others do.
  const fs::path contact = dir_ / "contact";
  ShimSpec spec = shim();
  spec.contact_file = contact.string();
  spec.stop_after = 3000ms;
  spec.kill_after = 300ms;
  write_contact(contact, -2800ms);
  int pidfd = -1;
  auto started = spawn_task(shell("sleep 30"), spec, pidfd);
  ASSERT_TRUE(started) << started.error().message;
  EXPECT_TRUE(ended_within(pidfd, 2000ms)) << "ran on for its whole window after an old contact";
  ::close(pidfd);
  // A time ahead of now (a file from before a reboot) says nothing: from the start.
  write_contact(contact, 3600000ms);
  started = spawn_task(shell("sleep 30"), spec, pidfd);
  ASSERT_TRUE(started) << started.error().message;
  EXPECT_FALSE(ended_within(pidfd, 2000ms)) << "stopped before its window from the start";
  EXPECT_TRUE(ended_within(pidfd, 5000ms)) << "never stopped: a contact ahead of now was taken";
  ::close(pidfd);
}

}  // namespace
}  // namespace k8s4r::agent
