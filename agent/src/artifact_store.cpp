#include "k8s4r/agent/artifact_store.h"

#include "k8s4r/common/hashing.h"

#include <openssl/evp.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>

namespace k8s4r::agent {

namespace {

constexpr std::string_view kIncoming = ".incoming-";
constexpr std::size_t kChunk = 1 << 20;

std::size_t hex_digits_of(const std::string& algorithm) {
  return algorithm == "sha256" ? 64 : algorithm == "sha512" ? 128 : 0;
}

bool is_lower_hex(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The digest an entry's file name stands for, if it is one.
std::optional<ContentDigest> digest_of_entry(const std::string& name) {
  const auto dash = name.find('-');
  if (dash == std::string::npos) return std::nullopt;
  ContentDigest digest{name.substr(0, dash), name.substr(dash + 1)};
  if (hex_digits_of(digest.algorithm) == 0 || digest.hex.size() != hex_digits_of(digest.algorithm) ||
      !is_lower_hex(digest.hex))
    return std::nullopt;
  return digest;
}

std::int64_t nanoseconds_of(const struct timespec& time) {
  return static_cast<std::int64_t>(time.tv_sec) * 1'000'000'000 + time.tv_nsec;
}

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t put = ::write(fd, data, size);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    data += put;
    size -= static_cast<std::size_t>(put);
  }
  return true;
}

// All of `from` into `to`: in the kernel when it can (and sharing blocks on
// a file system that clones), else through a buffer.
bool copy_file(int from, int to) {
  for (;;) {
    const ssize_t moved = ::copy_file_range(from, nullptr, to, nullptr, kChunk * 64, 0);
    if (moved > 0) continue;
    if (moved == 0) return true;
    if (errno == EINTR) continue;
    if (errno != EXDEV && errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP) return false;
    break;
  }
  std::unique_ptr<char[]> buffer(new char[kChunk]);
  for (;;) {
    const ssize_t got = ::read(from, buffer.get(), kChunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return false;
    if (got == 0) return true;
    if (!write_all(to, buffer.get(), static_cast<std::size_t>(got))) return false;
  }
}

constexpr const char* kSourcesSuffix = ".sources";
constexpr std::size_t kMaxSources = 16;
constexpr std::size_t kMaxSourceLength = 4096;

// The URLs an entry was fetched from, one per line (URLs hold no newline:
// curl refuses them).
std::vector<std::string> read_sources(const std::string& path) {
  std::vector<std::string> sources;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line) && sources.size() < kMaxSources;)
    if (!line.empty()) sources.push_back(line);
  return sources;
}

std::int64_t wall_nanoseconds() {
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return nanoseconds_of(now);
}

// The file's times set to `ns`: its place in the order, kept across restarts.
void set_time(int fd, std::int64_t ns) {
  const struct timespec at { static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000) };
  const struct timespec times[2] = {at, at};
  ::futimens(fd, times);
}

// 16 hex digits of the FNV-1a of the checksums listed, one per line, and
// the counts (a change detector, not a proof: the robot says what it holds).
std::string fingerprint_of(const std::vector<std::string>& texts, const std::string& counts) {
  Fnv1a64 hash;
  for (const std::string& text : texts) hash.update(text).update("\n");
  return hash.update(counts).hex();
}

struct Fd {
  int fd = -1;
  explicit Fd(int value) : fd(value) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

}  // namespace

Result<ContentDigest> parse_content_digest(const std::string& checksum) {
  const auto colon = checksum.find(':');
  ContentDigest digest;
  if (colon != std::string::npos) {
    digest.algorithm = checksum.substr(0, colon);
    digest.hex = checksum.substr(colon + 1);
  }
  for (char& c : digest.hex) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // The hex names a file in the store: nothing but its digits.
  if (hex_digits_of(digest.algorithm) == 0 || digest.hex.size() != hex_digits_of(digest.algorithm) ||
      !is_lower_hex(digest.hex)) {
    return Error{"checksum", "checksum must be sha256:HEX (64 hex digits) or sha512:HEX (128), got '" + checksum + "'"};
  }
  return digest;
}

