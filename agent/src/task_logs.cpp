#include "k8s4r/agent/task_logs.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include <unistd.h>

namespace k8s4r::agent {

namespace {

std::string file_tail(const std::string& path, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::size_t>(std::max<std::streamoff>(in.tellg(), 0));
  const std::size_t start = size > max_bytes ? size - max_bytes : 0;
  in.seekg(static_cast<std::streamoff>(start));
  std::string text(size - start, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return text;
}

bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

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
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (error || size <= max_bytes) return false;
  std::filesystem::copy_file(path, path + ".1", std::filesystem::copy_options::overwrite_existing, error);
  if (error) return false;
  // Bytes written between the copy and the truncate are lost; the task is
  // not paused for its log.
  return truncate(path.c_str(), 0) == 0;
}

}  // namespace k8s4r::agent
