#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include "ratewall/limit/limiter.hpp"
#include "ratewall/limit/memory_store.hpp"

using namespace ratewall;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

limit_config token_bucket_limit(std::string name, std::uint64_t count, nanos period,
                                std::uint64_t burst) {
  limit_config l;
  l.name = std::move(name);
  l.algo = algorithm::token_bucket;
  l.rate = {count, period};
  l.burst = burst;
  return l;
}

limit_config window_limit(std::string name, algorithm a, std::uint64_t limit, nanos window) {
  limit_config l;
  l.name = std::move(name);
  l.algo = a;
  l.limit = limit;
  l.window = window;
  return l;
}

route_config make_route(std::string name, std::vector<limit_config> limits) {
  route_config r;
  r.name = std::move(name);
  r.limits = std::move(limits);
  return r;
}

template <class T>
T run(boost::asio::awaitable<T> op) {
  boost::asio::io_context io;
  std::future<T> result = boost::asio::co_spawn(io, std::move(op), boost::asio::use_future);
  io.run();
  return result.get();
}

struct fixture {
  explicit fixture(config c) : cfg(std::move(c)), lim(cfg, clk) {}

  route_decision ask(std::string_view subject, std::size_t route = 0,
                     std::string_view method = "GET", std::string_view plan = "") {
    return *lim.try_check({route, subject, plan, method});
  }

  std::vector<decision> status(std::string_view subject, std::size_t route = 0) {
    return run(lim.status(subject, route, ""));
  }

  config cfg;
  manual_clock clk;
  limiter lim;
};

config with_routes(std::vector<route_config> routes) {
  config cfg;
  cfg.routes = std::move(routes);
  return cfg;
}

}  // namespace

TEST_CASE("a route is allowed only if every limit allows, and nothing is charged otherwise") {
  fixture f(with_routes(
      {make_route("api", {token_bucket_limit("wide", 1, std::chrono::hours(1), 10),
                          token_bucket_limit("narrow", 1, std::chrono::hours(1), 2)})}));
  CHECK(f.ask("alice").allowed);
  CHECK(f.ask("alice").allowed);
  for (int i = 0; i < 5; ++i) {
    const route_decision r = f.ask("alice");
    CHECK_FALSE(r.allowed);
    CHECK(r.limit_index == 1);
  }
  const std::vector<decision> st = f.status("alice");
  REQUIRE(st.size() == 2);
  CHECK(st[0].remaining == 8);  // charged twice, not seven times
  CHECK(st[1].remaining == 0);
}

TEST_CASE("every algorithm takes part in the all-or-nothing charge") {
  // A fixed window of 3 next to each algorithm: the fourth request is denied by the window and
  // must leave the other limit exactly as three requests left it.
  for (algorithm a :
       {algorithm::token_bucket, algorithm::leaky_bucket, algorithm::fixed_window,
        algorithm::sliding_window_log, algorithm::sliding_window_counter, algorithm::concurrency}) {
    CAPTURE(static_cast<int>(a));
    limit_config other = window_limit("other", a, 10, std::chrono::hours(1));
    other.rate = {1, std::chrono::hours(1)};
    other.burst = 10;
    fixture f(with_routes({make_route("api", {other, window_limit("three", algorithm::fixed_window,
                                                                  3, std::chrono::hours(1))})}));
    std::vector<route_decision> held;
    for (int i = 0; i < 3; ++i) {
      held.push_back(f.ask("alice"));
      CHECK(held.back().allowed);
    }
    for (int i = 0; i < 4; ++i) {
      held.push_back(f.ask("alice"));
      CHECK_FALSE(held.back().allowed);
      CHECK_FALSE(held.back().slot.held());
    }
    const std::uint64_t expected = a == algorithm::leaky_bucket ? 11 - 3 : 10 - 3;
    CHECK(f.status("alice")[0].remaining == expected);
  }
}

TEST_CASE("the headline is the most restrictive limit") {
  SUBCASE("allowed: the lowest remaining") {
    fixture f(with_routes({make_route("api", {token_bucket_limit("a", 1, seconds(1), 10),
                                              token_bucket_limit("b", 1, seconds(1), 3),
                                              token_bucket_limit("c", 1, seconds(1), 5)})}));
    const route_decision r = f.ask("alice");
    CHECK(r.limit_index == 1);
    CHECK(r.headline.limit == 3);
    CHECK(r.headline.remaining == 2);
  }
  SUBCASE("allowed, same remaining: the longest reset") {
    fixture f(with_routes({make_route(
        "api", {window_limit("minute", algorithm::fixed_window, 5, seconds(60)),
                window_limit("hour", algorithm::fixed_window, 5, std::chrono::hours(1))})}));
    const route_decision r = f.ask("alice");
    CHECK(r.limit_index == 1);
    CHECK(r.headline.reset_after == std::chrono::hours(1));
  }
  SUBCASE("denied: the denial that clears last, so Retry-After is never too early") {
    fixture f(with_routes(
        {make_route("api", {window_limit("ten_s", algorithm::fixed_window, 1, seconds(10)),
                            token_bucket_limit("minute", 1, seconds(60), 1)})}));
    CHECK(f.ask("alice").allowed);
    const route_decision r = f.ask("alice");
    CHECK_FALSE(r.allowed);
    CHECK(r.limit_index == 1);
    CHECK(r.headline.retry_after == seconds(60));
    f.clk.set(seconds(59));
    CHECK_FALSE(f.ask("alice").allowed);
    f.clk.set(seconds(60));
    CHECK(f.ask("alice").allowed);
  }
}

