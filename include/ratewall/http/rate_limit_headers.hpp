#pragma once

// The rate-limit part of a response, rendered without any HTTP library: header name/value
// pairs and the JSON body of a 429 (DESIGN §6). The session copies them into its Beast message.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ratewall/config/config.hpp"
#include "ratewall/limit/decision.hpp"

namespace ratewall {

// header_options (config.hpp) says which of these headers are written.

using header_list = std::vector<std::pair<std::string_view, std::string>>;

/// Appends to `out`, for a response that went through a limit (`d` is the most restrictive):
///   X-RateLimit-Limit      d.limit
///   X-RateLimit-Remaining  d.remaining
///   X-RateLimit-Reset      whole seconds until the quota is whole, rounded up (0 when it is
///                          already whole); with reset_epoch: wall_now + that time, in Unix
///                          seconds rounded up
///   Retry-After            only when denied: whole seconds, rounded up, at least 1 — sent
///                          even when `enabled` is false, since it is plain HTTP, not a quota
///   RateLimit-Policy       ietf_draft: "<limit_name>";q=<limit>;w=<window_seconds>
///                          (";w" left out when window_seconds is 0)
///   RateLimit              ietf_draft: "<limit_name>";r=<remaining>;t=<reset seconds>
/// Header names are static strings; values fit the small-string buffer, so this allocates only
/// for the vector and the two draft headers.
void render_rate_limit_headers(const decision& d, std::string_view limit_name,
                               std::uint64_t window_seconds, const header_options& options,
                               std::chrono::system_clock::time_point wall_now, header_list& out);

/// The window a limit speaks of in RateLimit-Policy (`w=`), in whole seconds rounded up:
///   token_bucket, leaky_bucket    the time a full quota takes to refill,
///                                 max(burst, 1) × period / count
///   fixed_window, sliding_window_log, sliding_window_counter    the window
///   concurrency                   0 (no window: `w` is left out)
/// With `plan`, its overrides replace the limit's rate, burst and window. Exact (128-bit) for
/// any values; saturates at UINT64_MAX.
std::uint64_t policy_window_seconds(const limit_config& limit,
                                    const limit_override* plan = nullptr);

/// Retry-After of a denied decision: retry_after in whole seconds, rounded up, at least 1.
std::uint64_t retry_after_seconds(const decision& d);

/// `nanos` as whole seconds, rounded up.
std::uint64_t ceil_seconds(nanos d);

inline constexpr std::string_view k_problem_content_type = "application/problem+json";

/// The JSON body of a 429 (RFC 9457 problem details), one line:
///   {"type":"about:blank","title":"Too Many Requests","status":429,
///    "detail":"...","route":"<route>","policy":"<limit name>","retry_after":<seconds>}
/// Route and limit names are JSON-escaped. With another `status` (routes[].deny.status), the
/// title is that status's reason phrase and "status" that number.
std::string render_problem_body(std::string_view route, std::string_view limit_name,
                                const decision& d, unsigned status = 429);

/// The RFC 9110 reason phrase of a 4xx/5xx status ("Too Many Requests"); "Request Denied"
/// for codes without one.
std::string_view denial_reason(unsigned status);

/// The answer to a denied request, as `deny` (route_config::deny) asks for it.
struct denial {
  unsigned status = 429;
  std::string_view content_type;  // views deny.content_type
  std::string body;
};

/// The custom body when one is configured, else the problem body with deny.status.
denial render_denial(const deny_config& deny, std::string_view route, std::string_view limit_name,
                     const decision& d);

}  // namespace ratewall
