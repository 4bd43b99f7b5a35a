#include "k8s4r/agent/task_logs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>

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

// No stream is this long (2^53 bytes): a larger number in a file the task
// owns is refused, and no sum of offsets overflows.
constexpr std::int64_t kMaxOffset = std::int64_t{1} << 53;

// `path`.base: the bytes rotated away before `path`'s first one.
std::int64_t read_base(const std::string& path) {
  off_t size = 0;
  const int fd = open_task_file(path + ".base", O_RDONLY, size);
  if (fd < 0) return 0;
  char text[32] = {};
  const ssize_t got = ::pread(fd, text, sizeof text - 1, 0);
  ::close(fd);
  std::int64_t base = 0;
  if (got <= 0 || std::from_chars(text, text + got, base).ec != std::errc{} || base < 0 || base > kMaxOffset) return 0;
  return base;
}

// Written whole under a new name, synced, then renamed over the old one (a
// link the task put there is replaced, not followed). False when it could
// not be: then nothing is rotated, so offsets never go back.
bool write_base(const std::string& path, std::int64_t base) {
  const std::string next = path + ".base.new";
  ::unlink(next.c_str());
  const int fd = ::open(next.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (fd < 0) return false;
  const std::string text = std::to_string(base) + "\n";
  const bool written =
      ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fdatasync(fd) == 0;
  ::close(fd);
  if (written && ::rename(next.c_str(), (path + ".base").c_str()) == 0) return true;
  ::unlink(next.c_str());
  return false;
}

// Up to `length` bytes of `fd` from `at`.
std::string pread_some(int fd, off_t at, std::size_t length) {
  std::string bytes(length, '\0');
  std::size_t done = 0;
  while (done < length) {
    const ssize_t got = ::pread(fd, bytes.data() + done, length - done, at + static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<std::size_t>(got);
  }
  bytes.resize(done);
  return bytes;
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
        // The new base first: a rotation it could not record (a full disk)
        // does not happen, and one that fails after it is undone.
        const std::int64_t base = read_base(path);
        rotated = copy_all(log, copy, size) && base + size <= kMaxOffset && write_base(path, base + size);
        if (rotated && ::ftruncate(log, 0) != 0) {
          write_base(path, base);
          rotated = false;
        }
        ::close(copy);
      }
    }
  }
  ::close(log);
  return rotated;
}

LogPiece read_log(const std::string& path, std::int64_t offset, std::size_t max_bytes) {
  const std::int64_t base = read_base(path);
  off_t current_size = 0, old_size = 0;
  const int current = open_task_file(path, O_RDONLY, current_size);
  if (current < 0) current_size = 0;
  const int old = open_task_file(path + ".1", O_RDONLY, old_size);
  // The older part holds the bytes just before `path`'s first.
  const bool old_usable = old >= 0 && old_size <= base;
  const std::int64_t old_start = old_usable ? base - old_size : base;
  LogPiece piece;
  piece.size = base + current_size;
  piece.offset = std::clamp(offset, old_start, piece.size);
  if (piece.offset >= base) {
    if (current >= 0)
      piece.data = pread_some(current, static_cast<off_t>(piece.offset - base),
                              std::min<std::size_t>(max_bytes, static_cast<std::size_t>(piece.size - piece.offset)));
  } else if (old_usable) {
    piece.data = pread_some(old, static_cast<off_t>(piece.offset - old_start),
                            std::min<std::size_t>(max_bytes, static_cast<std::size_t>(base - piece.offset)));
  }
  if (current >= 0) ::close(current);
  if (old >= 0) ::close(old);
  // An offset past the end (a .base lost in a crash) is where the reader is.
  if (offset > piece.size) piece.offset = piece.size = offset;
  return piece;
}

