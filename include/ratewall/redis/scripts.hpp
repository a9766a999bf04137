#pragma once

#include <string>
#include <string_view>

#include "ratewall/config/config.hpp"

namespace ratewall::redis {

/// The limiter script: one Lua unit per algorithm (token bucket, leaky bucket, fixed window,
/// sliding log, sliding counter, concurrency) and a driver that decides every limit of a route
/// for one subject in one atomic call, with the same semantics as the memory store
/// (include/ratewall/limit/*.hpp), on the Redis server clock in microseconds.
///
///   KEYS  one per limit of the route, all with the subject's hash tag.
///   ARGV  now ('' = the server clock, TIME), mode, cost, slot id, slot ttl (µs), n, then per
///         limit: algorithm code, limit, interval (µs), burst, window (µs), delay, shadow.
///   mode  'c': check, and charge everything only if every enforced limit allows (shadow
///              limits are charged when they allow themselves);
///         's': status, charges nothing;
///         'r': refresh the concurrency slot `slot id` in every key (the ttl again).
///   reply per limit: allowed, impossible, remaining, reset_after (µs), retry_after (µs, -1 =
///         never), delay (µs); in status mode two rows per limit: cost 0, then cost 1.
///
/// Keys get a TTL equal to the time until their state lapses, rounded up to the millisecond.
std::string_view limiter_script();
/// SHA-1 of limiter_script() in hex: the EVALSHA name.
const std::string& limiter_script_sha();

/// Fields per limit in ARGV, and values per decision in the reply.
inline constexpr std::size_t k_script_fixed_args = 6;
inline constexpr std::size_t k_script_args_per_limit = 7;
inline constexpr std::size_t k_script_values_per_decision = 6;

/// SHA-1 in hex (what Redis names scripts by).
std::string sha1_hex(std::string_view text);

/// The algorithm's code in the script.
int script_code(algorithm a);

}  // namespace ratewall::redis
