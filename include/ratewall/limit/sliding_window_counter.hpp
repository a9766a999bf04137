#pragma once

#include <algorithm>
#include <cstdint>

#include "ratewall/limit/decision.hpp"
#include "ratewall/limit/policy.hpp"

namespace ratewall {

/// Sliding window counter: two fixed windows, the current one and the one before, and the
/// estimate previous × (part of the previous window still inside the sliding window) + current.
/// With a 60 s window, 8 in the previous window and 3 in the current one 15 s after it opened,
/// the estimate is 8 × 0.75 + 3 = 9. A request is allowed iff estimate + cost ≤ limit.
///
/// All arithmetic is exact: the estimate is kept multiplied by the window length in 128 bits,
/// so retry_after is the first nanosecond at which the same request is allowed.
struct sliding_window_counter : detail::check_then_commit<sliding_window_counter> {
  struct state {
    std::int64_t window = 0;  // index of the current window
    std::uint64_t previous = 0;
    std::uint64_t current = 0;
  };
  static constexpr std::size_t width = 3;

  using u128 = unsigned __int128;

  static decision check(const state& s, nanos now, const policy& p, std::uint64_t cost) {
    const view v = at(s, now, p);
    const std::int64_t t = now.count();
    const std::int64_t w = p.window.count();
    const std::int64_t window_end = (v.window + 1) * w;
    const u128 uw = static_cast<u128>(w);
    const u128 weighted =
        static_cast<u128>(v.previous) * static_cast<u128>(w - v.elapsed) + v.current * uw;
    const u128 capacity = static_cast<u128>(p.limit) * uw;
    const u128 free_now = capacity - std::min(weighted, capacity);
    auto reset_after = [&](std::uint64_t current) {
      // The estimate is 0 once the newest non-empty window has slid out entirely.
      if (current > 0) {
        return nanos{window_end + w - t};
      }
      return nanos{v.previous > 0 ? window_end - t : 0};
    };
    if (cost > p.limit) {
      decision d = detail::impossible(p.limit, static_cast<std::uint64_t>(free_now / uw), 0);
      d.reset_after = reset_after(v.current);
      return d;
    }
    const u128 need = static_cast<u128>(cost) * uw;
    decision d;
    d.limit = p.limit;
    if (need <= free_now) {
      d.remaining = static_cast<std::uint64_t>((free_now - need) / uw);
      d.reset_after = reset_after(v.current + cost);
      return d;
    }
    d.allowed = false;
    d.remaining = static_cast<std::uint64_t>(free_now / uw);
    d.reset_after = reset_after(v.current);
    if (v.current + cost <= p.limit) {
      // Fits in this window once previous × (w − e) ≤ (limit − current − cost) × w.
      const u128 keep = static_cast<u128>(p.limit - v.current - cost) * uw / v.previous;
      const std::int64_t at_elapsed = w - static_cast<std::int64_t>(keep);
      d.retry_after = nanos{at_elapsed - v.elapsed};
    } else {
      // Only in the next window, where this window's count becomes the previous one.
      const u128 keep = static_cast<u128>(p.limit - cost) * uw / v.current;
      const std::int64_t at_elapsed = keep >= uw ? 0 : w - static_cast<std::int64_t>(keep);
      d.retry_after = nanos{window_end - t + at_elapsed};
    }
    return d;
  }

  static void commit(state& s, nanos now, const policy& p, std::uint64_t cost) {
    const view v = at(s, now, p);
    s.window = v.window;
    s.previous = v.previous;
    s.current = v.current + cost;
  }

  /// Charges `cost` whatever the windows hold (charge_mode::force): the current count may
  /// pass the limit (up to k_max_debt_units), and it weighs on the next window as well.
  static void force(state& s, nanos now, const policy& p, std::uint64_t cost) {
    commit(s, now, p, 0);
    s.current = detail::add_capped(s.current, cost, std::max(k_max_debt_units, p.limit));
  }

  static nanos expires_at(const state& s, const policy& p) {
    const std::int64_t w = p.window.count();
    if (s.current > 0) {
      return nanos{(s.window + 2) * w};
    }
    return nanos{s.previous > 0 ? (s.window + 1) * w : 0};
  }

 private:
  struct view {
    std::int64_t window;
    std::int64_t elapsed;  // into the current window, in [0, window)
    std::uint64_t previous;
    std::uint64_t current;
  };

  // The state rolled forward to the window of `now`.
  static view at(const state& s, nanos now, const policy& p) {
    const std::int64_t t = now.count();
    const std::int64_t w = p.window.count();
    const std::int64_t index = detail::floor_div(t, w);
    view v{s.window, 0, s.previous, s.current};
    if (index == s.window + 1) {
      v = {index, 0, s.current, 0};
    } else if (index > s.window + 1) {
      v = {index, 0, 0, 0};
    }
    // index < s.window only when a racing thread opened the next window: stay in it.
    v.elapsed = std::clamp<std::int64_t>(t - v.window * w, 0, w - 1);
    return v;
  }
};

}  // namespace ratewall
