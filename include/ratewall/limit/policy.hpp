#pragma once

#include <algorithm>
#include <cstdint>

#include "ratewall/config/config.hpp"
#include "ratewall/core/clock.hpp"
#include "ratewall/limit/decision.hpp"

namespace ratewall {

/// One limit resolved for one plan: the numbers the algorithms run on, computed once at start.
///
/// Times handed to the algorithms are non-negative nanoseconds of a monotonic clock (steady
/// clock since boot, manual_clock from 0): all-zero state then means "never seen".
struct policy {
  algorithm algo = algorithm::token_bucket;
  // X-RateLimit-Limit, and the largest cost one request may have: burst (token bucket),
  // burst + 1 (leaky bucket: one in service plus `burst` queued), limit (everything else).
  std::uint64_t limit = 0;
  nanos interval{0};   // token and leaky bucket: time per unit (rate period / count, rounded up)
  nanos tolerance{0};  // token bucket: burst × interval; leaky bucket: the longest queue delay
  nanos window{0};     // the window algorithms
  bool delay = false;  // leaky bucket: hold excess requests instead of rejecting them
  bool shadow = false;
  store_failure on_store_error = store_failure::allow;
};

/// The policy of `limit` for a subject on `plan` (nullptr: the limit's own values). Throws
/// std::invalid_argument naming the limit when the values cannot be run (zero rate or window,
/// numbers whose products overflow 64-bit nanoseconds, a sliding log above k_max_log_limit).
policy resolve_policy(const limit_config& limit, const limit_override* plan, bool route_shadow,
                      store_failure default_on_store_error);

/// The sliding log keeps one timestamp per admitted unit; above this, use the counter.
inline constexpr std::uint64_t k_max_log_limit = 1'000'000;

namespace detail {

/// Floor division (C++ `/` truncates towards zero; window indexes must not).
inline std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) {
    --q;
  }
  return q;
}

/// A denial that waiting cannot cure.
inline decision impossible(std::uint64_t limit, std::uint64_t remaining, std::int64_t reset_after) {
  decision d;
  d.allowed = false;
  d.impossible = true;
  d.limit = limit;
  d.remaining = remaining;
  d.reset_after = nanos{std::max<std::int64_t>(reset_after, 0)};
  d.retry_after = k_never;
  return d;
}

}  // namespace detail

}  // namespace ratewall
