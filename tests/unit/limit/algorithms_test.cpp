#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ratewall/limit/concurrency.hpp"
#include "ratewall/limit/fixed_window.hpp"
#include "ratewall/limit/gcra.hpp"
#include "ratewall/limit/leaky_bucket.hpp"
#include "ratewall/limit/limiter.hpp"
#include "ratewall/limit/sliding_window_counter.hpp"
#include "ratewall/limit/sliding_window_log.hpp"

using namespace ratewall;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

limit_config window_limit(algorithm a, std::uint64_t limit, nanos window) {
  limit_config l;
  l.name = "window";
  l.algo = a;
  l.limit = limit;
  l.window = window;
  return l;
}

limit_config bucket_limit(algorithm a, std::uint64_t count, nanos period, std::uint64_t burst,
                          bool delay = false) {
  limit_config l;
  l.name = "bucket";
  l.algo = a;
  l.rate = {count, period};
  l.burst = burst;
  l.delay = delay;
  return l;
}

policy resolved(const limit_config& l) {
  return resolve_policy(l, nullptr, false, store_failure::allow);
}

config one_route(std::vector<limit_config> limits) {
  config cfg;
  route_config route;
  route.name = "api";
  route.limits = std::move(limits);
  cfg.routes.push_back(std::move(route));
  return cfg;
}

struct fixture {
  explicit fixture(config c) : cfg(std::move(c)), lim(cfg, clk) {}

  route_decision at(nanos t, std::string_view subject = "alice") {
    clk.set(t);
    return *lim.try_check({0, subject, "", "GET"});
  }

  config cfg;
  manual_clock clk;
  limiter lim;
};

// Owns a sliding log state for the length of a test.
struct log_state {
  sliding_window_log::state s;
  ~log_state() { sliding_window_log::clear(s); }
};

}  // namespace

TEST_CASE("fixed window: 5 per 60 s, the sixth waits for the window to end (issue 3 vector)") {
  fixture f(one_route({window_limit(algorithm::fixed_window, 5, seconds(60))}));
  for (int t = 0; t < 5; ++t) {
    const route_decision r = f.at(seconds(t));
    CHECK(r.allowed);
    CHECK(r.headline.remaining == static_cast<std::uint64_t>(4 - t));
    CHECK(r.headline.reset_after == seconds(60 - t));
  }
  const route_decision sixth = f.at(seconds(4));
  CHECK_FALSE(sixth.allowed);
  CHECK(sixth.headline.retry_after == seconds(56));
  CHECK_FALSE(f.at(seconds(60) - nanos{1}).allowed);
  CHECK(f.at(seconds(60)).allowed);
}

TEST_CASE("window boundary: fixed window lets the spike through, the sliding log does not") {
  SUBCASE("fixed window: 5 at 59 s and 5 at 61 s are all allowed (the known spike)") {
    fixture f(one_route({window_limit(algorithm::fixed_window, 5, seconds(60))}));
    for (int i = 0; i < 5; ++i) {
      CHECK(f.at(seconds(59)).allowed);
    }
    for (int i = 0; i < 5; ++i) {
      CHECK(f.at(seconds(61)).allowed);
    }
  }
  SUBCASE("sliding window log: the 5 at 61 s are denied, retry after 58 s") {
    fixture f(one_route({window_limit(algorithm::sliding_window_log, 5, seconds(60))}));
    for (int i = 0; i < 5; ++i) {
      CHECK(f.at(seconds(59)).allowed);
    }
    for (int i = 0; i < 5; ++i) {
      const route_decision r = f.at(seconds(61));
      CHECK_FALSE(r.allowed);
      CHECK(r.headline.retry_after == seconds(58));
    }
    CHECK_FALSE(f.at(seconds(119) - nanos{1}).allowed);
    for (int i = 0; i < 5; ++i) {
      CHECK(f.at(seconds(119)).allowed);
    }
    CHECK_FALSE(f.at(seconds(119)).allowed);
  }
}

