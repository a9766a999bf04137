// Hot reload keeps limit state (issue 5 item 2): the limiter of a new configuration shares the
// store of the old one, and limits whose definition did not change keep their state.

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include "limit_fixtures.hpp"
#include "ratewall/limit/limiter.hpp"
#include "ratewall/limit/memory_store.hpp"

using namespace ratewall;
using namespace ratewall::testing;
using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

limit_config bucket(std::string name, std::uint64_t burst, nanos period = hours(1)) {
  limit_config l;
  l.name = std::move(name);
  l.algo = algorithm::token_bucket;
  l.rate = {1, period};
  l.burst = burst;
  return l;
}

route_config make_route(std::string name, std::vector<limit_config> limits) {
  route_config r;
  r.name = std::move(name);
  r.limits = std::move(limits);
  return r;
}

config with_routes(std::vector<route_config> routes) {
  config cfg;
  cfg.routes = std::move(routes);
  return cfg;
}

template <class T>
T run(boost::asio::awaitable<T> op) {
  boost::asio::io_context io;
  std::future<T> result = boost::asio::co_spawn(io, std::move(op), boost::asio::use_future);
  io.run();
  return result.get();
}

std::string subject(int i) {
  std::string s = "subject-";
  s += std::to_string(i);
  return s;
}

route_decision ask(limiter& lim, std::size_t route, std::string_view subject,
                   std::string_view plan = "") {
  return *lim.try_check({route, subject, plan, "GET"});
}

// One store shared by the limiters of successive configurations, as the gateway does on reload.
struct reloads {
  reloads() : mem(std::make_shared<memory_store>()) {}
  explicit reloads(memory_store_options options) : mem(std::make_shared<memory_store>(options)) {}

  std::unique_ptr<limiter> load(const config& cfg) {
    return std::make_unique<limiter>(cfg, clk, mem);
  }

  manual_clock clk;
  std::shared_ptr<memory_store> mem;
};

}  // namespace

TEST_CASE("reload: an unchanged limit keeps its state wherever its route moved") {
  reloads r;
  const config c1 = with_routes(
      {make_route("search", {bucket("burst", 3)}), make_route("upload", {bucket("burst", 5)})});
  auto a = r.load(c1);
  r.clk.set(seconds(10));
  for (int i = 0; i < 3; ++i) {
    CHECK(ask(*a, 0, "alice").allowed);
  }
  r.clk.set(seconds(20));
  const route_decision before = ask(*a, 0, "alice");
  REQUIRE_FALSE(before.allowed);

  // Routes added in front, reordered, one removed: "search" is now route 2.
  const config c2 = with_routes({make_route("new", {bucket("burst", 3)}),
                                 make_route("other", {bucket("burst", 1)}),
                                 make_route("search", {bucket("burst", 3)})});
  auto b = r.load(c2);
  const route_decision after = ask(*b, 2, "alice");
  CHECK_FALSE(after.allowed);
  CHECK(after.headline.retry_after == before.headline.retry_after);
  CHECK(after.headline.reset_after == before.headline.reset_after);
  CHECK(after.headline.remaining == 0);
  CHECK(b->policies(2, "")[0].slot == a->policies(0, "")[0].slot);
  CHECK(b->policies(2, "")[0].key == a->policies(0, "")[0].key);
  // The other routes of the new configuration are fresh for alice.
  CHECK(ask(*b, 0, "alice").allowed);

  a.reset();  // the old configuration is gone; its state for search is not
  CHECK_FALSE(ask(*b, 2, "alice").allowed);
  r.clk.set(seconds(10) + hours(1));  // one token back, exactly when it would have been
  CHECK(ask(*b, 2, "alice").allowed);
  CHECK_FALSE(ask(*b, 2, "alice").allowed);
}

