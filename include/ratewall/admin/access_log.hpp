#pragma once

// The access log: one JSON object per line and request (DESIGN §9), for example
//
//   {"time":"2024-05-01T12:00:00.123Z","request_id":"6f0c…","method":"GET",
//    "path":"/api/search","host":"api.example.com","route":"search",
//    "subject":"3f2a9c1b0d4e5f60","plan":"premium","client":"9b1c0a7d3e2f4a65",
//    "user_agent":"curl/8.1","decision":"allowed","limit":null,"status":200,
//    "upstream":"10.0.0.5:8000","upstream_ms":12.345,"duration_ms":13.002,"bytes_in":0,
//    "bytes_out":1234}
//
// (on one line). Every key is always present; null where it does not apply. "subject" is
// subject_hash() of the limiter subject (16 hex digits): never an API key, user id or address
// in clear. "client" is the client's address as log.client_address says: as it is (raw), as
// subject_hash() of "ip:<address>" (hashed, the default: the same hash "subject" has for a
// client identified by its address) or null (off). "path" is the request path without query
// or fragment, at most 1024 bytes; "user_agent" at most 256 bytes; every text is escaped so
// that every line is valid JSON whatever the client sent. The gateway's own answers are lines
// too (400, 408, 413, 431 for a refused head or body, 401, 404, 429, 502, 504): a head that
// could not be read has null method and path.
//
// Writing never takes a lock per request: each worker thread formats into its own
// access_log_writer, whose buffer goes to the sink with one write(2) when it passes 32 KiB and
// whenever the thread calls flush() (once per event-loop turn or on a short timer).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "ratewall/admin/metrics.hpp"
#include "ratewall/config/config.hpp"
#include "ratewall/core/clock.hpp"

namespace ratewall {

/// One request, as the session saw it. Views need only live for the call to write().
struct access_record {
  std::chrono::system_clock::time_point time;  // when the request head was complete
  std::string_view request_id;
  std::string_view method;
  std::string_view target;      // the request-target; the query and fragment are cut off here
  std::string_view host;        // canonical host, without port; "" = null
  std::string_view route;       // "" = none matched (null)
  std::string_view subject;     // the limiter subject, hashed here; "" = not identified (null)
  std::string_view plan;        // "" = the default plan (null)
  std::string_view key;         // the name of the API key that named the client; "" = null
  std::string_view client;      // the client's address, as identity resolved it; "" = null
  std::string_view user_agent;  // "" = null
  std::string_view upstream_address;  // the target the request went to; "" = not forwarded
  request_decision decision = request_decision::allowed;
  std::string_view limit;         // the limit that denied (or shadow-denied); "" = null
  unsigned status = 0;            // sent to the client
  std::optional<nanos> upstream;  // until the upstream's response head; nullopt = not asked
  nanos duration{0};              // head complete .. response sent
  std::uint64_t bytes_in = 0;     // request body bytes read
  std::uint64_t bytes_out = 0;    // response body bytes sent
  // Charged when the response ended (routes[].cost_from_response); unset: not such a route,
  // and the field is left out of the line.
  std::optional<std::uint64_t> cost;
};

/// What `ratewall check` asks of a file sink: throws the config_error access_log's constructor
/// would for a path it could not open (a missing folder, a directory, no write permission),
/// found without opening it, so that a check neither creates the file (with its own owner) nor
/// ends the stream of a FIFO's reader. Whether a FIFO has a reader is left to the start.
void check_access_log(const log_config& cfg, const std::string& config_file);

/// Whether a gateway made for `next` keeps the sink open for `running` (and the lines other
/// workers are writing to it) instead of opening its own: a reload then needs no new open.
bool keeps_access_log(const log_config& running, const log_config& next);

/// The sink: off, stdout, stderr or a file opened for appending. Shared by every writer;
/// thread-safe. Whole buffers are written under a mutex, so lines of different threads never
/// interleave even on a pipe.
class access_log {
 public:
  /// Opens the sink of `cfg` (a file is created with mode 0640; a relative path is taken from
  /// `config_file`'s directory). `hash_key` keys the subject hashes (use the gateway's). Throws
  /// config_error naming `config_file`, the line of log.access and the path when it cannot open.
  access_log(const log_config& cfg, std::string hash_key, const std::string& config_file = "");
  ~access_log();
  access_log(const access_log&) = delete;
  access_log& operator=(const access_log&) = delete;

  bool enabled() const { return sink_ != access_log_sink::off; }
  const std::string& hash_key() const { return hash_key_; }
  client_address_log client_address() const { return client_address_; }

  /// Reopens the file at its path, for log rotation (the server calls it on SIGUSR1/SIGHUP).
  /// Writes in progress finish on the old file; the next go to the new one. Nothing for
  /// stdout/stderr. Returns false (and keeps the old file) when the path cannot be opened.
  bool reopen();

  /// Writes whole lines. Retries short writes and EINTR; waits up to 100 ms for a pipe whose
  /// reader stalls (stdout/stderr pipes are written non-blocking), then drops the rest and
  /// counts an error.
  void write_lines(std::string_view lines);

  std::uint64_t lines_written() const { return lines_.load(std::memory_order_relaxed); }
  std::uint64_t write_errors() const { return errors_.load(std::memory_order_relaxed); }

 private:
  int open_file() const;

  access_log_sink sink_;
  client_address_log client_address_;
  std::string path_;
  std::string hash_key_;
  std::mutex write_mutex_;
  int fd_ = -1;  // ours (a dup for stdout/stderr); dup2'ed over by reopen()
  std::atomic<std::uint64_t> lines_{0};
  std::atomic<std::uint64_t> errors_{0};
};

/// One per worker thread; not thread-safe. Destroying it flushes.
class access_log_writer {
 public:
  static constexpr std::size_t k_flush_bytes = 32 * 1024;

  /// `log` may be null: nothing is written.
  explicit access_log_writer(std::shared_ptr<access_log> log);
  ~access_log_writer();
  access_log_writer(const access_log_writer&) = delete;
  access_log_writer& operator=(const access_log_writer&) = delete;

  /// Whether write() does anything (skip building the record when not).
  bool enabled() const { return log_ != nullptr && log_->enabled(); }

  /// Formats one line into the buffer; flushes when the buffer passes k_flush_bytes.
  void write(const access_record& r);
  /// Hands the buffer to the sink.
  void flush();
  /// Flushes, then writes to `log` from now on (a reload that changed `log.access`).
  void set_log(std::shared_ptr<access_log> log);

  std::size_t buffered() const { return buffer_.size(); }

 private:
  std::shared_ptr<access_log> log_;
  std::string buffer_;
  // The same second and the same client come back often: their text is kept.
  std::int64_t cached_second_ = -1;
  char cached_stamp_[20] = {};  // "YYYY-MM-DDTHH:MM:SS"
  std::string cached_subject_;
  std::string cached_hash_;
  std::string cached_client_;
  std::string cached_client_hash_;
};

/// Formats one line (with its '\n') onto `out`; what access_log_writer::write does, for tests
/// and tools. `hash_key` keys the subject hash (and the client's, as `client` says).
void format_access_line(std::string& out, const access_record& r, std::string_view hash_key,
                        client_address_log client = client_address_log::hashed);

}  // namespace ratewall