TEST_CASE("sliding window counter: 8 × 0.75 + 3 = 9 is allowed, the next one is not") {
  const policy p = resolved(window_limit(algorithm::sliding_window_counter, 10, seconds(60)));
  SUBCASE("from the state") {
    sliding_window_counter::state s{1, 8, 3};  // window [60 s, 120 s): 8 before, 3 so far
    const decision ninth = sliding_window_counter::decide(s, seconds(75), p, 1);
    CHECK(ninth.allowed);
    CHECK(ninth.remaining == 0);
    const decision tenth = sliding_window_counter::decide(s, seconds(75), p, 1);
    CHECK_FALSE(tenth.allowed);
    // 8 × (60 − e) + 4 × 60 + 60 ≤ 600 from e = 22.5 s on.
    CHECK(tenth.retry_after == milliseconds(7500));
    CHECK_FALSE(sliding_window_counter::check(s, milliseconds(82500) - nanos{1}, p, 1).allowed);
    CHECK(sliding_window_counter::check(s, milliseconds(82500), p, 1).allowed);
  }
  SUBCASE("through the limiter") {
    fixture f(one_route({window_limit(algorithm::sliding_window_counter, 10, seconds(60))}));
    for (int i = 0; i < 8; ++i) {
      CHECK(f.at(seconds(10)).allowed);
    }
    for (int i = 0; i < 3; ++i) {
      CHECK(f.at(seconds(70)).allowed);
    }
    CHECK(f.at(seconds(75)).allowed);
    CHECK_FALSE(f.at(seconds(75)).allowed);
  }
}

TEST_CASE("leaky bucket, rate 1/s, burst 2: four requests at once (issue 3 vector)") {
  SUBCASE("without delay: allow, allow, allow, deny") {
    fixture f(one_route({bucket_limit(algorithm::leaky_bucket, 1, seconds(1), 2)}));
    for (int i = 0; i < 3; ++i) {
      const route_decision r = f.at(seconds(0));
      CHECK(r.allowed);
      CHECK(r.delay == nanos{0});
      CHECK(r.headline.limit == 3);
      CHECK(r.headline.remaining == static_cast<std::uint64_t>(2 - i));
    }
    const route_decision fourth = f.at(seconds(0));
    CHECK_FALSE(fourth.allowed);
    CHECK(fourth.headline.retry_after == seconds(1));
    CHECK(f.at(seconds(1)).allowed);
  }
  SUBCASE("with delay: served at 0, 1 and 2 s, the fourth denied") {
    fixture f(one_route({bucket_limit(algorithm::leaky_bucket, 1, seconds(1), 2, true)}));
    for (int i = 0; i < 3; ++i) {
      const route_decision r = f.at(seconds(0));
      CHECK(r.allowed);
      CHECK(r.delay == seconds(i));
      CHECK(r.headline.delay == seconds(i));
    }
    CHECK_FALSE(f.at(seconds(0)).allowed);
    // Half a second later the queue has moved half a slot: still full.
    CHECK_FALSE(f.at(milliseconds(500)).allowed);
    const route_decision next = f.at(seconds(1));
    CHECK(next.allowed);
    CHECK(next.delay == seconds(2));  // served at 3 s, behind the two still queued
  }
  SUBCASE("burst 0: one request per interval, like nginx without burst") {
    fixture f(one_route({bucket_limit(algorithm::leaky_bucket, 2, seconds(1), 0, true)}));
    CHECK(f.at(seconds(0)).allowed);
    CHECK_FALSE(f.at(milliseconds(499)).allowed);
    const route_decision r = f.at(milliseconds(500));
    CHECK(r.allowed);
    CHECK(r.delay == nanos{0});
  }
}

TEST_CASE("concurrency, limit 2: the third in flight is denied until one completes") {
  fixture f(one_route({window_limit(algorithm::concurrency, 2, nanos{0})}));
  route_decision first = f.at(seconds(0));
  route_decision second = f.at(seconds(0));
  CHECK(first.allowed);
  CHECK(second.allowed);
  CHECK(first.slot.held());
  CHECK(second.headline.remaining == 0);
  const route_decision third = f.at(seconds(0));
  CHECK_FALSE(third.allowed);
  CHECK(third.headline.retry_after == k_concurrency_retry);
  CHECK_FALSE(third.slot.held());

  first.slot.release();  // the response completed
  route_decision fourth = f.at(seconds(0));
  CHECK(fourth.allowed);
  CHECK_FALSE(f.at(seconds(0)).allowed);

  {
    route_decision moved = std::move(fourth);  // a lease moves with its request
    CHECK_FALSE(fourth.slot.held());
    CHECK(moved.slot.held());
  }  // destroyed: the client went away
  route_decision fifth = f.at(seconds(0));
  CHECK(fifth.allowed);
  CHECK_FALSE(f.at(seconds(0)).allowed);
}

