#include "k8s4r/agent/task_logs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>

namespace k8s4r::agent {

int open_task_file(const std::string& path, int flags, off_t& size) {
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return -1;
  struct stat about {};
  if (::fstat(fd, &about) != 0 || !S_ISREG(about.st_mode) || about.st_nlink != 1) {
    ::close(fd);
    errno = EINVAL;
    return -1;
  }
  size = about.st_size;
  return fd;
}

namespace {

std::string file_tail(const std::string& path, std::size_t max_bytes) {
  off_t size = 0;
  const int fd = open_task_file(path, O_RDONLY, size);
  if (fd < 0) return {};
  const auto length = static_cast<std::size_t>(size);
  const std::size_t start = length > max_bytes ? length - max_bytes : 0;
  std::string text(length - start, '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t got = ::pread(fd, text.data() + done, text.size() - done, static_cast<off_t>(start + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<std::size_t>(got);
  }
  ::close(fd);
  text.resize(done);
  return text;
}

bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Copies all of `from` into `to`; false on a short write.
bool copy_all(int from, int to, off_t size) {
  char buffer[65536];
  for (off_t offset = 0; offset < size;) {
    const ssize_t got = ::pread(from, buffer, sizeof buffer, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return got == 0;
    for (ssize_t written = 0; written < got;) {
      const ssize_t put = ::write(to, buffer + written, static_cast<std::size_t>(got - written));
      if (put < 0 && errno == EINTR) continue;
      if (put <= 0) return false;
      written += put;
    }
    offset += got;
  }
  return true;
}

}  // namespace

std::string logs_tail(const std::string& stdout_path, const std::string& stderr_path, std::size_t max_bytes) {
  std::string text = file_tail(stdout_path, max_bytes) + file_tail(stderr_path, max_bytes);
  if (text.size() > max_bytes) text.erase(0, text.size() - max_bytes);
  // Do not start inside a multi-byte character.
  std::size_t skip = 0;
  while (skip < text.size() && skip < 3 && is_continuation(text[skip])) ++skip;
  text.erase(0, skip);
  return text;
}

bool cap_log(const std::string& path, std::size_t max_bytes) {
  off_t size = 0;
  const int log = open_task_file(path, O_RDWR, size);
  if (log < 0) return false;
  bool rotated = false;
  if (static_cast<std::size_t>(size) > max_bytes) {
    // The old part is the agent's file, made afresh; a link the task put at
    // its name is refused, not followed.
    const std::string old = path + ".1";
    if (::unlink(old.c_str()) == 0 || errno == ENOENT) {
      const int copy = ::open(old.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
      if (copy >= 0) {
        // Bytes written between the copy and the truncate are lost; the task
        // is not paused for its log.
        rotated = copy_all(log, copy, size) && ::ftruncate(log, 0) == 0;
        ::close(copy);
      }
    }
  }
  ::close(log);
  return rotated;
}

}  // namespace k8s4r::agent
