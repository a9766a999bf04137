#pragma once

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
class steady_clock final : public clock {
 public:
  nanos now() const override {
    return std::chrono::duration_cast<nanos>(std::chrono::steady_clock::now().time_since_epoch());
  }
  std::chrono::system_clock::time_point wall_now() const override {
    return std::chrono::system_clock::now();
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
