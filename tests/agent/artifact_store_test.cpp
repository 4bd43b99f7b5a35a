// The robot's artifact store on real files: what it keeps it gives back
// verified, a corrupt entry is dropped, the least recently used go first and
// never a pinned one, and what a crash left is cleaned at the next start.
#include "k8s4r/agent/artifact_store.h"

#include "k8s4r/testing/temp_dir.h"

#include <openssl/evp.h>

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace k8s4r::agent {
namespace {

namespace fs = std::filesystem;

const std::string kUrl = "https://models.example/v7/model.bin";

void write(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

ContentDigest sha256_of(const std::string& content) {
  unsigned char value[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(content.data(), content.size(), value, &length, EVP_sha256(), nullptr);
  std::string hex;
  char two[3];
  for (unsigned int i = 0; i < length; ++i) {
    std::snprintf(two, sizeof two, "%02x", value[i]);
    hex += two;
  }
  return {"sha256", hex};
}

class StoreTest : public ::testing::Test {
 protected:
  // A verified download, as fetch_artifact leaves it in a task directory.
  fs::path downloaded(const std::string& name, const std::string& content) {
    const fs::path path = dir_ / "task" / name;
    fs::create_directories(path.parent_path());
    write(path, content);
    return path;
  }
  fs::path store_dir() const { return dir_ / "artifacts"; }

  testing::TempDir dir_;
};

TEST(ContentDigest, IsAnAlgorithmAndItsHexDigitsAndNothingThatCouldNameAnotherFile) {
  const std::string hex(64, 'a');
  EXPECT_EQ(parse_content_digest("sha256:" + std::string(64, 'A')).value(), (ContentDigest{"sha256", hex}));
  EXPECT_EQ(parse_content_digest("sha512:" + std::string(128, 'b')).value().entry_name(),
            "sha512-" + std::string(128, 'b'));
  for (const std::string& bad : {"md5:" + hex, "sha256:" + hex.substr(1), "sha256:../../etc/" + hex.substr(9),
                                 "sha256:" + hex.substr(1) + "g", hex, std::string("sha256:")}) {
    EXPECT_FALSE(parse_content_digest(bad)) << bad;
  }
  EXPECT_EQ(parse_content_digest("sha1:abc").error().message,
            "checksum must be sha256:HEX (64 hex digits) or sha512:HEX (128), got 'sha1:abc'");
}

TEST_F(StoreTest, WhatItKeepsItGivesBackAsANewFileOfTheTasks) {
  ArtifactStore store(store_dir().string(), 1 << 20);
  const std::string content = "#!/bin/sh\necho from the store\n";
  const ContentDigest digest = sha256_of(content);
  const fs::path target = dir_ / "next-task" / "tool.sh";
  fs::create_directories(target.parent_path());
  EXPECT_EQ(store.copy_out(digest, kUrl, target.string(), nullptr), StoreUse::miss);
  EXPECT_FALSE(fs::exists(target));

  ASSERT_TRUE(store.keep(digest, downloaded("tool.sh", content).string(), kUrl, {}));
  EXPECT_EQ(store.bytes(), content.size());
  EXPECT_EQ(fs::status(store_dir()).permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(store.copy_out(digest, kUrl, target.string(), nullptr), StoreUse::hit);
  EXPECT_EQ(read(target), content);
  // A copy, not a link: a task that changes its file changes nothing kept.
  EXPECT_EQ(fs::hard_link_count(target), 1u);
  write(target, "changed by the task");
  EXPECT_EQ(read(store_dir() / digest.entry_name()), content);
}

TEST_F(StoreTest, ACorruptEntryIsDroppedAndNothingOfItReachesTheTask) {
  ArtifactStore store(store_dir().string(), 1 << 20);
  const ContentDigest digest = sha256_of("the real content");
  ASSERT_TRUE(store.keep(digest, downloaded("a.bin", "the real content").string(), kUrl, {}));
  write(store_dir() / digest.entry_name(), "bit rot or a tamperer");
  const fs::path target = dir_ / "a.bin.part";
  EXPECT_EQ(store.copy_out(digest, kUrl, target.string(), nullptr), StoreUse::corrupt);
  EXPECT_FALSE(fs::exists(target));
  EXPECT_FALSE(fs::exists(store_dir() / digest.entry_name()));
  EXPECT_TRUE(store.held().empty());
  EXPECT_EQ(store.bytes(), 0u);
}

TEST_F(StoreTest, TheLeastRecentlyUsedGoFirstAndNeverAPinnedOne) {
  ArtifactStore store(store_dir().string(), 3000);
  const std::string a(1000, 'a'), b(1000, 'b'), c(1000, 'c'), d(1000, 'd');
  ASSERT_TRUE(store.keep(sha256_of(a), downloaded("a", a).string(), kUrl, {}));
  ASSERT_TRUE(store.keep(sha256_of(b), downloaded("b", b).string(), kUrl, {}));
  ASSERT_TRUE(store.keep(sha256_of(c), downloaded("c", c).string(), kUrl, {}));
  EXPECT_EQ(store.copy_out(sha256_of(a), kUrl, (dir_ / "a.copy").string(), nullptr), StoreUse::hit);  // a used again
  ASSERT_TRUE(store.keep(sha256_of(d), downloaded("d", d).string(), kUrl, {}));
  EXPECT_EQ(store.held(), (std::vector<ContentDigest>{sha256_of(d), sha256_of(a), sha256_of(c)}));  // b went
  EXPECT_FALSE(fs::exists(store_dir() / sha256_of(b).entry_name()));
  EXPECT_EQ(store.bytes(), 3000u);

  // c is the oldest, but the task being fetched uses it: a goes instead.
  ASSERT_TRUE(store.keep(sha256_of(b), downloaded("b", b).string(), kUrl, {sha256_of(c)}));
  EXPECT_EQ(store.held(), (std::vector<ContentDigest>{sha256_of(b), sha256_of(d), sha256_of(c)}));
  // Larger than the whole store: not kept, and nothing else goes for it.
  EXPECT_FALSE(
      store.keep(sha256_of(std::string(3001, 'e')), downloaded("e", std::string(3001, 'e')).string(), kUrl, {}));
  EXPECT_EQ(store.held().size(), 3u);
}

// Knowing a checksum is not being allowed the content: an entry serves a
// task that names a URL it came from, unless the robot says any URL will do.
TEST_F(StoreTest, AnEntryServesOnlyATaskNamingAUrlItCameFromUnlessAnyUrlWillDo) {
  const std::string content = "weights a presigned URL guards";
  const ContentDigest digest = sha256_of(content);
  const std::string mirror = "https://mirror.example/model.bin";
  {
    ArtifactStore store(store_dir().string(), 1 << 20);
    ASSERT_TRUE(store.keep(digest, downloaded("m", content).string(), kUrl, {}));
    EXPECT_EQ(store.copy_out(digest, "http://invalid./guess", (dir_ / "out").string(), nullptr), StoreUse::miss);
    EXPECT_FALSE(fs::exists(dir_ / "out"));
    // Fetched from the mirror too (a download, verified): now served from either.
    ASSERT_TRUE(store.keep(digest, downloaded("m", content).string(), mirror, {}));
    EXPECT_EQ(store.copy_out(digest, mirror, (dir_ / "out").string(), nullptr), StoreUse::hit);
    EXPECT_EQ(store.copy_out(digest, kUrl, (dir_ / "out").string(), nullptr), StoreUse::hit);
  }
  ArtifactStore again(store_dir().string(), 1 << 20);  // the sources survive a restart
  EXPECT_EQ(again.copy_out(digest, mirror, (dir_ / "out").string(), nullptr), StoreUse::hit);
  EXPECT_EQ(again.copy_out(digest, "http://invalid./guess", (dir_ / "out").string(), nullptr), StoreUse::miss);
  ArtifactStore any(store_dir().string(), 1 << 20, ArtifactStore::Match::checksum);
  EXPECT_EQ(any.copy_out(digest, "http://invalid./guess", (dir_ / "out").string(), nullptr), StoreUse::hit);
}

TEST_F(StoreTest, WhatDoesNotFitBesideThePinnedIsNotKeptAndTheQuotaHolds) {
  ArtifactStore store(store_dir().string(), 2500);
  const std::string a(1000, 'a'), b(1000, 'b'), c(1000, 'c');
  ASSERT_TRUE(store.keep(sha256_of(a), downloaded("a", a).string(), kUrl, {}));
  ASSERT_TRUE(store.keep(sha256_of(b), downloaded("b", b).string(), kUrl, {sha256_of(a)}));
  // A task of three artifacts: two held and pinned, the third cannot fit.
  EXPECT_FALSE(store.keep(sha256_of(c), downloaded("c", c).string(), kUrl, {sha256_of(a), sha256_of(b)}));
  EXPECT_EQ(store.bytes(), 2000u);
  EXPECT_FALSE(fs::exists(store_dir() / sha256_of(c).entry_name()));
}

TEST_F(StoreTest, TheOrderOfUseSurvivesARestartWhateverTheClockDid) {
  const std::string a(1000, 'a'), b(1000, 'b'), c(1000, 'c'), d(1000, 'd');
  {
    ArtifactStore store(store_dir().string(), 3000);
    ASSERT_TRUE(store.keep(sha256_of(a), downloaded("a", a).string(), kUrl, {}));
    ASSERT_TRUE(store.keep(sha256_of(b), downloaded("b", b).string(), kUrl, {}));
    ASSERT_TRUE(store.keep(sha256_of(c), downloaded("c", c).string(), kUrl, {}));
    ASSERT_EQ(store.copy_out(sha256_of(a), kUrl, (dir_ / "a.copy").string(), nullptr), StoreUse::hit);
  }
  ArtifactStore again(store_dir().string(), 3000);
  EXPECT_EQ(again.held(), (std::vector<ContentDigest>{sha256_of(a), sha256_of(c), sha256_of(b)}));
  ASSERT_TRUE(again.keep(sha256_of(d), downloaded("d", d).string(), kUrl, {}));
  EXPECT_FALSE(fs::exists(store_dir() / sha256_of(b).entry_name()));  // b, the least recently used, went
  EXPECT_FALSE(fs::exists(store_dir() / (sha256_of(b).entry_name() + ".sources")));
}

TEST_F(StoreTest, ADirectoryOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the directory away";
  fs::create_directories(store_dir());
  ASSERT_EQ(::chown(store_dir().c_str(), 65534, 65534), 0);
  EXPECT_THROW(ArtifactStore(store_dir().string(), 1 << 20), std::runtime_error);
}

TEST_F(StoreTest, AStoreOpenedAgainHoldsWhatItKeptAndNothingACrashOrAnotherHandLeft) {
  const std::string content = "kept across a restart";
  {
    ArtifactStore store(store_dir().string(), 1 << 20);
    ASSERT_TRUE(store.keep(sha256_of(content), downloaded("x", content).string(), kUrl, {}));
  }
  write(store_dir() / ".incoming-7", "half a copy");       // a crash during keep
  write(store_dir() / "notes.txt", "an operator's file");  // not an entry: left alone, not counted
  fs::create_symlink("/etc/passwd", store_dir() / sha256_of("root:x").entry_name());  // never followed
  ArtifactStore again(store_dir().string(), 1 << 20);
  EXPECT_EQ(again.held(), std::vector<ContentDigest>{sha256_of(content)});
  EXPECT_EQ(again.bytes(), content.size());
  EXPECT_FALSE(fs::exists(store_dir() / ".incoming-7"));
  EXPECT_TRUE(fs::exists(store_dir() / "notes.txt"));
  EXPECT_EQ(again.copy_out(sha256_of("root:x"), kUrl, (dir_ / "out").string(), nullptr), StoreUse::miss);
  // A smaller quota at the next start is kept at once.
  ArtifactStore smaller(store_dir().string(), 4);
  EXPECT_TRUE(smaller.held().empty());
}

}  // namespace
}  // namespace k8s4r::agent
