#include "ratewall/proxy/upstream_budget.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

using namespace ratewall;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

/// A unit taken on an io_context, kept until reset; `got` says whether one came.
struct taker {
  std::optional<bool> got;  // unset: still waiting
  budget_unit unit;
};

void spawn_take(asio::io_context& ioc, const std::shared_ptr<upstream_budget>& budget, taker& t,
                nanos timeout) {
  asio::co_spawn(
      ioc,
      [&ioc, budget, &t, timeout]() -> asio::awaitable<void> {
        t.unit = co_await budget->take(ioc.get_executor(), timeout);
        t.got = static_cast<bool>(t.unit);
      },
      asio::detached);
}

}  // namespace

TEST_CASE("upstream budget: no bound counts units and never waits") {
  asio::io_context ioc;
  auto budget = std::make_shared<upstream_budget>(0);
  std::vector<taker> takers(100);
  for (auto& t : takers) {
    spawn_take(ioc, budget, t, nanos{0});
  }
  ioc.run();
  for (auto& t : takers) {
    CHECK(t.got == true);
  }
  CHECK(budget->in_use() == 100);
  takers.clear();
  CHECK(budget->in_use() == 0);
}

TEST_CASE("upstream budget: past the bound a request waits, first come first served") {
  asio::io_context ioc;
  auto budget = std::make_shared<upstream_budget>(2);
  taker a, b, c, d;
  spawn_take(ioc, budget, a, 10s);
  spawn_take(ioc, budget, b, 10s);
  spawn_take(ioc, budget, c, 10s);
  spawn_take(ioc, budget, d, 10s);
  ioc.poll();
  CHECK(a.got == true);
  CHECK(b.got == true);
  CHECK(!c.got);
  CHECK(!d.got);
  CHECK(budget->waiting() == 2);

  a.unit.reset();  // c was first in the queue
  ioc.poll();
  CHECK(c.got == true);
  CHECK(!d.got);
  CHECK(budget->in_use() == 2);

  SUBCASE("a waiter times out: empty, and it leaves the queue") {
    asio::io_context other;
    auto short_budget = std::make_shared<upstream_budget>(1);
    taker x, y;
    spawn_take(other, short_budget, x, 10s);
    spawn_take(other, short_budget, y, 20ms);
    other.run();
    CHECK(x.got == true);
    CHECK(y.got == false);
    CHECK(short_budget->waiting() == 0);
    x.unit.reset();
    CHECK(short_budget->in_use() == 0);
  }
  SUBCASE("a larger bound on reload admits waiters at once") {
    budget->set_capacity(3);
    ioc.poll();
    CHECK(d.got == true);
    CHECK(budget->in_use() == 3);
  }
  SUBCASE("queue_timeout 0: no wait") {
    taker e;
    spawn_take(ioc, budget, e, nanos{0});
    ioc.poll();
    CHECK(e.got == false);
  }
  b.unit.reset();
  ioc.poll();
  CHECK(d.got == true);
}

TEST_CASE("upstream budget: units given back on other threads reach every waiter") {
  // Two threads each take and give back units as fast as they can while a third waits for
  // each of its turns: the bound holds and no waiter is left behind.
  auto budget = std::make_shared<upstream_budget>(2);
  constexpr int k_rounds = 2000;
  std::atomic<int> peak{0};
  std::atomic<int> done{0};
  auto run = [&] {
    asio::io_context ioc;
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          for (int i = 0; i < k_rounds; ++i) {
            budget_unit u = co_await budget->take(co_await asio::this_coro::executor, 10s);
            REQUIRE(u);
            int now = static_cast<int>(budget->in_use());
            int seen = peak.load();
            while (now > seen && !peak.compare_exchange_weak(seen, now)) {
            }
          }
          ++done;
        },
        asio::detached);
    ioc.run();
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back(run);
  }
  for (auto& t : threads) {
    t.join();
  }
  CHECK(done == 3);
  CHECK(peak <= 2);
  CHECK(budget->in_use() == 0);
  CHECK(budget->waiting() == 0);
}

TEST_CASE("upstream budget: try_take gives a free unit at once and never overtakes a waiter") {
  asio::io_context ioc;
  auto budget = std::make_shared<upstream_budget>(1);
  budget_unit first = budget->try_take();
  REQUIRE(first);
  CHECK_FALSE(budget->try_take());  // none free: empty, and nothing queued for it
  CHECK(budget->waiting() == 0);

  taker queued;
  spawn_take(ioc, budget, queued, 10s);
  ioc.poll();
  CHECK(budget->waiting() == 1);
  first.reset();  // the unit goes to the waiter, not to whoever asks next
  CHECK_FALSE(budget->try_take());
  ioc.poll();
  CHECK(queued.got == true);
  queued.unit.reset();
  CHECK(budget->try_take());
}
