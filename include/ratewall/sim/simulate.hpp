#pragma once

// `ratewall simulate --config F --trace T.csv [--json]` (DESIGN §9): replays a trace of
// requests offline through the real router, identity resolver and limiter (memory store),
// driven by a manual clock set to each request's time. Nothing is sent anywhere; the output
// depends only on the two files, so the same input always prints the same thing.
//
// Trace: CSV, one request per line, `time_s,method,path,api_key,user,ip[,cost]`:
//   time_s   seconds since the start of the trace ("0", "1.5", "0.001"), non-decreasing
//   method   GET, POST, ...
//   path     the request-target ("/api/search?q=x"); the Host is empty
//   api_key  sent as the API key header ("" = none)
//   user     sent as the user header ("" = none); honoured only when `ip` is a trusted proxy,
//            as on the wire
//   ip       the socket peer
//   cost     optional: overrides the route's cost for this request
// A first line starting with "time_s" is a header; empty lines and lines starting with '#'
// are skipped; fields may be double-quoted ("" for a quote). Each request ends before the
// next one starts, so a concurrency limit never fills; a leaky bucket's delay is reported, not
// waited for.
//
// Output, --json: one object per request
//   {"t":0.5,"method":"GET","path":"/api/search","route":"search","subject":"key:…",
//    "plan":"premium","decision":"allowed","limit":"burst","remaining":19,"retry_after_s":0}
// (decision: allowed, denied, shadow_denied, rejected, no_route; limit: the limit the
// numbers are about, null without one; retry_after_s: seconds with 3 decimals, rounded up,
// null when waiting cannot help; "delay_s" is added for a leaky bucket's delay), then
// {"summary":"route",...} per route and {"summary":"subject",...} per subject. Without
// --json, the same as aligned text tables. Subjects are the limiter's (API keys and users as
// keyed hashes under a fixed key, so they are the same on every run).

#include <iosfwd>
#include <span>
#include <string>
#include <string_view>

namespace ratewall {

struct config;

struct simulate_options {
  std::string config_path;
  std::string trace_path;
  bool json = false;
};

/// Loads the config and replays the trace file. Returns the exit code: 0 done, 2 when the
/// config or the trace is invalid (the message, with file and line, goes to `err`).
int run_simulate(const simulate_options& options, std::ostream& out, std::ostream& err);

/// `ratewall simulate ARGS...` (the arguments after "simulate"): --config F (or -c F,
/// --config=F), --trace T (--trace=T), --json, --help. Exit codes as run_simulate; bad
/// arguments are 2 with the usage on `err`.
int simulate_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

/// The replay itself, on a config already loaded and a trace already read (`trace_name` names
/// it in errors). For tests.
int simulate(const config& cfg, std::string_view trace_text, const std::string& trace_name,
             bool json, std::ostream& out, std::ostream& err);

/// The usage text of simulate_command.
extern const char* const k_simulate_usage;

}  // namespace ratewall
