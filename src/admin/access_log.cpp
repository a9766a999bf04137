#include "ratewall/admin/access_log.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "ratewall/config/loader.hpp"
#include "ratewall/core/json_text.hpp"
#include "ratewall/core/log.hpp"
#include "ratewall/core/read_file.hpp"
#include "ratewall/http/identity.hpp"

namespace ratewall {

namespace {

// Longer paths are cut: a line stays small whatever a client sends.
constexpr std::size_t k_max_path_bytes = 1024;
constexpr std::size_t k_max_user_agent_bytes = 256;

// How long a flush waits for a pipe whose reader stalls before it drops the lines: a worker's
// event loop must not hang on a log collector.
constexpr int k_stalled_pipe_wait_ms = 100;

// Our own descriptor for stdout/stderr. For a pipe (docker, systemd), a new open file
// description of the same pipe, made non-blocking: a stalled reader then costs a bounded wait
// instead of a hung worker, without making the process's own stdout non-blocking. Anything
// else (a file, a terminal, a socket): a plain duplicate.
int stream_fd(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode)) {
    std::string self = "/proc/self/fd/" + std::to_string(fd);
    int own = ::open(self.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    if (own >= 0) {
      return own;
    }
  }
  return ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
}

void append_uint(std::string& out, std::uint64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

// Nanoseconds as milliseconds with three decimals (microseconds), exactly: "12.345".
void append_ms(std::string& out, nanos d) {
  auto us = static_cast<std::uint64_t>(std::max<std::int64_t>(d.count(), 0) / 1000);
  append_uint(out, us / 1000);
  char frac[5];
  std::snprintf(frac, sizeof frac, ".%03u", static_cast<unsigned>(us % 1000));
  out.append(frac);
}

void append_json_or_null(std::string& out, std::string_view s) {
  if (s.empty()) {
    out.append("null");
  } else {
    append_json_string(out, s);
  }
}

std::string_view path_of(std::string_view target) {
  target = target.substr(0, target.find_first_of("?#"));
  return target.substr(0, k_max_path_bytes);
}

// "YYYY-MM-DDTHH:MM:SS" of a Unix second, UTC.
void format_second(std::int64_t second, char (&out)[20]) {
  std::time_t t = static_cast<std::time_t>(second);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(out, sizeof out, "%Y-%m-%dT%H:%M:%S", &tm);
}

void split_time(std::chrono::system_clock::time_point time, std::int64_t& second, unsigned& ms) {
  auto total_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
  second = total_ms >= 0 ? total_ms / 1000 : (total_ms - 999) / 1000;
  ms = static_cast<unsigned>(total_ms - second * 1000);
}

// The client's address as log.client_address shows it ("" for null).
std::string client_text(const access_record& r, client_address_log mode,
                        std::string_view hash_key) {
  if (r.client.empty() || mode == client_address_log::off) {
    return {};
  }
  if (mode == client_address_log::raw) {
    return std::string(r.client);
  }
  return subject_hash("ip:" + std::string(r.client), hash_key);
}

void append_line(std::string& out, const access_record& r, std::string_view stamp, unsigned ms,
                 std::string_view subject_hash, std::string_view client) {
  out.append(R"({"time":")");
  out.append(stamp);
  char frac[6];
  std::snprintf(frac, sizeof frac, ".%03uZ", ms);
  out.append(frac);
  out.append(R"(","request_id":)");
  append_json_or_null(out, r.request_id);
  out.append(R"(,"method":)");
  append_json_or_null(out, r.method);
  out.append(R"(,"path":)");
  append_json_or_null(out, path_of(r.target));
  out.append(R"(,"host":)");
  append_json_or_null(out, r.host.substr(0, k_max_path_bytes));
  out.append(R"(,"route":)");
  append_json_or_null(out, r.route);
  out.append(R"(,"subject":)");
  append_json_or_null(out, subject_hash);
  out.append(R"(,"plan":)");
  append_json_or_null(out, r.plan);
  out.append(R"(,"key":)");
  append_json_or_null(out, r.key);
  out.append(R"(,"client":)");
  append_json_or_null(out, client);
  out.append(R"(,"user_agent":)");
  append_json_or_null(out, r.user_agent.substr(0, k_max_user_agent_bytes));
  out.append(R"(,"decision":")");
  out.append(to_string(r.decision));
  out.append(R"(","limit":)");
  append_json_or_null(out, r.limit);
  out.append(R"(,"status":)");
  append_uint(out, r.status);
  out.append(R"(,"upstream":)");
  append_json_or_null(out, r.upstream_address);
  out.append(R"(,"upstream_ms":)");
  if (r.upstream) {
    append_ms(out, *r.upstream);
  } else {
    out.append("null");
  }
  out.append(R"(,"duration_ms":)");
  append_ms(out, r.duration);
  out.append(R"(,"bytes_in":)");
  append_uint(out, r.bytes_in);
  out.append(R"(,"bytes_out":)");
  append_uint(out, r.bytes_out);
  if (r.cost) {
    out.append(R"(,"cost":)");
    append_uint(out, *r.cost);
  }
  out.append("}\n");
}

/// Why opening `path` failed with `err`. open(2) fails ENXIO on a FIFO with no reader (it does
/// not wait for one) and on a socket, which it never opens.
std::string open_failure(const std::string& path, int err) {
  struct stat st {};
  if (err == ENXIO && ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
    return "a socket, not a file or a FIFO";
  }
  return err == ENXIO ? "a FIFO with no reader" : std::strerror(err);
}

/// The refusal of a sink that cannot be opened, by the start, a reload or `ratewall check`.
config_error cannot_open(const log_config& cfg, const std::string& config_file,
                         const std::string& what, const std::string& reason) {
  return config_error(config_file, cfg.access_at.line, "log.access",
                      "cannot open " + what + ": " + reason);
}

}  // namespace

void format_access_line(std::string& out, const access_record& r, std::string_view hash_key,
                        client_address_log client) {
  std::int64_t second = 0;
  unsigned ms = 0;
  split_time(r.time, second, ms);
  char stamp[20];
  format_second(second, stamp);
  std::string hash = r.subject.empty() ? std::string() : subject_hash(r.subject, hash_key);
  append_line(out, r, stamp, ms, hash, client_text(r, client, hash_key));
}

void check_access_log(const log_config& cfg, const std::string& config_file) {
  if (cfg.access != access_log_sink::file) {
    return;
  }
  const std::string path = resolve_config_path(cfg.access_path, config_file);
  int err = 0;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      err = EISDIR;
    } else if (S_ISSOCK(st.st_mode)) {
      err = ENXIO;
    } else if (!S_ISFIFO(st.st_mode) &&
               ::faccessat(AT_FDCWD, path.c_str(), W_OK, AT_EACCESS) != 0) {
      err = errno;
    }
  } else if (errno == ENOENT) {
    // Created by the start, in its folder, or in the folder of the file a dangling link names
    // (open follows it): that folder must be one it may write in.
    std::string folder = std::filesystem::path(link_target(path)).parent_path().string();
    if (folder.empty()) {
      folder = ".";
    }
    if (::stat(folder.c_str(), &st) != 0) {
      err = errno;
    } else if (!S_ISDIR(st.st_mode)) {
      err = ENOTDIR;
    } else if (::faccessat(AT_FDCWD, folder.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
      err = errno;
    }
  } else {
    err = errno;
  }
  if (err != 0) {
    throw cannot_open(cfg, config_file, path, open_failure(path, err));
  }
}

