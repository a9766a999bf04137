// The largest numbers a limit may hold (config/limit_bounds.hpp): everything up to them loads,
// one past them is an error naming file, line and key.

#include <doctest/doctest.h>

#include <limits>
#include <string>

#include "config_test_support.hpp"
#include "ratewall/config/limit_bounds.hpp"
#include "ratewall/core/parse.hpp"

using namespace ratewall;
using ratewall::testing::config_error_of;
using std::chrono::hours;

namespace {

// One route whose limits[0] is `limit` (a flow mapping), with `route_extra` (e.g. a cost)
// before it, and a plan named gold. The limit is on line 10.
std::string with_limit(const std::string& limit, const std::string& route_extra = "") {
  return R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
plans:
  gold: {}
routes:
  - name: r
    upstream: api
)" + (route_extra.empty() ? std::string("    shadow: false\n") : "    " + route_extra + "\n") +
         R"(    limits:
      - )" +
         limit + "\n";
}

config load(const std::string& text) {
  return parse_config(text, "test.yaml");
}

constexpr nanos k_day = hours(24);

}  // namespace

TEST_CASE("bucket_depth is burst × period / count, exact and rounded up, in 128 bits") {
  CHECK(bucket_depth({600, k_day * 365}, 600) == k_day * 365);
  CHECK(bucket_depth({100, k_day * 3650}, 100) == k_day * 3650);
  CHECK(bucket_depth({3, nanos{10}}, 1) == nanos{4});  // 10/3 ns, rounded up
  // Products far beyond 64 bits are still exact, and the result saturates.
  CHECK(bucket_depth({1'000'000'000, std::chrono::seconds(1)}, 864'000'000'000'000'000u) ==
        k_day * 10000);
  CHECK(bucket_depth({1, k_day * 10000}, std::numeric_limits<std::uint64_t>::max()) ==
        nanos::max());
  CHECK(bucket_depth({0, std::chrono::seconds(1)}, 5) == nanos{0});
  CHECK(bucket_units(algorithm::token_bucket, 7) == 7);
  CHECK(bucket_units(algorithm::leaky_bucket, 7) == 8);
  CHECK(bucket_units(algorithm::leaky_bucket, std::numeric_limits<std::uint64_t>::max()) ==
        std::numeric_limits<std::uint64_t>::max());
  CHECK(bucket_units(algorithm::fixed_window, 7) == 0);
}

TEST_CASE("the extremes ratewall check accepts") {
  SUBCASE("600 a year and 100 a decade") {
    config c = load(with_limit("{ name: l, rate: 600/365d }"));
    CHECK(c.routes[0].limits[0].burst == 600);
    CHECK(c.routes[0].limits[0].rate.period == k_day * 365);
    c = load(with_limit("{ name: l, rate: 100/3650d }"));
    CHECK(c.routes[0].limits[0].burst == 100);
  }
  SUBCASE("the longest period, with the default burst and with burst 1") {
    CHECK(config_error_of(with_limit("{ name: l, rate: 1/10000d }")) == "loaded");
    CHECK(config_error_of(with_limit("{ name: l, rate: 7/10000d }")) == "loaded");
    CHECK(config_error_of(with_limit("{ name: l, algorithm: leaky_bucket, rate: 1/10000d }")) ==
          "loaded");
  }
  SUBCASE("the deepest buckets: 10000 days at one per nanosecond") {
    CHECK(config_error_of(with_limit("{ name: l, rate: 1000000000/s, burst: 864000000000000000 }",
                                     "cost: 864000000000000000")) == "loaded");
    CHECK(config_error_of(with_limit("{ name: l, algorithm: leaky_bucket, rate: 1000000000/s, "
                                     "burst: 863999999999999999 }",
                                     "cost: 864000000000000000")) == "loaded");
    CHECK(config_error_of(with_limit("{ name: l, rate: 864000000000000000/10000d }")) == "loaded");
  }
  SUBCASE("the longest window and the largest limit, with cost = limit") {
    for (const char* algo : {"fixed_window", "sliding_window_counter", "concurrency"}) {
      CAPTURE(algo);
      std::string window = std::string(algo) == "concurrency" ? "" : ", window: 10000d";
      CHECK(config_error_of(with_limit(std::string("{ name: l, algorithm: ") + algo +
                                           ", limit: 4611686018427387903" + window + " }",
                                       "cost: 4611686018427387903")) == "loaded");
    }
    CHECK(config_error_of(with_limit("{ name: l, algorithm: sliding_window_log, limit: 1000000, "
                                     "window: 10000d }",
                                     "cost: 1000000")) == "loaded");
  }
  SUBCASE("max_keys up to the largest integer") {
    const std::string text =
        with_limit("{ name: l, rate: 1/s }") + "store: { max_keys: 18446744073709551615 }\n";
    CHECK(load(text).store.max_keys == std::numeric_limits<std::uint64_t>::max());
  }
}

TEST_CASE("one past the extremes is an error naming file, line and key") {
  SUBCASE("a period or window above 10000 days") {
    CHECK(config_error_of(with_limit("{ name: l, rate: 1/10001d }")) ==
          R"(test.yaml:10: routes[0].limits[0].rate: expected "<count>/<unit>" like "10/s": )"
          R"(period: duration too large (at most 10000d))");
    CHECK(config_error_of(
              with_limit("{ name: l, algorithm: fixed_window, limit: 5, window: 240001h }")) ==
          "test.yaml:10: routes[0].limits[0].window: duration too large (at most 10000d)");
  }
  SUBCASE("a burst that takes more than 10000 days to refill") {
    CHECK(
        config_error_of(with_limit("{ name: l, rate: 1000000000/s, burst: 864000000000000001 }")) ==
        "test.yaml:10: routes[0].limits[0].burst: burst 864000000000000001 at 1000000000/s "
        "takes too long to refill (burst × period / count must be at most 10000d)");
    CHECK(config_error_of(with_limit("{ name: l, rate: 1/d, burst: 10001 }")) ==
          "test.yaml:10: routes[0].limits[0].burst: burst 10001 at 1/d takes too long to refill "
          "(burst × period / count must be at most 10000d)");
    CHECK(config_error_of(with_limit("{ name: l, rate: 1/d, burst: 18446744073709551615 }"))
              .find("routes[0].limits[0].burst: burst 18446744073709551615 at 1/d takes too "
                    "long") != std::string::npos);
  }
  SUBCASE("a leaky bucket counts the request in service too") {
    CHECK(config_error_of(with_limit("{ name: l, algorithm: leaky_bucket, rate: 1/d, "
                                     "burst: 9999 }")) == "loaded");
    CHECK(config_error_of(
              with_limit("{ name: l, algorithm: leaky_bucket, rate: 1/d, burst: 10000 }")) ==
          "test.yaml:10: routes[0].limits[0].burst: burst 10000 at 1/d takes too long to refill "
          "((burst + 1) × period / count must be at most 10000d)");
  }
  SUBCASE("a plan's rate that makes the limit's burst too deep is blamed on the plan") {
    const std::string limit = R"({ name: l, rate: 100/s, burst: 20000,
          plans: { gold: { rate: 1/d } } })";
    CHECK(config_error_of(with_limit(limit)) ==
          "test.yaml:11: routes[0].limits[0].plans.gold.rate: burst 20000 at 1/d takes too long "
          "to refill (burst × period / count must be at most 10000d)");
    const std::string plan_burst = R"({ name: l, rate: 1/d, burst: 10,
          plans: { gold: { burst: 10001 } } })";
    CHECK(config_error_of(with_limit(plan_burst)) ==
          "test.yaml:11: routes[0].limits[0].plans.gold.burst: burst 10001 at 1/d takes too long "
          "to refill (burst × period / count must be at most 10000d)");
    // A plan's default burst follows its rate, and so always fits.
    CHECK(config_error_of(with_limit(R"({ name: l, rate: 100/s,
          plans: { gold: { rate: 1/10000d } } })")) == "loaded");
  }
  SUBCASE("a limit above 2^62 - 1") {
    CHECK(config_error_of(with_limit("{ name: l, algorithm: concurrency, "
                                     "limit: 4611686018427387904 }")) ==
          "test.yaml:10: routes[0].limits[0].limit: must be at most 4611686018427387903");
    CHECK(config_error_of(with_limit(R"({ name: l, algorithm: fixed_window, limit: 5,
          window: 1s, plans: { gold: { limit: 4611686018427387904 } } })")) ==
          "test.yaml:11: routes[0].limits[0].plans.gold.limit: must be at most "
          "4611686018427387903");
  }
  SUBCASE("a sliding log above a million timestamps") {
    CHECK(config_error_of(with_limit("{ name: l, algorithm: sliding_window_log, "
                                     "limit: 1000001, window: 1s }")) ==
          "test.yaml:10: routes[0].limits[0].limit: sliding_window_log keeps one timestamp per "
          "request: at most 1000000 (use sliding_window_counter)");
  }
  SUBCASE("a cost above what a leaky bucket holds (burst + 1)") {
    CHECK(config_error_of(with_limit("{ name: l, algorithm: leaky_bucket, rate: 1/s, burst: 2 }",
                                     "cost: 3")) == "loaded");
    CHECK(config_error_of(
              with_limit("{ name: l, algorithm: leaky_bucket, rate: 1/s, burst: 2 }", "cost: 4")) ==
          R"(test.yaml:8: routes[0].cost: a request costing 4 could never pass limit "l")"
          R"( (capacity 3))");
  }
}

TEST_CASE("max_header_bytes stops at 64 KiB, where the HTTP parser's fields stop") {
  // Beast keeps a field's size in 16 bits and throws for one of 64 KiB or more: a head of at
  // most 64 KiB cannot carry one, over HTTP/1.1 or HTTP/2 (a cookie joined from crumbs).
  const std::string base = with_limit("{ name: l, rate: 1/s }");
  CHECK(load(base + "server:\n  max_header_bytes: 64KiB\n").server.max_header_bytes == 65536u);
  CHECK(config_error_of(base + "server:\n  max_header_bytes: 65537\n") ==
        "test.yaml:12: server.max_header_bytes: must be at most 64KiB (65536): no field of a head "
        "that size is past what the HTTP parser holds");
  CHECK(config_error_of(base + "server:\n  max_header_bytes: 4GiB\n").find("at most 64KiB") !=
        std::string::npos);
}