TEST_CASE("reload: every algorithm keeps its state, and the denials the admin API reports") {
  for (algorithm alg : k_all) {
    CAPTURE(static_cast<int>(alg));
    reloads r;
    const config c1 = with_routes({make_route("api", {admitting("l", alg, 4)})});
    auto a = r.load(c1);
    std::vector<route_decision> held;  // concurrency: the requests are still in flight
    for (int i = 0; i < 4; ++i) {
      held.push_back(ask(*a, 0, "alice"));
      CHECK(held.back().allowed);
    }
    CHECK_FALSE(ask(*a, 0, "alice").allowed);
    auto b =
        r.load(with_routes({make_route("first", {}), make_route("api", {admitting("l", alg, 4)})}));
    a.reset();
    const route_decision r1 = ask(*b, 1, "alice");
    CHECK_FALSE(r1.allowed);
    CHECK(r1.headline.remaining == 0);
    CHECK(ask(*b, 1, "bob").allowed);
    const std::vector<denied_subject> top = run(b->top_denied(10));
    REQUIRE(top.size() == 1);
    CHECK(top[0].subject == "alice");
    CHECK(top[0].denied == 2);  // one on each configuration
  }
}

TEST_CASE(
    "reload: a changed definition starts fresh; shadow and on_store_error are not part of it") {
  reloads r;
  limit_config own = bucket("burst", 2);
  own.plans["premium"].burst = 10;
  const config c1 = with_routes({make_route("api", {own})});
  auto a = r.load(c1);
  ask(*a, 0, "alice");
  ask(*a, 0, "alice");
  REQUIRE_FALSE(ask(*a, 0, "alice").allowed);

  auto fresh_on = [&](const config& c2) {
    auto b = r.load(c2);
    const bool fresh = ask(*b, 0, "alice").allowed;
    CHECK(fresh == (b->identity(0, 0) != a->identity(0, 0)));
    CHECK(fresh == (b->policies(0, "")[0].slot != a->policies(0, "")[0].slot));
    return fresh;
  };

  SUBCASE("same definition, other on_store_error / cost: state kept") {
    limit_config same = own;
    same.on_store_error = store_failure::deny;
    route_config route = make_route("api", {same});
    route.cost = 1;
    route.method_cost = {{"POST", 2}};
    CHECK_FALSE(fresh_on(with_routes({route})));
  }
  SUBCASE("the limit turned to shadow: same state, now only reported") {
    limit_config same = own;
    same.shadow = true;
    auto b = r.load(with_routes({make_route("api", {same})}));
    CHECK(b->identity(0, 0) == a->identity(0, 0));
    const route_decision d = ask(*b, 0, "alice");
    CHECK(d.allowed);
    CHECK(d.shadow_denied);  // it would still deny: the state was kept
  }
  SUBCASE("the same numbers written differently: 60/h is 1 per minute either way") {
    reloads s;
    limit_config per_minute = bucket("burst", 2, std::chrono::minutes(1));
    limit_config per_hour = per_minute;
    per_hour.rate = {60, hours(1)};
    per_hour.burst = 2;
    auto x = s.load(with_routes({make_route("api", {per_minute})}));
    auto y = s.load(with_routes({make_route("api", {per_hour})}));
    CHECK(x->identity(0, 0) == y->identity(0, 0));
  }
  SUBCASE("rate changed") {
    limit_config changed = own;
    changed.rate = {2, hours(1)};
    CHECK(fresh_on(with_routes({make_route("api", {changed})})));
  }
  SUBCASE("burst changed") {
    limit_config changed = own;
    changed.burst = 3;
    CHECK(fresh_on(with_routes({make_route("api", {changed})})));
  }
  SUBCASE("a plan override changed") {
    limit_config changed = own;
    changed.plans["premium"].burst = 20;
    CHECK(fresh_on(with_routes({make_route("api", {changed})})));
  }
  SUBCASE("an override that resolves to the limit's own values is no change") {
    limit_config changed = own;
    changed.plans["free"].burst = 2;
    CHECK_FALSE(fresh_on(with_routes({make_route("api", {changed})})));
  }
  SUBCASE("algorithm changed") {
    limit_config changed = own;
    changed.algo = algorithm::leaky_bucket;
    CHECK(fresh_on(with_routes({make_route("api", {changed})})));
  }
  SUBCASE("route renamed") {
    CHECK(fresh_on(with_routes({make_route("api-v2", {own})})));
  }
  SUBCASE("limit renamed") {
    limit_config changed = own;
    changed.name = "burst2";
    CHECK(fresh_on(with_routes({make_route("api", {changed})})));
  }
  // The old configuration keeps its own state while it lives.
  CHECK_FALSE(ask(*a, 0, "alice").allowed);
}

