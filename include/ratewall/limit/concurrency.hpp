#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "ratewall/limit/decision.hpp"
#include "ratewall/limit/policy.hpp"

namespace ratewall {

/// Concurrency: at most `limit` requests of a subject in flight. A request takes one slot
/// whatever its cost (cost weighs rates, not connections); the slot is given back by
/// `release`, which the store calls when the request's lease is destroyed.
///
/// When a slot frees up depends on other requests, not on time, so the retry_after of a
/// denial is a hint (k_concurrency_retry), the one exception to "never earlier than allowed".
/// A limit of 0 admits nothing (`impossible`).
inline constexpr nanos k_concurrency_retry = std::chrono::seconds(1);

struct concurrency : detail::check_then_commit<concurrency> {
  struct state {
    std::uint64_t in_flight = 0;
  };
  static constexpr std::size_t width = 1;

  static decision check(const state& s, nanos, const policy& p, std::uint64_t) {
    const std::uint64_t free_now = p.limit - std::min(s.in_flight, p.limit);
    if (p.limit == 0) {
      return detail::impossible(p.limit, 0, 0);
    }
    decision d;
    d.limit = p.limit;
    if (free_now >= 1) {
      d.remaining = free_now - 1;
      return d;
    }
    d.allowed = false;
    d.retry_after = k_concurrency_retry;
    return d;
  }

  static void commit(state& s, nanos, const policy&, std::uint64_t) { ++s.in_flight; }

  static void release(state& s) {
    if (s.in_flight > 0) {
      --s.in_flight;
    }
  }

  /// Never while a slot is held (the store keeps such rows); at once otherwise.
  static nanos expires_at(const state& s, const policy&) {
    return s.in_flight > 0 ? nanos::max() : nanos{0};
  }
};

}  // namespace ratewall
