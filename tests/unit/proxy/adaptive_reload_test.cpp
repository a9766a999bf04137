// routes[].adaptive across reloads (issue 17): a route kept with adaptive keeps its factor, new
// settings clamp it, a route that loses adaptive is back at its configured limits at once.

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>

#include "ratewall/admin/metrics.hpp"
#include "ratewall/config/loader.hpp"
#include "ratewall/proxy/gateway.hpp"

using namespace ratewall;
using namespace std::chrono_literals;

namespace {

// `adaptive` is the route's adaptive key, or "" for none.
config config_with(const std::string& adaptive) {
  std::string yaml = R"(upstreams:
  api: { targets: [127.0.0.1:1] }
routes:
  - name: adaptive_reload
    upstream: api
    limits:
      - { name: burst, rate: 10/s, burst: 10 }
)";
  if (!adaptive.empty()) {
    yaml += "    adaptive: " + adaptive + "\n";
  }
  return parse_config(yaml, "test.yaml");
}

// The route's sample of ratewall_route_adaptive_factor on /metrics, "" when it has none.
std::string factor_on_metrics() {
  const std::string text = process_metrics().render();
  const std::string prefix = "ratewall_route_adaptive_factor{route=\"adaptive_reload\"} ";
  const auto at = text.find(prefix);
  if (at == std::string::npos) {
    return "";
  }
  return text.substr(at + prefix.size(), text.find('\n', at) - at - prefix.size());
}

std::uint64_t headline_limit(const gateway& gw) {
  return gw.limits().try_check({0, "ip:203.0.113.9", "", "GET"})->headline.limit;
}

}  // namespace

TEST_CASE("a reload keeps the factor of a route that stays adaptive") {
  manual_clock clk;
  const std::string settings = "{ latency_target: 100ms, window: 1s }";
  auto first = std::make_shared<const gateway>(config_with(settings), clk, "k");
  const auto cell = first->adaptive(0);
  REQUIRE(cell);
  // One slow window from wherever the route's counters stand.
  const adaptive_route::status at_start = cell->read();
  CHECK(at_start.windows == 0);
  clk.advance(1s);
  upstream_totals slow;
  slow.exchanges = slow.heads = 1'000'000;
  slow.latency_ns = 1'000'000 * 500'000'000ull;
  REQUIRE(cell->tick(clk.now(), slow));
  REQUIRE(cell->factor() == 0.5);
  CHECK(headline_limit(*first) == 5);
  CHECK(factor_on_metrics() == "0.5");

  SUBCASE("the same settings: the same object, the same factor") {
    gateway next(config_with(settings), clk, "k", first.get());
    CHECK(next.adaptive(0) == cell);
    CHECK(next.limits().factor_ppm(0) == k_factor_one / 2);
    CHECK(headline_limit(next) == 5);
  }
  SUBCASE("a higher min_factor clamps it") {
    gateway next(config_with("{ latency_target: 100ms, min_factor: 0.8 }"), clk, "k", first.get());
    CHECK(next.adaptive(0) == cell);
    CHECK(cell->factor() == 0.8);
    CHECK(cell->read().cfg.window == 5s);
    CHECK(headline_limit(next) == 8);
    CHECK(factor_on_metrics() == "0.8");
  }
  SUBCASE("without adaptive: the configured limits at once; with it again: a new start at 1") {
    gateway plain(config_with(""), clk, "k", first.get());
    CHECK_FALSE(plain.adaptive(0));
    CHECK(plain.limits().factor_ppm(0) == k_factor_one);
    CHECK(headline_limit(plain) == 10);
    // The old configuration lives on (connections accepted under it), but is not listed.
    CHECK(factor_on_metrics() == "");
    gateway again(config_with(settings), clk, "k", &plain);
    CHECK(factor_on_metrics() == "1");
    REQUIRE(again.adaptive(0));
    CHECK(again.adaptive(0) != cell);
    CHECK(again.adaptive(0)->factor() == 1.0);
  }
}

TEST_CASE("an upstream that times out or is down reads as slow to a latency target") {
  // Before: a 504 added an exchange but no latency, so a window of timeouts had a mean of 0
  // (or of the few quick heads) and the factor rose while every request failed.
  manual_clock clk;
  const config cfg = parse_config(R"(upstreams:
  api: { targets: [127.0.0.1:1], response_timeout: 300ms }
routes:
  - name: adaptive_timeouts
    upstream: api
    adaptive: { latency_target: 100ms, window: 1s }
    limits:
      - { name: burst, rate: 10/s, burst: 10 }
)",
                                  "test.yaml");
  const gateway gw(cfg, clk, "k");
  route_metrics& m = process_metrics().route("adaptive_timeouts");
  for (int i = 0; i < 5; ++i) {
    m.upstream_response(200);  // quick heads
    m.upstream_latency(0ms);
  }
  for (int i = 0; i < 15; ++i) {
    m.upstream_failure(i % 3 == 0 ? 502 : 504);
  }
  clk.advance(1s);
  gw.tick_adaptive();
  const adaptive_route::status s = gw.adaptive(0)->read();
  REQUIRE(s.last);
  CHECK(s.last->exchanges == 20);
  CHECK(s.last->mean_latency == 225ms);  // 15 of 20 at the 300 ms the gateway waits
  CHECK(gw.adaptive(0)->factor() == 0.5);
}

TEST_CASE("a scaled limit still holds the route's largest cost") {
  // cost 10 against a bucket of 20 at factor 0.25 would be a bucket of 5: every request
  // "impossible", none forwarded, no window to recover by.
  manual_clock clk;
  const config cfg = parse_config(R"(upstreams:
  api: { targets: [127.0.0.1:1] }
routes:
  - name: adaptive_costly
    upstream: api
    cost: { default: 10, GET: 2 }
    adaptive: { latency_target: 100ms, window: 1s, min_factor: 0.1 }
    limits:
      - { name: tb, rate: 100/s, burst: 20 }
      - { name: fw, algorithm: fixed_window, limit: 40, window: 1m }
)",
                                  "test.yaml");
  const gateway gw(cfg, clk, "k");
  const auto cell = gw.adaptive(0);
  upstream_totals slow;
  for (int i = 1; i <= 4; ++i) {
    clk.advance(1s);
    slow.exchanges = slow.heads = 100u * i;
    slow.latency_ns = slow.heads * 500'000'000ull;
    cell->tick(clk.now(), slow);
  }
  REQUIRE(cell->factor() == doctest::Approx(0.1));
  const auto post = gw.limits().try_check({0, "ip:203.0.113.7", "", "POST"});
  REQUIRE(post);
  CHECK(post->allowed);
  CHECK_FALSE(post->headline.impossible);
  // Held at the largest cost: the bucket keeps 10 of its 20, the window 10 of its 40.
  std::vector<policy> scaled;
  const auto limits = gw.limits().effective(0, "", scaled);
  REQUIRE(limits.size() == 2);
  CHECK(limits[0].limit == 10);
  CHECK(limits[1].limit == 10);
}
