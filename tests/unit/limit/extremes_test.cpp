// Decisions at the extremes `ratewall check` accepts (config/limit_bounds.hpp): the longest
// periods and windows, the deepest buckets, the largest limits and counts, a cost equal to the
// limit. Every number is exact, on a clock ten years after boot.

#include <doctest/doctest.h>

#include <chrono>
#include <limits>
#include <string>

#include "ratewall/config/loader.hpp"
#include "ratewall/limit/limiter.hpp"
#include "ratewall/limit/memory_store.hpp"

using namespace ratewall;
using std::chrono::hours;
using std::chrono::seconds;

namespace {

constexpr nanos k_day = hours(24);
constexpr nanos k_t0 = k_day * 3650;  // ten years of uptime

// One route with `limit` (a flow mapping); GET costs 1, POST costs `post_cost`.
std::string one_limit(const std::string& limit, const std::string& post_cost = "1",
                      const std::string& top_level = "") {
  return R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: r
    upstream: api
    cost: { default: 1, POST: )" +
         post_cost + R"( }
    limits:
      - )" +
         limit + "\n" + top_level;
}

struct loaded {
  explicit loaded(const std::string& yaml, nanos start = k_t0)
      : cfg(parse_config(yaml, "test.yaml")), clk(start), lim(cfg, clk) {}

  decision get(std::string_view subject = "alice") { return ask("GET", subject).headline; }
  decision post(std::string_view subject = "alice") { return ask("POST", subject).headline; }
  route_decision ask(std::string_view method, std::string_view subject = "alice") {
    return *lim.try_check({0, subject, "", method});
  }
  loaded& at(nanos t) {
    clk.set(t);
    return *this;
  }

  config cfg;
  manual_clock clk;
  limiter lim;
};

}  // namespace

TEST_CASE("600/365d: one token every 52560 s, exact to the nanosecond") {
  loaded l(one_limit("{ name: yearly, rate: 600/365d }"));
  const nanos interval = seconds(52560);
  decision first = l.get();
  CHECK(first.allowed);
  CHECK(first.limit == 600);
  CHECK(first.remaining == 599);
  CHECK(first.reset_after == interval);
  for (int i = 1; i < 599; ++i) {
    REQUIRE(l.get().allowed);
  }
  decision last = l.get();
  CHECK(last.allowed);
  CHECK(last.remaining == 0);
  CHECK(last.reset_after == k_day * 365);
  decision denied = l.get();
  CHECK_FALSE(denied.allowed);
  CHECK(denied.retry_after == interval);
  CHECK(denied.reset_after == k_day * 365);
  CHECK_FALSE(l.at(k_t0 + interval - nanos{1}).get().allowed);
  CHECK(l.at(k_t0 + interval).get().allowed);
}

TEST_CASE("100/3650d: one token every 36.5 days") {
  loaded l(one_limit("{ name: decade, rate: 100/3650d }"));
  for (int i = 0; i < 100; ++i) {
    REQUIRE(l.get().allowed);
  }
  decision denied = l.get();
  CHECK_FALSE(denied.allowed);
  CHECK(denied.limit == 100);
  CHECK(denied.retry_after == seconds(3'153'600));
  CHECK(denied.reset_after == k_day * 3650);
  CHECK_FALSE(l.at(k_t0 + seconds(3'153'600) - nanos{1}).get().allowed);
  CHECK(l.at(k_t0 + seconds(3'153'600)).get().allowed);
}

TEST_CASE("the deepest token bucket: 10000 days at one per nanosecond, cost = burst") {
  constexpr std::uint64_t burst = 864'000'000'000'000'000;
  loaded l(one_limit("{ name: deep, rate: 1000000000/s, burst: 864000000000000000 }",
                     "864000000000000000"));
  decision all = l.post();
  CHECK(all.allowed);
  CHECK(all.limit == burst);
  CHECK(all.remaining == 0);
  CHECK(all.reset_after == k_day * 10000);
  decision one = l.get();
  CHECK_FALSE(one.allowed);
  CHECK(one.retry_after == nanos{1});
  CHECK(one.reset_after == k_day * 10000);
  decision early = l.at(k_t0 + k_day * 10000 - nanos{1}).post();
  CHECK_FALSE(early.allowed);
  CHECK(early.retry_after == nanos{1});
  CHECK(early.remaining == burst - 1);
  CHECK(l.at(k_t0 + k_day * 10000).post().allowed);
}

TEST_CASE("the deepest leaky bucket: burst + 1 = 864000000000000000, with delay") {
  constexpr std::uint64_t capacity = 864'000'000'000'000'000;
  loaded l(
      one_limit("{ name: deep, algorithm: leaky_bucket, rate: 1000000000/s, "
                "burst: 863999999999999999, delay: true }",
                "864000000000000000"));
  route_decision all = l.ask("POST");
  CHECK(all.allowed);
  CHECK(all.headline.limit == capacity);
  CHECK(all.headline.remaining == 0);
  CHECK(all.headline.reset_after == k_day * 10000);
  // Its last unit is served just before the queue has drained.
  CHECK(all.delay == k_day * 10000 - nanos{1});
  decision one = l.get();
  CHECK_FALSE(one.allowed);
  CHECK(one.retry_after == nanos{1});
}

