#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>

#include "ratewall/core/clock.hpp"

namespace ratewall::redis {

struct breaker_options {
  unsigned failures = 5;                     // consecutive failures that open it
  nanos cooldown = std::chrono::seconds(1);  // open this long before a probe may go
};

/// A circuit breaker in front of one Redis node, shared by every thread (lock-free).
///
///   closed     calls go through; `failures` consecutive failures open it.
///   open       calls are refused at once (the limits answer per on_store_error) until the
///              cooldown has passed; then the first caller is let through as the probe.
///   half_open  the probe is out; everyone else is still refused. Its success closes the
///              breaker, its failure opens it for another cooldown. A probe that never reports
///              does not wedge it: a cooldown later the next caller probes again.
///
/// Time is passed in (the limiter's monotonic clock).
class circuit_breaker {
 public:
  enum class state { closed, open, half_open };
  enum class admit { yes, probe, no };

  explicit circuit_breaker(breaker_options options = {}) : options_(options) {}

  /// Whether a call may go to Redis at `now`; `probe` means this caller is the one probe.
  admit try_acquire(nanos now) {
    std::int64_t next = next_probe_.load(std::memory_order_acquire);
    if (next == k_closed) {
      return admit::yes;
    }
    if (now.count() < next) {
      return admit::no;
    }
    // Push the next probe a cooldown away: only the caller whose exchange succeeds probes.
    if (!next_probe_.compare_exchange_strong(next, now.count() + options_.cooldown.count(),
                                             std::memory_order_acq_rel)) {
      return admit::no;
    }
    probing_.store(true, std::memory_order_release);
    return admit::probe;
  }

  /// Whether try_acquire would refuse at `now`, without taking the probe.
  bool refusing(nanos now) const {
    const std::int64_t next = next_probe_.load(std::memory_order_acquire);
    return next != k_closed && now.count() < next;
  }

  void record_success() {
    failures_.store(0, std::memory_order_relaxed);
    probing_.store(false, std::memory_order_relaxed);
    next_probe_.store(k_closed, std::memory_order_release);
  }

  void record_failure(nanos now) {
    const std::uint32_t failures = failures_.fetch_add(1, std::memory_order_relaxed) + 1;
    std::int64_t next = next_probe_.load(std::memory_order_acquire);
    if (next != k_closed) {
      if (probing_.exchange(false, std::memory_order_acq_rel)) {
        next_probe_.store(now.count() + options_.cooldown.count(), std::memory_order_release);
      }
      return;
    }
    if (failures >= options_.failures &&
        next_probe_.compare_exchange_strong(next, now.count() + options_.cooldown.count(),
                                            std::memory_order_acq_rel)) {
      opened_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  state current() const {
    if (next_probe_.load(std::memory_order_acquire) == k_closed) {
      return state::closed;
    }
    return probing_.load(std::memory_order_acquire) ? state::half_open : state::open;
  }

  /// How many times it has opened.
  std::uint64_t opened() const { return opened_.load(std::memory_order_relaxed); }
  const breaker_options& options() const { return options_; }

 private:
  static constexpr std::int64_t k_closed = std::numeric_limits<std::int64_t>::min();

  breaker_options options_;
  std::atomic<std::uint32_t> failures_{0};
  std::atomic<std::int64_t> next_probe_{k_closed};  // closed, or when the next probe may go
  std::atomic<bool> probing_{false};
  std::atomic<std::uint64_t> opened_{0};
};

}  // namespace ratewall::redis
