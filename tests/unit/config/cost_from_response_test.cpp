// routes[].cost_from_response: what loads, and every refusal naming file, line and key.

#include <doctest/doctest.h>

#include "config_test_support.hpp"

using namespace ratewall;
using ratewall::testing::config_error_of;

namespace {

// `extra` goes under the route (indented by 4), `limit` replaces the limit's algorithm lines.
std::string route_yaml(const std::string& extra,
                       const std::string& limit = "        rate: 100/m\n        burst: 100\n") {
  return "upstreams:\n"
         "  api:\n"
         "    targets: [127.0.0.1:8000]\n"
         "routes:\n"
         "  - name: chat\n"
         "    upstream: api\n" +
         extra +
         "    limits:\n"
         "      - name: tokens\n" +
         limit;
}

}  // namespace

TEST_CASE("cost_from_response loads a header or a JSON path, with default and max") {
  SUBCASE("a header, defaults") {
    config cfg = parse_config(route_yaml("    cost_from_response: { header: X-Tokens-Used }\n"),
                              "test.yaml");
    const auto& c = cfg.routes[0].cost_from_response;
    REQUIRE(c.has_value());
    CHECK(c->from == cost_from_response_config::source::header);
    CHECK(c->header == "X-Tokens-Used");
    CHECK(c->default_cost == 1);
    CHECK(c->max == 1000000);
  }
  SUBCASE("a JSON path, default, max and max_body") {
    config cfg = parse_config(route_yaml("    cost_from_response:\n"
                                         "      json: usage.total_tokens\n"
                                         "      default: 500\n"
                                         "      max: 100000\n"
                                         "      max_body: 64KiB\n"),
                              "test.yaml");
    const auto& c = cfg.routes[0].cost_from_response;
    REQUIRE(c.has_value());
    CHECK(c->from == cost_from_response_config::source::json);
    CHECK(c->json == std::vector<std::string>{"usage", "total_tokens"});
    CHECK(c->default_cost == 500);
    CHECK(c->max == 100000);
    CHECK(c->max_body == 64 * 1024);
  }
  SUBCASE("a route without it has none") {
    config cfg = parse_config(route_yaml(""), "test.yaml");
    CHECK_FALSE(cfg.routes[0].cost_from_response.has_value());
  }
  SUBCASE("window algorithms and a leaky bucket without delay can hold a debt") {
    const std::string from = "    cost_from_response: { header: X-Cost }\n";
    CHECK(config_error_of(route_yaml(from,
                                     "        algorithm: fixed_window\n"
                                     "        limit: 100\n        window: 1m\n")) == "loaded");
    CHECK(config_error_of(route_yaml(from,
                                     "        algorithm: sliding_window_counter\n"
                                     "        limit: 100\n        window: 1m\n")) == "loaded");
    CHECK(config_error_of(route_yaml(from,
                                     "        algorithm: leaky_bucket\n"
                                     "        rate: 10/s\n        burst: 5\n")) == "loaded");
  }
}

