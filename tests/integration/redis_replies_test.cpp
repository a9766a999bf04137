// Replies to the limiter script that the script cannot produce (a server that is not Redis, or
// a tampered key in a real one) are store errors: each limit is answered per on_store_error,
// exactly as when Redis times out.

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "ratewall/config/loader.hpp"
#include "ratewall/limit/limiter.hpp"
#include "ratewall/redis/keys.hpp"
#include "ratewall/redis/redis_store.hpp"
#include "ratewall/redis/reply.hpp"
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

// Three routes of one limit each, one per on_store_error; by default a breaker that never
// opens, so that every check asks the server.
config config_on(const std::string& url, unsigned breaker_failures = 1'000'000) {
  return parse_config("store:\n  type: redis\n  redis:\n    url: " + url +
                          "\n    timeout: 2s\n    breaker: { failures: " +
                          std::to_string(breaker_failures) + R"(, cooldown: 1h }
upstreams:
  api: { targets: [127.0.0.1:1] }
routes:
  - name: open
    upstream: api
    limits: [{ name: l, rate: 1/h, burst: 10, on_store_error: allow }]
  - name: closed
    upstream: api
    limits: [{ name: l, rate: 1/h, burst: 10, on_store_error: deny }]
  - name: local
    upstream: api
    limits: [{ name: l, algorithm: fixed_window, limit: 3, window: 1h, on_store_error: local }]
)",
                      "test.yaml");
}

constexpr std::size_t k_open = 0;
constexpr std::size_t k_closed = 1;
constexpr std::size_t k_local = 2;

// RESP: an array of the three integers of one decision.
std::string decision_reply(long long packed, long long reset_us, long long wait_us) {
  return "*3\r\n:" + std::to_string(packed) + "\r\n:" + std::to_string(reset_us) +
         "\r\n:" + std::to_string(wait_us) + "\r\n";
}

// What on_store_error answers for the first request of a subject on each route.
void check_store_error_answers(boost::asio::io_context& ioc, limiter& lim,
                               const std::string& subject) {
  const route_decision open = run_on(ioc, lim.check({k_open, subject, "", "GET"}));
  CHECK(open.allowed);
  CHECK(open.headline.remaining == 10);  // allow: the whole quota
  const route_decision closed = run_on(ioc, lim.check({k_closed, subject, "", "GET"}));
  CHECK_FALSE(closed.allowed);
  CHECK(closed.headline.retry_after == seconds(1));  // deny: retry in 1 s
  const route_decision local = run_on(ioc, lim.check({k_local, subject, "", "GET"}));
  CHECK(local.allowed);
  CHECK(local.headline.remaining == 2);  // local: the in-process store counted it
}

// A store on a fake server whose every answer the test chooses, behind the three routes.
struct fake_server_store {
  fake_redis server;
  const config cfg = config_on(server.url());
  boost::asio::io_context ioc{1};
  steady_clock clk;
  std::shared_ptr<redis_store> store = std::make_shared<redis_store>(cfg, "secret");
  limiter lim{cfg, clk, store};
};

}  // namespace

TEST_CASE_FIXTURE(
    fake_server_store,
    "redis store: replies the script cannot produce are answered per on_store_error") {
  SUBCASE("a reply the script can produce is the decision (the fake server works)") {
    // Allowed, 1 left: none of the on_store_error answers.
    server.answer_with(decision_reply(1 * 4 + 1, 360'000'000, 0));
    for (std::size_t route : {k_open, k_closed, k_local}) {
      const route_decision d = run_on(ioc, lim.check({route, "key:control", "", "GET"}));
      CHECK(d.allowed);
      CHECK(d.headline.remaining == 1);
    }
    const redis_metrics m = store->metrics();
    CHECK(m.errors == 0);
    CHECK(m.fallback_decisions == 0);
    CHECK(server.commands() == 3);
  }

  SUBCASE("hostile replies") {
    struct row {
      const char* what;
      std::string bytes;
    };
    const std::vector<row> table{
        {"packed negative", decision_reply(-1, 0, 0)},
        {"remaining above the limit", decision_reply(11 * 4 + 1, 0, 0)},
        {"remaining huge", decision_reply(9'223'372'036'854'775'807LL, 0, 0)},
        {"allowed and impossible", decision_reply(3, 0, -1)},
        {"reset negative", decision_reply(1, -1, 0)},
        {"reset past 2^50 us", decision_reply(1, (1LL << 50) + 1, 0)},
        {"retry -1 but not impossible", decision_reply(0, 10, -1)},
        {"retry INT64_MAX (overflows nanoseconds)",
         decision_reply(0, 10, 9'223'372'036'854'775'807LL)},
        {"a bulk string for an integer", "*3\r\n$1\r\n1\r\n:0\r\n:0\r\n"},
        {"nil for an integer", "*3\r\n:1\r\n$-1\r\n:0\r\n"},
        {"two values", "*2\r\n:1\r\n:0\r\n"},
        {"four values", "*4\r\n:1\r\n:0\r\n:0\r\n:0\r\n"},
        {"nil", "$-1\r\n"},
        {"an integer", ":1\r\n"},
        {"an error", "-ERR boom\r\n"},
        {"a status", "+OK\r\n"},
    };
    int n = 0;
    for (const row& r : table) {
      INFO(r.what);
      server.answer_with(r.bytes);
      const redis_metrics before = store->metrics();
      check_store_error_answers(ioc, lim, "key:row-" + std::to_string(n++));
      const redis_metrics after = store->metrics();
      CHECK(after.errors == before.errors + 3);
      CHECK(after.fallback_decisions == before.fallback_decisions + 3);
      CHECK(after.cache_entries == 0);  // nothing remembered from such a reply
    }
    CHECK(server.commands() == 3 * table.size());
  }
}

