// routes[].adaptive (issue 17): defaults, and every error naming file, line and key.

#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "config_test_support.hpp"
#include "ratewall/config/loader.hpp"

using namespace ratewall;
using namespace std::chrono_literals;
using ratewall::testing::config_error_of;

namespace {

std::string route_with(const std::string& adaptive, const std::string& limits =
                                                        "[{ name: l, "
                                                        "rate: 10/s }]") {
  return "upstreams:\n"
         "  api: { targets: [127.0.0.1:8000] }\n"
         "routes:\n"
         "  - name: r\n"
         "    upstream: api\n"
         "    limits: " +
         limits +
         "\n"
         "    adaptive: " +
         adaptive + "\n";
}

}  // namespace

TEST_CASE("routes[].adaptive: defaults") {
  SUBCASE("absent: limits as configured") {
    const config cfg = parse_config(
        "upstreams: { api: { targets: [127.0.0.1:8000] } }\n"
        "routes: [{ name: r, upstream: api, limits: [{ name: l, rate: 10/s }] }]\n",
        "t.yaml");
    CHECK_FALSE(cfg.routes[0].adaptive.has_value());
  }
  SUBCASE("a latency target alone") {
    const config cfg = parse_config(route_with("{ latency_target: 250ms }"), "t.yaml");
    REQUIRE(cfg.routes[0].adaptive.has_value());
    const adaptive_config& a = *cfg.routes[0].adaptive;
    CHECK(a.latency_target == 250ms);
    CHECK_FALSE(a.error_rate_target.has_value());
    CHECK(a.min_factor == 0.1);
    CHECK(a.window == 5s);
  }
  SUBCASE("every key") {
    const config cfg = parse_config(
        route_with(
            "{ latency_target: 100ms, error_rate_target: 0.05, min_factor: 0.25, window: 2s }"),
        "t.yaml");
    const adaptive_config& a = *cfg.routes[0].adaptive;
    CHECK(a.latency_target == 100ms);
    CHECK(*a.error_rate_target == 0.05);
    CHECK(a.min_factor == 0.25);
    CHECK(a.window == 2s);
  }
  SUBCASE("an error rate target alone, and the bounds themselves") {
    const config cfg =
        parse_config(route_with("{ error_rate_target: 0, min_factor: 1, window: 10m }"), "t.yaml");
    const adaptive_config& a = *cfg.routes[0].adaptive;
    CHECK(a.latency_target == 0s);
    CHECK(*a.error_rate_target == 0);
    CHECK(a.min_factor == 1);
    CHECK(a.window == 10min);
    CHECK(parse_config(route_with("{ error_rate_target: 0.999, window: 1s }"), "t.yaml")
              .routes[0]
              .adaptive->window == 1s);
  }
}

TEST_CASE("routes[].adaptive: errors") {
  const std::string at = "test.yaml:7: routes[0].adaptive";
  CHECK(config_error_of(route_with("{}")) ==
        at + ": set latency_target, error_rate_target or both (what says that the upstream "
             "struggles)");
  CHECK(config_error_of(route_with("{ latency_target: 1s, target: 2s }")) ==
        at + ".target: unknown key (expected one of: latency_target, error_rate_target, "
             "min_factor, window)");
  CHECK(config_error_of(route_with("{ latency_target: 0s }")) ==
        at + ".latency_target: must be greater than 0");
  CHECK(
      config_error_of(route_with("{ latency_target: fast }")).rfind(at + ".latency_target: ", 0) ==
      0);
  for (const char* bad : {"1", "5%", "-0.1", "1e-2", ".", "0.1.2", "0x1", " "}) {
    CAPTURE(bad);
    CHECK(config_error_of(route_with(std::string("{ error_rate_target: \"") + bad + "\" }")) ==
          at + ".error_rate_target: expected a fraction from 0 to below 1, like 0.05");
  }
  const std::string factor = ": expected a fraction above 0 and at most 1, like 0.1";
  CHECK(config_error_of(route_with("{ latency_target: 1s, min_factor: 0 }")) ==
        at + ".min_factor" + factor);
  CHECK(config_error_of(route_with("{ latency_target: 1s, min_factor: 1.5 }")) ==
        at + ".min_factor" + factor);
  CHECK(config_error_of(route_with("{ latency_target: 1s, min_factor: 0.0000001 }")) ==
        at + ".min_factor: must be at least 0.000001");
  CHECK_NOTHROW(parse_config(route_with("{ latency_target: 1s, min_factor: 0.000001 }"), "t.yaml"));
  CHECK(config_error_of(route_with("{ latency_target: 1s, min_factor: [0.5] }"))
            .rfind(at + ".min_factor: ", 0) == 0);
  CHECK(config_error_of(route_with("{ latency_target: 1s, window: 999ms }")) ==
        at + ".window: must be from 1s to 10m");
  CHECK(config_error_of(route_with("{ latency_target: 1s, window: 601s }")) ==
        at + ".window: must be from 1s to 10m");
  CHECK(config_error_of(route_with("{ latency_target: 1s }", "[]")) ==
        at + ": the route has no limits for the factor to apply to");
  CHECK(config_error_of(route_with("5s")) == at + ": expected a mapping");
}
