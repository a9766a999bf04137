#include "ratewall/core/read_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

}  // namespace ratewall