TEST_CASE("cost_from_response refusals name file, line and key") {
  SUBCASE("neither source, or both") {
    CHECK(config_error_of(route_yaml("    cost_from_response: { default: 5 }\n")) ==
          "test.yaml:7: routes[0].cost_from_response: set exactly one of header (a response "
          "header) and json (a field of a JSON body)");
    CHECK(config_error_of(route_yaml("    cost_from_response: { header: X-A, json: a.b }\n")) ==
          "test.yaml:7: routes[0].cost_from_response: set exactly one of header (a response "
          "header) and json (a field of a JSON body)");
  }
  SUBCASE("an unknown key") {
    CHECK(config_error_of(route_yaml("    cost_from_response:\n"
                                     "      header: X-A\n"
                                     "      trailer: X-B\n")) ==
          "test.yaml:9: routes[0].cost_from_response.trailer: unknown key (expected one of: "
          "header, json, default, max, max_body)");
  }
  SUBCASE("a header name that is not a token") {
    CHECK(config_error_of(route_yaml("    cost_from_response: { header: \"X Tokens\" }\n"))
              .starts_with("test.yaml:7: routes[0].cost_from_response.header: "));
  }
  SUBCASE("malformed JSON paths") {
    for (const char* path : {"\".usage\"", "\"usage.\"", "\"usage..total\"", "\".\""}) {
      CAPTURE(path);
      const std::string err = config_error_of(
          route_yaml(std::string("    cost_from_response: { json: ") + path + " }\n"));
      CHECK(err.starts_with("test.yaml:7: routes[0].cost_from_response.json: \""));
      CHECK(err.ends_with("\": expected keys joined by '.', like usage.total_tokens"));
    }
    CHECK(config_error_of(route_yaml("    cost_from_response: { json: \"\" }\n")) ==
          "test.yaml:7: routes[0].cost_from_response.json: must not be empty");
    CHECK(config_error_of(route_yaml(
              "    cost_from_response: { json: a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q }\n")) ==
          "test.yaml:7: routes[0].cost_from_response.json: at most 16 keys");
  }
  SUBCASE("default above max, max zero or beyond the bound") {
    CHECK(config_error_of(route_yaml("    cost_from_response:\n"
                                     "      header: X-A\n"
                                     "      max: 10\n"
                                     "      default: 11\n")) ==
          "test.yaml:10: routes[0].cost_from_response.default: default 11 is above max 10");
    CHECK(config_error_of(route_yaml("    cost_from_response: { header: X-A, max: 0 }\n")) ==
          "test.yaml:7: routes[0].cost_from_response.max: must be at least 1");
    CHECK(config_error_of(
              route_yaml("    cost_from_response: { header: X-A, max: 1000000000001 }\n")) ==
          "test.yaml:7: routes[0].cost_from_response.max: must be at most 1000000000000");
  }
  SUBCASE("max_body is for a JSON source, and bounded") {
    CHECK(
        config_error_of(route_yaml("    cost_from_response: { header: X-A, max_body: 1KiB }\n")) ==
        "test.yaml:7: routes[0].cost_from_response.max_body: only for json (a header needs "
        "no body)");
    CHECK(config_error_of(route_yaml("    cost_from_response: { json: a, max_body: 17MiB }\n")) ==
          "test.yaml:7: routes[0].cost_from_response.max_body: at most 16MiB (the body is kept "
          "in memory until it ends)");
  }
  SUBCASE("a static cost as well is ambiguous") {
    CHECK(config_error_of(route_yaml("    cost: 2\n"
                                     "    cost_from_response: { header: X-A }\n")) ==
          "test.yaml:8: routes[0].cost_from_response: cost and cost_from_response cannot both "
          "be set (the response's cost is charged; cost_from_response.default when it reports "
          "none)");
    CHECK(config_error_of(route_yaml("    cost: { default: 1, POST: 5 }\n"
                                     "    cost_from_response: { header: X-A }\n"))
              .starts_with("test.yaml:8: routes[0].cost_from_response: cost and "));
  }
  SUBCASE("limits that cannot hold a debt") {
    const std::string from = "    cost_from_response: { header: X-A }\n";
    CHECK(config_error_of(route_yaml(from,
                                     "        algorithm: sliding_window_log\n"
                                     "        limit: 100\n        window: 1m\n")) ==
          "test.yaml:7: routes[0].cost_from_response: limit \"tokens\": a sliding_window_log "
          "keeps one timestamp per unit and cannot hold a debt (use sliding_window_counter)");
    CHECK(config_error_of(route_yaml(from,
                                     "        algorithm: concurrency\n"
                                     "        limit: 10\n")) ==
          "test.yaml:7: routes[0].cost_from_response: limit \"tokens\": a concurrency limit "
          "counts requests in flight, not costs");
    CHECK(config_error_of(route_yaml(from,
                                     "        algorithm: leaky_bucket\n"
                                     "        rate: 10/s\n        burst: 5\n"
                                     "        delay: true\n")) ==
          "test.yaml:7: routes[0].cost_from_response: limit \"tokens\": a leaky bucket with "
          "delay holds a request for its cost, unknown until the response");
  }
}