TEST_CASE("windows and logs: a cost above the limit is impossible and charges nothing") {
  for (algorithm a : {algorithm::fixed_window, algorithm::sliding_window_log,
                      algorithm::sliding_window_counter}) {
    CAPTURE(static_cast<int>(a));
    config cfg = one_route({window_limit(a, 5, seconds(60))});
    cfg.routes[0].cost = 6;
    fixture f(cfg);
    const route_decision r = f.at(seconds(0));
    CHECK_FALSE(r.allowed);
    CHECK(r.headline.impossible);
    CHECK(r.headline.retry_after == k_never);
    CHECK(r.headline.remaining == 5);
  }
  const policy leaky = resolved(bucket_limit(algorithm::leaky_bucket, 1, seconds(1), 2));
  leaky_bucket::state s;
  CHECK(leaky_bucket::decide(s, seconds(0), leaky, 4).impossible);
  CHECK(leaky_bucket::decide(s, seconds(0), leaky, 3).allowed);
  const policy none = resolved(window_limit(algorithm::concurrency, 0, nanos{0}));
  concurrency::state c;
  CHECK(concurrency::decide(c, seconds(0), none, 1).impossible);
}

TEST_CASE("sliding log keeps at most `limit` timestamps and frees them when the window passes") {
  const policy p = resolved(window_limit(algorithm::sliding_window_log, 100, seconds(10)));
  log_state log;
  int allowed = 0;
  for (int i = 0; i < 1000; ++i) {
    allowed += sliding_window_log::decide(log.s, milliseconds(i), p, 1).allowed;
  }
  CHECK(allowed == 100);
  CHECK(sliding_window_log::size(log.s) == 100);
  CHECK(sliding_window_log::heap_bytes(log.s) <= 16 + 8 * 100);
  CHECK(sliding_window_log::expires_at(log.s, p) == milliseconds(99) + seconds(10));
  // Later traffic at a low rate: expired entries are dropped and the ring shrinks.
  for (int i = 0; i < 5; ++i) {
    CHECK(sliding_window_log::decide(log.s, seconds(20 + i), p, 1).allowed);
  }
  CHECK(sliding_window_log::size(log.s) == 5);
  CHECK(sliding_window_log::heap_bytes(log.s) < 16 + 8 * 100);
}

// For every algorithm with a time-based answer: a denial's retry_after is exactly the first
// nanosecond at which the same request passes, `remaining` is exactly the cost that still
// passes, and at reset_after the state is whole again.
template <class A>
void check_answers_are_exact(const policy& p, std::uint64_t max_cost, std::uint32_t seed) {
  std::mt19937 rng(seed);
  typename A::state s{};
  nanos now{0};
  int denials = 0;
  for (int i = 0; i < 3000; ++i) {
    now += nanos{std::uniform_int_distribution<std::int64_t>(
        0, p.interval.count() + p.window.count() / 8)(rng)};
    const std::uint64_t cost = std::uniform_int_distribution<std::uint64_t>(1, max_cost)(rng);
    const decision d = A::decide(s, now, p, cost);
    CAPTURE(i);
    if (!d.allowed) {
      REQUIRE_FALSE(d.impossible);
      ++denials;
      REQUIRE(d.retry_after > nanos{0});
      CHECK_FALSE(A::check(s, now + d.retry_after - nanos{1}, p, cost).allowed);
      CHECK(A::check(s, now + d.retry_after, p, cost).allowed);
      continue;
    }
    if (d.remaining > 0) {
      CHECK(A::check(s, now, p, d.remaining).allowed);
    }
    CHECK_FALSE(A::check(s, now, p, d.remaining + 1).allowed);
    if (d.reset_after > nanos{0}) {
      CHECK(A::check(s, now + d.reset_after, p, 0).remaining == p.limit);
      CHECK(A::check(s, now + d.reset_after - nanos{1}, p, 0).remaining < p.limit);
      CHECK(A::expires_at(s, p) <= now + d.reset_after);
    }
  }
  CHECK(denials > 100);  // the sequence did exercise denials
}

