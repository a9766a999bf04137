#include "ratewall/admin/metrics.hpp"

#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "exposition_parser.hpp"

using namespace ratewall;
using namespace std::chrono_literals;
using ratewall::testing::parse_exposition;

namespace {

config with_routes(std::initializer_list<const char*> names) {
  config cfg;
  for (const char* n : names) {
    route_config r;
    r.name = n;
    cfg.routes.push_back(r);
  }
  return cfg;
}

limit_config named_limit(const char* name) {
  limit_config l;
  l.name = name;
  return l;
}

// Plans free and premium; route "search" with limits burst and daily, route "default" with one.
config with_plans_and_limits() {
  config cfg = with_routes({"search", "default"});
  cfg.plans = {"premium", "free"};
  cfg.routes[0].limits = {named_limit("burst"), named_limit("daily")};
  cfg.routes[1].limits = {named_limit("default")};
  return cfg;
}

// The value of ratewall_requests_total with these labels, as render() writes them in order.
std::string requests(const char* route, const char* plan, const char* decision,
                     const char* limit = nullptr) {
  std::string s = std::string("ratewall_requests_total{route=\"") + route + "\",plan=\"" + plan;
  if (limit != nullptr) {
    s += std::string("\",limit=\"") + limit;
  }
  return s + "\",decision=\"" + decision + "\"}";
}

}  // namespace

TEST_CASE("an empty registry renders valid exposition text") {
  metrics_registry reg;
  std::string text = reg.render();
  auto ex = parse_exposition(text);
  INFO(text);
  CHECK_MESSAGE(ex.ok, ex.error);
  CHECK(ex.types["ratewall_requests_total"] == "counter");
  CHECK(ex.types["ratewall_upstream_latency_seconds"] == "histogram");
  CHECK(ex.types["ratewall_decision_latency_seconds"] == "histogram");
  CHECK(ex.types["ratewall_open_connections"] == "gauge");
  CHECK(ex.value(R"m(ratewall_requests_total{route="(none)",decision="no_route"})m") == 0);
  CHECK(ex.value(R"m(ratewall_decision_latency_seconds_bucket{le="+Inf"})m") == 0);
}

TEST_CASE("counters move as requests are counted") {
  metrics_registry reg;
  const config cfg = with_plans_and_limits();
  auto slots = reg.routes_for(cfg);
  REQUIRE(slots.size() == 2);
  const decision_metrics decisions(reg, cfg);
  decisions.of(0, "")[0]->count(request_decision::allowed);
  decisions.of(0, "")[0]->count(request_decision::allowed);
  decisions.of(0, "")[1]->count(request_decision::denied);
  decisions.of(1, "")[1]->count(request_decision::shadow_denied);
  reg.unrouted().count(request_decision::no_route);
  slots[0]->upstream_response(200);
  slots[0]->upstream_response(204);
  slots[0]->upstream_response(503);
  slots[0]->upstream_response(99);  // not a status: ignored
  slots[0]->upstream_failure(502);
  slots[0]->upstream_failure(504);
  slots[0]->upstream_failure(504);
  slots[0]->upstream_failure(500);  // not a gateway failure: ignored
  reg.connection_opened();
  reg.connection_opened();
  reg.connection_closed();
  reg.count_reload(true);
  reg.count_reload(false);
  reg.count_reload(false);

  auto ex = parse_exposition(reg.render());
  REQUIRE_MESSAGE(ex.ok, ex.error);
  CHECK(ex.value(requests("search", "default", "allowed")) == 2);
  CHECK(ex.value(requests("search", "default", "denied", "burst")) == 1);
  CHECK(ex.value(requests("search", "default", "error")) == 0);
  CHECK(ex.value(requests("default", "default", "shadow_denied", "default")) == 1);
  CHECK(ex.value(R"m(ratewall_requests_total{route="(none)",decision="no_route"})m") == 1);
  CHECK(ex.value(R"m(ratewall_upstream_responses_total{route="search",class="2xx"})m") == 2);
  CHECK(ex.value(R"m(ratewall_upstream_responses_total{route="search",class="5xx"})m") == 1);
  CHECK(ex.value(R"m(ratewall_upstream_responses_total{route="search",class="1xx"})m") == 0);
  CHECK(ex.value(R"m(ratewall_upstream_failures_total{route="search",status="502"})m") == 1);
  CHECK(ex.value(R"m(ratewall_upstream_failures_total{route="search",status="504"})m") == 2);
  CHECK(ex.value("ratewall_open_connections") == 1);
  CHECK(ex.value(R"m(ratewall_config_reloads_total{result="ok"})m") == 1);
  CHECK(ex.value(R"m(ratewall_config_reloads_total{result="error"})m") == 2);
}