bool keeps_access_log(const log_config& running, const log_config& next) {
  return running.access == next.access && running.access_path == next.access_path &&
         running.client_address == next.client_address;
}

access_log::access_log(const log_config& cfg, std::string hash_key, const std::string& config_file)
    : sink_(cfg.access),
      client_address_(cfg.client_address),
      path_(cfg.access == access_log_sink::file ? resolve_config_path(cfg.access_path, config_file)
                                                : std::string()),
      hash_key_(std::move(hash_key)) {
  switch (sink_) {
    case access_log_sink::off:
      return;
    case access_log_sink::stdout_stream:
      fd_ = stream_fd(STDOUT_FILENO);
      break;
    case access_log_sink::stderr_stream:
      fd_ = stream_fd(STDERR_FILENO);
      break;
    case access_log_sink::file:
      fd_ = open_file();
      break;
  }
  if (fd_ < 0) {
    const int err = errno;
    throw cannot_open(cfg, config_file, path_.empty() ? "the stream" : path_,
                      open_failure(path_, err));
  }
}

access_log::~access_log() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

int access_log::open_file() const {
  // Non-blocking: a FIFO with no reader fails at once (ENXIO) instead of holding the start, a
  // reload or a reopen until something reads it. A reader that then stalls is waited on as
  // one on standard output is (write_lines).
  return ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0640);
}

