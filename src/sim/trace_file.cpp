#include "ratewall/sim/trace_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <sstream>
#include <utility>
#include <vector>

#include "ratewall/core/huge_pages.hpp"
#include "ratewall/core/parse.hpp"
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
  descriptor(descriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
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

// The trace at `path`, open, and what fstat says of it into `st`.
descriptor open_trace(const std::string& path, struct stat& st) {
  descriptor fd(open_trace(path));
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) {
    throw cannot_read(path);
  }
  return fd;
}

bool null_device(const struct stat& st) {
  return S_ISCHR(st.st_mode) && major(st.st_rdev) == 1 && minor(st.st_rdev) == 3;
}

}  // namespace

trace_file::trace_file(const std::string& path) {
  struct stat st {};
  const descriptor fd = open_trace(path, st);
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
    read_regular(fd.get(), static_cast<std::size_t>(st.st_size), path);
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

trace_file::trace_file(int fd, std::size_t size, const std::string& path) {
  if (::lseek(fd, 0, SEEK_SET) != 0) {
    throw cannot_read(path);
  }
  read_regular(fd, size, path);
  if (text_.starts_with("\xEF\xBB\xBF")) {
    text_.remove_prefix(3);
  }
}

void trace_file::read_regular(int fd, std::size_t size, const std::string& path) {
  file_.reset(new char[size]);  // not zeroed: each byte used is read
  advise_huge_pages(file_.get(), size);
  std::size_t got = 0;
  while (got < size) {
    const std::size_t n = read_some(fd, file_.get() + got, size - got, path);
    if (n == 0) {
      break;  // truncated while read: what was there
    }
    got += n;
  }
  text_ = std::string_view(file_.get(), got);
}

namespace {

// A request read and not yet handed over: its views point into the buffer it was read into
// (and that buffer's storage), or into copies once that buffer is used again.
struct held {
  trace_request r;
  std::size_t buffer = 0;
};

constexpr std::size_t k_owned = ~std::size_t{0};

// Copies the text h's views point to into `owned`, and points them there.
void own(held& h, std::deque<std::string>& owned) {
  for (std::string_view* v : {&h.r.method, &h.r.path, &h.r.api_key, &h.r.user, &h.r.ip,
                              &h.r.subject, &h.r.plan, &h.r.key_name}) {
    *v = v->empty() ? std::string_view() : std::string_view(owned.emplace_back(*v));
  }
  h.buffer = k_owned;
}

// Whether `text` holds its first line that is not empty (as trace.hpp reads lines) whole.
bool first_line_whole(std::string_view text) {
  for (auto nl = text.find('\n'); nl != std::string_view::npos; nl = text.find('\n')) {
    std::string_view line = text.substr(0, nl);
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    if (!trim(line).empty()) {
      return true;
    }
    text.remove_prefix(nl + 1);
  }
  return false;
}

// A buffer a piece of the file is read into, the unescaped fields of its requests, and how
// many of them are held.
struct piece_buffer {
  std::unique_ptr<char[]> bytes;
  std::size_t capacity = 0;
  std::deque<std::string> storage;
  std::uint64_t piece = 0;  // the piece it holds
  std::size_t held = 0;
};

// At most this many buffers: enough for k_stream_window lines of an access log (about 400
// bytes each) in pieces of k_stream_piece_bytes, so that only a request held far longer than
// its neighbours (a time far ahead) has its text copied. A buffer none of whose requests is
// held is used again: an ordered CSV trace needs two.
constexpr std::size_t k_buffers = 32;

// The buffer for the next piece: a free one (not `current`, which holds the line the piece
// before cut), else a new one, else the one with the oldest piece.
std::size_t next_buffer(const std::vector<piece_buffer>& buffers, std::size_t current) {
  std::size_t oldest = k_owned;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    if (i == current) {
      continue;
    }
    if (buffers[i].held == 0) {
      return i;
    }
    if (oldest == k_owned || buffers[i].piece < buffers[oldest].piece) {
      oldest = i;
    }
  }
  return buffers.size() < k_buffers ? buffers.size() : oldest;
}

}  // namespace