TEST_CASE("limit keys: route:limit:<8 hex>, the same in every store and process") {
  const config cfg = with_routes({make_route("search", {bucket("burst", 3)})});
  reloads r1;
  reloads r2;
  auto a = r1.load(cfg);
  auto b = r2.load(cfg);
  const std::string key = a->policies(0, "")[0].key;
  CHECK(key == b->policies(0, "")[0].key);
  REQUIRE(key.size() == std::string("search:burst:").size() + 8);
  CHECK(key.starts_with("search:burst:"));
  CHECK(key.find_first_not_of("0123456789abcdef", 13) == std::string::npos);
  CHECK(key == a->identity(0, 0).key());
  // FNV-1a of fixed fields: a change to the signature's encoding shows up here (and would
  // orphan every key in Redis).
  CHECK(a->identity(0, 0).signature == 0x1050dcde9caa63eeull);
}

TEST_CASE("reload: the slots of removed limits are freed once the old limiter is gone") {
  reloads r;
  const config c1 = with_routes({make_route("search", {bucket("burst", 3)}),
                                 make_route("upload", {bucket("burst", 5), bucket("daily", 9)})});
  auto a = r.load(c1);
  for (int s = 0; s < 100; ++s) {
    ask(*a, 0, subject(s));
    ask(*a, 1, subject(s));
  }
  CHECK(r.mem->slot_count() == 3);
  const memory_store::usage full = r.mem->memory_usage();
  CHECK(full.entries == 300);

  auto b = r.load(with_routes({make_route("search", {bucket("burst", 3)})}));
  CHECK(r.mem->slot_count() == 3);  // a still decides on upload
  ask(*a, 1, "late");
  CHECK(r.mem->memory_usage().entries == 302);

  a.reset();
  CHECK(r.mem->slot_count() == 1);
  const memory_store::usage u = r.mem->memory_usage();
  CHECK(u.entries == 100);
  CHECK(r.mem->size() == 100);
  CHECK(u.table_bytes < full.table_bytes / 2);  // the tables of two slots of three are freed

  b.reset();
  CHECK(r.mem->slot_count() == 0);
  CHECK(r.mem->size() == 0);
}

TEST_CASE("reload: slot ids are reused, so many reloads do not grow the store") {
  reloads r;
  auto current = r.load(with_routes({make_route("api", {bucket("burst", 1)})}));
  ask(*current, 0, "alice");
  for (std::uint64_t n = 2; n < 200; ++n) {
    auto next = r.load(with_routes({make_route("api", {bucket("burst", n)})}));
    CHECK(ask(*next, 0, "alice").headline.remaining == n - 1);  // a changed limit: fresh
    current = std::move(next);
    CHECK(r.mem->slot_count() == 1);
  }
  CHECK(current->policies(0, "")[0].slot <= 1);
  // A definition that comes back after it was dropped starts fresh too.
  auto again = r.load(with_routes({make_route("api", {bucket("burst", 1)})}));
  CHECK(ask(*again, 0, "alice").allowed);
}

