#pragma once

#include <string>
#include <string_view>

#include "ratewall/config/config.hpp"

namespace ratewall::redis {

/// Every algorithm (the default script holds them all).
inline constexpr unsigned k_all_script_algorithms = 0x3f;

/// The limiter script: one Lua unit per algorithm (token bucket, leaky bucket, fixed window,
/// sliding log, sliding counter, concurrency) and a driver that decides every limit of a route
/// for one subject in one atomic call, with the same semantics as the memory store
/// (include/ratewall/limit/*.hpp), on the Redis server clock in microseconds.
///
/// A route's script holds the units of the algorithms its limits use (`algorithms`: a mask of
/// script_bit), since Redis runs the whole text of a script on every call; all its variants
/// are built and named (SHA-1) once, at first use.
///
///   KEYS  one per limit of the route, all with the subject's hash tag.
///   ARGV  now ('' = the server clock, TIME), mode, cost, unit id, unit ttl (µs), n, then per
///         limit: algorithm code, limit, interval (µs), burst, window (µs), delay, shadow.
///   mode  'c': check, and charge everything only if every enforced limit allows (shadow
///              limits are charged when they allow themselves);
///         's': status, charges nothing;
///         'r': refresh the concurrency unit `unit id` in every key (the ttl again).
///   reply per limit: allowed, impossible, remaining, reset_after (µs), retry_after (µs, -1 =
///         never), delay (µs); in status mode two rows per limit: cost 0, then cost 1.
///
/// Keys get a TTL equal to the time until their state lapses, rounded up to the millisecond.
std::string_view limiter_script(unsigned algorithms = k_all_script_algorithms);
/// SHA-1 of limiter_script(algorithms) in hex: the EVALSHA name.
const std::string& limiter_script_sha(unsigned algorithms = k_all_script_algorithms);

/// Fields per limit in ARGV, and values per decision in the reply.
inline constexpr std::size_t k_script_fixed_args = 6;
inline constexpr std::size_t k_script_args_per_limit = 7;
inline constexpr std::size_t k_script_values_per_decision = 6;

/// SHA-1 in hex (what Redis names scripts by).
std::string sha1_hex(std::string_view text);

/// The algorithm's code in the script, and its bit in a script's `algorithms` mask.
int script_code(algorithm a);
unsigned script_bit(algorithm a);

}  // namespace ratewall::redis