bool access_log::reopen() {
  if (sink_ != access_log_sink::file) {
    return true;
  }
  int fd = open_file();
  if (fd < 0) {
    const int err = errno;
    log_error("access log: cannot reopen " + path_ + ": " + open_failure(path_, err) +
              " (still writing to the old file)");
    return false;
  }
  std::lock_guard lock(write_mutex_);
  std::swap(fd, fd_);
  ::close(fd);
  return true;
}

void access_log::write_lines(std::string_view lines) {
  if (!enabled() || lines.empty()) {
    return;
  }
  const auto count = static_cast<std::uint64_t>(std::count(lines.begin(), lines.end(), '\n'));
  std::lock_guard lock(write_mutex_);
  while (!lines.empty()) {
    ssize_t n = ::write(fd_, lines.data(), lines.size());
    if (n > 0) {
      lines.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, k_stalled_pipe_wait_ms) > 0) {
        continue;
      }
    }
    // Disk full, pipe closed, or a reader that stopped reading: lose these lines, not the
    // process. The error log says so once per failed buffer.
    errors_.fetch_add(1, std::memory_order_relaxed);
    log_error(std::string("access log: write failed: ") + std::strerror(errno));
    return;
  }
  lines_.fetch_add(count, std::memory_order_relaxed);
}

access_log_writer::access_log_writer(std::shared_ptr<access_log> log) : log_(std::move(log)) {
  buffer_.reserve(k_flush_bytes + 4096);
}

access_log_writer::~access_log_writer() {
  flush();
}

void access_log_writer::write(const access_record& r) {
  if (!enabled()) {
    return;
  }
  std::int64_t second = 0;
  unsigned ms = 0;
  split_time(r.time, second, ms);
  if (second != cached_second_) {
    format_second(second, cached_stamp_);
    cached_second_ = second;
  }
  std::string_view hash;
  if (!r.subject.empty()) {
    if (r.subject != cached_subject_) {
      cached_subject_.assign(r.subject);
      cached_hash_ = subject_hash(r.subject, log_->hash_key());
    }
    hash = cached_hash_;
  }
  if (r.client != cached_client_) {
    cached_client_.assign(r.client);
    cached_client_hash_ = client_text(r, log_->client_address(), log_->hash_key());
  }
  append_line(buffer_, r, cached_stamp_, ms, hash, cached_client_hash_);
  if (buffer_.size() >= k_flush_bytes) {
    flush();
  }
}

void access_log_writer::flush() {
  if (buffer_.empty()) {
    return;
  }
  if (log_ != nullptr) {
    log_->write_lines(buffer_);
  }
  buffer_.clear();
}

void access_log_writer::set_log(std::shared_ptr<access_log> log) {
  flush();
  log_ = std::move(log);
  // Another log may use another hash key, or show clients otherwise.
  cached_subject_.clear();
  cached_hash_.clear();
  cached_client_.clear();
  cached_client_hash_.clear();
}

}  // namespace ratewall
