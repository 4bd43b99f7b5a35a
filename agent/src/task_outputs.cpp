#include "k8s4r/agent/task_outputs.h"

#include "k8s4r/agent/task_logs.h"
#include "k8s4r/common/messages.h"

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

namespace k8s4r::agent {

Result<std::optional<nlohmann::json>> read_task_outputs(const std::string& path) {
  off_t size = 0;
  const int fd = open_task_file(path, O_RDONLY, size);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<nlohmann::json>{};
    const int why = errno;
    return Error{"outputs", kTaskOutputsFile + std::string(" is not a plain file of the task's own (") +
                                (why == ELOOP    ? "a symbolic link"
                                 : why == EINVAL ? "a link or a special file"
                                                 : std::strerror(why)) +
                                ")"};
  }
  // One byte more than allowed tells a file that is too long, however its
  // size changes meanwhile.
  std::string text(kMaxTaskOutputsBytes + 1, '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t got = ::read(fd, text.data() + done, text.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int why = errno;
      ::close(fd);
      return Error{"outputs", std::string("cannot read ") + kTaskOutputsFile + ": " + std::strerror(why)};
    }
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  ::close(fd);
  text.resize(done);
  if (done > kMaxTaskOutputsBytes) {
    return Error{"outputs", std::string(kTaskOutputsFile) + " holds more than " + std::to_string(kMaxTaskOutputsBytes) +
                                " bytes (" + std::to_string(size) + ")"};
  }
  auto outputs = parse_task_outputs(text);
  if (!outputs) return Error{"outputs", std::string(kTaskOutputsFile) + " " + outputs.error().message};
  return std::optional<nlohmann::json>(std::move(outputs.value()));
}

}  // namespace k8s4r::agent
