#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "limit_fixtures.hpp"
#include "ratewall/limit/limiter.hpp"
#include "ratewall/limit/memory_store.hpp"
#include "ratewall/limit/recent_denials.hpp"

using namespace ratewall;
using namespace ratewall::testing;
using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

config one_route(std::vector<limit_config> limits) {
  config cfg;
  route_config route;
  route.name = "api";
  route.limits = std::move(limits);
  cfg.routes.push_back(std::move(route));
  return cfg;
}

struct fixture {
  explicit fixture(config c) : cfg(std::move(c)) {
    auto owned = std::make_shared<memory_store>(cfg);
    mem = owned.get();
    lim = std::make_unique<limiter>(cfg, clk, std::move(owned));
  }
  fixture(config c, memory_store_options options) : cfg(std::move(c)) {
    auto owned = std::make_shared<memory_store>(options);
    mem = owned.get();
    lim = std::make_unique<limiter>(cfg, clk, std::move(owned));
  }

  route_decision ask(std::string_view subject) { return *lim->try_check({0, subject, "", "GET"}); }

  config cfg;
  manual_clock clk;
  memory_store* mem = nullptr;
  std::unique_ptr<limiter> lim;
};

void check_same(const route_decision& a, const route_decision& b) {
  CHECK(a.allowed == b.allowed);
  CHECK(a.limit_index == b.limit_index);
  CHECK(a.delay == b.delay);
  CHECK(a.headline.limit == b.headline.limit);
  CHECK(a.headline.remaining == b.headline.remaining);
  CHECK(a.headline.reset_after == b.headline.reset_after);
  CHECK(a.headline.retry_after == b.headline.retry_after);
  CHECK(a.slot.held() == b.slot.held());
}

}  // namespace

TEST_CASE("exact under concurrency: T threads × M requests on one subject admit exactly L") {
  constexpr int k_threads = 4;
  constexpr int k_requests = 2000;
  constexpr std::uint64_t k_limit = 100;
  for (algorithm a : k_all) {
    CAPTURE(to_string(a));
    fixture f(one_route({admitting(a, k_limit)}));
    f.clk.set(seconds(5));  // frozen for the whole test
    std::atomic<std::uint64_t> hot{0};
    std::atomic<std::uint64_t> cold{0};
    std::vector<std::vector<route_decision>> held(k_threads);
    std::vector<std::thread> threads;
    std::latch start(k_threads);
    for (int t = 0; t < k_threads; ++t) {
      threads.emplace_back([&, t] {
        const std::string own = "cold-" + std::to_string(t);
        start.arrive_and_wait();  // all threads race from the same moment
        for (int i = 0; i < k_requests; ++i) {
          // Concurrency slots stay taken until the end: the requests are still "in flight".
          route_decision r = f.ask("hot");
          if (r.allowed) {
            hot.fetch_add(1);
            held[t].push_back(std::move(r));
          }
          route_decision c = f.ask(own);
          if (c.allowed) {
            cold.fetch_add(1);
            held[t].push_back(std::move(c));
          }
        }
      });
    }
    for (auto& t : threads) {
      t.join();
    }
    CHECK(hot.load() == k_limit);
    CHECK(cold.load() == k_threads * k_limit);
    if (a == algorithm::concurrency) {
      held.clear();  // every request completes: every slot comes back
      int again = 0;
      std::vector<route_decision> more;
      for (int i = 0; i < 300; ++i) {
        more.push_back(f.ask("hot"));
        again += more.back().allowed;
      }
      CHECK(again == static_cast<int>(k_limit));
    }
  }
}

