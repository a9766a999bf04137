#include "ratewall/sim/trace_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
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

// The mapping a SIGBUS may come from, and the message for it.
std::atomic<const char*> g_mapped{nullptr};
std::atomic<std::size_t> g_mapped_size{0};
char g_bus_message[640];
std::size_t g_bus_message_size = 0;
struct sigaction g_previous_bus {};

void on_bus_error(int, siginfo_t* info, void*) {
  const auto* at = static_cast<const char*>(info->si_addr);
  const char* begin = g_mapped.load();
  // si_code > 0: a fault the kernel raised, whose address is meaningful.
  if (info->si_code > 0 && begin != nullptr && at >= begin && at < begin + g_mapped_size.load()) {
    (void)!::write(STDERR_FILENO, g_bus_message, g_bus_message_size);
    ::_exit(2);
  }
  // Not the trace: the signal again, under the action there was before.
  ::sigaction(SIGBUS, &g_previous_bus, nullptr);
  ::raise(SIGBUS);
}

void guard_mapping(const char* begin, std::size_t size, const std::string& path) {
  const std::string message = path.substr(0, 512) +
                              ": the file was truncated while it was read (a log rotated?): run "
                              "again on a copy\n";
  message.copy(g_bus_message, sizeof g_bus_message);
  g_bus_message_size = std::min(message.size(), sizeof g_bus_message);
  g_mapped_size = size;
  g_mapped = begin;
  struct sigaction action {};
  action.sa_sigaction = on_bus_error;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, &g_previous_bus);
}

void unguard_mapping() {
  ::sigaction(SIGBUS, &g_previous_bus, nullptr);
  g_mapped = nullptr;
  g_mapped_size = 0;
}

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
    guard_mapping(static_cast<const char*>(map_), map_size_, path);
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
    unguard_mapping();
    ::munmap(map_, map_size_);
  }
}

}  // namespace ratewall