TEST_CASE("retry_after, remaining and reset_after are exact for every timed algorithm") {
  SUBCASE("token bucket") {
    const policy p = resolved(bucket_limit(algorithm::token_bucket, 3, seconds(1), 7));
    check_answers_are_exact<gcra>(p, 3, 1);
  }
  SUBCASE("leaky bucket") {
    const policy p = resolved(bucket_limit(algorithm::leaky_bucket, 3, seconds(1), 6, true));
    check_answers_are_exact<leaky_bucket>(p, 3, 2);
  }
  SUBCASE("fixed window") {
    const policy p = resolved(window_limit(algorithm::fixed_window, 9, seconds(7)));
    check_answers_are_exact<fixed_window>(p, 4, 3);
  }
  SUBCASE("sliding window counter") {
    const policy p = resolved(window_limit(algorithm::sliding_window_counter, 9, seconds(7)));
    check_answers_are_exact<sliding_window_counter>(p, 4, 4);
  }
  SUBCASE("sliding window log") {
    const policy p = resolved(window_limit(algorithm::sliding_window_log, 9, seconds(7)));
    log_state log;  // checked by hand: its state owns a ring that must be freed
    std::mt19937 rng(5);
    nanos now{0};
    int denials = 0;
    for (int i = 0; i < 3000; ++i) {
      now += milliseconds(std::uniform_int_distribution<int>(0, 1000)(rng));
      const std::uint64_t cost = std::uniform_int_distribution<std::uint64_t>(1, 4)(rng);
      const decision d = sliding_window_log::decide(log.s, now, p, cost);
      CAPTURE(i);
      if (!d.allowed) {
        ++denials;
        CHECK_FALSE(
            sliding_window_log::check(log.s, now + d.retry_after - nanos{1}, p, cost).allowed);
        CHECK(sliding_window_log::check(log.s, now + d.retry_after, p, cost).allowed);
        continue;
      }
      if (d.remaining > 0) {
        CHECK(sliding_window_log::check(log.s, now, p, d.remaining).allowed);
      }
      CHECK_FALSE(sliding_window_log::check(log.s, now, p, d.remaining + 1).allowed);
      CHECK(sliding_window_log::check(log.s, now + d.reset_after, p, 0).remaining == 9);
      CHECK(sliding_window_log::check(log.s, now + d.reset_after - nanos{1}, p, 0).remaining < 9);
    }
    CHECK(denials > 100);
  }
}

TEST_CASE("policies that cannot run are refused at start with the limit's name") {
  limit_config zero_rate = bucket_limit(algorithm::token_bucket, 0, seconds(1), 5);
  CHECK_THROWS_WITH_AS(resolve_policy(zero_rate, nullptr, false, store_failure::allow),
                       doctest::Contains("limit 'bucket'"), std::invalid_argument);
  limit_config no_window = window_limit(algorithm::fixed_window, 5, nanos{0});
  CHECK_THROWS_AS(resolve_policy(no_window, nullptr, false, store_failure::allow),
                  std::invalid_argument);
  limit_config huge_log = window_limit(algorithm::sliding_window_log, 2'000'000, seconds(1));
  CHECK_THROWS_WITH_AS(resolve_policy(huge_log, nullptr, false, store_failure::allow),
                       doctest::Contains("sliding_window_counter"), std::invalid_argument);
  limit_config overflow =
      bucket_limit(algorithm::token_bucket, 1, std::chrono::hours(24 * 365), 1000);
  CHECK_THROWS_AS(resolve_policy(overflow, nullptr, false, store_failure::allow),
                  std::invalid_argument);

  config cfg = one_route({zero_rate});
  manual_clock clk;
  CHECK_THROWS_WITH_AS(limiter(cfg, clk), doctest::Contains("route 'api' limit 'bucket'"),
                       std::invalid_argument);
}
