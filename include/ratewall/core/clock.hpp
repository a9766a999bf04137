#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace ratewall {

/// Monotonic time as nanoseconds since an arbitrary, fixed origin. Intervals only.
using nanos = std::chrono::nanoseconds;

/// A source of time. `now()` is monotonic and is read once per request by whoever owns
/// limiter state; algorithms never read a clock themselves. `wall_now()` is only for
/// printing epoch values (X-RateLimit-Reset in epoch form, logs).
/// Implementations are thread-safe.
class clock {
 public:
  virtual ~clock() = default;
  virtual nanos now() const = 0;
  virtual std::chrono::system_clock::time_point wall_now() const = 0;
};

/// The real clock: std::chrono::steady_clock for intervals, system_clock for epoch values.
///
/// now() counts from 2020-01-01 00:00 UTC as the wall clock read it once, when the process
/// first asked, and from then on moves with steady_clock only (never with the wall clock).
/// So it is monotonic within a process, and limit state written by one process (a fixed
/// window's index, a bucket's theoretical arrival time: store.snapshot) means the same instant
/// to the next one, to within the wall clock's error between the two; a fixed window of a day
/// is a UTC day. The 2020 origin keeps times small: the memory store's rows hold expiries to
/// 2^60 ns, 36 years from it. A wall clock before 2020 (a machine without a real-time clock,
/// booted before NTP set it) starts now() at 0: times are never negative, which the limit
/// algorithms assume (an all-zero state is a fresh one).
class steady_clock final : public clock {
 public:
  nanos now() const override { return steady_now() + origin_offset(); }
  std::chrono::system_clock::time_point wall_now() const override {
    return std::chrono::system_clock::now();
  }

  /// 2020-01-01 00:00:00 UTC in Unix time.
  static constexpr std::chrono::seconds k_origin{1577836800};

 private:
  static nanos steady_now() {
    return std::chrono::duration_cast<nanos>(std::chrono::steady_clock::now().time_since_epoch());
  }
  // The same for every steady_clock of the process, read once.
  static nanos origin_offset() {
    static const nanos offset = [] {
      const nanos wall =
          std::chrono::duration_cast<nanos>(std::chrono::system_clock::now().time_since_epoch());
      return std::max(wall - k_origin, nanos{0}) - steady_now();
    }();
    return offset;
  }
};

/// A clock that moves only when told to: unit tests and `ratewall simulate`.
/// Starts at zero (wall time: the Unix epoch plus the same offset).
class manual_clock final : public clock {
 public:
  explicit manual_clock(nanos start = nanos{0}) : now_(start.count()) {}

  nanos now() const override { return nanos{now_.load(std::memory_order_relaxed)}; }
  std::chrono::system_clock::time_point wall_now() const override {
    return std::chrono::system_clock::time_point{
        std::chrono::duration_cast<std::chrono::system_clock::duration>(now())};
  }

  void set(nanos t) { now_.store(t.count(), std::memory_order_relaxed); }
  void advance(nanos d) { now_.fetch_add(d.count(), std::memory_order_relaxed); }

 private:
  std::atomic<std::int64_t> now_;
};

}  // namespace ratewall
