#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "ratewall/limit/gcra.hpp"
#include "ratewall/limit/limiter.hpp"

using namespace ratewall;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

limit_config token_bucket_limit(std::uint64_t count, nanos period, std::uint64_t burst) {
  limit_config l;
  l.name = "burst";
  l.algo = algorithm::token_bucket;
  l.rate = {count, period};
  l.burst = burst;
  return l;
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

  route_decision at(nanos t, std::string_view subject = "alice", std::string_view plan = "") {
    clk.set(t);
    return *lim.try_check({0, subject, plan, "GET"});
  }

  config cfg;
  manual_clock clk;
  limiter lim;
};

}  // namespace

TEST_CASE("token bucket: capacity 5, refill 1/s, one client (issue 2 vector)") {
  fixture f(one_route({token_bucket_limit(1, seconds(1), 5)}));
  const std::vector<std::pair<int, std::uint64_t>> allowed = {{0, 4},    {500, 3},  {1000, 3},
                                                              {1500, 2}, {2000, 2}, {2500, 1},
                                                              {3000, 1}, {3500, 0}, {4000, 0}};
  for (auto [ms, remaining] : allowed) {
    CAPTURE(ms);
    const route_decision r = f.at(milliseconds(ms));
    CHECK(r.allowed);
    CHECK(r.has_limits);
    CHECK(r.headline.limit == 5);
    CHECK(r.headline.remaining == remaining);
  }
  const route_decision denied = f.at(milliseconds(4500));
  CHECK_FALSE(denied.allowed);
  CHECK_FALSE(denied.headline.impossible);
  CHECK(denied.headline.remaining == 0);
  CHECK(denied.headline.retry_after == milliseconds(500));  // Retry-After: 1 once rounded up

  const route_decision later = f.at(milliseconds(5500));
  CHECK(later.allowed);
  CHECK(later.headline.remaining == 0);
}

TEST_CASE("token bucket: capacity 3, refill 1/s, two clients are independent (issue 2 vector)") {
  fixture f(one_route({token_bucket_limit(1, seconds(1), 3)}));
  CHECK(f.at(seconds(0), "alice").allowed);
  CHECK(f.at(seconds(0), "alice").allowed);
  CHECK(f.at(seconds(0), "alice").allowed);
  CHECK_FALSE(f.at(seconds(0), "alice").allowed);

  const route_decision bob = f.at(seconds(0), "bob");
  CHECK(bob.allowed);
  CHECK(bob.headline.remaining == 2);

  CHECK(f.at(seconds(1), "alice").allowed);
  const route_decision bob_again = f.at(seconds(1), "bob");
  CHECK(bob_again.allowed);
  CHECK(bob_again.headline.remaining == 2);
}

TEST_CASE("token bucket: capacity 10, refill 2/s (issue 2 vector)") {
  fixture f(one_route({token_bucket_limit(2, seconds(1), 10)}));
  for (int i = 0; i < 10; ++i) {
    CHECK(f.at(seconds(0)).allowed);
  }
  const route_decision eleventh = f.at(seconds(0));
  CHECK_FALSE(eleventh.allowed);
  CHECK(eleventh.headline.retry_after == milliseconds(500));
  for (int ms : {500, 1000, 1500, 2000}) {
    CAPTURE(ms);
    CHECK(f.at(milliseconds(ms)).allowed);
  }
}

TEST_CASE("gcra is exact at the boundary: 999 ms denied, 1000 ms allowed") {
  const policy p =
      resolve_policy(token_bucket_limit(1, seconds(1), 1), nullptr, false, store_failure::allow);
  gcra::state s;
  CHECK(gcra::decide(s, seconds(10), p, 1).allowed);
  const decision denied = gcra::decide(s, seconds(10), p, 1);
  CHECK_FALSE(denied.allowed);
  CHECK(denied.retry_after == seconds(1));
  CHECK_FALSE(gcra::decide(s, seconds(10) + milliseconds(999), p, 1).allowed);
  CHECK(gcra::decide(s, seconds(11), p, 1).allowed);
}

TEST_CASE("gcra reports reset_after as the time until the bucket is full again") {
  const policy p =
      resolve_policy(token_bucket_limit(10, seconds(1), 10), nullptr, false, store_failure::allow);
  gcra::state s;
  decision d;
  for (int i = 0; i < 4; ++i) {
    d = gcra::decide(s, seconds(0), p, 1);
  }
  CHECK(d.remaining == 6);
  CHECK(d.reset_after == milliseconds(400));
  CHECK(gcra::expires_at(s, p) == milliseconds(400));
}

TEST_CASE("token bucket burst defaults to one period's worth of the rate") {
  const policy p =
      resolve_policy(token_bucket_limit(7, seconds(1), 0), nullptr, false, store_failure::allow);
  CHECK(p.limit == 7);
  CHECK(p.interval == nanos{142857143});  // 1 s / 7, rounded up: never faster than configured
}

TEST_CASE("token bucket: a cost above the burst is never admitted and charges nothing") {
  const policy p =
      resolve_policy(token_bucket_limit(1, seconds(1), 5), nullptr, false, store_failure::allow);
  gcra::state s;
  const decision d = gcra::decide(s, seconds(0), p, 6);
  CHECK_FALSE(d.allowed);
  CHECK(d.impossible);
  CHECK(d.retry_after == k_never);
  CHECK(d.remaining == 5);
  CHECK(s.tat == 0);
  // Much later it is still impossible: waiting never helps.
  CHECK(gcra::decide(s, seconds(3600), p, 6).impossible);
  CHECK(gcra::decide(s, seconds(0), p, 5).allowed);
}

TEST_CASE("token bucket: plan overrides replace rate and burst for that plan only") {
  limit_config l = token_bucket_limit(10, seconds(1), 20);
  limit_override premium;
  premium.rate = rate_spec{100, seconds(1)};
  premium.burst = 200;
  l.plans["premium"] = premium;
  fixture f(one_route({l}));

  int free_allowed = 0;
  int premium_allowed = 0;
  int no_override_allowed = 0;
  for (int i = 0; i < 300; ++i) {
    free_allowed += f.at(seconds(0), "free-user", "").allowed;
    premium_allowed += f.at(seconds(0), "premium-user", "premium").allowed;
    no_override_allowed += f.at(seconds(0), "other-user", "free").allowed;
  }
  CHECK(free_allowed == 20);
  CHECK(premium_allowed == 200);
  CHECK(no_override_allowed == 20);
  CHECK(f.at(seconds(0), "premium-user-2", "premium").headline.limit == 200);
  // Premium refills at 100/s: 10 ms buys one request.
  CHECK(f.at(milliseconds(10), "premium-user", "premium").allowed);
  CHECK_FALSE(f.at(milliseconds(10), "premium-user", "premium").allowed);
}
