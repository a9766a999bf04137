#include "ratewall/core/read_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace ratewall {

file_text read_regular_file(const std::string& path, std::size_t limit) {
  file_text out;
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    out.error = std::strerror(errno);
    return out;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    out.error = std::strerror(errno);
  } else if (S_ISDIR(st.st_mode)) {
    out.error = std::strerror(EISDIR);
  } else if (!S_ISREG(st.st_mode)) {
    out.error = "not a regular file (a FIFO, a device or a socket), which is not waited on";
  }
  char buf[64 * 1024];
  while (out.error.empty() && out.text.size() <= limit) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      out.error = std::strerror(errno);
    } else if (n == 0) {
      break;
    } else {
      out.text.append(buf, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  if (!out.error.empty()) {
    out.text.clear();
  } else if (out.text.size() > limit + 1) {
    out.text.resize(limit + 1);
  }
  return out;
}

write_obstacle obstacle_to_writing(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec == std::errc::not_a_directory) {
    return {write_obstacle::no_folder, {}};  // a file where a folder of the path should be
  }
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return {write_obstacle::unreadable, ec.message()};
  }
  if (std::filesystem::is_directory(status)) {
    return {write_obstacle::directory, {}};
  }
  if (std::filesystem::exists(status)) {
    return {std::filesystem::is_regular_file(status) ? write_obstacle::none
                                                     : write_obstacle::not_regular,
            {}};
  }
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (!folder.empty() && !std::filesystem::is_directory(folder, ec)) {
    return {write_obstacle::no_folder, {}};
  }
  return {};
}

}  // namespace ratewall
