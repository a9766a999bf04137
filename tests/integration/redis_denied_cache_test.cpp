// The Redis store's denied cache under a flood of new subjects, on a real redis-server: it
// stays within its capacity, and a subject it had to forget is still decided exactly, by Redis.

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <future>
#include <optional>
#include <string>

#include "ratewall/config/loader.hpp"
#include "ratewall/limit/limiter.hpp"
#include "ratewall/redis/redis_store.hpp"
#include "support/redis_server.hpp"

using namespace ratewall;
using namespace ratewall::testing;
using std::chrono::seconds;

namespace {

template <class T>
T run_on(boost::asio::io_context& ioc, boost::asio::awaitable<T> work) {
  std::future<T> f = boost::asio::co_spawn(ioc, std::move(work), boost::asio::use_future);
  while (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    ioc.run_one_for(std::chrono::milliseconds(10));
  }
  return f.get();
}

}  // namespace

TEST_CASE("redis store: a flood of new subjects keeps the denied cache within its capacity") {
  if (!have_program("redis-server")) {
    MESSAGE("redis-server not installed: skipped");
    return;
  }
  redis_server server;
  // One request per subject and hour: each subject's first request takes its last unit, so the
  // store caches it as denied (exhausted), one entry per subject.
  const config cfg = parse_config("store:\n  type: redis\n  redis: { url: " + server.url() +
                                      ", timeout: 2s }\n"
                                      R"(upstreams:
  api: { targets: [127.0.0.1:1] }
routes:
  - name: r
    upstream: api
    limits: [{ name: hourly, rate: 1/h, burst: 1 }]
)",
                                  "test.yaml");
  constexpr std::size_t capacity = 512;
  constexpr int subjects = 4000;
  boost::asio::io_context ioc(1);
  steady_clock clk;
  auto store = std::make_shared<redis_store>(cfg, "secret", capacity);
  limiter lim(cfg, clk, store);
  const auto subject = [](int i) { return "key:flood-" + std::to_string(i); };

  for (int i = 0; i < subjects; ++i) {
    const std::string s = subject(i);
    REQUIRE(run_on(ioc, lim.check({0, s, "", "GET"})).allowed);
    if (i % 100 == 0) {
      REQUIRE(store->metrics().cache_entries <= capacity);
    }
  }
  const redis_metrics flooded = store->metrics();
  CHECK(flooded.cache_entries <= capacity);
  CHECK(flooded.cache_entries > capacity / 2);  // it is used, not emptied
  CHECK(flooded.cache_evictions >= subjects - capacity);

  // The last subject is still cached: denied without Redis.
  const std::string last = subject(subjects - 1);
  const auto cached = lim.try_check({0, last, "", "GET"});
  REQUIRE(cached);
  CHECK_FALSE(cached->allowed);
  CHECK(store->metrics().calls == flooded.calls);

  // An early subject had to make room: its next request goes to Redis, which denies it.
  std::optional<std::string> evicted;
  for (int i = 0; i < subjects && !evicted; ++i) {
    if (!lim.try_check({0, subject(i), "", "GET"})) {
      evicted = subject(i);
    }
  }
  REQUIRE(evicted);
  const redis_metrics before = store->metrics();
  const route_decision again = run_on(ioc, lim.check({0, *evicted, "", "GET"}));
  CHECK_FALSE(again.allowed);
  CHECK(again.limit_index == 0);
  CHECK(again.headline.retry_after > seconds(3500));
  CHECK(again.headline.retry_after <= seconds(3600));
  const redis_metrics after = store->metrics();
  CHECK(after.calls == before.calls + 1);
  CHECK(after.errors == 0);
  CHECK(after.fallback_decisions == 0);
  // Redis's denial is cached again.
  const auto now_cached = lim.try_check({0, *evicted, "", "GET"});
  REQUIRE(now_cached);
  CHECK_FALSE(now_cached->allowed);
  CHECK(store->metrics().cache_entries <= capacity);
}
