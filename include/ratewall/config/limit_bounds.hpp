#pragma once

// The largest numbers a limit may hold. The loader refuses anything beyond them with the
// file, line and key; the limiter (limit/policy.hpp) relies on them, so that its 64-bit
// nanosecond arithmetic is exact for every configuration `ratewall check` accepts.
//
//   durations and rate periods       at most k_max_duration (core/parse.hpp), 10000 days
//   limit (window algorithms,        at most k_max_limit_count
//          concurrency)
//   limit of sliding_window_log      at most k_max_log_limit (one timestamp per unit)
//   token and leaky bucket depth     burst × period / count at most k_max_duration, where
//                                    burst counts one more for a leaky bucket (the request in
//                                    service); this bounds the burst too
//
// A bucket's depth in the limiter is burst × ceil(period / count), at most twice the exact
// depth (ceil adds less than one nanosecond per unit, and a unit lasts at least one): 20000
// days, below the 2^61 ns (73 years) the algorithms allow a span.

#include <cstdint>

#include "ratewall/config/config.hpp"

namespace ratewall {

inline constexpr std::uint64_t k_max_limit_count = (std::uint64_t{1} << 62) - 1;

/// The sliding log keeps one timestamp per admitted unit; above this, use the counter.
inline constexpr std::uint64_t k_max_log_limit = 1'000'000;

/// `units` × rate.period / rate.count, rounded up to the nanosecond: how long a bucket of
/// `units` takes to refill from empty. Exact in 128 bits; saturates at nanos::max(). A rate
/// with a zero count or a period of at most 0 gives 0.
nanos bucket_depth(const rate_spec& rate, std::uint64_t units);

/// The units a bucket holds: `burst` for a token bucket, burst + 1 for a leaky bucket (one in
/// service and `burst` waiting); saturates at UINT64_MAX. 0 for the other algorithms.
std::uint64_t bucket_units(algorithm algo, std::uint64_t burst);

}  // namespace ratewall
