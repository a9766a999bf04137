#include "ratewall/sim/trace_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ratewall/core/huge_pages.hpp"
#include "ratewall/sim/trace.hpp"

namespace ratewall {

namespace {

class descriptor {
 public:
  explicit descriptor(int fd) : fd_(fd) {}
  ~descriptor() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  descriptor(const descriptor&) = delete;
  descriptor& operator=(const descriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

trace_error cannot_read(const std::string& path) {
  return trace_error(path + ": cannot read file: " + std::strerror(errno));
}

int open_trace(const std::string& path) {
  if (path == "-") {
    return ::dup(STDIN_FILENO);
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  // A socket cannot be opened by name (a standard input that a parent made a socketpair):
  // the descriptor the process already has is read instead.
  if (fd < 0 && errno == ENXIO && path == "/dev/stdin") {
    return ::dup(STDIN_FILENO);
  }
  return fd;
}

// read(2) once, again after a signal; 0 at the end.
std::size_t read_some(int fd, char* into, std::size_t size, const std::string& path) {
  while (true) {
    const ssize_t n = ::read(fd, into, size);
    if (n >= 0) {
      return static_cast<std::size_t>(n);
    }
    if (errno != EINTR) {
      throw cannot_read(path);
    }
  }
}

bool null_device(const struct stat& st) {
  return S_ISCHR(st.st_mode) && major(st.st_rdev) == 1 && minor(st.st_rdev) == 3;
}

}  // namespace

trace_file::trace_file(const std::string& path) {
  descriptor fd(open_trace(path));
  if (fd.get() < 0) {
    throw cannot_read(path);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    throw cannot_read(path);
  }
  if (S_ISDIR(st.st_mode)) {
    throw trace_error(path + ": is a directory, not a trace");
  }
  if (null_device(st)) {
    return;  // an empty trace, as a program started with </dev/null gives
  }
  // Another device (/dev/zero, a disk) would be read without end.
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISSOCK(st.st_mode) &&
      ::isatty(fd.get()) == 0) {
    throw trace_error(path + ": is not a file, a pipe or a terminal");
  }
  // A regular file of size 0 may still hold something (/proc's files do): read as a stream.
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    // What the file holds now: what is appended while it is read is not part of the trace.
    const auto size = static_cast<std::size_t>(st.st_size);
    file_.reset(new char[size]);  // not zeroed: each byte used is read
    advise_huge_pages(file_.get(), size);
    std::size_t got = 0;
    while (got < size) {
      const std::size_t n = read_some(fd.get(), file_.get() + got, size - got, path);
      if (n == 0) {
        break;  // truncated while read: what was there
      }
      got += n;
    }
    text_ = std::string_view(file_.get(), got);
  } else {
    char buffer[1 << 16];
    while (const std::size_t n = read_some(fd.get(), buffer, sizeof buffer, path)) {
      streamed_.append(buffer, n);
    }
    text_ = streamed_;
  }
  if (text_.starts_with("\xEF\xBB\xBF")) {
    text_.remove_prefix(3);
  }
}

}  // namespace ratewall
