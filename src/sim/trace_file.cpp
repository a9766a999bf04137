#include "ratewall/sim/trace_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

}  // namespace

trace_file::trace_file(const std::string& path) {
  descriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
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
  // A device other than a terminal (/dev/zero, a disk) would be read without end.
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISSOCK(st.st_mode) &&
      ::isatty(fd.get()) == 0) {
    throw trace_error(path + ": is not a file, a pipe or a terminal");
  }
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    map_size_ = static_cast<std::size_t>(st.st_size);
    // Read once, front to back: populate the mapping now and let the kernel read ahead.
    void* map = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd.get(), 0);
    if (map == MAP_FAILED) {
      throw cannot_read(path);
    }
    map_ = map;
    ::madvise(map_, map_size_, MADV_SEQUENTIAL);
    text_ = std::string_view(static_cast<const char*>(map_), map_size_);
  } else {
    char buffer[1 << 16];
    while (true) {
      ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0) {
        throw cannot_read(path);
      }
      if (n == 0) {
        break;
      }
      read_.append(buffer, static_cast<std::size_t>(n));
    }
    text_ = read_;
  }
  if (text_.starts_with("\xEF\xBB\xBF")) {
    text_.remove_prefix(3);
  }
}

trace_file::~trace_file() {
  if (map_ != nullptr) {
    ::munmap(map_, map_size_);
  }
}

}  // namespace ratewall
