// The Lua limiter against the memory store's algorithms on a real redis-server: the same
// decisions, field by field, for random sequences of requests at chosen times (the script takes
// `now` from its caller here instead of TIME), all-or-nothing charging across a route's limits,
// TTLs, and concurrency units that lapse. Then the Redis store itself through a limiter.

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "ratewall/config/loader.hpp"
#include "ratewall/limit/concurrency.hpp"
#include "ratewall/limit/fixed_window.hpp"
#include "ratewall/limit/gcra.hpp"
#include "ratewall/limit/leaky_bucket.hpp"
#include "ratewall/limit/limiter.hpp"
#include "ratewall/limit/memory_store.hpp"
#include "ratewall/limit/sliding_window_counter.hpp"
#include "ratewall/limit/sliding_window_log.hpp"
#include "ratewall/proxy/gateway.hpp"
#include "ratewall/redis/keys.hpp"
#include "ratewall/redis/redis_store.hpp"
#include "ratewall/redis/scripts.hpp"
#include "support/redis_server.hpp"
#include "support/refusing_port.hpp"

using namespace ratewall;
using namespace ratewall::testing;
using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

namespace {

// A Unix time in microseconds, as TIME would give it.
constexpr std::int64_t k_epoch_us = 1'760'000'000'000'000;

struct script_runner {
  explicit script_runner(redis_server& s) : client(s.port()) {
    // Every variant: a call runs the one holding just the algorithms of its limits.
    for (unsigned algorithms = 0; algorithms <= redis::k_all_script_algorithms; ++algorithms) {
      const redis::reply r =
          client.call({"SCRIPT", "LOAD", std::string(redis::limiter_script(algorithms))});
      REQUIRE(r.str == redis::limiter_script_sha(algorithms));
    }
  }

  // One call of the script; `rows` decisions per limit come back.
  std::vector<decision> run(char mode, const std::vector<std::string>& keys,
                            const std::vector<policy>& limits, std::int64_t now_us,
                            std::uint64_t cost, const std::string& unit = "",
                            std::int64_t ttl_us = 0) {
    redis::script_call call(mode, now_us, static_cast<std::uint64_t>(ttl_us));
    REQUIRE(call.add(keys, mode == 'r' ? std::span<const policy>() : limits, cost, unit));
    return decisions(client.call(call.arguments()), mode, limits);
  }

  // One call of the script, its keys then made persistent in the same transaction. The script
  // sets TTLs for the time it was told and Redis expires on its own clock: a separate PERSIST
  // can come too late for a key of a few milliseconds on a busy machine (ASan), and the next
  // step would then find no state. Gives the script's reply.
  redis::reply call_kept(const redis::script_call& call, const std::vector<std::string>& keys) {
    REQUIRE(client.call({"MULTI"}).str == "OK");
    REQUIRE(client.call(call.arguments()).str == "QUEUED");
    for (const std::string& k : keys) {
      REQUIRE(client.call({"PERSIST", k}).str == "QUEUED");
    }
    redis::reply r = client.call({"EXEC"});
    REQUIRE(r.type == redis::reply::kind::array);
    REQUIRE(r.elements.size() == 1 + keys.size());
    return std::move(r.elements[0]);
  }

  // One check through call_kept.
  std::vector<decision> run_kept(const std::vector<std::string>& keys,
                                 const std::vector<policy>& limits, std::int64_t now_us,
                                 std::uint64_t cost, const std::string& unit = "",
                                 std::int64_t ttl_us = 0) {
    redis::script_call call('c', now_us, static_cast<std::uint64_t>(ttl_us));
    REQUIRE(call.add(keys, limits, cost, unit));
    return decisions(call_kept(call, keys), 'c', limits);
  }

  // One check and the PTTL of its key in one transaction: read in a later round trip, the TTL
  // would also count however long the machine took in between (hundreds of ms under ASan).
  // The key is then made persistent in the same transaction.
  long long ttl_after(const std::string& key, const policy& p, std::int64_t now_us,
                      std::uint64_t cost) {
    redis::script_call call('c', now_us, 0);
    REQUIRE(call.add({key}, std::vector<policy>{p}, cost, ""));
    REQUIRE(client.call({"MULTI"}).str == "OK");
    REQUIRE(client.call(call.arguments()).str == "QUEUED");
    REQUIRE(client.call({"PTTL", key}).str == "QUEUED");
    // Then kept, for the checks that read its state later (the TTL is a few hundred ms).
    REQUIRE(client.call({"PERSIST", key}).str == "QUEUED");
    const redis::reply r = client.call({"EXEC"});
    REQUIRE(r.type == redis::reply::kind::array);
    REQUIRE(r.elements.size() == 3);
    REQUIRE(r.elements[1].type == redis::reply::kind::integer);
    return r.elements[1].integer;
  }

  static std::vector<decision> decisions(const redis::reply& r, char mode,
                                         const std::vector<policy>& limits) {
    if (mode == 'r') {
      REQUIRE(r.type == redis::reply::kind::integer);
      return {};
    }
    REQUIRE_MESSAGE(r.type == redis::reply::kind::array, r.str);
    const std::size_t rows = mode == 's' ? 2 : 1;
    REQUIRE(r.elements.size() == limits.size() * rows * 3);
    // Every reply of the real script passes the store's validation of Redis replies.
    std::optional<std::vector<decision>> out = redis::decode_decisions(r.elements, limits, rows);
    REQUIRE(out);
    return std::move(*out);
  }