TEST_CASE("exact under concurrency with two limits on one route") {
  fixture f(one_route({admitting(algorithm::token_bucket, 300),
                       admitting(algorithm::sliding_window_counter, 100)}));
  std::atomic<int> admitted{0};
  std::vector<std::thread> threads;
  std::latch start(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      for (int i = 0; i < 1000; ++i) {
        admitted += f.ask("hot").allowed;
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  CHECK(admitted.load() == 100);
  const std::vector<decision> st = f.mem->status_now("hot", f.lim->policies(0, ""), f.clk.now());
  CHECK(st[0].remaining == 200);  // the bucket paid for the 100 admitted only
}

TEST_CASE("expired state is swept, and afterwards a subject is answered like a new one") {
  for (algorithm a : k_all) {
    CAPTURE(to_string(a));
    fixture f(one_route({admitting(a, 3)}));
    std::vector<route_decision> held;
    for (int i = 0; i < 5; ++i) {
      held.push_back(f.ask("old"));
    }
    CHECK(f.mem->size() == 1);
    CHECK(f.lim->sweep() == 0);  // nothing has expired yet
    CHECK_FALSE(f.ask("old").allowed);

    f.clk.set(hours(10));
    if (a == algorithm::concurrency) {
      CHECK(f.lim->sweep() == 0);  // slots in flight keep the row, however old
      held.clear();
    }
    CHECK(f.lim->sweep() == 1);
    CHECK(f.mem->size() == 0);
    check_same(f.ask("old"), f.ask("new"));
    check_same(f.ask("old"), f.ask("new"));
  }
}

TEST_CASE("a token bucket is swept once it is full again, never a nanosecond earlier") {
  limit_config l = admitting(algorithm::token_bucket, 3);
  l.rate = {1, seconds(1)};
  fixture f(one_route({l}));
  for (int i = 0; i < 3; ++i) {
    f.ask("alice");
  }
  f.clk.set(seconds(3) - nanos{1});
  CHECK(f.lim->sweep() == 0);
  CHECK(f.ask("alice").headline.remaining == 1);  // 2.999… tokens back, one spent now
  f.clk.set(seconds(4) - nanos{1});
  CHECK(f.lim->sweep() == 0);  // the request just made keeps it until 4 s
  // Expiry is kept to 2^20 ns, rounded up: swept within about a millisecond after.
  f.clk.set(seconds(4) + milliseconds(2));
  CHECK(f.lim->sweep() == 1);
}

TEST_CASE("max_keys: a flood of new subjects cannot push out the limits of active subjects") {
  memory_store_options options;
  options.max_keys = 64;
  options.shards = 1;  // one shard: the cap is exactly 64
  const config cfg = one_route({admitting(algorithm::token_bucket, 3)});

  auto exhaust_active = [](fixture& f) {
    for (int s = 0; s < 10; ++s) {
      const std::string subject = "active-" + std::to_string(s);
      for (int i = 0; i < 3; ++i) {
        CHECK(f.ask(subject).allowed);
      }
      CHECK_FALSE(f.ask(subject).allowed);
    }
  };
  auto active_still_limited = [](fixture& f) {
    for (int s = 0; s < 10; ++s) {
      CHECK_FALSE(f.ask("active-" + std::to_string(s)).allowed);
    }
  };

  SUBCASE("past the cap, new subjects take the rows of idle ones and are limited like any") {
    fixture f(cfg, options);
    exhaust_active(f);
    for (int s = 0; s < 1000; ++s) {
      const route_decision r = f.ask("flood-" + std::to_string(s));
      CHECK(r.allowed);
      CHECK_FALSE(r.untracked);
      CHECK_FALSE(r.store_full);
    }
    CHECK(f.mem->size() == 64);
    CHECK(f.mem->full_stats().evictions == 1000 - 54);
    CHECK(f.mem->full_stats().full == 0);
    active_still_limited(f);
    // The last flood subject was recorded: it has its limit, not a fresh bucket per request.
    CHECK(f.ask("flood-999").allowed);
    CHECK(f.ask("flood-999").allowed);
    CHECK_FALSE(f.ask("flood-999").allowed);
  }
  SUBCASE("64 shards: the table stays near max_keys and active limits hold") {
    options.shards = 64;
    options.max_keys = 1000;
    fixture f(cfg, options);
    exhaust_active(f);
    for (int s = 0; s < 20000; ++s) {
      CHECK(f.ask("flood-" + std::to_string(s)).allowed);
    }
    CHECK(f.mem->size() <= 1024);  // 64 shards × ceil(1000 / 64)
    CHECK(f.mem->size() >= 1000);
    active_still_limited(f);
  }
}

TEST_CASE("eviction at max_keys takes the row nearest its idle state") {
  memory_store_options options;
  options.max_keys = 4;
  options.shards = 1;
  // Token buckets of 3 refilled one token an hour: a row expires when its bucket is full again.
  fixture f(one_route({admitting(algorithm::token_bucket, 3)}), options);
  auto remaining = [&](std::string_view subject) {
    return f.mem->status_now(subject, f.lim->policies(0, ""), f.clk.now())[0].remaining;
  };
  auto spend = [&](std::string_view subject, int n) {
    for (int i = 0; i < n; ++i) {
      REQUIRE(f.ask(subject).allowed);
    }
  };

  SUBCASE("the bucket nearest full goes, the others keep their state") {
    spend("two-spent", 2);  // full again at 2 h
    spend("one-spent", 1);  // full again at 1 h: nearest idle
    spend("two-more", 2);   // 2 h
    f.clk.set(std::chrono::minutes(5));
    spend("late-one", 1);  // 1 h 5 min
    CHECK(f.mem->size() == 4);

    f.clk.set(std::chrono::minutes(10));
    CHECK(f.ask("newcomer").allowed);  // 1 h 10 min
    CHECK(f.mem->size() == 4);
    CHECK(f.mem->full_stats().evictions == 1);
    CHECK(remaining("one-spent") == 3);  // no row: a full bucket, which it nearly was
    CHECK(remaining("two-spent") == 1);
    CHECK(remaining("two-more") == 1);
    CHECK(remaining("late-one") == 2);
    CHECK(remaining("newcomer") == 2);

    CHECK(f.ask("second-newcomer").allowed);  // now late-one is nearest full
    CHECK(remaining("late-one") == 3);
    CHECK(remaining("newcomer") == 2);
    CHECK(remaining("two-spent") == 1);
  }
  SUBCASE("a row whose state has expired goes first: it loses nothing") {
    spend("hour-ago", 1);  // full again at 1 h
    f.clk.set(std::chrono::minutes(30));
    spend("a", 1);
    spend("b", 1);
    spend("c", 1);
    f.clk.set(std::chrono::minutes(61));
    CHECK(f.ask("newcomer").allowed);
    CHECK(f.mem->full_stats().evictions == 1);
    CHECK(remaining("a") == 2);
    CHECK(remaining("b") == 2);
    CHECK(remaining("c") == 2);
  }
}

TEST_CASE("a limited subject is never evicted; when every row is limited, store.on_full decides") {
  // A row is limited from its first denial, or from a request that leaves nothing remaining,
  // until its state is idle again (here: 2 tokens back at 1 token an hour).
  memory_store_options options;
  options.max_keys = 4;
  options.shards = 1;
  const config cfg = one_route({admitting(algorithm::token_bucket, 2)});
  auto hold_four = [](fixture& f) {
    for (const char* subject : {"denied-a", "denied-b", "spent-c", "spent-d"}) {
      REQUIRE(f.ask(subject).allowed);
      REQUIRE(f.ask(subject).allowed);
    }
    REQUIRE_FALSE(f.ask("denied-a").allowed);
    REQUIRE_FALSE(f.ask("denied-b").allowed);
  };
  auto all_held = [](fixture& f) {
    for (const char* subject : {"denied-a", "denied-b", "spent-c", "spent-d"}) {
      CAPTURE(subject);
      CHECK_FALSE(f.ask(subject).allowed);
    }
  };

  SUBCASE("on_full: deny (the default): the new subject is refused, a store-full decision") {
    CHECK(options.on_full == store_full::deny);
    fixture f(cfg, options);
    hold_four(f);
    for (int i = 0; i < 3; ++i) {
      const route_decision r = f.ask("newcomer");
      CHECK_FALSE(r.allowed);
      CHECK(r.store_full);
      CHECK_FALSE(r.untracked);
      CHECK(r.headline.retry_after == k_full_retry);
    }
    CHECK(f.mem->full_stats().full == 3);
    CHECK(f.mem->full_stats().evictions == 0);
    all_held(f);

    // One token back after an hour: limited rows stay limited until their bucket is full.
    f.clk.set(hours(1));
    CHECK(f.ask("denied-a").allowed);
    CHECK(f.ask("newcomer").store_full);
    // Full again (2 h, the row expiry rounded up to about a millisecond): rows may go.
    f.clk.set(hours(2) + milliseconds(2));
    const route_decision late = f.ask("newcomer");
    CHECK(late.allowed);
    CHECK_FALSE(late.store_full);
    CHECK(f.mem->full_stats().evictions == 1);
    CHECK(f.ask("newcomer").allowed);
    CHECK_FALSE(f.ask("newcomer").allowed);  // recorded, and limited like any other
  }
  SUBCASE("on_full: allow: the new subject is decided as new and not recorded") {
    options.on_full = store_full::allow;
    fixture f(cfg, options);
    hold_four(f);
    for (int i = 0; i < 3; ++i) {
      const route_decision r = f.ask("newcomer");
      CHECK(r.allowed);
      CHECK(r.untracked);
      CHECK_FALSE(r.store_full);
      CHECK(r.headline.remaining == 1);  // a fresh bucket every time: nothing is recorded
    }
    CHECK(f.mem->size() == 4);
    CHECK(f.mem->full_stats().full == 3);
    all_held(f);
  }
  SUBCASE("from a configuration: store.on_full, and one shard for a small max_keys") {
    config c = cfg;
    c.store.max_keys = 4;
    SUBCASE("deny") {
      fixture f(c);
      hold_four(f);
      CHECK(f.ask("newcomer").store_full);
    }
    SUBCASE("allow") {
      c.store.on_full = store_full::allow;
      fixture f(c);
      hold_four(f);
      CHECK(f.ask("newcomer").untracked);
    }
  }
}

TEST_CASE("a row with concurrency units in flight is never evicted") {
  memory_store_options options;
  options.max_keys = 2;
  options.shards = 1;
  fixture f(one_route({admitting(algorithm::concurrency, 5)}), options);
  route_decision first = f.ask("first");
  route_decision second = f.ask("second");
  REQUIRE(first.slot.held());
  REQUIRE(second.slot.held());
  CHECK(f.ask("newcomer").store_full);
  first.slot.release();  // nothing in flight: the row equals no row
  const route_decision r = f.ask("newcomer");
  CHECK(r.allowed);
  CHECK(r.slot.held());
  CHECK(f.mem->full_stats().evictions == 1);
  CHECK(f.ask("third").store_full);  // second and newcomer both hold a unit
}

TEST_CASE("eviction looks at a bounded sample, and successive looks walk the whole shard") {
  // 1000 limited rows and one idle one: each new subject looks at k_eviction_sample rows, each
  // look starting where the last one ended, so the idle row is found within 1001 / 16 looks.
  memory_store_options options;
  options.max_keys = 1001;
  options.shards = 1;
  options.on_full = store_full::allow;
  fixture f(one_route({admitting(algorithm::token_bucket, 2)}), options);
  for (int s = 0; s < 1000; ++s) {
    const std::string subject = "held-" + std::to_string(s);
    REQUIRE(f.ask(subject).allowed);
    REQUIRE(f.ask(subject).allowed);  // nothing remaining: limited
  }
  REQUIRE(f.ask("idle").allowed);  // one token left: may go
  REQUIRE(f.mem->size() == 1001);

  int looks = 0;
  bool recorded = false;
  while (!recorded && looks < 1001) {
    recorded = !f.ask("new-" + std::to_string(looks)).untracked;
    ++looks;
  }
  CHECK(recorded);
  CHECK(looks <= (1001 + k_eviction_sample - 1) / k_eviction_sample);
  CHECK(f.mem->full_stats().evictions == 1);
  CHECK(f.mem->full_stats().full == static_cast<std::uint64_t>(looks - 1));
  CHECK(f.mem->status_now("idle", f.lim->policies(0, ""), f.clk.now())[0].remaining == 2);
  for (int s = 0; s < 1000; ++s) {
    CHECK_FALSE(f.ask("held-" + std::to_string(s)).allowed);
  }
}

TEST_CASE("subjects of any length are keys: 15 bytes inline, longer ones on the heap") {
  fixture f(one_route({admitting(algorithm::token_bucket, 1)}));
  const std::string inline_subject(15, 'a');
  const std::string heap_subject(16, 'a');
  const std::string long_subject = std::string(64, 'f') + "x";
  const std::string long_twin = std::string(64, 'f') + "y";
  CHECK(f.ask(inline_subject).allowed);
  CHECK(f.ask(heap_subject).allowed);
  CHECK(f.ask(long_subject).allowed);
  CHECK(f.ask(long_twin).allowed);
  CHECK(f.ask("").allowed);
  CHECK_FALSE(f.ask(inline_subject).allowed);
  CHECK_FALSE(f.ask(heap_subject).allowed);
  CHECK_FALSE(f.ask(long_subject).allowed);
  CHECK_FALSE(f.ask(long_twin).allowed);
  CHECK_FALSE(f.ask("").allowed);
  const memory_store::usage u = f.mem->memory_usage();
  CHECK(u.entries == 5);
  CHECK(u.heap_bytes == 16 + 65 + 65);
  CHECK(u.table_bytes >= 5 * 32);
}

TEST_CASE("memory accounting: a token bucket subject is a 32-byte slot (16 key + 16 state)") {
  fixture f(one_route({admitting(algorithm::token_bucket, 5)}));
  for (int s = 0; s < 10000; ++s) {
    f.ask("10.0." + std::to_string(s / 256) + "." + std::to_string(s % 256));
  }
  const memory_store::usage u = f.mem->memory_usage();
  CHECK(u.entries == 10000);
  CHECK(u.heap_bytes == 0);
  // Slots are 32 bytes; each shard's table is at most 7/8 full and doubles when it fills.
  CHECK(u.table_bytes >= 10000 * 32);
  CHECK(u.table_bytes <= 10000 * 32 * 4);
}

TEST_CASE("top denied: a subject is listed for top_window after its rows expire and are swept") {
  limit_config l = admitting(algorithm::token_bucket, 1);
  l.rate = {1, seconds(1)};   // full again a second after the last request
  fixture f(one_route({l}));  // admin.top_window: 10m, slices of 1m
  f.clk.set(seconds(30));
  CHECK(f.ask("alice").allowed);
  for (int i = 0; i < 3; ++i) {
    CHECK_FALSE(f.ask("alice").allowed);
  }
  f.clk.set(seconds(35));
  CHECK(f.lim->sweep() == 1);
  CHECK(f.mem->size() == 0);
  std::vector<denied_subject> top = f.mem->top_denied_now(10, f.clk.now());
  REQUIRE(top.size() == 1);
  CHECK(top[0].subject == "alice");
  CHECK(top[0].denied == 3);

  // Denied in the slice 0-1m: counted until that slice is 10 slices old.
  f.clk.set(std::chrono::minutes(11) - nanos{1});
  f.lim->sweep();
  top = f.mem->top_denied_now(10, f.clk.now());
  REQUIRE(top.size() == 1);
  CHECK(top[0].denied == 3);
  f.clk.set(std::chrono::minutes(11));
  CHECK(f.mem->top_denied_now(10, f.clk.now()).empty());
  CHECK(f.mem->denied_subjects() == 1);
  f.lim->sweep();
  CHECK(f.mem->denied_subjects() == 0);
}

TEST_CASE("top denied: a subject's denials by every limit add up; most first, ties by subject") {
  limit_config bucket = admitting(algorithm::token_bucket, 2);
  bucket.name = "bucket";
  bucket.rate = {1, seconds(1)};
  limit_config window = admitting(algorithm::fixed_window, 3);
  window.name = "window";
  fixture f(one_route({bucket, window}));
  auto ask_n = [&](const std::string& subject, int requests) {
    for (int i = 0; i < requests; ++i) {
      f.ask(subject);
    }
  };
  ask_n("alice", 5);  // 2 allowed, 3 denied by the bucket
  ask_n("dave", 5);
  ask_n("bob", 5);
  ask_n("carol", 2);  // never denied
  f.clk.set(seconds(10));
  ask_n("alice", 3);  // the bucket is full again: 1 allowed, then 2 denied by the window
  const std::vector<denied_subject> top = f.mem->top_denied_now(10, f.clk.now());
  REQUIRE(top.size() == 3);
  CHECK(top[0].subject == "alice");
  CHECK(top[0].denied == 5);
  CHECK(top[1].subject == "bob");  // 3, like dave
  CHECK(top[1].denied == 3);
  CHECK(top[2].subject == "dave");
  CHECK(top[2].denied == 3);
  CHECK(f.mem->top_denied_now(1, f.clk.now()).size() == 1);
}

TEST_CASE("top denied: a flood of distinct denied subjects stays bounded, the heaviest stays") {
  limit_config l = admitting(algorithm::token_bucket, 1);
  fixture f(one_route({l}));
  for (int i = 0; i < 51; ++i) {
    f.ask("heavy");
  }
  for (int s = 0; s < 100000; ++s) {
    const std::string subject = "flood-" + std::to_string(s);
    f.ask(subject);
    CHECK_FALSE(f.ask(subject).allowed);
  }
  CHECK(f.mem->size() == 100001);  // every subject has its row: only the count is bounded
  CHECK(f.mem->denied_subjects() <= k_top_subjects);
  const std::vector<denied_subject> top = f.mem->top_denied_now(1, f.clk.now());
  REQUIRE(top.size() == 1);
  CHECK(top[0].subject == "heavy");
  CHECK(top[0].denied == 50);
}
