#pragma once

#include <algorithm>
#include <cstdint>

#include "ratewall/limit/decision.hpp"
#include "ratewall/limit/gcra.hpp"
#include "ratewall/limit/policy.hpp"

namespace ratewall {

/// Leaky bucket with nginx `limit_req` semantics: requests leave the bucket one per
/// T = policy.interval; one may be in service and `burst` wait behind it. nginx keeps the
/// "excess" in milli-requests; here it is the time the queue drains (tat), which is the
/// same model without rounding to milliseconds.
///
///   served_at = max(tat, now)              when the first unit of this request is served
///   new_tat   = served_at + T × cost
///   allowed iff new_tat − T − now ≤ burst × T   (its last unit waits at most burst × T)
///
/// `delay: false` (nginx `nodelay`) forwards an admitted request at once; `delay: true` sets
/// decision.delay = new_tat − T − now, the time until its last unit's turn, so the session
/// holds it with a timer (no thread blocks); the delay never exceeds burst × T. With rate 1/s
/// and burst 2, four requests at 0 are served at 0, 1 and 2 s; the fourth is denied.
/// A cost above burst + 1 (policy.limit) is `impossible`.
struct leaky_bucket : detail::check_then_commit<leaky_bucket> {
  // The same state as GCRA, advanced the same way: only the admission rule differs.
  using state = gcra::state;
  static constexpr std::size_t width = 1;

  static decision check(const state& s, nanos now, const policy& p, std::uint64_t cost) {
    const std::int64_t t = now.count();
    const std::int64_t interval = p.interval.count();
    const std::int64_t capacity = p.tolerance.count() + interval;  // (burst + 1) × T
    const std::int64_t served_at = std::max(s.tat, t);
    const std::int64_t free_now = std::max<std::int64_t>(capacity - (served_at - t), 0);
    if (cost > p.limit) {
      return detail::impossible(p.limit, free_now / interval, served_at - t);
    }
    const std::int64_t used = served_at + interval * static_cast<std::int64_t>(cost) - t;
    decision d;
    d.limit = p.limit;
    if (used <= capacity) {
      d.remaining = static_cast<std::uint64_t>((capacity - used) / interval);
      d.reset_after = nanos{used};
      if (p.delay && cost > 0) {
        d.delay = nanos{used - interval};
      }
      return d;
    }
    d.allowed = false;
    d.remaining = static_cast<std::uint64_t>(free_now / interval);
    d.reset_after = nanos{served_at - t};
    d.retry_after = nanos{used - capacity};
    return d;
  }

  static void commit(state& s, nanos now, const policy& p, std::uint64_t cost) {
    gcra::commit(s, now, p, cost);
  }

  /// As gcra::force: the queue may run past its capacity, and drains at the rate.
  static void force(state& s, nanos now, const policy& p, std::uint64_t cost) {
    gcra::force(s, now, p, cost);
  }

  static nanos expires_at(const state& s, const policy& p) { return gcra::expires_at(s, p); }
};

}  // namespace ratewall