TEST_CASE("shadow limits are computed and reported but never deny") {
  SUBCASE("one shadow limit next to an enforced one") {
    limit_config shadow = token_bucket_limit("trial", 1, std::chrono::hours(1), 1);
    shadow.shadow = true;
    fixture f(with_routes(
        {make_route("api", {shadow, token_bucket_limit("real", 1, std::chrono::hours(1), 3)})}));
    const route_decision first = f.ask("alice");
    CHECK(first.allowed);
    CHECK_FALSE(first.shadow_denied);
    const route_decision second = f.ask("alice");
    CHECK(second.allowed);
    CHECK(second.shadow_denied);
    CHECK(second.shadow_limit_index == 0);
    CHECK(second.limit_index == 1);  // the headers report enforced limits only
    CHECK(second.headline.remaining == 1);
    // The shadow limit was not charged for the request it would have denied.
    CHECK(f.status("alice")[0].retry_after == std::chrono::hours(1));
    CHECK(f.ask("alice").allowed);
    CHECK_FALSE(f.ask("alice").allowed);  // the enforced limit still holds
  }
  SUBCASE("a shadow route: no headers, never denied") {
    route_config route =
        make_route("api", {token_bucket_limit("trial", 1, std::chrono::hours(1), 1)});
    route.shadow = true;
    fixture f(with_routes({route}));
    CHECK(f.ask("alice").allowed);
    const route_decision r = f.ask("alice");
    CHECK(r.allowed);
    CHECK_FALSE(r.has_limits);
    CHECK(r.shadow_denied);
  }
}

TEST_CASE("cost per route and per method; a cost above the burst is rejected, never admitted") {
  route_config route = make_route("api", {token_bucket_limit("burst", 1, seconds(1), 10)});
  route.cost = 2;
  route.method_cost = {{"POST", 5}, {"DELETE", 11}};
  fixture f(with_routes({route}));
  CHECK(f.lim.cost(0, "GET") == 2);
  CHECK(f.lim.cost(0, "POST") == 5);
  CHECK(f.lim.cost(0, "HEAD") == 2);  // the route's cost: GET is not listed
  route.method_cost["GET"] = 4;
  fixture with_get(with_routes({route}));
  CHECK(with_get.lim.cost(0, "HEAD") == 4);  // served as the GET it is: never cheaper
  route.method_cost["HEAD"] = 1;
  fixture with_head(with_routes({route}));
  CHECK(with_head.lim.cost(0, "HEAD") == 1);  // named: its own
  CHECK(f.ask("alice", 0, "GET").headline.remaining == 8);
  CHECK(f.ask("alice", 0, "POST").headline.remaining == 3);

  const route_decision huge = f.ask("alice", 0, "DELETE");
  CHECK_FALSE(huge.allowed);
  CHECK(huge.headline.impossible);
  CHECK(huge.headline.retry_after == k_never);
  CHECK(huge.headline.remaining == 3);
  f.clk.set(std::chrono::hours(24));
  CHECK(f.ask("alice", 0, "DELETE").headline.impossible);  // waiting never helps
  CHECK(f.ask("bob", 0, "DELETE").headline.impossible);    // nor being new

  // 5 does not fit in 3: a plain denial with an exact retry.
  fixture g(with_routes({route}));
  CHECK(g.ask("carol", 0, "POST").allowed);
  CHECK(g.ask("carol", 0, "POST").allowed);
  const route_decision r = g.ask("carol", 0, "POST");
  CHECK_FALSE(r.allowed);
  CHECK_FALSE(r.headline.impossible);
  CHECK(r.headline.retry_after == seconds(5));
}

TEST_CASE("a route without limits answers at once and sends no headers") {
  fixture f(with_routes({make_route("open", {}), make_route("api", {})}));
  const route_decision r = f.ask("alice");
  CHECK(r.allowed);
  CHECK_FALSE(r.has_limits);
  CHECK_FALSE(r.slot.held());
}

