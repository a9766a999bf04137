// Adaptive limits (routes[].adaptive, issue 17): the controller, the scaling of a limit by its
// factor, and the limiter applying it.

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include "ratewall/limit/adaptive.hpp"
#include "ratewall/limit/limiter.hpp"
#include "ratewall/limit/memory_store.hpp"

using namespace ratewall;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

adaptive_config latency_target(milliseconds target) {
  adaptive_config a;
  a.latency_target = target;
  a.window = seconds(1);
  return a;
}

adaptive_window window_of(std::uint64_t exchanges, milliseconds mean, std::uint64_t errors = 0) {
  adaptive_window w;
  w.exchanges = exchanges;
  w.errors = errors;
  w.mean_latency = mean;
  w.error_rate = exchanges == 0 ? 0 : static_cast<double>(errors) / exchanges;
  return w;
}

limit_config token_bucket(std::uint64_t rate, std::uint64_t burst) {
  limit_config l;
  l.name = "burst";
  l.algo = algorithm::token_bucket;
  l.rate = {rate, seconds(1)};
  l.burst = burst;
  return l;
}

policy resolved(const limit_config& l) {
  return resolve_policy(l, nullptr, false, store_failure::allow);
}

}  // namespace

TEST_CASE("the adaptive controller keeps the factor at 1 while the upstream meets its target") {
  adaptive_controller c(latency_target(milliseconds(100)));
  for (int i = 0; i < 5; ++i) {
    CHECK(c.update(window_of(50, milliseconds(99))) == 1.0);
  }
  CHECK(c.judge(window_of(50, milliseconds(100))) == adaptive_controller::verdict::under);
  CHECK(c.judge(window_of(50, milliseconds(101))) == adaptive_controller::verdict::over);
}

TEST_CASE("the adaptive controller halves the factor per window over target, down to min_factor") {
  adaptive_config cfg = latency_target(milliseconds(100));
  cfg.min_factor = 0.2;
  adaptive_controller c(cfg);
  CHECK(c.update(window_of(50, milliseconds(300))) == 0.5);
  CHECK(c.update(window_of(50, milliseconds(300))) == 0.25);
  CHECK(c.update(window_of(50, milliseconds(300))) == 0.2);
  CHECK(c.update(window_of(50, milliseconds(300))) == 0.2);
}

TEST_CASE("the adaptive controller recovers by 0.1 per window under target, to exactly 1") {
  adaptive_config cfg = latency_target(milliseconds(100));
  adaptive_controller c(cfg, 0.1);
  std::vector<double> seen;
  for (int i = 0; i < 10; ++i) {
    seen.push_back(c.update(window_of(50, milliseconds(10))));
  }
  CHECK(seen[0] == doctest::Approx(0.2));
  CHECK(seen[4] == doctest::Approx(0.6));
  CHECK(seen[8] == 1.0);
  CHECK(seen[9] == 1.0);
}

TEST_CASE("a window of fewer than 10 exchanges moves nothing") {
  adaptive_controller c(latency_target(milliseconds(100)), 0.5);
  CHECK(c.judge(window_of(9, milliseconds(900))) == adaptive_controller::verdict::too_few);
  CHECK(c.update(window_of(9, milliseconds(900))) == 0.5);
  CHECK(c.update(window_of(0, milliseconds(0))) == 0.5);
  CHECK(c.update(window_of(10, milliseconds(900))) == 0.25);
}

TEST_CASE("the error rate target counts 5xx and failed exchanges") {
  adaptive_config cfg;
  cfg.error_rate_target = 0.1;
  adaptive_controller c(cfg);
  SUBCASE("at the target: under") {
    CHECK(c.update(window_of(100, milliseconds(5000), 10)) == 1.0);  // latency is not watched
  }
  SUBCASE("above: over") {
    CHECK(c.update(window_of(100, milliseconds(1), 11)) == 0.5);
  }
  SUBCASE("both targets: either one over is over") {
    cfg.latency_target = milliseconds(100);
    adaptive_controller both(cfg);
    CHECK(both.judge(window_of(100, milliseconds(150), 0)) == adaptive_controller::verdict::over);
    CHECK(both.judge(window_of(100, milliseconds(50), 20)) == adaptive_controller::verdict::over);
    CHECK(both.judge(window_of(100, milliseconds(50), 5)) == adaptive_controller::verdict::under);
  }
}