TEST_CASE("a route keeps its counters across a reload by name") {
  metrics_registry reg;
  auto before = reg.routes_for(with_routes({"search", "old"}));
  before[0]->upstream_response(200);
  auto after = reg.routes_for(with_routes({"new", "search"}));
  CHECK(after[1] == before[0]);
  CHECK(after[1]->upstream_responses(2) == 1);
  CHECK(after[0] != before[1]);
  CHECK(after[0]->name() == "new");
}

TEST_CASE("decisions keep their counters across a reload by route, plan and limit name") {
  metrics_registry reg;
  config first = with_plans_and_limits();
  first.routes[1].name = "old";
  const decision_metrics before(reg, first);
  before.of(0, "premium")[2]->count(request_decision::denied);  // search, daily

  config second = with_plans_and_limits();
  second.routes = {second.routes[1], second.routes[0]};  // "default", then "search"
  second.routes[1].limits = {named_limit("daily"), named_limit("hourly")};
  second.plans = {"premium"};
  const decision_metrics after(reg, second);
  CHECK(after.of(1, "premium")[1] == before.of(0, "premium")[2]);
  CHECK(after.of(1, "premium")[1]->requests(request_decision::denied) == 1);
  CHECK(after.of(1, "free")[0] == before.of(0, "")[0]);  // free is no longer declared: default
  // A request in flight on the old configuration may still count into what was removed.
  before.of(1, "free")[1]->count(request_decision::denied);
  before.of(0, "free")[1]->count(request_decision::shadow_denied);
  auto ex = parse_exposition(reg.render());
  REQUIRE_MESSAGE(ex.ok, ex.error);
  CHECK(ex.value(requests("search", "premium", "denied", "daily")) == 1);
  CHECK(ex.value(requests("old", "free", "denied", "default")) == 1);
  CHECK(ex.value(requests("search", "free", "shadow_denied", "burst")) == 1);
  CHECK(ex.value(requests("search", "premium", "denied", "hourly")) == 0);
  CHECK(ex.value(requests("default", "default", "allowed")) == 0);
}

TEST_CASE("plan and limit labels come from the configuration, never from a request") {
  metrics_registry reg;
  const config cfg = with_plans_and_limits();
  const decision_metrics decisions(reg, cfg);
  // A plan that is not declared (a made-up claim, say) counts as the default plan.
  CHECK(decisions.of(0, "made-up")[0] == decisions.of(0, "")[0]);
  CHECK(decisions.of(0, "Premium")[0] == decisions.of(0, "")[0]);
  CHECK(decisions.of(0, "premium")[0] != decisions.of(0, "")[0]);
  CHECK(decisions.of(0, "premium").size() == 3);  // no limit label, burst, daily
  CHECK(decisions.of(1, "free").size() == 2);
  decisions.of(0, "made-up")[0]->count(request_decision::allowed);
  decisions.of(0, "free")[2]->count(request_decision::denied);

  const std::string text = reg.render();
  auto ex = parse_exposition(text);
  REQUIRE_MESSAGE(ex.ok, ex.error);
  CHECK(ex.value(requests("search", "default", "allowed")) == 1);
  CHECK(ex.value(requests("search", "free", "denied", "daily")) == 1);
  // Every series: (none) x 2; per route and plan, allowed, rejected and error without a limit,
  // denied and shadow_denied per limit: 3 plans x ((3 + 2 x 2) + (3 + 2 x 1)).
  std::size_t series = 0;
  for (const auto& [name, value] : ex.samples) {
    if (!name.starts_with("ratewall_requests_total")) {
      continue;
    }
    ++series;
    CHECK(name.find("made-up") == std::string::npos);
  }
  CHECK(series == 2 + 3 * ((3 + 2 * 2) + (3 + 2 * 1)));
  CHECK_FALSE(ex.has(requests("search", "default", "denied")));  // a denial names its limit
  CHECK_FALSE(ex.has(requests("search", "default", "allowed", "burst")));
}