  redis_client client;
};

limit_config bucket(algorithm a, std::uint64_t count, nanos period, std::uint64_t burst,
                    bool delay = false) {
  limit_config l;
  l.name = "l";
  l.algo = a;
  l.rate = {count, period};
  l.burst = burst;
  l.delay = delay;
  return l;
}

limit_config window(algorithm a, std::uint64_t limit, nanos w) {
  limit_config l;
  l.name = "l";
  l.algo = a;
  l.limit = limit;
  l.window = w;
  return l;
}

policy resolved(const limit_config& l, bool shadow = false) {
  return resolve_policy(l, nullptr, shadow, store_failure::allow);
}

// The script runs on the Redis clock, in microseconds: a retry_after that falls inside a
// microsecond (only the sliding counter's can) is the next whole one, never earlier.
nanos micro_ceil(nanos d) {
  if (d == k_never) {
    return d;
  }
  return nanos{(d.count() + 999) / 1000 * 1000};
}

void check_same(const decision& expect, const decision& got, const std::string& where) {
  INFO(where);
  CHECK(got.allowed == expect.allowed);
  CHECK(got.impossible == expect.impossible);
  CHECK(got.remaining == expect.remaining);
  CHECK(got.reset_after == expect.reset_after);
  CHECK(got.retry_after == micro_ceil(expect.retry_after));
  CHECK(got.delay == expect.delay);
}

// Random steps: mostly small, sometimes whole windows; costs mostly 1, sometimes 0, large or
// above the limit. Every step is checked against A, the memory store's algorithm.
template <class A>
void compare_sequence(script_runner& runner, const policy& p, std::uint32_t seed, int steps,
                      std::int64_t typical_step_us, std::uint64_t max_cost) {
  std::mt19937 rng(seed);
  typename A::state s{};
  std::int64_t now = k_epoch_us;
  const std::string key = "rw:test:" + std::to_string(seed);
  runner.client.call({"DEL", key});
  for (int i = 0; i < steps; ++i) {
    const unsigned kind = rng() % 20;
    if (kind < 12) {
      now += static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(typical_step_us + 1));
    } else if (kind < 14) {
      now += typical_step_us * static_cast<std::int64_t>(rng() % 50);
    }
    std::uint64_t cost = 1;
    const unsigned c = rng() % 20;
    if (c == 0) {
      cost = 0;
    } else if (c < 4) {
      cost = 1 + rng() % max_cost;
    } else if (c == 4) {
      cost = p.limit + 1;
    }
    const nanos t{now * 1000};
    decision expect = A::check(s, t, p, cost);
    if (expect.allowed) {
      A::commit(s, t, p, cost);
    }
    const decision got = runner.run_kept({key}, {p}, now, cost)[0];
    check_same(expect, got,
               "step " + std::to_string(i) + " t=" + std::to_string(now - k_epoch_us) +
                   "us cost=" + std::to_string(cost));
    if (got.allowed != expect.allowed) {
      break;  // the states have parted: the rest would only repeat the failure
    }
  }
  if constexpr (std::is_same_v<A, sliding_window_log>) {
    sliding_window_log::clear(s);
  }
}

// A route whose cost the response reports: random peeks ('p', cost 1, nothing charged) and
// forced charges ('f': small, above the limit, or huge and clamped at k_max_debt), each
// checked against A's check and force.
template <class A>
void compare_debt_sequence(script_runner& runner, const policy& p, std::uint32_t seed, int steps,
                           std::int64_t typical_step_us) {
  std::mt19937 rng(seed);
  typename A::state s{};
  std::int64_t now = k_epoch_us;
  const std::string key = "rw:test:debt:" + std::to_string(seed);
  runner.client.call({"DEL", key});
  for (int i = 0; i < steps; ++i) {
    now += static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(typical_step_us + 1));
    const nanos t{now * 1000};
    const bool force = rng() % 3 == 0;
    std::uint64_t cost = 1;
    if (force) {
      const unsigned c = rng() % 10;
      cost = c == 0 ? 1'000'000'000'000 : c == 1 ? 0 : 1 + rng() % (3 * p.limit);
    }
    const decision expect = A::check(s, t, p, cost);
    redis::script_call call(force ? 'f' : 'p', now, 0);
    REQUIRE(call.add({key}, std::vector<policy>{p}, cost, ""));
    const decision got = script_runner::decisions(runner.call_kept(call, {key}), 'c', {p})[0];
    check_same(expect, got,
               std::string(force ? "force" : "peek") + " step " + std::to_string(i) +
                   " t=" + std::to_string(now - k_epoch_us) + "us cost=" + std::to_string(cost));
    if (force) {
      A::force(s, t, p, cost);
    }
    if (got.allowed != expect.allowed) {
      break;
    }
  }
}

// A configuration on the Redis at `url` with upstream "api" (a closed port), then `rest`: the
// routes, and any other section.
config config_on_redis(const std::string& url, const std::string& timeout,
                       const std::string& rest) {
  return parse_config("store:\n  type: redis\n  redis: { url: " + url + ", timeout: " + timeout +
                          " }\nupstreams:\n  api: { targets: [127.0.0.1:1] }\n" + rest,
                      "test.yaml");
}

template <class T>
T run_on(boost::asio::io_context& ioc, boost::asio::awaitable<T> work) {
  std::future<T> f = boost::asio::co_spawn(ioc, std::move(work), boost::asio::use_future);
  while (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    ioc.run_one_for(std::chrono::milliseconds(10));
  }
  return f.get();
}

}  // namespace

