#pragma once

// `ratewall simulate --config F --trace T [--format F] [--compare B.yaml] [--html FILE]
// [--json] [--summary]` (DESIGN §9): replays a trace of requests offline through the real
// router, identity resolver and limiter (memory store), driven by a manual clock set to each
// request's time. Nothing is sent anywhere; the output depends only on the files, so the same
// input always prints the same thing.
//
// Traces (trace.hpp; the format is detected from the first line that is not empty, or named
// with --format csv|access-log|nginx):
//   csv         `time_s,method,path,api_key,user,ip[,cost[,latency_ms[,status]]]`, one request
//               per line:
//     time_s   seconds since the start of the trace ("0", "1.5", "0.001"), non-decreasing
//     method   GET, POST, ...
//     path     the request-target ("/api/search?q=x"); the Host is empty
//     api_key  sent as the API key header ("" = none)
//     user     sent as the user header ("" = none); honoured only when `ip` is a trusted
//              proxy, as on the wire
//     ip       the socket peer
//     cost     optional: overrides the route's cost for this request
//     latency_ms, status   optional: the upstream's time to its response head and the status
//              the client got; routes[].adaptive replays its factor from them
//   A first line starting with "time_s" is a header; empty lines and lines starting with '#'
//   are skipped; fields may be double-quoted ("" for a quote).
//   access-log  ratewall's own JSON access log. It holds no API key, user or (by default)
//     address in clear, so a client cannot be identified again: each line is replayed as the
//     subject the gateway logged ("log:<hash>"), with the plan the replayed config gives the
//     API key named in "key" (when it has one by that name), else the logged plan. A line
//     with a null subject was never limited (rejected, or no route): it replays as rejected
//     when a route matches. So a config whose `identify_by` or keys differ cannot re-identify
//     anyone: compare limits, plans and routes with an access log, identity rules with CSV.
//   nginx       the combined format: remote_addr is the peer, remote_user (when not "-") is
//     sent as the user header (as on the wire, it counts only from a trusted proxy).
// Each request ends before the next one starts, so a concurrency limit never fills; a leaky
// bucket's delay is reported, not waited for.
//
// Output, --json: one object per request
//   {"t":0.5,"method":"GET","path":"/api/search","route":"search","subject":"key:…",
//    "plan":"premium","decision":"allowed","limit":"burst","remaining":19,"retry_after_s":0}
// (decision: allowed, denied, shadow_denied, rejected, no_route; limit: the limit the
// numbers are about, null without one; retry_after_s: seconds with 3 decimals, rounded up,
// null when waiting cannot help; "delay_s" is added for a leaky bucket's delay), then
// {"summary":"route",...} per route and {"summary":"subject",...} per subject. Without
// --json, the same as aligned text tables. --summary leaves out the per-request lines (for
// large traces: printing them costs more than replaying). Subjects are the limiter's (API
// keys and users as keyed hashes under a fixed key, so they are the same on every run).
//
// --compare B.yaml replays the same trace against a second config, each with its own limiter,
// and prints per route and per subject the counts under each and how many requests were
// decided differently, then those requests (--json: {"differ":...} objects first, then the
// summaries with "a" and "b" counts). --html FILE also writes report_html.hpp's page.

#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ratewall/sim/trace.hpp"

namespace ratewall {

struct config;

struct simulate_options {
  std::string config_path;
  std::string trace_path;
  bool json = false;
  bool summary_only = false;           // --summary: no line per request
  std::optional<trace_format> format;  // nullopt: detected
  std::string compare_path;            // --compare: "" = none
  std::string html_path;               // --html: "" = none
};

/// Loads the config and replays the trace file. Returns the exit code: 0 done, 2 when the
/// config or the trace is invalid (the message, with file and line, goes to `err`).
int run_simulate(const simulate_options& options, std::ostream& out, std::ostream& err);

/// `ratewall simulate ARGS...` (the arguments after "simulate"): --config F (or -c F,
/// --config=F), --trace T (--trace=T), --format F, --compare B, --html FILE (each also as
/// --flag=value), --json, --summary, --help. Exit codes as run_simulate; bad
/// arguments are 2 with the usage on `err`.
int simulate_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

/// The replay itself, on a config already loaded and a trace already read (`trace_name` names
/// it in errors). For tests.
int simulate(const config& cfg, std::string_view trace_text, const std::string& trace_name,
             bool json, std::ostream& out, std::ostream& err);

/// The same with every option: `other` is the --compare config (null: none), whose file name
/// is options.compare_path; options.html_path, when set, is written. Paths of `options` other
/// than html_path are used only as names.
int simulate(const config& cfg, const config* other, std::string_view trace_text,
             const std::string& trace_name, const simulate_options& options, std::ostream& out,
             std::ostream& err);

/// The usage text of simulate_command.
extern const char* const k_simulate_usage;

}  // namespace ratewall