std::int64_t tail_offset(const std::string& path, std::int64_t lines) {
  constexpr std::size_t kBlock = 64 * 1024;
  constexpr std::int64_t kMaxLookBack = 16 * 1024 * 1024;
  std::int64_t end = read_log(path, 0, 0).size;
  if (lines <= 0) return end;
  const std::int64_t stop = std::max<std::int64_t>(0, end - kMaxLookBack);
  bool skip_last_newline = true;
  std::int64_t found = 0;
  while (end > stop) {
    const std::int64_t start = std::max<std::int64_t>(stop, end - static_cast<std::int64_t>(kBlock));
    // The block, whole: a piece ends where a rotated part does.
    std::string block;
    std::int64_t start_kept = start;
    bool oldest_reached = false;
    for (std::int64_t at = start; at < end;) {
      LogPiece piece = read_log(path, at, static_cast<std::size_t>(end - at));
      if (piece.offset != at && block.empty() && piece.offset < end) {
        // Older bytes are gone: the block starts at the oldest byte kept, and the count stops there.
        start_kept = at = piece.offset;
        oldest_reached = true;
      } else if (piece.offset != at || piece.data.empty()) {
        if (block.empty()) return std::min(piece.offset, end);
        break;
      }
      block += piece.data;
      at += static_cast<std::int64_t>(piece.data.size());
    }
    for (std::size_t at = block.size(); at-- > 0;) {
      if (block[at] != '\n') {
        skip_last_newline = false;
        continue;
      }
      if (skip_last_newline) {  // the newline ending the last line
        skip_last_newline = false;
        continue;
      }
      if (++found == lines) return start_kept + static_cast<std::int64_t>(at) + 1;
    }
    if (oldest_reached) return start_kept;
    if (start + static_cast<std::int64_t>(block.size()) < end) return start + static_cast<std::int64_t>(block.size());
    end = start;
  }
  return stop;
}

std::int64_t line_start_from(const std::string& path, std::int64_t offset) {
  if (offset <= 0) return 0;
  if (offset > kMaxOffset) return offset;
  LogPiece before = read_log(path, offset - 1, 1);
  if (before.offset == offset - 1 && before.data == "\n") return offset;
  for (std::int64_t at = offset; at < offset + 1024 * 1024;) {
    const LogPiece piece = read_log(path, at, 64 * 1024);
    if (piece.data.empty()) return piece.size;
    if (const auto newline = piece.data.find('\n'); newline != std::string::npos)
      return piece.offset + static_cast<std::int64_t>(newline) + 1;
    at = piece.offset + static_cast<std::int64_t>(piece.data.size());
  }
  return offset;
}

void append_log_index(const std::string& index, std::int64_t unix_ms, std::int64_t stdout_size,
                      std::int64_t stderr_size) {
  constexpr off_t kMaxIndexBytes = 1024 * 1024;
  int fd = ::open(index.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0640);
  if (fd < 0) return;
  struct stat about {};
  if (::fstat(fd, &about) == 0 && S_ISREG(about.st_mode) && about.st_nlink == 1 && about.st_size >= kMaxIndexBytes) {
    // Full: its newer half is kept (a --since further back starts earlier, never later).
    ::close(fd);
    fd = -1;
    off_t size = 0;
    const int old = open_task_file(index, O_RDONLY, size);
    if (old < 0) return;
    std::string text = pread_some(old, size / 2, static_cast<std::size_t>(size - size / 2));
    ::close(old);
    const auto newline = text.find('\n');
    text.erase(0, newline == std::string::npos ? text.size() : newline + 1);
    const std::string next = index + ".new";
    ::unlink(next.c_str());
    const int fresh = ::open(next.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
    if (fresh < 0) return;
    const bool written = ::write(fresh, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fresh);
    if (!written || ::rename(next.c_str(), index.c_str()) != 0) {
      ::unlink(next.c_str());
      return;
    }
    fd = ::open(index.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return;
  }
  if (::fstat(fd, &about) == 0 && S_ISREG(about.st_mode) && about.st_nlink == 1 && about.st_size < kMaxIndexBytes) {
    char line[80];
    const int length = std::snprintf(line, sizeof line, "%lld %lld %lld\n", static_cast<long long>(unix_ms),
                                     static_cast<long long>(stdout_size), static_cast<long long>(stderr_size));
    if (length > 0) (void)!::write(fd, line, static_cast<std::size_t>(length));
  }
  ::close(fd);
}

std::int64_t offset_at(const std::string& index, bool stderr_stream, std::int64_t unix_ms) {
  off_t size = 0;
  const int fd = open_task_file(index, O_RDONLY, size);
  if (fd < 0) return 0;
  const std::string text = pread_some(fd, 0, static_cast<std::size_t>(std::min<off_t>(size, 2 * 1024 * 1024)));
  ::close(fd);
  std::int64_t offset = 0;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) break;  // a line being written
    std::int64_t fields[3] = {};
    const char* cursor = text.data() + at;
    const char* const line_end = text.data() + end;
    bool ok = true;
    for (std::int64_t& field : fields) {
      while (cursor < line_end && *cursor == ' ') ++cursor;
      const auto [next, error] = std::from_chars(cursor, line_end, field);
      ok = ok && error == std::errc{} && field >= 0 && field <= kMaxOffset;
      cursor = next;
    }
    at = end + 1;
    if (!ok) continue;
    if (fields[0] > unix_ms) break;
    offset = fields[stderr_stream ? 2 : 1];
  }
  return offset;
}

}  // namespace k8s4r::agent