TEST_CASE("redis script: the same decisions as the memory store's algorithms") {
  if (!have_program("redis-server")) {
    MESSAGE("redis-server not installed: skipped");
    return;
  }
  redis_server server;
  script_runner runner(server);

  SUBCASE("token bucket (GCRA)") {
    compare_sequence<gcra>(runner, resolved(bucket(algorithm::token_bucket, 10, seconds(1), 5)), 1,
                           400, 100'000, 6);
    compare_sequence<gcra>(runner, resolved(bucket(algorithm::token_bucket, 3, seconds(60), 20)), 2,
                           300, 5'000'000, 25);
  }
  SUBCASE("leaky bucket, with and without delay") {
    compare_sequence<leaky_bucket>(
        runner, resolved(bucket(algorithm::leaky_bucket, 4, seconds(1), 3)), 3, 400, 250'000, 5);
    compare_sequence<leaky_bucket>(
        runner, resolved(bucket(algorithm::leaky_bucket, 1000, seconds(1), 20, true)), 4, 400,
        1'000, 25);
  }
  SUBCASE("fixed window, aligned to the epoch") {
    compare_sequence<fixed_window>(runner, resolved(window(algorithm::fixed_window, 5, seconds(1))),
                                   5, 400, 100'000, 6);
    compare_sequence<fixed_window>(runner,
                                   resolved(window(algorithm::fixed_window, 100, seconds(86400))),
                                   6, 300, 3'000'000'000, 150);
  }
  SUBCASE("sliding window log") {
    compare_sequence<sliding_window_log>(
        runner, resolved(window(algorithm::sliding_window_log, 5, seconds(1))), 7, 400, 100'000, 6);
    compare_sequence<sliding_window_log>(
        runner, resolved(window(algorithm::sliding_window_log, 50, seconds(60))), 8, 300, 2'000'000,
        60);
  }
  SUBCASE("sliding window counter, small and past 2^53 in its products") {
    compare_sequence<sliding_window_counter>(
        runner, resolved(window(algorithm::sliding_window_counter, 8, seconds(60))), 9, 400,
        3'000'000, 9);
    // previous × (window − elapsed) exceeds 2^53 here: the script's exact long multiplication.
    compare_sequence<sliding_window_counter>(
        runner, resolved(window(algorithm::sliding_window_counter, 1'000'000, seconds(86400))), 10,
        300, 4'000'000'000, 900'000);
  }
}

TEST_CASE("redis script: peeks and forced charges decide as the memory store's force") {
  if (!have_program("redis-server")) {
    MESSAGE("redis-server not installed: skipped");
    return;
  }
  redis_server server;
  script_runner runner(server);
  compare_debt_sequence<gcra>(runner, resolved(bucket(algorithm::token_bucket, 10, seconds(1), 20)),
                              11, 400, 300'000);
  compare_debt_sequence<leaky_bucket>(
      runner, resolved(bucket(algorithm::leaky_bucket, 10, seconds(1), 5)), 12, 400, 300'000);
  compare_debt_sequence<fixed_window>(
      runner, resolved(window(algorithm::fixed_window, 20, seconds(2))), 13, 400, 300'000);
  compare_debt_sequence<sliding_window_counter>(
      runner, resolved(window(algorithm::sliding_window_counter, 20, seconds(2))), 14, 400,
      300'000);

  SUBCASE("a peek writes nothing; a forced charge's key lives until its debt has drained") {
    const policy p = resolved(bucket(algorithm::token_bucket, 10, seconds(1), 10));
    const std::string key = "rw:test:debt-ttl";
    runner.client.call({"DEL", key});
    CHECK(runner.run('p', {key}, {p}, k_epoch_us, 1)[0].allowed);
    CHECK(runner.client.call({"EXISTS", key}).integer == 0);
    runner.run('f', {key}, {p}, k_epoch_us, 45);  // 4.5 s of a 1 s bucket
    const long long ttl = runner.client.call({"PTTL", key}).integer;
    CHECK(ttl > 3500);
    CHECK(ttl <= 4500);
    const decision d = runner.run('p', {key}, {p}, k_epoch_us, 1)[0];
    CHECK_FALSE(d.allowed);
    CHECK(d.retry_after == milliseconds(3600));
  }
}

TEST_CASE("redis script: a batch decides like its requests one after the other") {
  if (!have_program("redis-server")) {
    return;
  }
  redis_server server;
  script_runner runner(server);
  // Two routes, every algorithm between them; three subjects. Each step sends a few requests
  // (often for the same subject) in one call on keys "b:", and the same requests one call
  // each on keys "s:", at the same time: the decisions must be the same, row by row.
  const std::vector<policy> route_a{
      resolved(bucket(algorithm::token_bucket, 5, seconds(1), 4)),
      resolved(window(algorithm::sliding_window_counter, 9, seconds(2))),
      resolved(window(algorithm::sliding_window_log, 7, seconds(1)))};
  const std::vector<policy> route_b{resolved(bucket(algorithm::leaky_bucket, 3, seconds(1), 2)),
                                    resolved(window(algorithm::fixed_window, 6, seconds(1))),
                                    resolved(window(algorithm::concurrency, 4, nanos{0}))};
  std::mt19937_64 rng(42);
  std::int64_t now = k_epoch_us;
  std::size_t denied = 0;
  std::size_t batched = 0;
  for (int step = 0; step < 150; ++step) {
    now += static_cast<std::int64_t>(rng() % 150'000);
    const std::size_t k = 1 + rng() % 6;
    redis::script_call call('c', now, 1'000'000);
    struct sent {
      const std::vector<policy>* limits;
      std::string subject;
      std::uint64_t cost;
      std::string unit;
    };
    std::vector<sent> requests;
    std::vector<std::string> batch_keys;
    for (std::size_t j = 0; j < k; ++j) {
      sent r{rng() % 2 ? &route_a : &route_b, "s" + std::to_string(rng() % 3), 1 + rng() % 2,
             "u" + std::to_string(step) + "." + std::to_string(j)};
      std::vector<std::string> keys;
      for (std::size_t i = 0; i < r.limits->size(); ++i) {
        keys.push_back("b:" + r.subject + ":" + std::to_string(&*r.limits == &route_a) + ":" +
                       std::to_string(i));
      }
      REQUIRE(call.add(keys, *r.limits, r.cost, r.unit));
      batch_keys.insert(batch_keys.end(), keys.begin(), keys.end());
      requests.push_back(r);
    }
    const redis::reply reply = runner.call_kept(call, batch_keys);
    REQUIRE_MESSAGE(reply.type == redis::reply::kind::array, reply.str);
    std::size_t at = 0;
    for (const sent& r : requests) {
      std::vector<std::string> keys;
      for (std::size_t i = 0; i < r.limits->size(); ++i) {
        keys.push_back("s:" + r.subject + ":" + std::to_string(&*r.limits == &route_a) + ":" +
                       std::to_string(i));
      }
      const std::vector<decision> one =
          runner.run_kept(keys, *r.limits, now, r.cost, r.unit, 1'000'000);
      for (std::size_t i = 0; i < one.size(); ++i, at += 3) {
        REQUIRE(at + 3 <= reply.elements.size());
        INFO("step " << step << " limit " << i);
        const std::optional<decision> decoded =
            redis::decode_decision(reply.elements[at].integer, reply.elements[at + 1].integer,
                                   reply.elements[at + 2].integer, one[i].limit);
        REQUIRE(decoded);
        const decision& got = *decoded;
        CHECK(got.allowed == one[i].allowed);
        CHECK(got.impossible == one[i].impossible);
        CHECK(got.remaining == one[i].remaining);
        CHECK(got.reset_after == one[i].reset_after);
        CHECK(got.retry_after == one[i].retry_after);
        CHECK(got.delay == one[i].delay);
        denied += one[i].allowed ? 0 : 1;
      }
    }
    CHECK(at == reply.elements.size());
    batched += k > 1 ? 1 : 0;
  }
  // The sequence must exercise denials, or it shows nothing.
  CHECK(denied > 50);
  CHECK(batched > 100);
}

TEST_CASE("redis script: after the last unit, exhausted_for ends exactly when a request fits") {
  if (!have_program("redis-server")) {
    return;
  }
  redis_server server;
  script_runner runner(server);
  // Intervals of a fraction of a microsecond (3/s, 7/s) test the script's rounding.
  const std::vector<policy> policies{
      resolved(bucket(algorithm::token_bucket, 3, seconds(1), 4)),
      resolved(bucket(algorithm::token_bucket, 1, seconds(1), 1)),
      resolved(bucket(algorithm::leaky_bucket, 7, seconds(1), 2)),
      resolved(bucket(algorithm::leaky_bucket, 7, seconds(1), 2, true)),
      resolved(window(algorithm::fixed_window, 5, milliseconds(700)))};
  std::mt19937_64 rng(7);
  for (std::size_t n = 0; n < policies.size(); ++n) {
    const policy& p = policies[n];
    const std::string key = "x:" + std::to_string(n);
    std::int64_t now = k_epoch_us;
    int exhausted = 0;
    for (int step = 0; step < 300; ++step) {
      now += static_cast<std::int64_t>(rng() % 120'000);
      const std::uint64_t cost = 1 + rng() % 2;
      const decision d = runner.run_kept({key}, {p}, now, cost)[0];
      const nanos wait = redis::exhausted_for(p, d);
      if (!d.allowed || d.remaining > 0) {
        CHECK(wait == nanos{0});
        continue;
      }
      INFO("policy " << n << " step " << step);
      REQUIRE(wait > nanos{0});
      REQUIRE(wait.count() % 1000 == 0);
      ++exhausted;
      const std::int64_t until = now + wait.count() / 1000;
      // Status mode: row 0 costs 0, row 1 costs 1; nothing is charged.
      CHECK_FALSE(runner.run('s', {key}, {p}, until - 1, 0)[1].allowed);
      CHECK(runner.run('s', {key}, {p}, until, 0)[1].allowed);
    }
    CHECK(exhausted > 10);
  }
  // Sliding windows and concurrency free units at moments the reply does not tell.
  const policy log = resolved(window(algorithm::sliding_window_log, 1, seconds(1)));
  const decision d = runner.run('c', {"y:log"}, {log}, k_epoch_us, 1)[0];
  REQUIRE(d.allowed);
  REQUIRE(d.remaining == 0);
  CHECK(redis::exhausted_for(log, d) == nanos{0});
}

TEST_CASE("redis script: a route's limits are charged all or nothing, shadow limits apart") {
  if (!have_program("redis-server")) {
    return;
  }
  redis_server server;
  script_runner runner(server);
  // The memory store decides the same route; both must agree on every request.
  memory_store mem;
  std::vector<policy> limits{
      resolved(bucket(algorithm::token_bucket, 1, seconds(1), 3)),
      resolved(window(algorithm::fixed_window, 5, seconds(60))),
      resolved(window(algorithm::sliding_window_log, 2, seconds(60)), /*shadow=*/true),
  };
  const char* names[] = {"tb", "fw", "log"};
  for (std::size_t i = 0; i < limits.size(); ++i) {
    limits[i].slot = mem.bind_slot({"r", names[i], i}, limits[i].algo);
  }
  const std::vector<std::string> keys{"rw:t:{s}:tb", "rw:t:{s}:fw", "rw:t:{s}:log"};
  std::mt19937 rng(42);
  std::int64_t now = k_epoch_us - k_epoch_us % 60'000'000;  // a window start: no roll-over
  for (int i = 0; i < 40; ++i) {
    now += static_cast<std::int64_t>(rng() % 700'000);
    const std::uint64_t cost = 1 + rng() % 2;
    check_request req{"s", 0, limits, cost, nanos{now * 1000}};
    const route_decision expect = mem.decide(req);
    const std::vector<decision> got = runner.run_kept(keys, limits, now, cost);
    decision_fold fold;
    for (std::uint32_t j = 0; j < got.size(); ++j) {
      fold.add(j, got[j], limits[j].shadow);
    }
    const route_decision r = fold.finish();
    INFO("request " << i);
    CHECK(r.allowed == expect.allowed);
    CHECK(r.limit_index == expect.limit_index);
    CHECK(r.shadow_denied == expect.shadow_denied);
    check_same(expect.headline, r.headline, "headline");
  }
  for (std::uint32_t slot = 0; slot < 3; ++slot) {
    mem.unbind_slot(limits[slot].slot);
  }
}

TEST_CASE("redis script: keys live exactly as long as their state") {
  if (!have_program("redis-server")) {
    return;
  }
  redis_server server;
  script_runner runner(server);
  const policy tb = resolved(bucket(algorithm::token_bucket, 10, seconds(1), 10));
  // tat = now + 4 × 100 ms: the key expires when the bucket is full again.
  const long long ttl = runner.ttl_after("k:tb", tb, k_epoch_us, 4);
  CHECK(ttl <= 400);
  CHECK(ttl > 300);

  const policy fw = resolved(window(algorithm::fixed_window, 5, seconds(60)));
  const std::int64_t start = k_epoch_us - k_epoch_us % 60'000'000;
  const long long fw_ttl = runner.ttl_after("k:fw", fw, start + 45'000'000, 1);
  CHECK(fw_ttl <= 15'000);
  CHECK(fw_ttl > 14'000);

  SUBCASE("a denied request writes nothing") {
    runner.run('c', {"k:tb"}, {tb}, k_epoch_us, 100);  // impossible: cost > burst
    CHECK(runner.client.call({"GET", "k:tb"}).str == std::to_string(k_epoch_us + 400'000));
  }
  SUBCASE("status mode charges nothing") {
    const auto rows = runner.run('s', {"k:tb"}, {tb}, k_epoch_us, 1);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].remaining == 6);
    CHECK(rows[1].allowed);
    CHECK(runner.client.call({"GET", "k:tb"}).str == std::to_string(k_epoch_us + 400'000));
  }
}

TEST_CASE("redis script: concurrency units are released, and lapse when nobody refreshes them") {
  if (!have_program("redis-server")) {
    return;
  }
  redis_server server;
  script_runner runner(server);
  limit_config c;
  c.name = "c";
  c.algo = algorithm::concurrency;
  c.limit = 2;
  const policy p = resolved(c);
  const std::int64_t ttl = 3'000'000;
  std::int64_t now = k_epoch_us;
  CHECK(runner.run('c', {"k:c"}, {p}, now, 1, "u1", ttl)[0].allowed);
  CHECK(runner.run('c', {"k:c"}, {p}, now, 1, "u2", ttl)[0].allowed);
  const decision full = runner.run('c', {"k:c"}, {p}, now, 1, "u3", ttl)[0];
  CHECK_FALSE(full.allowed);
  CHECK(full.retry_after == k_concurrency_retry);
  CHECK(integer_of(runner.client.call({"ZCARD", "k:c"})) == 2);

  // Released: one fits again.
  runner.client.call({"ZREM", "k:c", "u1"});
  CHECK(runner.run('c', {"k:c"}, {p}, now, 1, "u4", ttl)[0].allowed);

  // u2 is refreshed at +2 s, u4 is not (its gateway died): at +3.5 s only u4 has lapsed.
  runner.run('r', {"k:c"}, {}, now + 2'000'000, 0, "u2", ttl);
  now += 3'500'000;
  CHECK(runner.run('c', {"k:c"}, {p}, now, 1, "u5", ttl)[0].allowed);
  CHECK_FALSE(runner.run('c', {"k:c"}, {p}, now, 1, "u6", ttl)[0].allowed);
  const redis::reply members = runner.client.call({"ZRANGE", "k:c", "0", "-1"});
  REQUIRE(members.elements.size() == 2);
  CHECK(members.elements[0].str == "u2");
  CHECK(members.elements[1].str == "u5");
}

namespace {

// Alice's concurrency limit (1 unit) on a real redis-server with the store's `timeout`, through
// a limiter; `key` is her unit's sorted set.
struct concurrency_on_redis {
  concurrency_on_redis(const char* timeout, const char* on_store_error)
      : cfg(config_on_redis(server.url(), timeout,
                            std::string(R"(
routes:
  - name: r
    upstream: api
    limits: [{ name: conc, algorithm: concurrency, limit: 1, on_store_error: )") +
                                on_store_error + " }]\n")),
        store(std::make_shared<redis_store>(cfg, "secret")),
        lim(std::make_unique<limiter>(cfg, clk, store)),
        key(redis::limit_key(redis::subject_tag("secret", "key:alice"),
                             lim->policies(0, "")[0].key)) {}

  bool key_exists() { return integer_of(server.call({"EXISTS", key})) == 1; }
  // Runs the loop until the key is gone, for a second at most.
  void until_gone() {
    for (int i = 0; i < 100 && key_exists(); ++i) {
      ioc.run_for(milliseconds(10));
    }
  }

  redis_server server;
  config cfg;
  boost::asio::io_context ioc{1};
  steady_clock clk;
  std::shared_ptr<redis_store> store;
  std::unique_ptr<limiter> lim;
  const limit_request alice{0, "key:alice", "", "GET"};
  std::string key;
};

}  // namespace

TEST_CASE("redis store: a check that timed out leaves no concurrency unit behind") {
  // Redis stalls (a fork, a slow command) past the check's deadline: on_store_error answers,
  // but the script still runs once Redis is back. Its unit must not hold the subject's only
  // slot for slot_ttl.
  if (!have_program("redis-server")) {
    return;
  }
  concurrency_on_redis f("200ms", "allow");
  // Warm: the connection is up and the script loaded, so the stalled check is the script alone.
  run_on(f.ioc, f.lim->check(f.alice)).slot.release();
  f.until_gone();
  REQUIRE_FALSE(f.key_exists());

  const std::uint64_t fallbacks = f.store->metrics().fallback_decisions;
  f.server.call({"CLIENT", "PAUSE", "800"});
  route_decision stalled = run_on(f.ioc, f.lim->check(f.alice));
  CHECK(stalled.allowed);  // on_store_error: allow
  CHECK(f.store->metrics().fallback_decisions == fallbacks + 1);
  // The pause ends; the script runs, and then whatever follows it on that connection.
  f.ioc.run_for(milliseconds(1000));
  f.until_gone();
  CHECK_FALSE(f.key_exists());
  // Redis decides again, and the slot is free.
  route_decision next = run_on(f.ioc, f.lim->check(f.alice));
  CHECK(next.allowed);
  CHECK(next.slot.held());
  CHECK(f.store->metrics().fallback_decisions == fallbacks + 1);
}

TEST_CASE("redis store: a unit given back just before its store goes is removed all the same") {
  // A reload that replaces the store: the old one goes with its configuration's last request,
  // right after that request's lease is given back. The ZREM must not go down with its
  // connections, or the unit holds a slot until slot_ttl.
  if (!have_program("redis-server")) {
    return;
  }
  concurrency_on_redis f("500ms", "deny");
  route_decision held = run_on(f.ioc, f.lim->check(f.alice));
  REQUIRE(held.allowed);
  REQUIRE(f.key_exists());
  held.slot.release();
  f.lim.reset();
  f.store.reset();  // the last owner: the store goes now, before the loop runs again
  f.until_gone();
  CHECK_FALSE(f.key_exists());
}

TEST_CASE("redis store: check, status, reset and top_denied through a limiter") {
  if (!have_program("redis-server")) {
    return;
  }
  redis_server server;
  const config cfg = config_on_redis(server.url(), "500ms", R"(
routes:
  - name: r
    upstream: api
    limits:
      - { name: burst, rate: 1/h, burst: 3 }
      - { name: conc, algorithm: concurrency, limit: 2 }
)");
  boost::asio::io_context ioc(1);
  steady_clock clk;
  auto store = std::make_shared<redis_store>(cfg, "secret");
  limiter lim(cfg, clk, store);
  const limit_request alice{0, "key:alice", "", "GET"};

  CHECK_FALSE(lim.try_check(alice));  // Redis: the answer needs a round trip
  route_decision first = run_on(ioc, lim.check(alice));
  CHECK(first.allowed);
  CHECK(first.headline.remaining == 1);  // the concurrency limit: 2 - 1
  CHECK(first.slot.held());
  route_decision second = run_on(ioc, lim.check(alice));
  CHECK(second.allowed);
  route_decision third = run_on(ioc, lim.check(alice));
  CHECK_FALSE(third.allowed);  // two units in flight
  CHECK(third.limit_index == 1);

  // Giving the units back is a message to Redis; let it go out.
  first.slot.release();
  second.slot.release();
  const std::string tag = redis::subject_tag("secret", "key:alice");
  for (int i = 0; i < 100; ++i) {
    ioc.run_for(milliseconds(10));
    if (integer_of(server.call({"EXISTS", redis::limit_key(tag, lim.policies(0, "")[1].key)})) ==
        0) {
      break;
    }
  }
  CHECK(integer_of(server.call({"EXISTS", redis::limit_key(tag, lim.policies(0, "")[1].key)})) ==
        0);

  route_decision fourth = run_on(ioc, lim.check(alice));
  CHECK(fourth.allowed);  // the third burst unit
  fourth.slot.release();
  route_decision fifth = run_on(ioc, lim.check(alice));
  CHECK_FALSE(fifth.allowed);
  CHECK(fifth.limit_index == 0);
  CHECK(fifth.headline.retry_after > seconds(3590));

  SUBCASE("a denied subject is then answered from the cache, without Redis") {
    const auto before = store->metrics();
    auto cached = lim.try_check(alice);
    REQUIRE(cached);
    CHECK_FALSE(cached->allowed);
    CHECK(cached->limit_index == 0);
    CHECK(store->metrics().cache_hits == before.cache_hits + 1);
    CHECK(store->metrics().calls == before.calls);
  }
  SUBCASE("status charges nothing") {
    const std::vector<decision> st = run_on(ioc, lim.status("key:alice", 0, ""));
    REQUIRE(st.size() == 2);
    CHECK(st[0].remaining == 0);
    CHECK_FALSE(st[0].allowed);
    CHECK(st[1].remaining == 2);
    CHECK(st[1].allowed);
  }
  SUBCASE("reset forgets the subject (and the cache with it)") {
    CHECK(run_on(ioc, lim.reset("key:alice")) == 1);
    route_decision again = run_on(ioc, lim.check(alice));
    CHECK(again.allowed);
    CHECK(again.headline.remaining == 1);
  }
  SUBCASE("reset_all clears every rw:v1 key but units in flight") {
    route_decision bob = run_on(ioc, lim.check({0, "key:bob", "", "GET"}));
    REQUIRE(bob.allowed);
    CHECK(run_on(ioc, lim.reset_all()) == 2);         // alice's and bob's buckets
    CHECK(integer_of(server.call({"DBSIZE"})) == 1);  // bob's unit, still in flight
    CHECK(run_on(ioc, lim.check(alice)).allowed);
  }
  SUBCASE("top_denied counts this gateway's denials over admin.top_window") {
    const auto top = run_on(ioc, lim.top_denied(5));
    REQUIRE(top.size() == 1);
    CHECK(top[0].subject == "key:alice");
    CHECK(top[0].denied == 2);
    // 10m by default, in slices of 1m: counted at least 10m, at most 11m.
    const nanos now = clk.now();
    CHECK(run_on(ioc, store->top_denied(5, now + minutes(9) + seconds(59))).size() == 1);
    CHECK(run_on(ioc, store->top_denied(5, now + minutes(11))).empty());
    store->set_top_window(hours(1), now);
    const auto longer = run_on(ioc, store->top_denied(5, now + minutes(11)));
    REQUIRE(longer.size() == 1);
    CHECK(longer[0].denied == 2);
    CHECK(run_on(ioc, store->top_denied(5, now + minutes(66) + seconds(6))).empty());
  }
  SUBCASE("no raw subject in Redis: only hashed tags") {
    const redis::reply keys = server.call({"KEYS", "*"});
    for (const auto& k : keys.elements) {
      CHECK(k.str.find("alice") == std::string::npos);
      CHECK(k.str.rfind("rw:v1:{" + tag + "}:r:", 0) == 0);
    }
  }
}

TEST_CASE("redis store: the request after the last unit is denied from the cache") {
  if (!have_program("redis-server")) {
    return;
  }
  redis_server server;
  const config cfg = config_on_redis(server.url(), "500ms", R"(
routes:
  - name: r
    upstream: api
    limits:
      - { name: hour, rate: 1/h, burst: 2 }
      - { name: minute, algorithm: fixed_window, limit: 100, window: 1m }
      - { name: watch, algorithm: fixed_window, limit: 1, window: 1d, shadow: true }
)");
  boost::asio::io_context ioc(1);
  steady_clock clk;
  auto store = std::make_shared<redis_store>(cfg, "secret");
  limiter lim(cfg, clk, store);
  const limit_request alice{0, "key:alice", "", "GET"};
  CHECK(run_on(ioc, lim.check(alice)).allowed);  // the shadow limit's last unit: no matter
  CHECK_FALSE(lim.try_check(alice));
  const route_decision last = run_on(ioc, lim.check(alice));
  REQUIRE(last.allowed);
  CHECK(last.headline.remaining == 0);

  const auto before = store->metrics();
  auto next = lim.try_check(alice);
  REQUIRE(next);
  CHECK_FALSE(next->allowed);
  CHECK(next->limit_index == 0);
  CHECK(next->headline.remaining == 0);
  CHECK(next->headline.retry_after > seconds(3590));
  CHECK(next->headline.retry_after <= seconds(3600));
  CHECK(store->metrics().calls == before.calls);
  CHECK(store->metrics().cache_hits == before.cache_hits + 1);
  // Redis agrees, and charged nothing for the cached answer: 2 in the minute's window.
  const std::vector<decision> st = run_on(ioc, lim.status("key:alice", 0, ""));
  REQUIRE(st.size() == 3);
  CHECK(st[0].remaining == 0);
  CHECK(st[1].remaining == 98);
  // Another subject is not concerned.
  CHECK_FALSE(lim.try_check({0, "key:bob", "", "GET"}));
}

TEST_CASE(
    "redis store: the denied cache forgets on reset, even with a check in flight, and on "
    "reload") {
  if (!have_program("redis-server")) {
    return;
  }
  redis_server server;
  const auto with = [&](const std::string& limit) {
    return config_on_redis(server.url(), "2s",
                           "routes:\n  - { name: r, upstream: api, limits: [" + limit + "] }\n");
  };
  boost::asio::io_context ioc(1);
  steady_clock clk;
  const gateway first(with("{ name: l, rate: 1/h, burst: 2 }"), clk, "secret");
  limiter& lim = first.limits();
  const limit_request alice{0, "key:alice", "", "GET"};
  REQUIRE(run_on(ioc, lim.check(alice)).allowed);

  SUBCASE("a reset while the check that took the last unit is in flight") {
    // Redis holds every command for a while: the check goes out, then the reset's DEL, on the
    // same connection, so Redis decides the check first; its reply ("none left") comes after
    // the reset began, and must not be cached as if it came after it.
    server.call({"CLIENT", "PAUSE", "300", "ALL"});
    auto check = boost::asio::co_spawn(ioc, lim.check(alice), boost::asio::use_future);
    ioc.run_for(milliseconds(50));
    auto reset = boost::asio::co_spawn(ioc, lim.reset("key:alice"), boost::asio::use_future);
    while (check.wait_for(seconds(0)) != std::future_status::ready ||
           reset.wait_for(seconds(0)) != std::future_status::ready) {
      ioc.run_one_for(milliseconds(10));
    }
    const route_decision last = check.get();
    CHECK(last.allowed);
    CHECK(last.headline.remaining == 0);
    CHECK(reset.get() == 1);
    CHECK_FALSE(lim.try_check(alice));  // Redis holds nothing for alice now
    CHECK(run_on(ioc, lim.check(alice)).allowed);
  }
  SUBCASE("a reload that keeps the store and makes the limit a shadow one") {
    REQUIRE(run_on(ioc, lim.check(alice)).allowed);
    REQUIRE(lim.try_check(alice));  // cached: denied
    const gateway next(with("{ name: l, rate: 1/h, burst: 2, shadow: true }"), clk, "secret",
                       &first);
    REQUIRE(&next.limits().backing_store() == &lim.backing_store());
    CHECK_FALSE(next.limits().try_check(alice));
    const route_decision shadowed = run_on(ioc, next.limits().check(alice));
    CHECK(shadowed.allowed);
  }
}

TEST_CASE("redis store: limits and costs the script cannot carry are refused, on reload too") {
  // The script computes in doubles: counts, costs and microsecond spans stay below 2^49.
  const auto with = [](const std::string& route) {
    return config_on_redis("redis://127.0.0.1:1", "5ms", "routes:\n" + route);
  };
  const config fine = with(
      "  - { name: r, upstream: api, limits: [{ name: l, algorithm: concurrency, limit: 5 }] "
      "}\n");
  const config huge_limit = with(
      "  - { name: r, upstream: api, limits: [{ name: l, algorithm: fixed_window, "
      "limit: 1000000000000000, window: 1m }] }\n");
  const config huge_cost = with(
      "  - { name: r, upstream: api, cost: { default: 1, POST: 1000000000000000 }, limits: "
      "[{ name: l, algorithm: concurrency, limit: 5 }] }\n");
  // 6944 days of bucket: within what a configuration may hold, past 2^49 µs.
  const config huge_plan = with(R"(  - name: r
    upstream: api
    limits:
      - { name: l, rate: 1/s, plans: { gold: { rate: 1/s, burst: 600000000 } } }
plans:
  gold: {}
)");
  CHECK_NOTHROW(redis_store::validate(fine));
  CHECK_THROWS_WITH_AS(redis_store(huge_limit, "k"),
                       doctest::Contains("test.yaml: route 'r' limit 'l': too large"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(redis_store::validate(huge_cost),
                       doctest::Contains("route 'r' limit 'l': too large"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(redis_store::validate(huge_plan),
                       doctest::Contains("limit 'l' for plan 'gold': too large"),
                       std::invalid_argument);

  // A reload with the same store settings keeps the store: the new limits are checked anyway.
  steady_clock clk;
  const gateway running(fine, clk, "k");
  CHECK_THROWS_AS(gateway(huge_limit, clk, "k", &running), std::invalid_argument);
  CHECK_THROWS_AS(gateway(huge_cost, clk, "k", &running), std::invalid_argument);
  const gateway next(fine, clk, "k", &running);
  CHECK(&next.limits().backing_store() == &running.limits().backing_store());
}

TEST_CASE("redis store kept by a reload scales its fallback by the new routes' costs") {
  // A reload that keeps the store (same store settings) may reorder routes or add one: the
  // local fallback must scale each limit by its own route's cost, not by the route that had
  // its index in the first configuration.
  const refusing_port closed;
  const auto config_with = [&](const std::string& routes) {
    return parse_config(R"(
store:
  type: redis
  redis:
    url: redis://127.0.0.1:)" +
                            std::to_string(closed.port()) +
                            R"(
    timeout: 200ms
    instances: 4
    breaker: { failures: 1000000, cooldown: 1s }
upstreams:
  api: { targets: [127.0.0.1:1] }
routes:
)" + routes,
                        "test.yaml");
  };
  const std::string cheap = R"(
  - name: cheap
    upstream: api
    limits: [{ name: l, algorithm: fixed_window, limit: 100, window: 1h, on_store_error: local }]
)";
  const std::string costly = R"(
  - name: costly
    upstream: api
    cost: 40
    limits: [{ name: l, algorithm: fixed_window, limit: 100, window: 1h, on_store_error: local }]
)";
  const config first = config_with(cheap);
  const config reloaded = config_with(costly + cheap);
  boost::asio::io_context ioc(1);
  steady_clock clk;
  auto store = std::make_shared<redis_store>(first, "secret");
  limiter before(first, clk, store);
  limiter after(reloaded, clk, store);  // as make_store keeps it
  // 100 / 4 instances is 25, below one request's 40: the fallback's limit holds 40, one request.
  const route_decision d = run_on(ioc, after.check({0, "key:a", "", "GET"}));
  CHECK(d.allowed);
  CHECK(store->metrics().fallback_decisions == 1);
  CHECK_FALSE(run_on(ioc, after.check({0, "key:a", "", "GET"})).allowed);
}

TEST_CASE("redis store: unreachable Redis answers each limit per on_store_error") {
  const refusing_port closed;  // refused for the whole test: no other test's server gets it
  const std::uint16_t closed_port = closed.port();
  const config cfg = parse_config(R"(
store:
  type: redis
  redis:
    url: redis://127.0.0.1:)" + std::to_string(closed_port) +
                                      R"(
    timeout: 200ms
    instances: 2
    breaker: { failures: 2, cooldown: 10s }
upstreams:
  api: { targets: [127.0.0.1:1] }
routes:
  - name: open
    upstream: api
    limits: [{ name: l, rate: 1/h, burst: 1, on_store_error: allow }]
  - name: closed
    upstream: api
    limits: [{ name: l, rate: 1/h, burst: 100, on_store_error: deny }]
  - name: local
    upstream: api
    limits: [{ name: l, algorithm: fixed_window, limit: 6, window: 1d, on_store_error: local }]
)",
                                  "test.yaml");
  boost::asio::io_context ioc(1);
  steady_clock clk;
  auto store = std::make_shared<redis_store>(cfg, "secret");
  limiter lim(cfg, clk, store);
  const auto decide = [&](std::size_t route, const char* subject) {
    if (auto r = lim.try_check({route, subject, "", "GET"})) {
      return std::move(*r);
    }
    return run_on(ioc, lim.check({route, subject, "", "GET"}));
  };
  for (int i = 0; i < 3; ++i) {
    CHECK(decide(0, "a").allowed);
  }
  const route_decision denied = decide(1, "a");
  CHECK_FALSE(denied.allowed);
  CHECK(denied.headline.retry_after == seconds(1));
  // local: the limit split between 2 gateways.
  int admitted = 0;
  for (int i = 0; i < 10; ++i) {
    admitted += decide(2, "a").allowed ? 1 : 0;
  }
  CHECK(admitted == 3);
  const redis_metrics m = store->metrics();
  CHECK(m.breaker_opened == 1);
  CHECK(m.breakers_open == 1);
  CHECK(m.breaker_rejections >= 10);  // answered at once once the breaker opened
  CHECK(m.fallback_decisions == 14);
  CHECK(store->nodes().size() == 1);
  CHECK(store->nodes()[0].breaker == redis::circuit_breaker::state::open);
}
