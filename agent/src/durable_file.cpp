#include "durable_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

namespace k8s4r::agent {

Result<void> write_file_durably(const std::string& path, const std::string& text, const std::string& what) {
  const std::string temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Error{what, "cannot write " + temporary + ": " + std::strerror(errno)};
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      ::unlink(temporary.c_str());
      return Error{what, "cannot write " + temporary + ": " + std::strerror(error)};
    }
    written += static_cast<std::size_t>(n);
  }
  // Durable before it replaces the old content.
  if (::fsync(fd) != 0 || ::close(fd) != 0 || ::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    return Error{what, "cannot store " + path + ": " + std::strerror(error)};
  }
  // The rename itself is durable only once the directory is: without this a
  // power cut could bring the old file back.
  const auto slash = path.rfind('/');
  const std::string directory = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int directory_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directory_fd < 0) return Error{what, "cannot open " + directory + ": " + std::strerror(errno)};
  const int synced = ::fsync(directory_fd);
  const int error = errno;
  ::close(directory_fd);
  if (synced != 0) return Error{what, "cannot sync " + directory + ": " + std::strerror(error)};
  return ok();
}

}  // namespace k8s4r::agent
