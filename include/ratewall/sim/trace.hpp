#pragma once

// The traces `ratewall simulate` replays (DESIGN §9), read from one text in memory:
//
//   csv         time_s,method,path,api_key,user,ip[,cost[,latency_ms[,status]]] (see
//               simulate.hpp). Written by hand or by a script: any bad line is an error
//               (file:line), times never decrease.
//   access-log  ratewall's own JSON access log (access_log.hpp), one object per line.
//   nginx       nginx's "combined" format: `$remote_addr - $remote_user [$time_local]
//               "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"`
//               (more fields after these are ignored).
//
// Logs are real traffic: a malformed line (not JSON, a bad time, a request line that is not
// "METHOD TARGET PROTOCOL", a line over 64 KiB, ...) is skipped and reported with file:line
// (the first k_reported_bad_lines of them, then a count), unless malformed lines outnumber the
// good ones: then the trace is refused (most likely the wrong format). Log lines are replayed
// in time order (a stable sort: workers flush their buffers at different moments, so a log is
// slightly out of order), times relative to the earliest line (trace::origin places it).
// Log times run from 1970 to 2200; an impossible date (31 February) is malformed.

#include <cstdint>
#include <deque>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ratewall/core/clock.hpp"

namespace ratewall {

enum class trace_format : std::uint8_t { csv, access_log, nginx };

/// "csv", "access-log", "nginx".
std::string_view to_string(trace_format f);
/// The inverse of to_string; nullopt for anything else.
std::optional<trace_format> parse_trace_format(std::string_view text);
/// The format of a trace, from its first line that is not empty: '{' starts an access-log
/// line, `ADDRESS - USER [` an nginx one, anything else is CSV.
trace_format detect_trace_format(std::string_view text);

/// One request of a trace. The views point into the trace text or into trace::storage.
struct trace_request {
  std::uint32_t line = 0;
  nanos time{0};  // since the start of the trace
  std::string_view method;
  std::string_view path;  // the request-target
  std::string_view api_key;
  std::string_view user;
  std::string_view ip;  // "" = unknown (an access log that hashed or left out the address)
  std::optional<std::uint64_t> cost;
  // What the upstream did with it, as the trace saw it (adaptive limits replay these): the
  // time to its response head (negative: unknown, or not forwarded) and the status the client
  // got (0: unknown).
  nanos latency{-1};
  std::uint16_t status = 0;
  // Access log: the client was identified by the gateway and cannot be again (its API key is
  // not in the log). The replay uses these instead of the identity rules.
  bool logged_identity = false;
  std::string_view subject;   // the logged subject hash; "" = the gateway identified no one
  std::string_view plan;      // the logged plan ("" = default)
  std::string_view key_name;  // the logged API key name ("" = none)
};

struct trace {
  trace_format format = trace_format::csv;
  std::vector<trace_request> requests;  // in time order
  std::deque<std::string> storage;      // unescaped fields the views point to
  std::uint64_t bad_lines = 0;          // malformed log lines skipped
  // Where the trace's time 0 is on the gateway's clock (since 2020-01-01 UTC, core/clock.hpp):
  // a log's first time, so that fixed windows align as the gateway's did (a day's window is a
  // UTC day); 0 for CSV, or a log before 2020.
  nanos origin{0};
};

class trace_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr std::size_t k_reported_bad_lines = 10;
inline constexpr std::size_t k_max_log_line_bytes = 64 * 1024;

/// Reads a trace one line at a time, as read_trace does (trace_stream reads a file in pieces
/// with it). Lines are numbered from 1 in the order they are given.
class trace_line_reader {
 public:
  trace_line_reader(std::string name, trace_format format, std::ostream& warnings);

  /// The request on the next line (given without its "\n" or "\r\n"), or nullopt for one
  /// that holds none: empty, a CSV comment or header, a malformed log line (reported to
  /// `warnings`). Views point into `line` or `storage`. Throws trace_error for a bad CSV line
  /// (CSV times never decrease).
  std::optional<trace_request> next(std::string_view line, std::deque<std::string>& storage);

  /// After the last line: reports the malformed lines skipped; throws trace_error when they
  /// outnumber the requests.
  void finish();

  std::uint64_t bad_lines() const { return bad_lines_; }

 private:
  std::string name_;
  trace_format format_;
  std::ostream& warnings_;
  std::uint32_t line_no_ = 0;
  std::uint64_t requests_ = 0;
  std::uint64_t bad_lines_ = 0;
  nanos last_{0};  // CSV: the time of the request before, as written
  std::string last_text_ = "0";
  std::vector<std::string_view> fields_;
};

/// trace::origin of a log whose earliest line is at `first` (since the epoch).
nanos trace_origin(nanos first);

/// Reads `text` (which must outlive the result) as `format`. `name` names it in messages.
/// Malformed log lines go to `warnings` as "name:line: problem" (the first
/// k_reported_bad_lines, then "name: N malformed lines skipped"). Throws trace_error for a bad
/// CSV line, or when a log has more malformed lines than good ones.
trace read_trace(std::string_view text, const std::string& name, trace_format format,
                 std::ostream& warnings);

}  // namespace ratewall
