// Routes whose cost the response reports (cost_from_response): admission peeks (allowed iff a
// 1-unit request would be, nothing charged), and the reported cost is forced in when the
// response ends, past the limit if it must; later requests wait for the debt to drain.

#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "ratewall/limit/fixed_window.hpp"
#include "ratewall/limit/gcra.hpp"
#include "ratewall/limit/limiter.hpp"
#include "ratewall/limit/memory_store.hpp"

using namespace ratewall;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

limit_config bucket(algorithm a, std::uint64_t count, nanos period, std::uint64_t burst) {
  limit_config l;
  l.name = "bucket";
  l.algo = a;
  l.rate = {count, period};
  l.burst = burst;
  return l;
}

limit_config window(algorithm a, std::uint64_t limit, nanos length) {
  limit_config l;
  l.name = "window";
  l.algo = a;
  l.limit = limit;
  l.window = length;
  return l;
}

config response_cost_route(std::vector<limit_config> limits) {
  config cfg;
  route_config r;
  r.name = "chat";
  r.limits = std::move(limits);
  r.cost_from_response = cost_from_response_config{};
  cfg.routes.push_back(std::move(r));
  return cfg;
}

struct fixture {
  explicit fixture(config c) : cfg(std::move(c)), lim(cfg, clk) {}

  route_decision admit(std::string_view subject = "alice") {
    return *lim.try_check({0, subject, "", "GET"});
  }
  void charge(std::uint64_t cost, std::string_view subject = "alice") {
    REQUIRE(lim.try_charge({0, subject, "", "GET"}, cost).has_value());
  }

  config cfg;
  manual_clock clk;
  limiter lim;
};

// What each limit of route 0 holds for alice now (nothing charged).
std::vector<decision> run_status(fixture& f) {
  auto& store = dynamic_cast<memory_store&>(f.lim.backing_store());
  return store.status_now("alice", f.lim.policies(0, ""), f.clk.now());
}

}  // namespace

TEST_CASE("admission on a response-cost route peeks: room left, nothing charged") {
  fixture f(response_cost_route({bucket(algorithm::token_bucket, 10, seconds(1), 10)}));
  CHECK(f.lim.cost_from_response(0));
  for (int i = 0; i < 50; ++i) {
    const route_decision d = f.admit();
    REQUIRE(d.allowed);
    CHECK(d.headline.remaining == 9);  // what a 1-unit request would leave
  }
}

TEST_CASE("token bucket: a forced charge goes past the burst, and requests wait for the debt") {
  // 10/s, burst 10: 100 ms per token, tau = 1 s.
  fixture f(response_cost_route({bucket(algorithm::token_bucket, 10, seconds(1), 10)}));
  REQUIRE(f.admit().allowed);
  f.charge(25);  // TAT = 2.5 s: 1.5 s of debt beyond the bucket
  route_decision d = f.admit();
  CHECK_FALSE(d.allowed);
  CHECK(d.headline.remaining == 0);
  // A 1-unit request fits once TAT + 100 ms - now <= 1 s: at 1.6 s.
  CHECK(d.headline.retry_after == milliseconds(1600));
  CHECK(d.headline.reset_after == milliseconds(2500));
  f.clk.set(milliseconds(1600) - nanos{1});
  CHECK_FALSE(f.admit().allowed);
  f.clk.set(milliseconds(1600));
  CHECK(f.admit().allowed);
  // Another subject was never charged.
  CHECK(f.admit("bob").headline.remaining == 9);
}

TEST_CASE("leaky bucket: the queue may run past its capacity and drains at the rate") {
  // 10/s, burst 5: capacity 6 × 100 ms.
  fixture f(response_cost_route({bucket(algorithm::leaky_bucket, 10, seconds(1), 5)}));
  f.charge(20);  // TAT = 2 s
  const route_decision d = f.admit();
  CHECK_FALSE(d.allowed);
  CHECK(d.headline.retry_after == milliseconds(1500));  // 2 s + 100 ms - 600 ms
  f.clk.set(milliseconds(1500) - nanos{1});
  CHECK_FALSE(f.admit().allowed);
  f.clk.set(milliseconds(1500));
  CHECK(f.admit().allowed);
}

TEST_CASE("fixed window: a count above the limit denies until the window ends") {
  fixture f(response_cost_route({window(algorithm::fixed_window, 100, seconds(60))}));
  f.charge(60);
  CHECK(f.admit().allowed);
  f.charge(90);  // 150 of 100
  f.clk.set(seconds(10));
  const route_decision d = f.admit();
  CHECK_FALSE(d.allowed);
  CHECK(d.headline.retry_after == seconds(50));
  f.clk.set(seconds(60) - nanos{1});
  CHECK_FALSE(f.admit().allowed);
  f.clk.set(seconds(60));
  CHECK(f.admit().allowed);  // the debt ends with its window
}

TEST_CASE("sliding window counter: a debt weighs on the next window too") {
  fixture f(response_cost_route({window(algorithm::sliding_window_counter, 100, seconds(60))}));
  f.charge(150);
  f.clk.set(seconds(60));
  const route_decision d = f.admit();
  CHECK_FALSE(d.allowed);
  // 150 × (60 - e) / 60 + 1 <= 100 from e = 20.4 s into the next window.
  CHECK(d.headline.retry_after == milliseconds(20400));
  f.clk.set(seconds(60) + milliseconds(20400) - nanos{1});
  CHECK_FALSE(f.admit().allowed);
  f.clk.set(seconds(60) + milliseconds(20400));
  CHECK(f.admit().allowed);
}