stream_outcome stream_trace(const std::string& path, std::optional<trace_format> format,
                            std::ostream& warnings, const std::function<void(nanos)>& start,
                            const std::function<void(const trace_request&)>& each,
                            std::optional<trace_file>& whole, std::size_t piece_bytes) {
  // Only a regular file opened here, read from its start: "-" shares the standard input's
  // offset, and a FIFO opened twice loses what its writer wrote between.
  struct stat st {};
  if (path == "-" || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
    whole.emplace(path);  // trace_file's rules, and its messages
    return stream_outcome::whole;
  }
  const descriptor fd = open_trace(path, st);
  // What the file holds now: what is appended while it is read is not part of the trace.
  const auto size = static_cast<std::size_t>(st.st_size);
  const auto read_whole = [&] {
    whole.emplace(fd.get(), size, path);
    return stream_outcome::whole;
  };
  if (!S_ISREG(st.st_mode)) {
    whole.emplace(path);  // replaced since stat
    return stream_outcome::whole;
  }
  std::size_t unread = size;
  std::ostringstream reported;
  std::optional<trace_line_reader> reader;
  std::vector<held> window;  // [first, end) is held, in time order
  std::size_t first = 0;
  std::deque<std::string> owned;  // the text of requests held longer than their piece
  bool started = false;
  nanos offset{0};  // subtracted from a log's times: its earliest
  nanos last{0};    // the time of the last request handed over
  std::vector<piece_buffer> buffers;
  buffers.reserve(k_buffers);  // never moved: views point into their storage
  std::size_t current = k_owned;
  std::string_view carry;  // a line cut by the end of the piece before
  bool shrank = false;     // the file ended before the size it had at the start

  // Hands over the held requests but the last `keep`.
  const auto hand_over = [&](std::size_t keep) {
    for (; window.size() - first > keep; ++first) {
      trace_request& r = window[first].r;
      if (window[first].buffer != k_owned) {
        --buffers[window[first].buffer].held;
      }
      if (!started) {
        started = true;
        const bool log = format != trace_format::csv;
        offset = log ? r.time : nanos{0};
        start(log ? trace_origin(r.time) : nanos{0});
      }
      last = r.time;
      r.time -= offset;
      each(r);
    }
    if (first == window.size()) {
      owned.clear();  // nothing points there
    }
  };

  try {
    for (std::uint64_t piece = 0;; ++piece) {
      const std::size_t index = next_buffer(buffers, current);
      if (index == buffers.size()) {
        buffers.emplace_back();
      }
      piece_buffer& buffer = buffers[index];
      // Long lines fill the buffers before k_stream_window requests do: the earliest are
      // handed over rather than copied, down to k_stream_min_window.
      while (buffer.held > 0 && window.size() - first > k_stream_min_window) {
        hand_over(window.size() - first - 1);
      }
      // What is still held of the piece it had moves out first.
      for (std::size_t i = first; i < window.size() && buffer.held > 0; ++i) {
        if (window[i].buffer == index) {
          own(window[i], owned);
          --buffer.held;
        }
      }
      buffer.storage.clear();
      buffer.piece = piece;
      if (first > 0 && first >= window.size() - first) {
        window.erase(window.begin(), window.begin() + static_cast<std::ptrdiff_t>(first));
        first = 0;
      }
      // Room for the cut line and a piece (a line longer than a piece doubles the buffer).
      const std::size_t wanted = std::max({piece_bytes, 2 * carry.size(), std::size_t{64}});
      if (buffer.capacity < wanted) {
        buffer.bytes.reset(new char[wanted]);
        buffer.capacity = wanted;
      }
      if (!carry.empty()) {  // memcpy takes no null pointer, even for 0 bytes
        std::memcpy(buffer.bytes.get(), carry.data(), carry.size());
      }
      std::size_t filled = carry.size();
      bool end = false;
      while (filled < buffer.capacity && !end) {
        const std::size_t n = read_some(fd.get(), buffer.bytes.get() + filled,
                                        std::min(buffer.capacity - filled, unread), path);
        filled += n;
        unread -= n;
        end = n == 0 || unread == 0;
        // Cut while read: what was there is the trace, without the line the cut went through.
        shrank = shrank || (n == 0 && unread > 0);
      }
      std::string_view text(buffer.bytes.get(), filled);
      if (piece == 0) {
        if (text.starts_with("\xEF\xBB\xBF")) {
          text.remove_prefix(3);
        }
        if (!format) {
          // Detected from the first line that is not empty, which must be whole in this piece.
          if (!end && !first_line_whole(text)) {
            return read_whole();
          }
          format = detect_trace_format(text);
        }
        reader.emplace(path, *format, reported);
      }
      // Each whole line; the last one, cut by the end of the buffer, waits for the next piece.
      const std::size_t fresh = window.size();
      while (!text.empty()) {
        const std::size_t nl = text.find('\n');
        if (nl == std::string_view::npos && (!end || shrank)) {
          break;
        }
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        if (!line.empty() && line.back() == '\r') {
          line.remove_suffix(1);
        }
        if (auto r = reader->next(line, buffer.storage)) {
          if (*format == trace_format::csv) {
            // In order (the reader refuses a time that decreases): nothing to hold back.
            if (!started) {
              started = true;
              start(nanos{0});
            }
            each(*r);
          } else {
            window.push_back({*r, index});
            ++buffer.held;
          }
        }
      }
      carry = text;
      current = index;
      // In time order (a stable sort: lines with the same time keep their order), after what
      // is held; a line earlier than one handed over cannot be.
      const auto earlier = [](const held& a, const held& b) { return a.r.time < b.r.time; };
      const auto from = window.begin() + static_cast<std::ptrdiff_t>(fresh);
      if (!std::is_sorted(from, window.end(), earlier)) {
        std::stable_sort(from, window.end(), earlier);
      }
      if (from != window.end() && started && from->r.time < last) {
        return read_whole();
      }
      if (fresh > first && from != window.end() && earlier(*from, *(from - 1))) {
        std::inplace_merge(window.begin() + static_cast<std::ptrdiff_t>(first), from, window.end(),
                           earlier);
      }
      if (end) {
        reader->finish();
        hand_over(0);
        break;
      }
      hand_over(k_stream_window);
    }
  } catch (const trace_error&) {
    warnings << reported.str();
    throw;
  }
  // Read during the replay: a log rotated with copytruncate meanwhile (and written again)
  // was cut, or is shorter now than at the start.
  struct stat after {};
  if (shrank || (::fstat(fd.get(), &after) == 0 && after.st_size < st.st_size)) {
    reported << path << ": the file shrank while it was read (rotated with copytruncate?): "
             << "replay a copy\n";
  }
  warnings << reported.str();
  return stream_outcome::streamed;
}

}  // namespace ratewall