TEST_CASE("reload: a concurrency lease outlives the limiter that granted it") {
  const auto c1 = with_routes(
      {make_route("api", {admitting("inflight", algorithm::concurrency, 1), bucket("rate", 100)})});
  SUBCASE("the limit is kept: the new configuration sees the unit until it comes back") {
    for (bool old_first : {true, false}) {
      CAPTURE(old_first);
      reloads r;
      auto a = r.load(c1);
      route_decision held = ask(*a, 0, "alice");
      REQUIRE(held.slot.held());
      auto b = r.load(with_routes({make_route("other", {}), c1.routes[0]}));
      CHECK_FALSE(ask(*b, 1, "alice").allowed);
      if (old_first) {
        a.reset();
        held.slot.release();
      } else {
        held.slot.release();
        a.reset();
      }
      CHECK(r.mem->slot_count() == 2);
      route_decision next = ask(*b, 1, "alice");
      CHECK(next.allowed);
      CHECK_FALSE(ask(*b, 1, "alice").allowed);
    }
  }
  SUBCASE("the limit is removed: its slot goes when the last unit comes back") {
    const auto c2 = with_routes({make_route("api", {bucket("rate", 100)})});
    for (int order = 0; order < 3; ++order) {
      CAPTURE(order);
      reloads r;
      auto a = r.load(c1);
      route_decision held = ask(*a, 0, "alice");
      REQUIRE(held.slot.held());
      auto b = r.load(c2);
      CHECK(r.mem->slot_count() == 2);
      switch (order) {
        case 0:  // the old limiter goes first, then the request ends
          a.reset();
          CHECK(r.mem->slot_count() == 2);  // the unit still names the slot
          CHECK(r.mem->size() == 2);        // alice's concurrency row and her rate row
          held.slot.release();
          break;
        case 1:  // the request ends first
          held.slot.release();
          CHECK(r.mem->slot_count() == 2);
          a.reset();
          break;
        case 2:  // the new configuration is dropped too (a rollback), then a, then the request
          b.reset();
          CHECK(r.mem->slot_count() == 2);
          a.reset();
          CHECK(r.mem->slot_count() == 1);
          held.slot.release();
          CHECK(r.mem->slot_count() == 0);
          CHECK(r.mem->size() == 0);
          continue;
      }
      CHECK(r.mem->slot_count() == 1);
      CHECK(r.mem->size() == 1);  // the rate row, kept: the rate limit did not change
      CHECK(ask(*b, 0, "alice").headline.remaining == 98);
    }
  }
  SUBCASE("a reset keeps the unit of a retired slot, and the slot still goes with it") {
    reloads r;
    auto a = r.load(c1);
    route_decision held = ask(*a, 0, "alice");
    auto b = r.load(with_routes({make_route("api", {bucket("rate", 100)})}));
    a.reset();
    run(b->reset_all());
    CHECK(r.mem->slot_count() == 2);
    held = route_decision{};
    CHECK(r.mem->slot_count() == 1);
  }
}

TEST_CASE("reload: requests on the old and the new configuration at once admit exactly L") {
  constexpr int k_threads = 4;  // two on each configuration
  constexpr int k_requests = 1000;
  constexpr std::uint64_t k_limit = 100;
  for (algorithm alg : k_all) {
    CAPTURE(static_cast<int>(alg));
    reloads r;
    r.clk.set(seconds(5));  // frozen for the whole test
    const limit_config l = admitting("l", alg, k_limit);
    auto a = r.load(with_routes({make_route("api", {l})}));
    auto b = r.load(with_routes({make_route("new", {bucket("x", 1)}), make_route("api", {l})}));
    std::atomic<std::uint64_t> admitted{0};
    std::vector<std::vector<route_decision>> held(k_threads);
    std::vector<std::thread> threads;
    std::latch start(k_threads);
    for (int t = 0; t < k_threads; ++t) {
      threads.emplace_back([&, t] {
        limiter& lim = t % 2 == 0 ? *a : *b;
        const std::size_t route = t % 2 == 0 ? 0 : 1;
        start.arrive_and_wait();
        for (int i = 0; i < k_requests; ++i) {
          route_decision d = ask(lim, route, "hot");
          if (d.allowed) {
            admitted.fetch_add(1);
            held[t].push_back(std::move(d));
          }
        }
      });
    }
    for (auto& t : threads) {
      t.join();
    }
    CHECK(admitted.load() == k_limit);
    a.reset();
    CHECK_FALSE(ask(*b, 1, "hot").allowed);
    if (alg == algorithm::concurrency) {
      held.clear();  // every request completes, half of them granted by a, gone now
      std::vector<route_decision> more;
      for (std::uint64_t i = 0; i < k_limit; ++i) {
        more.push_back(ask(*b, 1, "hot"));
        CHECK(more.back().allowed);
      }
      CHECK_FALSE(ask(*b, 1, "hot").allowed);
    }
  }
}

TEST_CASE("reload: admin operations on the new configuration reach the shared state") {
  reloads r;
  const config c1 =
      with_routes({make_route("a", {bucket("l", 2)}), make_route("b", {bucket("l", 2)})});
  auto old = r.load(c1);
  for (int i = 0; i < 3; ++i) {
    ask(*old, 0, "alice");
    ask(*old, 1, "alice");
  }
  auto b =
      r.load(with_routes({make_route("b", {bucket("l", 2)}), make_route("a", {bucket("l", 2)})}));
  const std::vector<decision> st = run(b->status("alice", 1, ""));
  REQUIRE(st.size() == 1);
  CHECK(st[0].remaining == 0);
  CHECK(run(b->reset("alice", 1)) == 1);  // route "a"
  CHECK(ask(*old, 0, "alice").allowed);   // the old configuration sees the reset too
  CHECK_FALSE(ask(*old, 1, "alice").allowed);
  CHECK(run(b->reset("alice")) == 2);
  CHECK(ask(*b, 0, "alice").allowed);
}