ArtifactStore::ArtifactStore(std::string dir, std::uint64_t max_bytes, Match match)
    : dir_(std::move(dir)), max_bytes_(max_bytes), match_(match) {
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
    throw std::runtime_error("cannot create the artifact store " + dir_ + ": " + std::strerror(errno));
  }
  struct stat about {};
  // The agent's own directory and nobody else's: another owner could put
  // files under an entry's name.
  if (::lstat(dir_.c_str(), &about) != 0 || !S_ISDIR(about.st_mode) || about.st_uid != ::geteuid()) {
    throw std::runtime_error("the artifact store " + dir_ + " is not a directory of the agent's own user");
  }
  ::chmod(dir_.c_str(), 0700);
  std::unique_ptr<DIR, int (*)(DIR*)> listing(::opendir(dir_.c_str()), &::closedir);
  if (!listing) throw std::runtime_error("cannot read the artifact store " + dir_ + ": " + std::strerror(errno));
  while (const dirent* item = ::readdir(listing.get())) {
    const std::string name = item->d_name;
    const std::string path = dir_ + "/" + name;
    if (name.rfind(kIncoming, 0) == 0) {
      ::unlink(path.c_str());  // a copy a crash cut short
      continue;
    }
    const auto digest = digest_of_entry(name);
    if (!digest || ::lstat(path.c_str(), &about) != 0 || !S_ISREG(about.st_mode)) continue;
    Entry entry{static_cast<std::uint64_t>(about.st_size), nanoseconds_of(about.st_mtim), {}};
    entry.sources = read_sources(path + kSourcesSuffix);
    entries_[*digest] = std::move(entry);
    bytes_ += static_cast<std::uint64_t>(about.st_size);
    newest_use_ = std::max(newest_use_, nanoseconds_of(about.st_mtim));
  }
  // Sources whose entry is gone (a crash between the two removals of drop()).
  std::unique_ptr<DIR, int (*)(DIR*)> again(::opendir(dir_.c_str()), &::closedir);
  while (const dirent* item = again ? ::readdir(again.get()) : nullptr) {
    const std::string name = item->d_name;
    const std::string suffix = kSourcesSuffix;
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const auto digest = digest_of_entry(name.substr(0, name.size() - suffix.size()));
    if (digest && !entries_.count(*digest)) ::unlink((dir_ + "/" + name).c_str());
  }
  evict_for(0, {});
}

