#pragma once

#include <algorithm>
#include <cstdint>

#include "ratewall/limit/decision.hpp"
#include "ratewall/limit/policy.hpp"

namespace ratewall {

/// Fixed window: at most `limit` units per window; windows are aligned to the clock's epoch
/// ([k × window, (k + 1) × window)). In the memory store the epoch is the clock's origin
/// (steady_clock: 2020-01-01 UTC, so a window of a day is a UTC day); the Redis store uses
/// server time. A denied request may retry when the window ends.
/// Known weakness, kept on purpose: up to 2 × limit can pass around a window boundary.
struct fixed_window : detail::check_then_commit<fixed_window> {
  struct state {
    std::int64_t window = 0;  // index of the window `count` belongs to
    std::uint64_t count = 0;
  };
  static constexpr std::size_t width = 2;

  static decision check(const state& s, nanos now, const policy& p, std::uint64_t cost) {
    const std::int64_t t = now.count();
    const std::int64_t w = p.window.count();
    // A racing thread may have opened the next window already: never step back into an old one.
    const std::int64_t index = std::max(detail::floor_div(t, w), s.window);
    const std::uint64_t count = index == s.window ? s.count : 0;
    const std::int64_t until_end = (index + 1) * w - t;
    const std::uint64_t free_now = p.limit - std::min(count, p.limit);
    if (cost > p.limit) {
      return detail::impossible(p.limit, free_now, count > 0 ? until_end : 0);
    }
    decision d;
    d.limit = p.limit;
    if (cost <= free_now) {
      d.remaining = free_now - cost;
      d.reset_after = nanos{count + cost > 0 ? until_end : 0};
      return d;
    }
    d.allowed = false;
    d.remaining = free_now;
    d.reset_after = nanos{until_end};
    d.retry_after = nanos{until_end};
    return d;
  }

  static void commit(state& s, nanos now, const policy& p, std::uint64_t cost) {
    const std::int64_t index = std::max(detail::floor_div(now.count(), p.window.count()), s.window);
    if (index != s.window) {
      s.window = index;
      s.count = 0;
    }
    s.count += cost;
  }

  /// Charges `cost` whatever the window holds (charge_mode::force): the count may pass the
  /// limit (up to k_max_debt_units). The debt ends with the window, as every count does.
  static void force(state& s, nanos now, const policy& p, std::uint64_t cost) {
    commit(s, now, p, 0);
    s.count = detail::add_capped(s.count, cost, std::max(k_max_debt_units, p.limit));
  }

  static nanos expires_at(const state& s, const policy& p) {
    return nanos{s.count > 0 ? (s.window + 1) * p.window.count() : 0};
  }
};

}  // namespace ratewall
