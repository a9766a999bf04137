#pragma once

#include <algorithm>
#include <cstdint>

#include "ratewall/limit/decision.hpp"
#include "ratewall/limit/policy.hpp"

namespace ratewall {

/// Token bucket as GCRA (generic cell rate algorithm): the whole bucket is one number, the
/// theoretical arrival time (TAT) at which the bucket would be full again.
///
/// With T = policy.interval (time per token) and tau = burst × T (policy.tolerance):
///   new_tat = max(tat, now) + T × cost
///   allowed iff new_tat − now ≤ tau
///   remaining = floor((tau − (new_tat − now)) / T), reset_after = new_tat − now
///   denied: retry_after = new_tat − now − tau (exactly when the same request fits)
/// A cost above the burst can never fit and is denied as `impossible`.
///
/// Every algorithm has this shape: `check` decides without touching the state, `commit`
/// charges an allowed request, `decide` does both (a route's limits are all checked before
/// any is charged), `expires_at` is the time from which the state equals no state.
struct gcra : detail::check_then_commit<gcra> {
  struct state {
    std::int64_t tat = 0;
  };
  static constexpr std::size_t width = 1;  // 64-bit words of state

  static decision check(const state& s, nanos now, const policy& p, std::uint64_t cost) {
    const std::int64_t t = now.count();
    const std::int64_t interval = p.interval.count();
    const std::int64_t tau = p.tolerance.count();
    const std::int64_t base = std::max(s.tat, t);
    // Under racing threads `now` may be a little older than the last charge: clamp at 0.
    const std::int64_t free_now = std::max<std::int64_t>(tau - (base - t), 0);
    if (cost > p.limit) {
      return detail::impossible(p.limit, free_now / interval, base - t);
    }
    const std::int64_t used = base + interval * static_cast<std::int64_t>(cost) - t;
    decision d;
    d.limit = p.limit;
    if (used <= tau) {
      d.remaining = static_cast<std::uint64_t>((tau - used) / interval);
      d.reset_after = nanos{used};
      return d;
    }
    d.allowed = false;
    d.remaining = static_cast<std::uint64_t>(free_now / interval);
    d.reset_after = nanos{base - t};
    d.retry_after = nanos{used - tau};
    return d;
  }

  static void commit(state& s, nanos now, const policy& p, std::uint64_t cost) {
    s.tat = std::max(s.tat, now.count()) + p.interval.count() * static_cast<std::int64_t>(cost);
  }

  /// Charges `cost` whatever the bucket holds (charge_mode::force): the TAT may pass now + tau,
  /// and requests are denied until it has come back within it. The debt is bounded by
  /// k_max_debt (or the bucket's depth if deeper).
  static void force(state& s, nanos now, const policy& p, std::uint64_t cost) {
    const std::int64_t t = now.count();
    const std::int64_t base = std::max(s.tat, t);
    const std::int64_t cap = std::max(k_max_debt.count(), p.tolerance.count() + p.interval.count());
    const std::int64_t room = std::max<std::int64_t>(t + cap - base, 0);
    const std::int64_t interval = p.interval.count();
    const bool capped = cost > static_cast<std::uint64_t>(room / interval);
    s.tat = base + (capped ? room : interval * static_cast<std::int64_t>(cost));
  }

  static nanos expires_at(const state& s, const policy&) { return nanos{s.tat}; }
};

using token_bucket = gcra;

}  // namespace ratewall