StoreUse ArtifactStore::copy_out(const ContentDigest& digest, const std::string& source, const std::string& target,
                                 const std::atomic<bool>* cancel) {
  auto held = entries_.find(digest);
  if (held == entries_.end()) return StoreUse::miss;
  // Knowing a checksum is not being allowed its content: a task names a URL
  // the entry came from (unless any URL will do).
  const auto& sources = held->second.sources;
  if (match_ == Match::url && std::find(sources.begin(), sources.end(), source) == sources.end()) return StoreUse::miss;
  Fd entry(::open(path_of(digest).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (entry.fd < 0) {
    drop(digest);
    return StoreUse::miss;
  }
  Fd out(::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666));
  if (out.fd < 0) return StoreUse::miss;
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> context(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  EVP_DigestInit_ex(context.get(), digest.algorithm == "sha256" ? EVP_sha256() : EVP_sha512(), nullptr);
  std::unique_ptr<char[]> buffer(new char[kChunk]);
  StoreUse failed = StoreUse::hit;
  for (;;) {
    if (cancel && cancel->load()) {
      failed = StoreUse::cancelled;
      break;
    }
    const ssize_t got = ::read(entry.fd, buffer.get(), kChunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      if (got < 0) failed = StoreUse::miss;
      break;
    }
    EVP_DigestUpdate(context.get(), buffer.get(), static_cast<std::size_t>(got));
    if (!write_all(out.fd, buffer.get(), static_cast<std::size_t>(got))) {
      failed = StoreUse::miss;
      break;
    }
  }
  if (failed != StoreUse::hit) {
    ::unlink(target.c_str());
    return failed;
  }
  unsigned char value[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(context.get(), value, &length);
  if (hex_encode(std::string_view(reinterpret_cast<const char*>(value), length)) != digest.hex) {
    ::unlink(target.c_str());
    drop(digest);
    return StoreUse::corrupt;
  }
  // Used now: the last to go, in memory and on disk alike.
  const std::int64_t used = used_now(wall_nanoseconds());
  set_time(entry.fd, used);
  std::lock_guard lock(mutex_);
  held->second.used_ns = used;
  return StoreUse::hit;
}

bool ArtifactStore::keep(const ContentDigest& digest, const std::string& verified, const std::string& source,
                         const std::set<ContentDigest>& pinned) {
  Fd from(::open(verified.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  struct stat about {};
  if (from.fd < 0 || ::fstat(from.fd, &about) != 0 || !S_ISREG(about.st_mode)) return false;
  const auto size = static_cast<std::uint64_t>(about.st_size);
  std::set<ContentDigest> keep_too = pinned;
  keep_too.insert(digest);
  if (auto held = entries_.find(digest); held != entries_.end() && held->second.size == size) {
    // Held already (fetched from another URL): one more source for it.
    remember_source(digest, source);
    return true;
  }
  // Room first, from what no task being fetched uses; none: not kept.
  if (!evict_for(size, keep_too)) return false;
  const std::string incoming = dir_ + "/" + std::string(kIncoming) + std::to_string(++incoming_);
  const std::int64_t used = used_now(wall_nanoseconds());
  bool written = false;
  {
    Fd to(::open(incoming.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_EXCL | O_CLOEXEC, 0600));
    written = to.fd >= 0 && copy_file(from.fd, to.fd);
    if (written) set_time(to.fd, used);
  }
  if (!written || ::rename(incoming.c_str(), path_of(digest).c_str()) != 0) {
    ::unlink(incoming.c_str());
    return false;
  }
  {
    std::lock_guard lock(mutex_);
    if (auto held = entries_.find(digest); held != entries_.end()) bytes_ -= held->second.size;
    entries_[digest] = Entry{size, used, {}};
    bytes_ += size;
  }
  remember_source(digest, source);
  return true;
}

std::vector<ContentDigest> ArtifactStore::held() const {
  std::vector<std::pair<std::int64_t, ContentDigest>> by_use;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [digest, entry] : entries_) by_use.emplace_back(entry.used_ns, digest);
  }
  std::sort(by_use.begin(), by_use.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<ContentDigest> out;
  for (auto& [used, digest] : by_use) out.push_back(std::move(digest));
  return out;
}

ArtifactsHeld ArtifactStore::summary(std::size_t max_listed) const {
  ArtifactsHeld summary;
  std::vector<std::pair<std::int64_t, std::string>> by_use;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [digest, entry] : entries_) by_use.emplace_back(entry.used_ns, digest.text());
    summary.bytes = static_cast<std::int64_t>(bytes_);
  }
  summary.count = static_cast<std::int64_t>(by_use.size());
  summary.max_bytes = static_cast<std::int64_t>(std::min<std::uint64_t>(max_bytes_, INT64_MAX));
  std::sort(by_use.begin(), by_use.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> listed;
  for (std::size_t i = 0; i < by_use.size() && i < max_listed; ++i) listed.push_back(by_use[i].second);
  summary.truncated = by_use.size() > listed.size();
  // Of what a heartbeat lists, in its order, and the counts: whatever it
  // would say differently is another fingerprint, and is listed again.
  summary.fingerprint = fingerprint_of(listed, std::to_string(summary.count) + " " + std::to_string(summary.bytes) +
                                                   " " + std::to_string(summary.max_bytes));
  summary.held = std::move(listed);
  return summary;
}

std::int64_t ArtifactStore::used_now(std::int64_t wall_ns) {
  // Later than every use before, whatever the wall clock did (a robot
  // without a battery-backed clock boots in the past until NTP steps it):
  // the order is the order of use.
  newest_use_ = std::max(wall_ns, newest_use_ + 1);
  return newest_use_;
}

void ArtifactStore::drop(const ContentDigest& digest) {
  ::unlink(path_of(digest).c_str());
  ::unlink((path_of(digest) + kSourcesSuffix).c_str());
  std::lock_guard lock(mutex_);
  if (auto held = entries_.find(digest); held != entries_.end()) {
    bytes_ -= held->second.size;
    entries_.erase(held);
  }
}

bool ArtifactStore::holds(const ContentDigest& digest, const std::string& source) const {
  auto held = entries_.find(digest);
  if (held == entries_.end()) return false;
  const auto& sources = held->second.sources;
  return match_ == Match::checksum || std::find(sources.begin(), sources.end(), source) != sources.end();
}

bool ArtifactStore::evict_for(std::uint64_t size, const std::set<ContentDigest>& pinned) {
  if (size > max_bytes_) return false;
  while (bytes_ > max_bytes_ - size) {
    const ContentDigest* oldest = nullptr;
    std::int64_t oldest_use = 0;
    for (const auto& [digest, entry] : entries_) {
      if (pinned.count(digest) || wanted_.count(digest)) continue;
      if (!oldest || entry.used_ns < oldest_use) {
        oldest = &digest;
        oldest_use = entry.used_ns;
      }
    }
    if (!oldest) return false;  // what is left is pinned: no room
    drop(ContentDigest(*oldest));
  }
  return true;
}

void ArtifactStore::remember_source(const ContentDigest& digest, const std::string& source) {
  auto held = entries_.find(digest);
  if (held == entries_.end() || source.size() > kMaxSourceLength)
    return;  // served to no URL: a later download fixes it
  auto& sources = held->second.sources;
  if (auto known = std::find(sources.begin(), sources.end(), source); known != sources.end()) sources.erase(known);
  sources.push_back(source);
  if (sources.size() > kMaxSources) sources.erase(sources.begin());
  // Written aside and renamed: a crash leaves the old list or the new.
  const std::string path = path_of(digest) + kSourcesSuffix;
  const std::string incoming = dir_ + "/" + std::string(kIncoming) + std::to_string(++incoming_);
  {
    Fd to(::open(incoming.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_EXCL | O_CLOEXEC, 0600));
    std::string text;
    for (const std::string& url : sources) text += url + "\n";
    if (to.fd < 0 || !write_all(to.fd, text.data(), text.size())) {
      ::unlink(incoming.c_str());
      return;
    }
  }
  if (::rename(incoming.c_str(), path.c_str()) != 0) ::unlink(incoming.c_str());
}

}  // namespace k8s4r::agent
