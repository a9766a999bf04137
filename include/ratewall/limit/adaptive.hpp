#pragma once

// Adaptive limits (routes[].adaptive, issue 17): a route's limits tighten while its upstream
// struggles and relax when it recovers.
//
// Every window the gateway reads what the route's upstream exchanges showed (the counters the
// exchange keeps anyway: response heads by class, their latency sum, the 502 and 504 the
// gateway answered) and hands the difference to an adaptive_controller, which moves a factor
// in [min_factor, 1]: multiplicatively down (× k_decrease) after a window over a target,
// additively up (+ k_increase) after a window under both. A window of fewer than
// k_adaptive_min_samples exchanges says nothing: it is extended until it has that many. Every limit
// of the route is then applied at its configured values × factor (scale_policy), in the memory and
// the Redis store alike; the limit's identity, and so its state, does not change with the factor.

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "ratewall/config/config.hpp"
#include "ratewall/core/clock.hpp"

namespace ratewall {

/// A factor as an integer: parts per million of the configured limits (1.0 = k_factor_one).
inline constexpr std::uint32_t k_factor_one = 1'000'000;

/// A window with fewer exchanges than this leaves the factor where it is.
inline constexpr std::uint64_t k_adaptive_min_samples = 10;

/// One route's upstream exchanges since the process started: counters that only grow, read
/// from the route's metrics. A window is the difference of two readings.
struct upstream_totals {
  std::uint64_t exchanges = 0;   // response heads received + 502 and 504 answered for it
  std::uint64_t errors = 0;      // 5xx response heads + 502 + 504
  std::uint64_t heads = 0;       // response heads whose latency was measured, and the 502
                                 // and 504 (never answered: counted at response_timeout)
  std::uint64_t latency_ns = 0;  // the sum of those latencies
};

/// What one window showed.
struct adaptive_window {
  std::uint64_t exchanges = 0;
  std::uint64_t errors = 0;
  nanos mean_latency{0};  // time to the response head; 0 without heads
  double error_rate = 0;  // errors / exchanges; 0 without exchanges

  /// The window between two readings (`to` taken after `from`).
  static adaptive_window between(const upstream_totals& from, const upstream_totals& to);
};

/// The AIMD controller of one route: pure (the window is handed in), not thread-safe.
class adaptive_controller {
 public:
  /// After a window over a target the factor is multiplied by this...
  static constexpr double k_decrease = 0.5;
  /// ...and after a window under both targets this is added to it.
  static constexpr double k_increase = 0.1;

  enum class verdict { over, under, too_few };

  explicit adaptive_controller(const adaptive_config& cfg, double factor = 1.0);

  /// over: mean latency above latency_target or error rate above error_rate_target; too_few:
  /// fewer than k_adaptive_min_samples exchanges; else under.
  verdict judge(const adaptive_window& w) const;
  /// Moves the factor after window `w` and returns it, always in [min_factor, 1].
  double update(const adaptive_window& w);
  double factor() const { return factor_; }
  /// New targets from the next window on; the factor stays, clamped to the new bounds.
  void reconfigure(const adaptive_config& cfg);
  const adaptive_config& config() const { return cfg_; }

 private:
  adaptive_config cfg_;
  double factor_ = 1.0;
};

/// A route's adaptive state in a gateway: the controller, the window it is in, and the factor
/// the request path reads. Shared by the configurations that keep the route (a reload keeps
/// the factor). Thread-safe: factor_ppm() is one relaxed atomic load (the request path), the
/// rest takes a mutex (the housekeeping thread and the admin API).
/// Marks an extended window keeps (one a window apart).
inline constexpr std::size_t k_adaptive_max_marks = 64;

class adaptive_route {
 public:
  /// The first window starts at `now`, counting from the reading `totals`.
  adaptive_route(std::string route, const adaptive_config& cfg, const upstream_totals& totals,
                 nanos now);

  const std::string& route() const { return route_; }
  /// The factor, in parts per million (k_factor_one = the configured limits).
  std::uint32_t factor_ppm() const noexcept { return factor_ppm_.load(std::memory_order_relaxed); }
  double factor() const noexcept { return static_cast<double>(factor_ppm()) / k_factor_one; }

  /// A change worth a log line: the factor moved by more than 10% from the last one reported.
  struct change {
    double from = 1.0;
    double to = 1.0;
    adaptive_window window;  // the window that moved it last
  };
  /// Ends the window when `now` is `window` or more past its start and the counters (`totals`,
  /// read now) show at least k_adaptive_min_samples exchanges since: the controller moves the
  /// factor by them, and a new window begins. A window with fewer goes on until it has them,
  /// and is then judged by its latest whole windows that hold enough (of the last
  /// k_adaptive_max_marks), all of it only when they do not.
  /// Returns a change to report, if any.
  std::optional<change> tick(nanos now, const upstream_totals& totals);
  /// New settings (a reload that keeps the route): see adaptive_controller::reconfigure. The
  /// window under way goes on. Returns the change when the new bounds moved the factor (it
  /// counts as reported: the next change is from there).
  std::optional<std::pair<double, double>> reconfigure(const adaptive_config& cfg);

  struct status {
    double factor = 1.0;
    adaptive_config cfg;
    std::optional<adaptive_window> last;  // the last window ended, if any
    std::uint64_t windows = 0;            // windows ended so far
  };
  status read() const;

 private:
  void publish(double factor);

  const std::string route_;
  mutable std::mutex mutex_;
  adaptive_controller controller_;
  nanos window_start_;
  upstream_totals start_;
  struct mark {
    nanos at;
    upstream_totals totals;
  };
  std::deque<mark> marks_;  // a window extended: the counters a window apart
  std::optional<adaptive_window> last_;
  std::uint64_t windows_ = 0;
  double reported_ = 1.0;  // the factor of the last change reported
  std::atomic<std::uint32_t> factor_ppm_{k_factor_one};
};

}  // namespace ratewall