TEST_CASE("the largest rate counts: one per nanosecond over 10000 days, and over 1 ms") {
  SUBCASE("864000000000000000/10000d") {
    loaded l(one_limit("{ name: vast, rate: 864000000000000000/10000d }"));
    decision d = l.get();
    CHECK(d.allowed);
    CHECK(d.limit == 864'000'000'000'000'000u);
    CHECK(d.remaining == 864'000'000'000'000'000u - 1);
    CHECK(d.reset_after == nanos{1});
  }
  SUBCASE("1000000/1ms") {
    loaded l(one_limit("{ name: fine, rate: 1000000/1ms }", "1000000"));
    decision d = l.get();
    CHECK(d.limit == 1'000'000);
    CHECK(d.remaining == 999'999);
    CHECK(d.reset_after == nanos{1});
    decision rest = l.post();  // 999 999 left, 1 000 000 asked: the first unit back in 1 ns
    CHECK_FALSE(rest.allowed);
    CHECK(rest.retry_after == nanos{1});
    CHECK(l.at(k_t0 + nanos{1}).post().allowed);
    decision empty = l.get();
    CHECK_FALSE(empty.allowed);
    CHECK(empty.retry_after == nanos{1});
    CHECK(empty.reset_after == std::chrono::milliseconds(1));
  }
}

TEST_CASE("the longest window and the largest limit, with cost = limit") {
  constexpr std::uint64_t limit = 4'611'686'018'427'387'903;  // 2^62 - 1
  const nanos window = k_day * 10000;
  // k_t0 is 3650 days into the first window.
  const nanos until_end = window - k_t0;
  SUBCASE("fixed window") {
    loaded l(
        one_limit("{ name: w, algorithm: fixed_window, limit: 4611686018427387903, "
                  "window: 10000d }",
                  "4611686018427387903"));
    decision all = l.post();
    CHECK(all.allowed);
    CHECK(all.limit == limit);
    CHECK(all.remaining == 0);
    CHECK(all.reset_after == until_end);
    decision one = l.get();
    CHECK_FALSE(one.allowed);
    CHECK(one.retry_after == until_end);
    CHECK(l.at(window).post().allowed);
  }
  SUBCASE("sliding window counter") {
    loaded l(
        one_limit("{ name: w, algorithm: sliding_window_counter, "
                  "limit: 4611686018427387903, window: 10000d }",
                  "4611686018427387903"));
    decision all = l.post();
    CHECK(all.allowed);
    CHECK(all.remaining == 0);
    CHECK(all.reset_after == until_end + window);
    // Next window: previous = limit, weighted by (w − e) / w; one unit fits once
    // limit × (w − e) ≤ (limit − 1) × w, i.e. e ≥ w / limit: 1 ns in.
    decision one = l.get();
    CHECK_FALSE(one.allowed);
    CHECK(one.retry_after == until_end + nanos{1});
    CHECK_FALSE(l.at(window).get().allowed);
    CHECK(l.at(window + nanos{1}).get().allowed);
  }
  SUBCASE("sliding window log, at its own cap of a million") {
    loaded l(
        one_limit("{ name: w, algorithm: sliding_window_log, limit: 1000000, "
                  "window: 10000d }",
                  "1000000"));
    decision all = l.post();
    CHECK(all.allowed);
    CHECK(all.remaining == 0);
    CHECK(all.reset_after == window);
    decision one = l.get();
    CHECK_FALSE(one.allowed);
    CHECK(one.retry_after == window);
    CHECK(l.at(k_t0 + window).get().allowed);
  }
  SUBCASE("concurrency") {
    loaded l(one_limit("{ name: c, algorithm: concurrency, limit: 4611686018427387903 }"));
    route_decision r = l.ask("GET");
    CHECK(r.allowed);
    CHECK(r.headline.limit == limit);
    CHECK(r.headline.remaining == limit - 1);
  }
}

TEST_CASE("max_keys up to UINT64_MAX tracks every subject (the per-shard cap does not wrap)") {
  loaded l(one_limit("{ name: b, rate: 1/s }", "1", "store: { max_keys: 18446744073709551615 }\n"));
  // Rounding max_keys up to whole shards used to wrap to 1 row per shard: among 256 subjects
  // some would then have shared a shard and gone untracked.
  for (int i = 0; i < 256; ++i) {
    const std::string subject = "s" + std::to_string(i);
    route_decision r = l.ask("GET", subject);
    CAPTURE(subject);
    REQUIRE(r.allowed);
    REQUIRE_FALSE(r.untracked);
  }
}

TEST_CASE("a bucket that outlasts the store's 36-year expiry field is never swept early") {
  // 1999999/2ms has an interval of 2 ns for an exact 1.000 0005 ns: the limiter's bucket is
  // twice as deep as the 10000 days the loader measures, about 55 years, beyond the 2^60 ns
  // a row can name as its expiry. Such a row is kept rather than dropped at 2^60 ns.
  const nanos start = k_day * 365 * 37;  // uptime past 2^60 ns
  loaded l(one_limit("{ name: deep, rate: 1999999/2ms, burst: 863999568000000000 }",
                     "863999568000000000"),
           start);
  REQUIRE(l.post().allowed);
  CHECK(l.lim.sweep() == 0);
  decision after = l.get();
  CHECK_FALSE(after.allowed);
  CHECK(after.retry_after == nanos{2});
  CHECK(after.reset_after == nanos{2 * 863'999'568'000'000'000});
}