TEST_CASE("a limit without a name (a configuration built in code) is labelled by its index") {
  metrics_registry reg;
  config cfg = with_routes({"api"});
  cfg.routes[0].limits = {named_limit("burst"), named_limit("")};
  const decision_metrics decisions(reg, cfg);
  decisions.of(0, "")[2]->count(request_decision::denied);
  auto ex = parse_exposition(reg.render());
  REQUIRE_MESSAGE(ex.ok, ex.error);
  CHECK(ex.value(requests("api", "default", "denied", "1")) == 1);
}

TEST_CASE("a declared plan named default shares the series of clients without a plan") {
  metrics_registry reg;
  config cfg = with_plans_and_limits();
  cfg.plans.push_back("default");
  const decision_metrics decisions(reg, cfg);
  CHECK(decisions.of(0, "default")[0] == decisions.of(0, "")[0]);
  auto ex = parse_exposition(reg.render());
  CHECK_MESSAGE(ex.ok, ex.error);  // a series written twice would not parse
}

TEST_CASE("histograms: inclusive upper bounds, cumulative buckets, exact sum in seconds") {
  metrics_registry reg;
  route_metrics& r = reg.route("api");
  r.upstream_latency(1ms);     // exactly on the first bound: le="0.001"
  r.upstream_latency(1001us);  // just above: le="0.002"
  r.upstream_latency(40ms);    // le="0.05"
  r.upstream_latency(60s);     // above every bound: +Inf only
  r.upstream_latency(-5ms);    // a clock step backwards counts as 0
  reg.observe_decision(7us);
  reg.observe_decision(2us);

  auto ex = parse_exposition(reg.render());
  REQUIRE_MESSAGE(ex.ok, ex.error);
  auto bucket = [&](const char* le) {
    return ex.value(std::string(R"m(ratewall_upstream_latency_seconds_bucket{route="api",le=")m") +
                    le + "\"}");
  };
  CHECK(bucket("0.001") == 2);
  CHECK(bucket("0.002") == 3);
  CHECK(bucket("0.025") == 3);
  CHECK(bucket("0.05") == 4);
  CHECK(bucket("30") == 4);
  CHECK(bucket("+Inf") == 5);
  CHECK(ex.value(R"m(ratewall_upstream_latency_seconds_count{route="api"})m") == 5);
  CHECK(ex.value(R"m(ratewall_upstream_latency_seconds_sum{route="api"})m") ==
        doctest::Approx(60.042001));
  CHECK(ex.value(R"m(ratewall_decision_latency_seconds_bucket{le="0.000005"})m") == 1);
  CHECK(ex.value(R"m(ratewall_decision_latency_seconds_bucket{le="0.00001"})m") == 2);
  CHECK(ex.value("ratewall_decision_latency_seconds_sum") == doctest::Approx(0.000009));
  // The sum is printed exactly, without floating-point noise.
  CHECK(reg.render().find("ratewall_decision_latency_seconds_sum 0.000009\n") != std::string::npos);
}