TEST_CASE("routes keep separate state for the same subject") {
  fixture f(with_routes({make_route("a", {token_bucket_limit("l", 1, seconds(1), 1)}),
                         make_route("b", {token_bucket_limit("l", 1, seconds(1), 1)})}));
  CHECK(f.ask("alice", 0).allowed);
  CHECK_FALSE(f.ask("alice", 0).allowed);
  CHECK(f.ask("alice", 1).allowed);
}

TEST_CASE("check() is the awaitable form of try_check() and gives the same answers") {
  fixture f(with_routes({make_route("api", {token_bucket_limit("l", 1, seconds(1), 2)})}));
  const limit_request req{0, "alice", "", "GET"};
  route_decision a = run(f.lim.check(req));
  route_decision b = run(f.lim.check(req));
  route_decision c = run(f.lim.check(req));
  CHECK(a.allowed);
  CHECK(a.headline.remaining == 1);
  CHECK(b.allowed);
  CHECK_FALSE(c.allowed);
  CHECK(c.headline.retry_after == seconds(1));
}

TEST_CASE("a concurrency lease survives the await and frees its slot when dropped") {
  fixture f(with_routes(
      {make_route("api", {window_limit("inflight", algorithm::concurrency, 1, nanos{0})})}));
  route_decision held = run(f.lim.check({0, "alice", "", "GET"}));
  CHECK(held.slot.held());
  CHECK_FALSE(f.ask("alice").allowed);
  held = route_decision{};  // assignment drops the old lease
  CHECK(f.ask("alice").allowed);
}

TEST_CASE("admin: status, reset of one route or all routes, reset_all, top denied") {
  fixture f(with_routes({make_route("a", {token_bucket_limit("l", 1, std::chrono::hours(1), 2)}),
                         make_route("b", {token_bucket_limit("l", 1, std::chrono::hours(1), 2)})}));
  for (int i = 0; i < 5; ++i) {
    f.ask("alice", 0);
    f.ask("alice", 1);
    f.ask("bob", 0);
  }
  f.ask("carol", 0);
  f.ask("carol", 0);
  f.ask("carol", 0);

  SUBCASE("status reads without charging") {
    const std::vector<decision> st = f.status("alice");
    REQUIRE(st.size() == 1);
    CHECK_FALSE(st[0].allowed);
    CHECK(st[0].remaining == 0);
    CHECK(st[0].limit == 2);
    CHECK(st[0].retry_after == std::chrono::hours(1));
    CHECK(st[0].reset_after == std::chrono::hours(2));
    const std::vector<decision> fresh = f.status("nobody");
    CHECK(fresh[0].allowed);
    CHECK(fresh[0].remaining == 2);
    CHECK(fresh[0].reset_after == nanos{0});
    CHECK(f.status("alice")[0].remaining == 0);
  }
  SUBCASE("top denied adds up a subject's routes") {
    const std::vector<denied_subject> top = run(f.lim.top_denied(2));
    REQUIRE(top.size() == 2);
    CHECK(top[0].subject == "alice");
    CHECK(top[0].denied == 6);
    CHECK(top[1].subject == "bob");
    CHECK(top[1].denied == 3);
    CHECK(run(f.lim.top_denied(10)).size() == 3);
  }
  SUBCASE("reset one route") {
    CHECK(run(f.lim.reset("alice", 0)) == 1);
    CHECK(f.ask("alice", 0).allowed);
    CHECK_FALSE(f.ask("alice", 1).allowed);
  }
  SUBCASE("reset every route of a subject") {
    CHECK(run(f.lim.reset("alice")) == 2);
    CHECK(f.ask("alice", 0).allowed);
    CHECK(f.ask("alice", 1).allowed);
    CHECK_FALSE(f.ask("bob", 0).allowed);
    CHECK(run(f.lim.reset("nobody")) == 0);
  }
  SUBCASE("reset all") {
    CHECK(run(f.lim.reset_all()) == 4);
    CHECK(f.ask("alice", 0).allowed);
    CHECK(f.ask("bob", 0).allowed);
    // A reset forgets limit state, not the denials /admin/top counts: they happened.
    CHECK(run(f.lim.top_denied(10)).size() == 3);
  }
}

TEST_CASE("reset keeps the slots of requests still in flight") {
  fixture f(
      with_routes({make_route("api", {window_limit("inflight", algorithm::concurrency, 1, nanos{0}),
                                      token_bucket_limit("rate", 1, std::chrono::hours(1), 5)})}));
  route_decision held = f.ask("alice");
  CHECK(held.allowed);
  CHECK(run(f.lim.reset("alice")) == 1);
  CHECK_FALSE(f.ask("alice").allowed);         // the request in flight still occupies the slot
  CHECK(f.status("alice")[1].remaining == 5);  // but the rate was forgiven
  held.slot.release();
  CHECK(f.ask("alice").allowed);
}
