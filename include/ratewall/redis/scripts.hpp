#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ratewall/config/config.hpp"
#include "ratewall/limit/policy.hpp"
#include "ratewall/redis/reply.hpp"

namespace ratewall::redis {

/// Every algorithm (the default script holds them all).
inline constexpr unsigned k_all_script_algorithms = 0x3f;

/// The limiter script: one Lua unit per algorithm (token bucket, leaky bucket, fixed window,
/// sliding log, sliding counter, concurrency) and a driver that decides, in one atomic call,
/// one or more requests in order, each with every limit of its route for one subject, with the
/// same semantics as the memory store (include/ratewall/limit/*.hpp), on the Redis server clock
/// in microseconds.
///
/// A call's script holds the units of the algorithms its limits use (`algorithms`: a mask of
/// script_bit), since Redis runs the whole text of a script on every call; all its variants
/// are built and named (SHA-1) once, at first use.
///
///   KEYS  the requests' keys one after the other, one per limit, all of a request with its
///         subject's hash tag; for 'r', the keys of the unit.
///   ARGV  now ('' = the server clock, TIME), mode, unit ttl (µs), then
///         for 'c' and 's': the number of limit sets, the number of requests, each limit set
///         (n, then per limit: algorithm code, limit, interval (µs), burst, window (µs), delay,
///         shadow), then each request (its limit set, from 1; cost; unit id);
///         for 'r': the unit id.
///   mode  'c': check, and charge everything only if every enforced limit allows (shadow
///              limits are charged when they allow themselves);
///         'p': peek: decide as 'c' (the cost sent is 1) and charge nothing;
///         'f': force: charge `cost` to every limit whatever it holds, past the limit if it
///              must (a TAT at most k_max_debt_us ahead, a count at most k_max_debt_units);
///              sliding logs and concurrency limits are left alone; the reply is each limit's
///              decision for `cost` before the charge;
///         's': status, charges nothing;
///         'r': refresh the concurrency unit `unit id` in every key (the ttl again).
///   reply per limit of each request, in order, three integers (see decode_decision):
///         remaining × 4 + impossible × 2 + allowed; reset_after (µs); the delay (µs) when
///         allowed, else retry_after (µs, -1 = never). In status mode two rows per limit: cost
///         0, then cost 1. Mode 'r' replies 0.
///
/// Keys get a TTL equal to the time until their state lapses, rounded up to the millisecond.
/// Deciding several requests in one call (batching) is the same as calling once per request,
/// back to back: each request reads the state the one before it left.
std::string_view limiter_script(unsigned algorithms = k_all_script_algorithms);
/// SHA-1 of limiter_script(algorithms) in hex: the EVALSHA name.
const std::string& limiter_script_sha(unsigned algorithms = k_all_script_algorithms);

/// Values per decision in the reply.
inline constexpr std::size_t k_script_values_per_decision = 3;

/// The longest span (µs) a reply of the script can hold: the script's numbers stay below 2^49
/// (see script_call::add) and its longest span is two of them (a sliding window counter's
/// reset: the current window and the next).
inline constexpr std::int64_t k_max_reply_span_us = std::int64_t{1} << 50;

/// One decision of the script's reply, for a limit of `limit`; nullopt when the three values
/// are not a decision the script can make: `packed` negative, allowed and impossible at once,
/// or more remaining than the limit; a span negative or above k_max_reply_span_us; -1 (never)
/// but for an impossible request, and anything else for one. Redis is outside input: a
/// tampered key or script, or a server that is not Redis, gets a store error, not a decision.
std::optional<decision> decode_decision(std::int64_t packed, std::int64_t reset_us,
                                        std::int64_t wait_us, std::uint64_t limit);

/// The decisions of one request in the script's reply (its share of the reply's array):
/// `rows` per limit of `limits`, each three integer replies (decode_decision). nullopt unless
/// `values` is exactly that.
std::optional<std::vector<decision>> decode_decisions(std::span<const reply> values,
                                                      std::span<const policy> limits,
                                                      std::size_t rows = 1);

/// After `d`, a decision of the script that allowed a request on limit `p`: how long from the
/// script's clock reading every further request (cost 1 or more) is certain to be denied by
/// that limit, computed in the script's own units; 0 when it is not certain (units left, or
/// an algorithm whose next unit cannot be told from the reply: sliding windows, concurrency).
/// Token and leaky bucket: until the bucket has room for one more; fixed window: until the
/// window ends.
nanos exhausted_for(const policy& p, const decision& d);

/// One EVALSHA of the limiter script, built request by request.
class script_call {
 public:
  /// `now_us` < 0: the server's clock (TIME); `unit_ttl_us`: how long a concurrency unit lives
  /// unless refreshed.
  script_call(char mode, std::int64_t now_us, std::uint64_t unit_ttl_us);

  /// Adds a request: one key per limit (for mode 'r', the one request: the keys whose unit to
  /// refresh, and no limits). False, and nothing added, when a number is too large for the
  /// script to compute exactly (counts and spans in microseconds must stay below 2^49).
  bool add(std::span<const std::string> keys, std::span<const policy> limits, std::uint64_t cost,
           std::string_view unit);
  /// The same, taking the keys.
  bool add(std::vector<std::string>&& keys, std::span<const policy> limits, std::uint64_t cost,
           std::string_view unit);

  char mode() const { return mode_; }
  std::size_t requests() const { return requests_; }
  std::size_t key_count() const { return keys_.size(); }
  /// The algorithms of every limit added: the script to run.
  unsigned algorithms() const { return algorithms_; }

  /// The whole command: EVALSHA, sha, numkeys, keys, arguments.
  std::vector<std::string> arguments() const;
  /// The command in RESP, appended to `out`.
  void append_to(std::string& out) const;

 private:
  std::vector<std::string_view> argv(std::string& numbers) const;
  // The request's limits and arguments, its keys left to the caller.
  bool add_request(std::size_t keys, std::span<const policy> limits, std::uint64_t cost,
                   std::string_view unit);

  char mode_;
  std::vector<std::string> keys_;
  std::vector<std::string> header_;    // now, mode, unit ttl
  std::vector<std::string> set_args_;  // each limit set's arguments
  std::vector<std::uint64_t> sets_;    // each limit set's numbers: n, then 7 per limit
  std::vector<std::string> request_args_;
  std::size_t set_count_ = 0;
  std::size_t requests_ = 0;
  unsigned algorithms_ = 0;
};

/// SHA-1 in hex (what Redis names scripts by).
std::string sha1_hex(std::string_view text);

/// The algorithm's code in the script, and its bit in a script's `algorithms` mask.
int script_code(algorithm a);
unsigned script_bit(algorithm a);

}  // namespace ratewall::redis