TEST_CASE("max_keys counts (subject, limit) rows: a route with two limits tracks half as many") {
  memory_store_options options;
  options.max_keys = 64;
  options.shards = 1;
  reloads r(options);
  auto lim = r.load(with_routes({make_route("api", {bucket("a", 3), bucket("b", 5)})}));
  int untracked = 0;
  for (int s = 0; s < 100; ++s) {
    untracked += ask(*lim, 0, subject(s)).untracked ? 1 : 0;
  }
  // 32 subjects fill the shard; each later one takes two rows of the idle ones.
  CHECK(untracked == 0);
  CHECK(r.mem->size() == 64);
  CHECK(r.mem->full_stats().evictions == 2 * (100 - 32));
  CHECK(ask(*lim, 0, subject(99)).headline.remaining == 1);  // both its rows were recorded
  CHECK(ask(*lim, 0, subject(99)).allowed);
  CHECK_FALSE(ask(*lim, 0, subject(99)).allowed);
}

TEST_CASE("a subject missing one row in a full shard is charged on the rows it has") {
  // Route "api": a per-second bucket and an hourly window. Route "other": one token an hour,
  // so each of its subjects holds one limited row, which is never evicted.
  memory_store_options options;
  options.max_keys = 4;
  options.shards = 1;
  limit_config second = bucket("second", 1, seconds(1));
  limit_config window = admitting("hour", algorithm::fixed_window, 5);
  const config cfg =
      with_routes({make_route("api", {second, window}), make_route("other", {bucket("tight", 1)})});
  // Leaves alice with her hourly row and without her per-second one, in a shard whose other
  // rows are all limited.
  auto fill = [](reloads& r, limiter& lim) {
    CHECK(ask(lim, 0, "alice").allowed);
    CHECK(ask(lim, 1, "bob").allowed);
    CHECK(ask(lim, 1, "carol").allowed);
    CHECK(r.mem->size() == 4);
    r.clk.set(seconds(2));
    CHECK(lim.sweep() == 1);  // alice's per-second row is full again: gone
    CHECK(ask(lim, 1, "dave").allowed);
    CHECK(r.mem->size() == 4);
  };

  SUBCASE("on_full: allow") {
    options.on_full = store_full::allow;
    reloads r(options);
    auto lim = r.load(cfg);
    fill(r, *lim);
    const route_decision d = ask(*lim, 0, "alice");  // needs its per-second row back: full
    CHECK(d.allowed);
    CHECK(d.untracked);
    CHECK(run(lim->status("alice", 0, ""))[1].remaining == 3);  // the hour still counts
    CHECK(r.mem->size() == 4);
    CHECK(r.mem->full_stats().evictions == 0);
  }
  SUBCASE("on_full: deny") {
    reloads r(options);
    auto lim = r.load(cfg);
    fill(r, *lim);
    const route_decision d = ask(*lim, 0, "alice");
    CHECK_FALSE(d.allowed);
    CHECK(d.store_full);
    CHECK(d.headline.retry_after == k_full_retry);
    CHECK(run(lim->status("alice", 0, ""))[1].remaining == 4);  // nothing charged
  }
}

TEST_CASE("limits that would share an identity in a hand-built config get their own slots") {
  reloads r;
  auto lim = r.load(with_routes(
      {make_route("api", {bucket("l", 2), bucket("l", 2)}), make_route("api", {bucket("l", 2)})}));
  CHECK(lim->policies(0, "")[0].slot != lim->policies(0, "")[1].slot);
  CHECK(lim->policies(0, "")[0].slot != lim->policies(1, "")[0].slot);
  CHECK(r.mem->slot_count() == 3);
  CHECK(ask(*lim, 0, "alice").headline.remaining == 1);  // charged once per limit, not twice
  CHECK(ask(*lim, 0, "alice").headline.remaining == 0);
  CHECK(ask(*lim, 1, "alice").allowed);
}

