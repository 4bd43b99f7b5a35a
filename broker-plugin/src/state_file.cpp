#include "k8s4r/auth/state_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

namespace k8s4r::auth {

namespace {

Error os_error(const std::string& what, const std::string& path) {
  return Error{path, what + ": " + std::strerror(errno)};
}

// Writes all of `bytes` or fails (a short write is retried; EINTR too).
Result<void> write_all(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return os_error("writing", path);
    }
    bytes.remove_prefix(static_cast<std::size_t>(written));
  }
  return ok();
}

std::string lines_of(const std::vector<logins::StateRecord>& records) {
  std::string text;
  text.reserve(records.size() * 96);
  for (const logins::StateRecord& record : records) {
    text += logins::format_state_record(record);
    text += '\n';
  }
  return text;
}

Result<void> sync_directory_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  const std::string directory = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return os_error("opening the directory", directory);
  const int synced = ::fsync(fd);
  ::close(fd);
  if (synced != 0) return os_error("syncing the directory", directory);
  return ok();
}

}  // namespace

StateFile::~StateFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<void> StateFile::open_for_append() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd_ < 0) return os_error("opening for appending", path_);
  return ok();
}

Result<Loaded> StateFile::load(LoginTable& table) {
  Loaded loaded;
  std::string text;
  struct stat status {};
  if (::stat(path_.c_str(), &status) == 0) {
    std::ifstream in(path_, std::ios::binary);
    std::ostringstream buffer;
    if (status.st_size > 0 && !(buffer << in.rdbuf())) return os_error("reading", path_);
    text = std::move(buffer).str();
  } else if (errno != ENOENT) {
    return os_error("reading", path_);
  }
  // A last line without its newline was cut short by a crash mid-append:
  // its batch was never answered, so dropping it loses nothing promised.
  std::size_t whole = text.rfind('\n');
  whole = whole == std::string::npos ? 0 : whole + 1;
  loaded.torn_tail = whole != text.size();
  std::string why;
  std::vector<logins::StateRecord> records;
  if (whole != 0) {
    std::string_view rest(text.data(), whole);
    const std::size_t header_end = rest.find('\n');
    if (rest.substr(0, header_end) != logins::kStateHeader) {
      why = "its first line is not '" + std::string(logins::kStateHeader) + "'";
    } else {
      rest.remove_prefix(header_end + 1);
      std::size_t line_number = 2;
      while (!rest.empty() && why.empty()) {
        const std::size_t end = rest.find('\n');
        auto record = logins::parse_state_record(rest.substr(0, end));
        if (!record)
          why = "line " + std::to_string(line_number) + ": " + record.error().to_string();
        else
          records.push_back(std::move(record).value());
        rest.remove_prefix(end + 1);
        ++line_number;
      }
    }
  }
  if (!why.empty()) {
    loaded.set_aside = path_ + ".corrupt";
    loaded.why_set_aside = why;
    if (::rename(path_.c_str(), loaded.set_aside.c_str()) != 0) return os_error("moving aside", path_);
    records.clear();
    whole = 0;
  }
  for (const logins::StateRecord& record : records) table.restore(record);
  loaded.records = records.size();
  records_ = records.size();
  if (whole == 0) {
    // Missing, empty, cut inside its header, or set aside: a new file.
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return os_error("making", path_);
    auto written = write_all(fd, std::string(logins::kStateHeader) + "\n", path_);
    const int synced = ::fsync(fd);
    ::close(fd);
    if (!written) return written.error();
    if (synced != 0) return os_error("syncing", path_);
    if (auto synced_directory = sync_directory_of(path_); !synced_directory) return synced_directory.error();
  } else if (loaded.torn_tail && ::truncate(path_.c_str(), static_cast<off_t>(whole)) != 0) {
    return os_error("cutting off its torn last line", path_);
  }
  if (auto opened = open_for_append(); !opened) return opened.error();
  return loaded;
}

Result<void> StateFile::append(const std::vector<logins::StateRecord>& records) {
  if (records.empty()) return ok();
  if (fd_ < 0) return Error{path_, "not open"};
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  if (before < 0) return os_error("finding its end", path_);
  auto written = write_all(fd_, lines_of(records), path_);
  if (written && ::fdatasync(fd_) != 0) written = os_error("syncing", path_);
  if (!written) {
    // Leave no part of this batch behind: a later append must not follow a
    // half record. (If even this fails, loading drops the torn tail.)
    if (::ftruncate(fd_, before) == 0) (void)::fdatasync(fd_);
    return written.error();
  }
  records_ += records.size();
  return ok();
}

Result<void> StateFile::compact(const LoginTable& table) {
  const std::string temporary = path_ + ".tmp";
  const std::vector<logins::StateRecord> records = table.snapshot();
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return os_error("making", temporary);
  auto written = write_all(fd, std::string(logins::kStateHeader) + "\n" + lines_of(records), temporary);
  if (written && ::fsync(fd) != 0) written = os_error("syncing", temporary);
  ::close(fd);
  if (written && ::rename(temporary.c_str(), path_.c_str()) != 0) written = os_error("renaming over", path_);
  if (!written) {
    ::unlink(temporary.c_str());
    return written.error();
  }
  // Renamed: from now on appends go to the new file, whatever follows.
  records_ = records.size();
  auto opened = open_for_append();
  if (auto synced = sync_directory_of(path_); !synced) return synced.error();
  return opened;
}

}  // namespace k8s4r::auth