TEST_CASE("a forced charge charges every limit, shadow ones too, and a denied peek nothing") {
  limit_config minute = window(algorithm::fixed_window, 1000, seconds(60));
  minute.name = "minute";
  limit_config watch = bucket(algorithm::token_bucket, 1, seconds(1), 5);
  watch.name = "watch";
  watch.shadow = true;
  fixture f(
      response_cost_route({bucket(algorithm::token_bucket, 10, seconds(1), 10), minute, watch}));
  f.charge(12);
  const std::vector<decision> after = run_status(f);
  REQUIRE(after.size() == 3);
  CHECK(after[0].remaining == 0);
  CHECK(after[1].remaining == 988);
  CHECK(after[2].remaining == 0);  // shadow: charged, never enforced
  // Denied by the bucket: the minute window is not charged by the peek.
  CHECK_FALSE(f.admit().allowed);
  CHECK(run_status(f)[1].remaining == 988);
}

TEST_CASE("a huge reported cost is bounded: the debt never exceeds k_max_debt") {
  // One token a day: a cost of 10^12 would be 2.7 billion years; it is held to 2^49 µs.
  fixture f(response_cost_route({bucket(algorithm::token_bucket, 1, std::chrono::hours(24), 1)}));
  f.charge(1'000'000'000'000);
  route_decision d = f.admit();
  CHECK_FALSE(d.allowed);
  CHECK(d.headline.reset_after == k_max_debt);
  f.charge(1'000'000'000'000);  // and charging again moves it no further
  CHECK(f.admit().headline.reset_after == k_max_debt);
  CHECK(f.admit().headline.retry_after == k_max_debt);  // + 1 day interval - 1 day tau

  fixture w(response_cost_route({window(algorithm::sliding_window_counter, 100, seconds(60))}));
  w.charge(~std::uint64_t{0});
  w.charge(~std::uint64_t{0});
  CHECK_FALSE(w.admit().allowed);
}

TEST_CASE("the algorithms' force, directly") {
  SUBCASE("gcra keeps the TAT of a clamped charge at now + k_max_debt") {
    limit_config l = bucket(algorithm::token_bucket, 1, seconds(1), 1);
    const policy p = resolve_policy(l, nullptr, false, store_failure::allow);
    gcra::state s;
    gcra::force(s, seconds(5), p, 3);
    CHECK(s.tat == nanos(seconds(8)).count());
    gcra::force(s, seconds(5), p, ~std::uint64_t{0});
    CHECK(s.tat == nanos(seconds(5)).count() + k_max_debt.count());
  }
  SUBCASE("fixed window opens the window of now before it counts") {
    const policy p = resolve_policy(window(algorithm::fixed_window, 10, seconds(10)), nullptr,
                                    false, store_failure::allow);
    fixed_window::state s{0, 7};
    fixed_window::force(s, seconds(25), p, 30);
    CHECK(s.window == 2);
    CHECK(s.count == 30);
  }
}

TEST_CASE("the limiter refuses limits without a debt on a response-cost route") {
  CHECK_THROWS_AS(
      fixture(response_cost_route({window(algorithm::sliding_window_log, 10, seconds(1))})),
      std::invalid_argument);
  limit_config c;
  c.name = "inflight";
  c.algo = algorithm::concurrency;
  c.limit = 2;
  CHECK_THROWS_AS(fixture(response_cost_route({c})), std::invalid_argument);
}

namespace {

// A store of one row, held by alice's debt of 30 units (3 s at 10/s): limited, not evictable.
struct one_row_store {
  one_row_store()
      : cfg(response_cost_route({bucket(algorithm::token_bucket, 10, seconds(1), 10)})),
        lim(cfg, clk, std::make_shared<memory_store>(options())) {
    REQUIRE(lim.try_charge({0, "alice", "", "GET"}, 30).has_value());
  }
  static memory_store_options options() {
    memory_store_options o;
    o.max_keys = 1;
    o.shards = 1;
    return o;
  }
  config cfg;
  manual_clock clk;
  limiter lim;
};

}  // namespace

TEST_CASE("a forced charge makes the row of a new subject, and a full store keeps its rows") {
  one_row_store full;
  limiter& lim = full.lim;
  auto* store = dynamic_cast<memory_store*>(&lim.backing_store());
  REQUIRE(store != nullptr);
  CHECK(store->size() == 1);
  // Alice is in debt (limited): a new subject cannot evict her row, so its charge is lost.
  const route_decision bob = *lim.try_charge({0, "bob", "", "GET"}, 5);
  CHECK(bob.untracked);
  CHECK_FALSE(lim.try_check({0, "alice", "", "GET"})->allowed);
}

TEST_CASE("a full store refuses a response-cost admission as it refuses a check (on_full: deny)") {
  one_row_store full;
  limiter& lim = full.lim;
  // Bob's charge could not be recorded: he is refused (503), not admitted for free.
  const route_decision bob = *lim.try_check({0, "bob", "", "GET"});
  CHECK_FALSE(bob.allowed);
  CHECK(bob.store_full);
  SUBCASE("with room, a peek still charges nothing and makes no row") {
    full.clk.advance(seconds(10));  // alice's debt has drained: her row may go
    const route_decision again = *lim.try_check({0, "bob", "", "GET"});
    CHECK(again.allowed);
    CHECK_FALSE(again.store_full);
  }
}