TEST_CASE("new settings keep the factor, clamped to the new min_factor") {
  adaptive_config cfg = latency_target(milliseconds(100));
  cfg.min_factor = 0.1;
  adaptive_controller c(cfg, 0.1);
  cfg.min_factor = 0.3;
  c.reconfigure(cfg);
  CHECK(c.factor() == 0.3);
}

TEST_CASE("a window is the difference of two readings of the route's counters") {
  const upstream_totals from{100, 3, 90, 90 * 20'000'000ull};
  const upstream_totals to{150, 13, 130, 90 * 20'000'000ull + 40 * 50'000'000ull};
  const adaptive_window w = adaptive_window::between(from, to);
  CHECK(w.exchanges == 50);
  CHECK(w.errors == 10);
  CHECK(w.error_rate == doctest::Approx(0.2));
  CHECK(w.mean_latency == milliseconds(50));
  const adaptive_window none = adaptive_window::between(to, to);
  CHECK(none.exchanges == 0);
  CHECK(none.mean_latency == nanos{0});
  CHECK(none.error_rate == 0);
}

TEST_CASE("an adaptive route ends its window on time and reports changes of more than 10%") {
  adaptive_route r("search", latency_target(milliseconds(100)), {}, seconds(10));
  const auto slow = [](std::uint64_t n) {
    return upstream_totals{n, 0, n, n * 300'000'000ull};  // every head after 300 ms
  };
  CHECK(r.factor_ppm() == k_factor_one);
  CHECK_FALSE(r.tick(seconds(10) + milliseconds(999), slow(50)));
  CHECK(r.factor() == 1.0);  // the window is not over
  auto c = r.tick(seconds(11), slow(50));
  REQUIRE(c);
  CHECK(c->from == 1.0);
  CHECK(c->to == 0.5);
  CHECK(c->window.exchanges == 50);
  CHECK(r.factor_ppm() == k_factor_one / 2);
  CHECK(r.read().windows == 1);

  // Back under target: +0.1 a window; 0.5 -> 0.6 is 20%, reported; 0.6 -> 0.7 is 16.7%...
  upstream_totals t = slow(50);
  const auto fast = [&t](std::uint64_t n) {
    t.exchanges += n;
    t.heads += n;
    t.latency_ns += n * 10'000'000ull;
    return t;
  };
  std::vector<double> reported;
  for (int s = 12; s < 20; ++s) {
    if (auto ch = r.tick(seconds(s), fast(50))) {
      reported.push_back(ch->to);
    }
  }
  CHECK(r.factor() == 1.0);
  // ...and 0.9 -> 1.0 is 11.1%: every step from 0.5 up is more than 10% of the one before.
  CHECK(reported.size() == 5);
  CHECK(reported.back() == 1.0);
}

TEST_CASE("a window with fewer than 10 exchanges goes on until it has them") {
  adaptive_route r("quiet", latency_target(milliseconds(100)), {}, nanos{0});
  const auto slow = [](std::uint64_t n) { return upstream_totals{n, 0, n, n * 300'000'000ull}; };
  CHECK_FALSE(r.tick(seconds(1), slow(9)));
  CHECK_FALSE(r.tick(seconds(5), slow(9)));
  CHECK(r.read().windows == 0);
  CHECK(r.factor() == 1.0);
  REQUIRE(r.tick(seconds(6), slow(10)));  // one window of 6 s
  CHECK(r.factor() == 0.5);
  CHECK(r.read().last->exchanges == 10);
}

