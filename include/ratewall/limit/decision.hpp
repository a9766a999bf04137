#pragma once

#include <cstdint>

#include "ratewall/core/clock.hpp"

namespace ratewall {

/// `retry_after` of a request that no amount of waiting admits: its cost exceeds what the
/// limit can ever hold (cost > burst, cost > limit). Headers should not print it as a number.
inline constexpr nanos k_never = nanos::max();

/// The answer of one limit to one request.
struct decision {
  bool allowed = true;
  bool impossible = false;  // denied for good: the cost exceeds the limit (retry_after = k_never)
  std::uint64_t limit = 0;  // the quota reported in X-RateLimit-Limit
  std::uint64_t remaining = 0;  // whole units left (after this request when allowed)
  nanos reset_after{0};         // until the quota is whole again
  nanos retry_after{0};         // denied: until this same request would be allowed; else 0
  nanos delay{0};               // allowed but to be held this long first (leaky bucket delay)
};

}  // namespace ratewall
