#include "k8s4r/agent/artifacts.h"

#include "k8s4r/testing/temp_dir.h"

#include <gtest/gtest.h>

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace k8s4r::agent {
namespace {

namespace fs = std::filesystem;

Artifact artifact(std::string source, std::string dest = "", std::optional<std::string> mode = std::nullopt) {
  Artifact a;
  a.getter_source = std::move(source);
  a.relative_dest = std::move(dest);
  a.getter_mode = std::move(mode);
  return a;
}

TEST(ArtifactDestination, IsADirectoryUnlessModeIsFile) {
  EXPECT_EQ(artifact_destination(artifact("https://h/x/tool.sh?v=2", "local/"), "/w/t").value(), "/w/t/local/tool.sh");
  EXPECT_EQ(artifact_destination(artifact("https://h/tool.sh"), "/w/t").value(), "/w/t/tool.sh");
  EXPECT_EQ(artifact_destination(artifact("https://h/tool.sh", "bin/run", "file"), "/w/t").value(), "/w/t/bin/run");
}

TEST(ArtifactDestination, RefusesPathsOutOfTheTaskDirectory) {
  for (const auto& bad : {artifact("https://h/a", "../other"), artifact("https://h/a", "/etc/cron.d", "file"),
                          artifact("https://h/a", "x/../../../etc/passwd", "file"), artifact("https://h/..", "")}) {
    EXPECT_FALSE(artifact_destination(bad, "/w/t")) << bad.relative_dest;
  }
}

class FetchArtifact : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(source_) << "hello\n";
    fs::create_directories(task_);
  }
  testing::TempDir dir_;
  fs::path source_ = dir_ / "hello.txt";
  fs::path task_ = dir_ / "task";
  // sha256 of "hello\n"
  std::string sha256_ = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";
};

TEST_F(FetchArtifact, VerifiesTheChecksumBeforeMovingIntoPlace) {
  Artifact good = artifact("file://" + source_.string(), "local/");
  good.getter_options["checksum"] = "sha256:" + sha256_;
  ASSERT_TRUE(fetch_artifact(good, task_.string()));
  std::ifstream in(task_ / "local" / "hello.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "hello\n");

  Artifact bad = artifact("file://" + source_.string(), "other/");
  bad.getter_options["checksum"] = "sha256:" + std::string(64, '0');
  auto failed = fetch_artifact(bad, task_.string());
  ASSERT_FALSE(failed);
  EXPECT_NE(failed.error().message.find("checksum mismatch"), std::string::npos);
  EXPECT_FALSE(fs::exists(task_ / "other" / "hello.txt"));
  EXPECT_FALSE(fs::exists(task_ / "other" / "hello.txt.part"));
}

TEST_F(FetchArtifact, NamesTheCauseOfAFailure) {
  auto missing = fetch_artifact(artifact("file://" + (dir_ / "nope").string()), task_.string());
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("nope"), std::string::npos);
  Artifact weird = artifact("file://" + source_.string());
  weird.getter_options["checksum"] = "crc32:1234";
  EXPECT_NE(fetch_artifact(weird, task_.string()).error().message.find("sha256:HEX"), std::string::npos);
  EXPECT_FALSE(fetch_artifact(artifact("ftp://h/x.bin"), task_.string()));
}

TEST_F(FetchArtifact, AFileUrlOfATaskRunAsAnotherUserIsReadWithThatUsersPermissions) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to read as another user";
  const passwd* nobody = ::getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  const ReadAs as{nobody->pw_uid, nobody->pw_gid};
  fs::permissions(dir_.path(), fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  fs::permissions(source_, fs::perms::owner_read | fs::perms::owner_write | fs::perms::others_read);

  Artifact readable = artifact("file://localhost" + source_.string(), "conf/a.txt", "file");
  readable.getter_options["checksum"] = "sha256:" + sha256_;
  ASSERT_TRUE(fetch_artifact(readable, task_.string(), nullptr, as));
  std::ifstream in(task_ / "conf" / "a.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "hello\n");

  fs::permissions(source_, fs::perms::owner_read | fs::perms::owner_write);  // root's alone
  auto refused =
      fetch_artifact(artifact("file://" + source_.string(), "conf/b.txt", "file"), task_.string(), nullptr, as);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("not readable by the task's user"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("Permission denied"), std::string::npos) << refused.error().message;
  EXPECT_FALSE(fs::exists(task_ / "conf" / "b.txt"));
  EXPECT_FALSE(fs::exists(task_ / "conf" / "b.txt.part"));
  // The agent's own tasks read with the agent's permissions.
  EXPECT_TRUE(fetch_artifact(artifact("file://" + source_.string(), "conf/c.txt", "file"), task_.string()));
}

}  // namespace
}  // namespace k8s4r::agent

namespace k8s4r::agent {
namespace {

// The worker's state of each artifact wanted ahead of need, polled until it
// is not Downloading (a real thread and a real connection attempt), with a
// deadline.
std::vector<PrefetchState> settled(const ArtifactWorker& worker) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    const auto summary = worker.summary(kMaxArtifactsListed);
    // Not taken yet, or still fetching: look again.
    const bool busy = !summary || summary->prefetch.empty() ||
                      std::any_of(summary->prefetch.begin(), summary->prefetch.end(),
                                  [](const PrefetchState& state) { return state.state == "Downloading"; });
    if (!busy) return summary->prefetch;
    if (std::chrono::steady_clock::now() > deadline) return summary ? summary->prefetch : std::vector<PrefetchState>{};
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

TEST(Prefetch, WhatCannotBeKeptIsFailedWithWhyAndAStoreLessRobotSaysSo) {
  testing::TempDir dir;
  const std::string checksum = "sha256:" + std::string(64, 'c');
  ArtifactWorker worker(std::make_unique<ArtifactStore>((dir / "artifacts").string(), 1000),
                        (dir / "prefetch").string());
  worker.prefetch({{"http://127.0.0.1:9/refused.bin", checksum, std::nullopt},
                   {"https://models.example/huge.bin", "sha256:" + std::string(64, 'd'), 5000}});
  const auto states = settled(worker);
  ASSERT_EQ(states.size(), 2u);
  EXPECT_EQ(states[0].state, "Failed");
  EXPECT_EQ(states[0].reason, "DownloadFailed");
  EXPECT_NE(states[0].message.find("127.0.0.1"), std::string::npos) << states[0].message;
  EXPECT_EQ(states[1].reason, "NoRoom");  // known too big: not fetched at all
  EXPECT_EQ(states[1].message, "5000 bytes do not fit in a store of 1000 (artifact-store-bytes)");
  // The fingerprint covers the states: what changed is listed again.
  const auto before = worker.summary(kMaxArtifactsListed)->fingerprint;
  worker.prefetch({});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!worker.summary(kMaxArtifactsListed)->prefetch.empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(worker.summary(kMaxArtifactsListed)->prefetch.empty());
  EXPECT_NE(worker.summary(kMaxArtifactsListed)->fingerprint, before);

  ArtifactWorker storeless;
  EXPECT_FALSE(storeless.summary(kMaxArtifactsListed));  // nothing to say
  storeless.prefetch({{"https://models.example/nav.bin", checksum, std::nullopt}});
  const auto told = settled(storeless);
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].reason, "NoStore");
}

}  // namespace
}  // namespace k8s4r::agent
