#include "k8s4r/agent/artifacts.h"

#include "k8s4r/common/hashing.h"

#include <spdlog/spdlog.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

namespace k8s4r::agent {

namespace fs = std::filesystem;

namespace {

Error artifact_error(const Artifact& artifact, const std::string& why) {
  return Error{"artifacts", artifact.getter_source + ": " + why};
}

// The last path segment of a URL, without query or fragment.
std::string url_basename(const std::string& url) {
  std::string path = url.substr(0, url.find_first_of("?#"));
  const auto scheme = path.find("://");
  if (scheme != std::string::npos) path = path.substr(scheme + 3);
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(slash + 1);
}

struct Download {
  std::FILE* file = nullptr;
  EVP_MD_CTX* digest = nullptr;
};

std::size_t write_chunk(char* data, std::size_t size, std::size_t count, void* user) {
  auto* download = static_cast<Download*>(user);
  const std::size_t bytes = size * count;
  if (download->digest) EVP_DigestUpdate(download->digest, data, bytes);
  return std::fwrite(data, 1, bytes, download->file);
}

// The local path of a file URL ("file:///p", "file://localhost/p"), decoded;
// none for any other URL.
std::optional<std::string> file_url_path(const std::string& url) {
  std::unique_ptr<CURLU, void (*)(CURLU*)> parsed(curl_url(), &curl_url_cleanup);
  if (!parsed || curl_url_set(parsed.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) return std::nullopt;
  char* scheme = nullptr;
  if (curl_url_get(parsed.get(), CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK) return std::nullopt;
  const bool is_file = std::string(scheme) == "file";
  curl_free(scheme);
  if (!is_file) return std::nullopt;
  char* path = nullptr;
  if (curl_url_get(parsed.get(), CURLUPART_PATH, &path, CURLU_URLDECODE) != CURLUE_OK) return std::nullopt;
  std::string text(path);
  curl_free(path);
  return text;
}

// Copies `path` into `download` as `as` reads it: `setpriv … cat -- PATH`,
// its output through a pipe. Empty on success; else why (cat's own words).
std::string read_as_user(const std::string& path, ReadAs as, Download& download, const std::atomic<bool>* cancel) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return std::string("pipe: ") + std::strerror(errno);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  const std::string reuid = "--reuid=" + std::to_string(as.uid), regid = "--regid=" + std::to_string(as.gid);
  std::vector<std::string> words = {"setpriv", reuid, regid, "--init-groups", "--", "cat", "--", path};
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  char* envp[] = {const_cast<char*>("PATH=/usr/bin:/bin"), const_cast<char*>("LC_ALL=C"), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "setpriv", &actions, nullptr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  ::close(err[1]);
  if (spawned != 0) {
    ::close(out[0]);
    ::close(err[0]);
    return std::string("cannot run setpriv: ") + std::strerror(spawned);
  }
  std::string problem;
  char buffer[65536];
  for (;;) {
    if (cancel && cancel->load()) {
      ::kill(pid, SIGKILL);
      problem = "cancelled";
      break;
    }
    const ssize_t n = ::read(out[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (write_chunk(buffer, 1, static_cast<std::size_t>(n), &download) != static_cast<std::size_t>(n)) {
      ::kill(pid, SIGKILL);
      problem = "cannot write the downloaded file";
      break;
    }
  }
  std::string said;
  for (ssize_t n; (n = ::read(err[0], buffer, sizeof buffer)) > 0 && said.size() < 4096;) {
    said.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  ::close(err[0]);
  int status = 0;
  pid_t waited = 0;
  do {
    waited = ::waitpid(pid, &status, 0);
  } while (waited < 0 && errno == EINTR);
  if (!problem.empty()) return problem;
  // Never taken for success when its status is unknown.
  if (waited != pid) return std::string("cannot wait for setpriv: ") + std::strerror(errno);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  while (!said.empty() && (said.back() == '\n' || said.back() == '\r')) said.pop_back();
  return said.empty() ? "reading it as the task's user failed" : said;
}

int on_progress(void* cancel, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* flag = static_cast<const std::atomic<bool>*>(cancel);
  return flag && flag->load() ? 1 : 0;  // non-zero aborts the transfer
}

}  // namespace

Result<std::string> artifact_destination(const Artifact& artifact, const std::string& task_dir) {
  const fs::path relative(artifact.relative_dest);
  if (relative.is_absolute()) return artifact_error(artifact, "relativeDest must be relative, got an absolute path");
  const fs::path base = fs::path(task_dir).lexically_normal();
  fs::path target = (base / relative).lexically_normal();
  const bool is_file = artifact.getter_mode == "file";
  if (!is_file) {
    const std::string name = url_basename(artifact.getter_source);
    if (name.empty() || name == "." || name == "..") {
      return artifact_error(artifact, "the URL names no file; set getterMode: file and a relativeDest");
    }
    target = (target / name).lexically_normal();
  }
  const auto [end, unused] = std::mismatch(base.begin(), base.end(), target.begin(), target.end());
  if (end != base.end() || target == base) {
    return artifact_error(artifact, "relativeDest '" + artifact.relative_dest + "' leaves the task directory");
  }
  return target.string();
}

namespace {

// The downloaded `partial` checked against the expected digest, then renamed
// to `target`; removed when anything fails.
Result<void> verify_and_place(const Artifact& artifact, EVP_MD_CTX* digest, const std::string& expected,
                              const std::string& partial, const std::string& target) {
  std::error_code error;
  auto give_up = [&](const std::string& why) -> Result<void> {
    fs::remove(partial, error);
    return artifact_error(artifact, why);
  };
  if (digest) {
    unsigned char value[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    EVP_DigestFinal_ex(digest, value, &length);
    const std::string actual = hex_encode(std::string_view(reinterpret_cast<const char*>(value), length));
    if (actual != expected) return give_up("checksum mismatch: expected " + expected + ", got " + actual);
  }
  fs::rename(partial, target, error);
  if (error) return give_up("cannot move into place at " + target + ": " + error.message());
  return ok();
}

}  // namespace

Result<ArtifactSource> fetch_artifact(const Artifact& artifact, const std::string& task_dir,
                                      const std::atomic<bool>* cancel, std::optional<ReadAs> read_as,
                                      ArtifactStore* store, const std::set<ContentDigest>& pinned) {
  auto destination = artifact_destination(artifact, task_dir);
  if (!destination) return destination.error();
  const std::string target = destination.value();

  const EVP_MD* algorithm = nullptr;
  std::optional<ContentDigest> digest;
  std::string expected;
  if (auto checksum = artifact.getter_options.find("checksum"); checksum != artifact.getter_options.end()) {
    auto parsed = parse_content_digest(checksum->second);
    if (!parsed) return artifact_error(artifact, parsed.error().message);
    digest = parsed.value();
    expected = digest->hex;
    algorithm = digest->algorithm == "sha256" ? EVP_sha256() : EVP_sha512();
  }
  // Only what the agent downloads is kept: a file URL is on the robot
  // already, and may have been read as the task's user.
  const bool storable = store && digest && !file_url_path(artifact.getter_source);

  std::error_code error;
  fs::create_directories(fs::path(target).parent_path(), error);
  if (error) return artifact_error(artifact, "cannot create " + fs::path(target).parent_path().string());
  const std::string partial = target + ".part";
  if (storable) {
    switch (store->copy_out(*digest, artifact.getter_source, partial, cancel)) {
      case StoreUse::hit:
        fs::rename(partial, target, error);
        if (!error) {
          spdlog::info("artifact {}: from the robot's store ({})", artifact.getter_source, digest->text());
          return ArtifactSource::store;
        }
        fs::remove(partial, error);
        break;
      case StoreUse::corrupt:
        spdlog::warn("artifact {}: the store's copy of {} did not match it; dropped, downloading again",
                     artifact.getter_source, digest->text());
        break;
      case StoreUse::cancelled:
        return artifact_error(artifact, "cancelled");
      case StoreUse::miss:
        break;
    }
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(partial.c_str(), "wb"), &std::fclose);
  if (!file) return artifact_error(artifact, "cannot write " + partial);
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> context(algorithm ? EVP_MD_CTX_new() : nullptr, &EVP_MD_CTX_free);
  if (context) EVP_DigestInit_ex(context.get(), algorithm, nullptr);
  Download download{file.get(), context.get()};

  auto give_up = [&](const std::string& why) -> Error {
    file.reset();
    fs::remove(partial, error);
    return artifact_error(artifact, why);
  };
  const auto local = read_as ? file_url_path(artifact.getter_source) : std::nullopt;
  if (local) {
    const std::string problem = read_as_user(*local, *read_as, download, cancel);
    if (!problem.empty())
      return give_up("not readable by the task's user (uid " + std::to_string(read_as->uid) + "): " + problem);
    if (std::fflush(file.get()) != 0) return give_up("cannot write " + partial);
    file.reset();
    if (auto placed = verify_and_place(artifact, context.get(), expected, partial, target); !placed)
      return placed.error();
    return ArtifactSource::download;
  }

  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), &curl_easy_cleanup);
  char curl_error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(curl.get(), CURLOPT_URL, artifact.getter_source.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_PROTOCOLS_STR, "http,https,file");
  curl_easy_setopt(curl.get(), CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl.get(), CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(curl.get(), CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_CONNECTTIMEOUT, 30L);
  // A transfer slower than 1 KiB/s for a minute has stalled.
  curl_easy_setopt(curl.get(), CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(curl.get(), CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_ERRORBUFFER, curl_error);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, &write_chunk);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &download);
  curl_easy_setopt(curl.get(), CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl.get(), CURLOPT_XFERINFOFUNCTION, &on_progress);
  curl_easy_setopt(curl.get(), CURLOPT_XFERINFODATA, const_cast<std::atomic<bool>*>(cancel));
  const CURLcode code = curl_easy_perform(curl.get());
  const bool written = std::fflush(file.get()) == 0;
  file.reset();
  if (code != CURLE_OK) return give_up(curl_error[0] ? curl_error : curl_easy_strerror(code));
  if (!written) return give_up("cannot write " + partial);
  if (auto placed = verify_and_place(artifact, context.get(), expected, partial, target); !placed)
    return placed.error();
  if (storable && !store->keep(*digest, target, artifact.getter_source, pinned)) {
    spdlog::info(
        "artifact {}: not kept in the robot's store (no room beside the artifacts of the task being "
        "fetched, or it cannot be written)",
        artifact.getter_source);
  }
  return ArtifactSource::download;
}

}  // namespace k8s4r::agent
