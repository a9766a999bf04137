#pragma once

#include <algorithm>
#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "ratewall/config/config.hpp"
#include "ratewall/config/limit_bounds.hpp"
#include "ratewall/core/clock.hpp"
#include "ratewall/limit/decision.hpp"

namespace ratewall {

/// How far a forced charge (charge_mode::force: a cost reported by the upstream) may take a
/// limit past what it holds: a bucket's debt drains within 2^49 µs (17.8 years) of now, a
/// window holds at most 2^49 units. Both stores use the same bounds, which keep the Redis
/// script's numbers exact (below 2^53) and a denial's retry_after below 2^50 µs; a bucket
/// deeper than this keeps its own depth as the bound.
inline constexpr std::int64_t k_max_debt_us = std::int64_t{1} << 49;
inline constexpr nanos k_max_debt{k_max_debt_us * 1000};
inline constexpr std::uint64_t k_max_debt_units = std::uint64_t{1} << 49;

/// policy::slot of a limit that no store has bound (and what stores without slots return).
inline constexpr std::uint32_t k_no_slot = 0xffff'ffff;

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

  // Where the state lives, bound once per configuration by the limiter (store::bind_slot) so
  // that the request path does no string work. Shared by every plan's policy of one limit.
  std::uint32_t slot = k_no_slot;
  std::string key;  // limit_identity::key(): "route:limit:<8 hex>"
};

/// Whether `a` and `b` give the same state the same meaning: the algorithm and every number it
/// runs on. shadow and on_store_error are not part of it: they change what is done with a
/// decision, not what the state counts.
bool same_state_meaning(const policy& a, const policy& b);

/// A limit definition as the store sees it across configurations: two limits with equal
/// identities share their state, so a reload that leaves a limit unchanged keeps every
/// client's state for it. The signature covers what same_state_meaning compares, for the
/// limit's own values and for every plan whose override resolves to something else; renaming
/// the route or the limit, or changing any of those numbers, makes a new identity (fresh state).
struct limit_identity {
  std::string route;
  std::string limit;
  std::uint64_t signature = 0;

  auto operator<=>(const limit_identity&) const = default;

  /// "route:limit:<the signature's low 32 bits, 8 hex digits>"; the same in every process and
  /// build, for stores that name their keys by it (Redis).
  std::string key() const;
};

/// Builds limit_identity::signature: 64-bit FNV-1a over fixed-width little-endian fields, so
/// that it does not depend on the build, the process or the machine.
class signature_builder {
 public:
  /// The fields same_state_meaning compares.
  void add(const policy& p);
  /// Length first, so that ("ab", "c") and ("a", "bc") differ.
  void add(std::string_view s);
  std::uint64_t value() const { return hash_; }

 private:
  void add_word(std::uint64_t v);

  std::uint64_t hash_ = 0xcbf29ce484222325ull;
};

/// The policy of `limit` for a subject on `plan` (nullptr: the limit's own values). Throws
/// std::invalid_argument naming the limit when the values cannot be run (zero rate or window,
/// numbers whose products overflow 64-bit nanoseconds, a sliding log above k_max_log_limit):
/// never for a loaded configuration, whose limits are within config/limit_bounds.hpp.
policy resolve_policy(const limit_config& limit, const limit_override* plan, bool route_shadow,
                      store_failure default_on_store_error);

/// `p` applied at num/den (0 < num <= den) of its values: the rate and the burst of a bucket,
/// the limit of a window or concurrency limit. Never admits more than `p`: intervals round up,
/// counts round down, but a token bucket keeps a burst of 1 and a non-zero limit stays at least
/// 1 (a limit always lets something through). The slot and key are kept: the state is the same.
/// Adaptive limits (num/den = the factor) and the Redis store's local fallback (1/instances).
/// A count is also kept at `least` or above (bounded by p's own): an adaptive route passes its
/// largest cost, so that a request the configured limit can admit never becomes one the scaled
/// limit can never admit (a 429 "retrying will not help", and no exchange to recover by).
policy scale_policy(policy p, std::uint64_t num, std::uint64_t den, std::uint64_t least = 1);

/// The most one request of `route` asks for at admission, scale_policy's `least` for the
/// route: its cost or largest method_cost; 1 on a cost_from_response route, whose admission
/// asks whether one unit is left (the charge comes after the response, forced).
std::uint64_t max_admission_cost(const route_config& route);

/// The most one request of `route` can be charged: max_admission_cost, or on a
/// cost_from_response route its max (what a store must be able to hold).
std::uint64_t max_cost(const route_config& route);

namespace detail {

/// Floor division (C++ `/` truncates towards zero; window indexes must not).
inline std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) {
    --q;
  }
  return q;
}

/// Every algorithm's decide(): check, and charge only when the check allowed. A base of each
/// algorithm (CRTP); `State` is deduced because the algorithm is incomplete where this is named.
template <class Algorithm>
struct check_then_commit {
  template <class State>
  static decision decide(State& s, nanos now, const policy& p, std::uint64_t cost) {
    decision d = Algorithm::check(s, now, p, cost);
    if (d.allowed) {
      Algorithm::commit(s, now, p, cost);
    }
    return d;
  }
};

/// a + b, but never above `cap` (nor below a: a state already past `cap` stays where it is).
inline std::uint64_t add_capped(std::uint64_t a, std::uint64_t b, std::uint64_t cap) {
  return a >= cap ? a : a + std::min(b, cap - a);
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