TEST_CASE("providers add families; label values and help text are escaped") {
  metrics_registry reg;
  int calls = 0;
  {
    auto handle = reg.add_provider([&](metric_writer& w) {
      ++calls;
      w.family("ratewall_store_calls_total", "Store calls.\nBy \\ result.", metric_type::counter);
      w.sample({{"result", "ok"}}, std::uint64_t{7});
      w.sample({{"result", "a \"quoted\"\nback\\slash"}}, std::uint64_t{1});
      w.gauge("ratewall_tracked_subjects", "Subjects with state.", 42.0);
      w.gauge("ratewall_fraction", "A fraction.", 0.25);
      // Refused so that the output still parses: a bad name, a family written twice, a bad
      // label name.
      w.gauge("bad name", "x", 1.0);
      w.gauge("ratewall_tracked_subjects", "again", 1.0);
      w.family("ratewall_labels", "x", metric_type::gauge);
      w.sample({{"0bad", "x"}}, 1.0);
      w.sample({{"__reserved", "x"}}, 1.0);
    });
    std::string text = reg.render();
    auto ex = parse_exposition(text);
    INFO(text);
    REQUIRE_MESSAGE(ex.ok, ex.error);
    CHECK(calls == 1);
    CHECK(ex.value(R"m(ratewall_store_calls_total{result="ok"})m") == 7);
    CHECK(ex.value("ratewall_store_calls_total{result=\"a \"quoted\"\nback\\slash\"}") == 1);
    CHECK(text.find(R"m(result="a \"quoted\"\nback\\slash")m") != std::string::npos);
    CHECK(text.find("# HELP ratewall_store_calls_total Store calls.\\nBy \\\\ result.\n") !=
          std::string::npos);
    CHECK(ex.value("ratewall_tracked_subjects") == 42);
    CHECK(ex.value("ratewall_fraction") == 0.25);
    CHECK(text.find("bad name") == std::string::npos);
    CHECK(text.find("again") == std::string::npos);
    CHECK(text.find("0bad") == std::string::npos);
  }
  // The handle is gone: the provider is no longer called.
  reg.render();
  CHECK(calls == 1);
}

TEST_CASE("special float values") {
  metrics_registry reg;
  auto handle = reg.add_provider([](metric_writer& w) {
    w.gauge("a", "", std::numeric_limits<double>::infinity());
    w.gauge("b", "", -std::numeric_limits<double>::infinity());
    w.gauge("c", "", std::nan(""));
    w.gauge("d", "", 1e21);
    w.gauge("e", "", -3.0);
  });
  std::string text = reg.render();
  auto ex = parse_exposition(text);
  REQUIRE_MESSAGE(ex.ok, ex.error);
  CHECK(text.find("\na +Inf\n") != std::string::npos);
  CHECK(text.find("\nb -Inf\n") != std::string::npos);
  CHECK(text.find("\nc NaN\n") != std::string::npos);
  CHECK(ex.value("d") == 1e21);
  CHECK(ex.value("e") == -3);
}

TEST_CASE("counting from many threads loses nothing") {
  metrics_registry reg;
  route_metrics& r = reg.route("busy");
  decision_counters& d = reg.decisions("busy", "default", "");
  constexpr int k_threads = 8;
  constexpr int k_each = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < k_each; ++i) {
        d.count(request_decision::allowed);
        r.upstream_latency(3ms);
        reg.connection_opened();
        reg.connection_closed();
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  CHECK(d.requests(request_decision::allowed) == k_threads * k_each);
  CHECK(r.latency().bucket(2) == k_threads * k_each);  // le="0.005"
  CHECK(reg.open_connections() == 0);
}

TEST_CASE("the parser used here rejects what Prometheus would") {
  using ratewall::testing::parse_exposition;
  CHECK(parse_exposition("# TYPE a counter\na 1\n").ok);
  CHECK_FALSE(parse_exposition("a 1\n").ok);                               // no TYPE
  CHECK_FALSE(parse_exposition("# TYPE a counter\na{b=\"x} 1\n").ok);      // unterminated
  CHECK_FALSE(parse_exposition("# TYPE a counter\na{b=\"\\x\"} 1\n").ok);  // bad escape
  CHECK_FALSE(parse_exposition("# TYPE a counter\na one\n").ok);           // bad value
  CHECK_FALSE(parse_exposition("# TYPE a counter\na 1").ok);               // no final newline
  CHECK_FALSE(parse_exposition("# TYPE a counter\n# TYPE b gauge\nb 1\na 1\n").ok);  // split
  CHECK_FALSE(parse_exposition("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
                               "h_sum 1\nh_count 1\n")
                  .ok);  // not cumulative
  CHECK_FALSE(parse_exposition("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n")
                  .ok);  // +Inf != count
  CHECK_FALSE(parse_exposition("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n")
                  .ok);  // no +Inf
}