TEST_CASE("a window extended for long is judged by its latest exchanges that are enough") {
  adaptive_route r("quiet", latency_target(milliseconds(100)), {}, nanos{0});
  // Five responses of 10 s in the first minutes, then nothing for an hour: too few to tell.
  upstream_totals t{5, 0, 5, 5 * 10'000'000'000ull};
  for (int s = 5; s <= 3600; s += 5) {
    CHECK_FALSE(r.tick(seconds(s), t));
  }
  // Then 20 of 10 ms: the upstream is fast now, whatever it was an hour ago.
  t.exchanges += 20;
  t.heads += 20;
  t.latency_ns += 20 * 10'000'000ull;
  r.tick(seconds(3660), t);
  CHECK(r.read().windows == 1);
  CHECK(r.read().last->exchanges == 20);
  CHECK(r.read().last->mean_latency == milliseconds(10));
  CHECK(r.factor() == 1.0);  // all 25 averaged 2 s: it was halved
}

TEST_CASE("scale_policy applies a limit at a share of its values, never above them") {
  SUBCASE("token bucket: rate and burst") {
    const policy p = resolved(token_bucket(10, 20));
    const policy half = scale_policy(p, 1, 2);
    CHECK(half.limit == 10);
    CHECK(half.interval == milliseconds(200));  // 5/s
    CHECK(half.tolerance == seconds(2));        // 10 × 200 ms
    CHECK(half.key == p.key);
    CHECK(half.slot == p.slot);
    SUBCASE("a burst never below 1") {
      const policy tiny = scale_policy(resolved(token_bucket(1, 1)), 1, 10);
      CHECK(tiny.limit == 1);
      CHECK(tiny.interval == seconds(10));
    }
    SUBCASE("intervals round up: never faster than the share") {
      const policy third = scale_policy(resolved(token_bucket(3, 3)), 1, 3);
      CHECK(third.interval == nanos{1'000'000'002});  // 333'333'334 ns (3/s, rounded up) × 3
    }
  }
  SUBCASE("leaky bucket: one in service plus the scaled queue") {
    limit_config l = token_bucket(10, 9);
    l.algo = algorithm::leaky_bucket;
    const policy p = scale_policy(resolved(l), 1, 2);
    CHECK(p.limit == 5);  // 4 queued + 1
    CHECK(p.interval == milliseconds(200));
  }
  SUBCASE("windows and concurrency: the limit, at least 1") {
    for (algorithm a : {algorithm::fixed_window, algorithm::sliding_window_log,
                        algorithm::sliding_window_counter, algorithm::concurrency}) {
      limit_config l;
      l.name = "l";
      l.algo = a;
      l.limit = 9;
      l.window = seconds(1);
      const policy p = resolved(l);
      CHECK(scale_policy(p, 1, 2).limit == 4);
      CHECK(scale_policy(p, 1, 100).limit == 1);
      CHECK(scale_policy(p, 1, 2).window == p.window);
    }
  }
  SUBCASE("a share of 1 or more changes nothing") {
    const policy p = resolved(token_bucket(10, 20));
    CHECK(same_state_meaning(scale_policy(p, 1, 1), p));
    CHECK(same_state_meaning(scale_policy(p, 3, 2), p));
  }
  SUBCASE("never above the configured values, at any factor") {
    const policy p = resolved(token_bucket(7, 13));
    for (std::uint64_t ppm = 1; ppm <= k_factor_one; ppm += 9973) {
      const policy s = scale_policy(p, ppm, k_factor_one);
      CHECK(s.limit <= p.limit);
      CHECK(s.interval >= p.interval);
      CHECK(s.limit >= 1);
    }
  }
}

namespace {

struct adaptive_fixture {
  /// A token bucket of 10/s, burst 10; `reported`: its cost comes from the response (up to
  /// cost_from_response's default max, a million).
  explicit adaptive_fixture(bool reported = false) {
    route_config r;
    r.name = "search";
    r.limits.push_back(token_bucket(10, 10));
    r.adaptive = latency_target(milliseconds(100));
    if (reported) {
      r.cost_from_response.emplace();
    }
    cfg.routes.push_back(r);
    lim.emplace(cfg, clk, std::make_shared<memory_store>(cfg),
                std::vector<std::shared_ptr<const adaptive_route>>{adaptive});
  }

  // One window of slow exchanges: the factor halves.
  void slow_window() {
    totals.exchanges += 50;
    totals.heads += 50;
    totals.latency_ns += 50 * 500'000'000ull;
    now += seconds(1);
    adaptive->tick(now, totals);
  }

  std::size_t admitted_at_once(std::string_view subject) {
    std::size_t n = 0;
    while (lim->try_check({0, subject, "", "GET"})->allowed && n < 100) {
      ++n;
    }
    return n;
  }

  config cfg;
  manual_clock clk;
  upstream_totals totals;
  nanos now{0};
  std::shared_ptr<adaptive_route> adaptive = std::make_shared<adaptive_route>(
      "search", latency_target(milliseconds(100)), upstream_totals{}, nanos{0});
  std::optional<limiter> lim;
};

}  // namespace

TEST_CASE("the limiter applies every limit of an adaptive route at its factor") {
  adaptive_fixture f;
  CHECK(f.admitted_at_once("a") == 10);
  f.slow_window();
  REQUIRE(f.adaptive->factor() == 0.5);
  SUBCASE("a new subject gets half the burst, and the headers say so") {
    route_decision d = *f.lim->try_check({0, "b", "", "GET"});
    CHECK(d.headline.limit == 5);
    CHECK(d.headline.remaining == 4);
    CHECK(f.admitted_at_once("b") == 4);
  }
  SUBCASE("the status reports the effective limit") {
    boost::asio::io_context io;
    std::vector<decision> status;
    boost::asio::co_spawn(
        io, [&]() -> boost::asio::awaitable<void> { status = co_await f.lim->status("c", 0, ""); },
        boost::asio::detached);
    io.run();
    REQUIRE(status.size() == 1);
    CHECK(status[0].limit == 5);
  }
  SUBCASE("the state and the identity stay those of the configured limit") {
    const std::uint64_t before = f.lim->identity(0, 0).signature;
    f.slow_window();
    CHECK(f.lim->identity(0, 0).signature == before);
    CHECK(f.lim->policies(0, "")[0].limit == 10);  // the configured values
    CHECK(f.lim->factor_ppm(0) == k_factor_one / 4);
  }
  SUBCASE("refills at the scaled rate") {
    CHECK(f.admitted_at_once("d") == 5);
    f.clk.advance(milliseconds(199));
    CHECK_FALSE(f.lim->try_check({0, "d", "", "GET"})->allowed);
    f.clk.advance(milliseconds(1));  // 5/s: one every 200 ms
    CHECK(f.lim->try_check({0, "d", "", "GET"})->allowed);
  }
}

TEST_CASE("an adaptive route whose cost comes from the response is scaled too") {
  // Its admission asks for one unit (the charge comes later, forced): a scaled limit held at
  // the most a response may report (a million) was never scaled at all.
  adaptive_fixture f(true);
  f.slow_window();
  REQUIRE(f.adaptive->factor() == 0.5);
  const route_decision d = *f.lim->try_check({0, "b", "", "GET"});
  CHECK(d.headline.limit == 5);
  CHECK(d.headline.remaining == 4);  // what a 1-unit request would leave (it only peeks)
}

// ---------------------------------------------------------------------------------------------
// The simulation behind the choice of AIMD (the closing note of issue 17). An upstream serves
// `capacity` requests a second with a base latency; what it is sent beyond that queues. The
// route's limit allows 200/s, clients offer 150/s. At window 20 the upstream's capacity falls to
// 60/s; at window 80 it comes back. Each window (1 s) a controller sees the window's mean
// latency and sets the factor for the next. AIMD is the gateway's adaptive_controller; the
// gradient is Envoy's adaptive concurrency rule applied to the factor: × clamp(target / latency,
// 0.5, 2). Rerun with the figures printed:
//   RATEWALL_PRINT_SIMULATION=1 build/unit_limit -tc='adaptive simulation*'

namespace {

struct simulated_run {
  int windows_to_fit = -1;     // after the capacity falls, until no more than it is admitted
  int windows_to_target = -1;  // after the capacity falls, until a window is under target
  int windows_over = 0;        // over target while capacity is low
  double served = 0;           // requests admitted while capacity is low
  double mean_latency_ms = 0;  // while capacity is low
  double worst_latency_ms = 0;
  int reversals = 0;            // the factor changed direction, while capacity is low
  int windows_to_recover = -1;  // after capacity returns, until the factor is 1 again
  double min_factor = 1, max_factor = 0;
  std::vector<double> factors;
};

template <class Controller>
simulated_run simulate(Controller next_factor) {
  constexpr double k_limit = 200, k_offered = 150, k_base_ms = 20, k_target_ms = 100;
  constexpr int k_fall = 20, k_recover = 80, k_end = 140;
  double factor = 1, backlog = 0, last_change = 0;
  simulated_run run;
  int low_windows = 0;
  for (int t = 0; t < k_end; ++t) {
    const double capacity = t >= k_fall && t < k_recover ? 60 : 300;
    const double admitted = std::min(k_offered, factor * k_limit);
    // A fluid queue: what is not served this second waits for the next.
    backlog = std::max(0.0, backlog + admitted - capacity);
    const double rho = std::min(admitted / capacity, 0.95);
    const double latency_ms = k_base_ms / (1 - rho) + 1000 * backlog / capacity;
    const double before = factor;
    factor = next_factor(factor, admitted, latency_ms, k_target_ms);
    run.factors.push_back(factor);
    if (t >= k_fall && t < k_recover) {
      ++low_windows;
      run.served += admitted;
      run.mean_latency_ms += latency_ms;
      run.worst_latency_ms = std::max(run.worst_latency_ms, latency_ms);
      run.windows_over += latency_ms > k_target_ms ? 1 : 0;
      if (run.windows_to_fit < 0 && admitted <= capacity) {
        run.windows_to_fit = t - k_fall;
      }
      if (run.windows_to_target < 0 && latency_ms <= k_target_ms) {
        run.windows_to_target = t - k_fall;
      }
      const double change = factor - before;
      if (change * last_change < 0) {
        ++run.reversals;
      }
      if (change != 0) {
        last_change = change;
      }
      if (t >= k_fall + 10) {  // steady state
        run.min_factor = std::min(run.min_factor, factor);
        run.max_factor = std::max(run.max_factor, factor);
      }
    }
    if (t >= k_recover && run.windows_to_recover < 0 && factor == 1) {
      run.windows_to_recover = t - k_recover + 1;
    }
  }
  run.mean_latency_ms /= low_windows;
  return run;
}

simulated_run simulate_aimd() {
  adaptive_config cfg;
  cfg.latency_target = milliseconds(100);
  adaptive_controller c(cfg);
  return simulate([&c](double, double admitted, double latency_ms, double) {
    adaptive_window w;
    w.exchanges = static_cast<std::uint64_t>(admitted);
    w.mean_latency = nanos{static_cast<std::int64_t>(latency_ms * 1e6)};
    return c.update(w);
  });
}

simulated_run simulate_gradient() {
  return simulate([](double factor, double, double latency_ms, double target_ms) {
    const double gradient = std::clamp(target_ms / latency_ms, 0.5, 2.0);
    return std::clamp(factor * gradient, 0.1, 1.0);
  });
}

void print(const char* name, const simulated_run& r) {
  std::printf(
      "%-8s within capacity after %d windows, under target after %d | over target %d of 60 | "
      "served %.0f (upstream 3600) | latency "
      "mean %.0f ms, worst %.0f ms | steady factor %.2f..%.2f, %d reversals | back to 1 after "
      "%d windows\n",
      name, r.windows_to_fit, r.windows_to_target, r.windows_over, r.served, r.mean_latency_ms,
      r.worst_latency_ms, r.min_factor, r.max_factor, r.reversals, r.windows_to_recover);
}

}  // namespace

TEST_CASE("adaptive simulation: AIMD against a gradient controller") {
  const simulated_run aimd = simulate_aimd();
  const simulated_run gradient = simulate_gradient();
  if (std::getenv("RATEWALL_PRINT_SIMULATION") != nullptr) {
    print("aimd", aimd);
    print("gradient", gradient);
  }
  // What the gateway's controller must do: send no more than the upstream serves within two
  // windows of the fall (1 -> 0.5 -> 0.25: 50/s for 60/s), stay within [min_factor, 1], and be
  // back at 1 within ten windows of the recovery.
  CHECK(aimd.windows_to_fit >= 1);
  CHECK(aimd.windows_to_fit <= 2);
  CHECK(aimd.windows_to_recover >= 1);
  CHECK(aimd.windows_to_recover <= 10);
  for (double f : aimd.factors) {
    CHECK(f >= 0.1);
    CHECK(f <= 1.0);
  }
  // Why AIMD: the target is a ceiling, not a set point. The gradient doubles the factor as soon
  // as a window is under target and refills the queue; AIMD creeps back up, so it spends fewer
  // windows over the target with a lower mean latency, for somewhat fewer requests served.
  CHECK(aimd.windows_over < gradient.windows_over);
  CHECK(aimd.mean_latency_ms < gradient.mean_latency_ms);
}