TEST_CASE("reload under load: slots bound and freed while requests and leases come and go") {
  reloads r;
  constexpr std::uint64_t k_inflight = 3;
  const limit_config inflight = admitting("inflight", algorithm::concurrency, k_inflight);
  // Every other configuration changes the rate limit, so its slot is retired and replaced while
  // requests hold units in the kept concurrency slot and in a changing one.
  auto config_for = [&](std::uint64_t n) {
    return with_routes(
        {make_route("api", {inflight, admitting("changing", algorithm::concurrency, 1000 + n % 2),
                            bucket("rate", 1'000'000 + n % 2, seconds(1))})});
  };
  // The gateway swaps configurations the same way: a shared pointer under a lock (a mutex
  // rather than std::atomic<std::shared_ptr>, whose libstdc++ lock ThreadSanitizer cannot see).
  std::mutex swap_mutex;
  std::shared_ptr<limiter> current_limiter(r.load(config_for(0)));
  auto current = [&] {
    std::lock_guard lock(swap_mutex);
    return current_limiter;
  };
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> over{0};
  std::atomic<std::uint64_t> admitted{0};
  // Threads 0 and 2 share subject 0 and want up to 6 requests in flight between them.
  std::atomic<std::uint64_t> in_flight[2] = {0, 0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      const int who = t % 2;
      const std::string name = subject(who);
      std::vector<route_decision> held;
      auto complete_oldest = [&] {
        // Counted down before the unit goes back, up after it is taken: the count never
        // exceeds the units really held, so going over the limit is the store's fault.
        in_flight[who].fetch_sub(1);
        held.erase(held.begin());
      };
      while (!stop.load()) {
        const std::shared_ptr<limiter> lim = current();
        route_decision d = ask(*lim, 0, name);
        if (d.allowed) {
          admitted.fetch_add(1);
          if (in_flight[who].fetch_add(1) + 1 > k_inflight) {
            over.fetch_add(1);
          }
          held.push_back(std::move(d));
        }
        if (held.size() == 3 || (!d.allowed && !held.empty())) {
          complete_oldest();
        }
      }
      while (!held.empty()) {
        complete_oldest();
      }
    });
  }
  for (std::uint64_t n = 1; n <= 200; ++n) {
    std::shared_ptr<limiter> next(r.load(config_for(n)));
    {
      std::lock_guard lock(swap_mutex);
      current_limiter.swap(next);
    }
    next.reset();  // the old configuration goes (unless a request still uses it)
    // Let requests run on every configuration, however the threads are scheduled.
    const std::uint64_t seen = admitted.load();
    while (admitted.load() < seen + 5) {
      std::this_thread::yield();
    }
  }
  stop.store(true);
  for (auto& t : threads) {
    t.join();
  }
  CHECK(over.load() == 0);
  CHECK(r.mem->slot_count() == 3);  // only the last configuration's, every lease is back
  const std::shared_ptr<limiter> last = current();
  std::vector<route_decision> held;
  for (std::uint64_t i = 0; i < k_inflight; ++i) {
    held.push_back(ask(*last, 0, subject(0)));
    CHECK(held.back().allowed);
  }
  CHECK_FALSE(ask(*last, 0, subject(0)).allowed);
}

TEST_CASE("a lease gives back a unit in every concurrency limit of its route") {
  reloads r;
  std::vector<limit_config> limits;
  for (int i = 0; i < 5; ++i) {
    limits.push_back(admitting("inflight-" + std::to_string(i), algorithm::concurrency, 1));
  }
  auto a = r.load(with_routes({make_route("api", limits)}));
  route_decision held = ask(*a, 0, "alice");
  REQUIRE(held.slot.held());
  limits.resize(3);
  auto b = r.load(with_routes({make_route("api", limits)}));
  CHECK_FALSE(ask(*b, 0, "alice").allowed);
  a.reset();
  CHECK(r.mem->slot_count() == 5);  // two retired slots wait for the unit
  held.slot.release();
  CHECK(r.mem->slot_count() == 3);
  const std::vector<decision> st = run(b->status("alice", 0, ""));
  REQUIRE(st.size() == 3);
  for (const decision& d : st) {
    CHECK(d.remaining == 1);
  }
  CHECK(ask(*b, 0, "alice").allowed);
}