TEST_CASE_FIXTURE(
    fake_server_store,
    "redis store: a reply past the reader's bounds is a store error; the next connection serves") {
  // hiredis 0.14 would buffer a bulk string of up to 512 MiB, or make an array of a billion
  // elements from one line: whatever answers on the server's port could spend the gateway's
  // memory. Past reply_reader's bounds the connection ends, and the limits answer as when Redis
  // is down.
  // The byte bound is the reader's unit test's: 32 MiB through the gateway's loop, which the
  // test runs only while a check waits, raced the store's 2 s timeout under ThreadSanitizer.
  const std::vector<std::string> hostile{
      "*1000000000\r\n",
      "*" + std::to_string(redis::reply_reader::k_max_elements + 1) + "\r\n:1\r\n",
  };
  int n = 0;
  for (const std::string& bytes : hostile) {
    CAPTURE(bytes.substr(0, 16));
    server.answer_with(bytes);
    const redis_metrics before = store->metrics();
    check_store_error_answers(ioc, lim, "key:bound-" + std::to_string(n++));
    const redis_metrics after = store->metrics();
    CHECK(after.errors == before.errors + 3);
    CHECK(after.fallback_decisions == before.fallback_decisions + 3);
  }
  // A server that answers as Redis does is used again, on a new connection.
  server.answer_with(decision_reply(1 * 4 + 1, 360'000'000, 0));
  bool served = false;
  for (int i = 0; i < 50 && !served; ++i) {
    const route_decision d = run_on(ioc, lim.check({k_closed, "key:after", "", "GET"}));
    served = d.allowed && d.headline.remaining == 1;
    if (!served) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  CHECK(served);
}

TEST_CASE("redis store: a server that answers but cannot serve counts against its breaker") {
  // A primary demoted to a replica, one refusing writes it cannot persist, one whose password
  // the gateway lacks, one loading its data: down, as far as the breaker goes. A script's own
  // error is not the server's failure.
  fake_redis server;
  boost::asio::io_context ioc(1);
  steady_clock clk;
  const std::vector<std::pair<std::string, bool>> table{
      {"-READONLY You can't write against a read only replica.\r\n", true},
      {"-MISCONF Redis is configured to save RDB snapshots, but it's unable to persist\r\n", true},
      {"-NOAUTH Authentication required.\r\n", true},
      {"-LOADING Redis is loading the dataset in memory\r\n", true},
      {"-ERR user_script:1: boom\r\n", false},
  };
  for (const auto& [bytes, opens] : table) {
    INFO(bytes);
    const config cfg = config_on(server.url(), 3);
    auto store = std::make_shared<redis_store>(cfg, "secret");
    limiter lim(cfg, clk, store);
    server.answer_with(bytes);
    const std::size_t commands_before = server.commands();
    for (int i = 0; i < 4; ++i) {
      CHECK(run_on(ioc, lim.check({k_open, "key:s" + std::to_string(i), "", "GET"})).allowed);
    }
    const redis_metrics m = store->metrics();
    CHECK(m.fallback_decisions == 4);
    CHECK(m.breaker_opened == (opens ? 1u : 0u));
    // Open after three failures: the fourth check is answered without asking.
    CHECK(server.commands() - commands_before == (opens ? 3u : 4u));
  }
}

TEST_CASE("redis store: a key tampered in Redis gives a store error, not a 30,000-year denial") {
  if (!have_program("redis-server")) {
    MESSAGE("redis-server not installed: skipped");
    return;
  }
  redis_server server;
  const config cfg = config_on(server.url());
  boost::asio::io_context ioc(1);
  steady_clock clk;
  auto store = std::make_shared<redis_store>(cfg, "secret");
  limiter lim(cfg, clk, store);
  const std::string subject = "key:alice";
  // Untampered, Redis decides: 9 of 10 left.
  for (std::size_t route : {k_open, k_closed}) {
    const route_decision d = run_on(ioc, lim.check({route, subject, "", "GET"}));
    REQUIRE(d.allowed);
    CHECK(d.headline.remaining == 9);
  }
  REQUIRE(store->metrics().errors == 0);
  // Each token bucket's state is its theoretical arrival time in µs: put it 10^18 µs (about
  // 30,000 years) ahead. The script then computes a reset and a retry of that length, which
  // no state it writes can give.
  const std::string tag = redis::subject_tag("secret", subject);
  for (std::size_t route : {k_open, k_closed}) {
    const std::string key = redis::limit_key(tag, lim.policies(route, "")[0].key);
    REQUIRE(server.call({"EXISTS", key}).integer == 1);
    REQUIRE(server.call({"SET", key, "1000000000000000000"}).str == "OK");
  }
  const route_decision open = run_on(ioc, lim.check({k_open, subject, "", "GET"}));
  CHECK(open.allowed);
  CHECK(open.headline.remaining == 10);
  const route_decision closed = run_on(ioc, lim.check({k_closed, subject, "", "GET"}));
  CHECK_FALSE(closed.allowed);
  CHECK(closed.headline.retry_after == seconds(1));
  const redis_metrics m = store->metrics();
  CHECK(m.errors == 2);
  CHECK(m.fallback_decisions == 2);
  CHECK(m.cache_entries == 0);
}
