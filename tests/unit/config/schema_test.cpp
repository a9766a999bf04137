// Defaults and the meaning of each key, on small configs.

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "config_test_support.hpp"
#include "ratewall/core/hash.hpp"

using namespace ratewall;
using namespace std::chrono_literals;

namespace {

constexpr const char* k_minimal = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: all
    upstream: api
)";

config load(const std::string& yaml) {
  return parse_config(yaml, "test.yaml");
}

// k_minimal with `fields` added to its only route.
config load_route(const std::string& fields) {
  return load(std::string(k_minimal) + "    " + fields + "\n");
}

}  // namespace

TEST_CASE("a minimal config: one upstream, one route, everything else defaulted") {
  config c = load(k_minimal);
  CHECK(c.source == "test.yaml");
  CHECK(c.server.listen.host == "0.0.0.0");
  CHECK(c.server.listen.port == 8080);
  CHECK(c.server.threads == std::max(1u, std::thread::hardware_concurrency()));
  CHECK(c.server.body_timeout == 60s);
  CHECK(c.server.drain_timeout == 10s);
  CHECK(c.admin.listen.host == "127.0.0.1");
  CHECK(c.identity.unknown_api_key == unknown_key_policy::ip);
  CHECK(c.identity.ipv6_prefix == 64);
  CHECK(c.identity.trusted_proxies.empty());
  CHECK(c.store.type == store_type::memory);
  CHECK(c.store.redis.instances == 1);
  CHECK(c.upstreams[0].max_idle == 64);
  CHECK(c.plans.empty());
  CHECK(c.api_keys.empty());
  REQUIRE(c.routes.size() == 1);
  const route_config& r = c.routes[0];
  CHECK(r.match.path_prefix == "/");  // no match: every path
  CHECK(r.match.methods.empty());
  CHECK(r.match.host.empty());
  CHECK(r.identify_by.size() == 3);
  CHECK(r.cost == 1);
  CHECK(r.method_cost.empty());
  CHECK(r.limits.empty());  // a route without limits is proxied unlimited
  CHECK_FALSE(r.shadow);
}

TEST_CASE("server keys beyond the reference") {
  config c = load(std::string(k_minimal) + R"(server:
  listen: "[::1]:0"
  threads: 3
  max_header_bytes: 8KiB
  body_timeout: 250ms
  drain_timeout: 0s
)");
  CHECK(c.server.listen.host == "::1");
  CHECK(c.server.listen.port == 0);  // an ephemeral port: tests bind this way
  CHECK(c.server.threads == 3);
  CHECK(c.server.max_header_bytes == 8192);
  CHECK(c.server.body_timeout == 250ms);
  CHECK(c.server.drain_timeout == 0s);  // 0 = stop without draining
}

TEST_CASE("identity, store and upstream keys beyond the reference") {
  config c = load(std::string(k_minimal) + R"(identity:
  trusted_proxies: [fd00::/8, 192.168.0.0/16]
  unknown_api_key: reject
  ipv6_prefix: 56
store:
  type: redis
  redis: { url: "redis://redis:6379", cluster: true, timeout: 20ms, on_error: local,
           instances: 3 }
)");
  CHECK(c.identity.trusted_proxies[0].prefix == 8);
  CHECK(c.identity.trusted_proxies[1].prefix == 112);
  CHECK(c.identity.unknown_api_key == unknown_key_policy::reject);
  CHECK(c.identity.ipv6_prefix == 56);
  CHECK(c.store.type == store_type::redis);
  CHECK(c.store.redis.url == "redis://redis:6379");
  CHECK(c.store.redis.cluster);
  CHECK(c.store.redis.timeout == 20ms);
  CHECK(c.store.redis.on_error == store_failure::local);
  CHECK(c.store.redis.instances == 3);
}

TEST_CASE("bounds on what clients can make the gateway hold (issue 11)") {
  SUBCASE("defaults") {
    config c = load(k_minimal);
    CHECK(c.server.request_buffer_bytes == 1024 * 1024);
    CHECK(c.routes[0].request_buffering);
    CHECK(c.upstreams[0].max_connections == 0);
    CHECK(c.upstreams[0].queue_timeout == 1s);
    CHECK(c.store.on_full == store_full::deny);
    CHECK(c.admin.allowed_hosts.empty());
    CHECK(c.admin.header_timeout == 5s);
    CHECK(c.admin.max_connections == 64);
  }
  SUBCASE("set") {
    config c = load(R"(server: { request_buffer_bytes: 0 }
admin: { allowed_hosts: [Gateway.Internal, "[fd00::1]"], header_timeout: 2s, max_connections: 8 }
store: { on_full: allow }
upstreams:
  api: { targets: [127.0.0.1:8000], max_connections: 32, queue_timeout: 0s }
routes:
  - { name: all, upstream: api, request_buffering: false }
)");
    CHECK(c.server.request_buffer_bytes == 0);  // every body streams
    CHECK(c.routes[0].request_buffering == false);
    CHECK(c.upstreams[0].max_connections == 32);
    CHECK(c.upstreams[0].queue_timeout == 0s);  // no wait: 503 at once
    CHECK(c.store.on_full == store_full::allow);
    CHECK(c.admin.allowed_hosts == std::vector<std::string>{"gateway.internal", "[fd00::1]"});
    CHECK(c.admin.header_timeout == 2s);
    CHECK(c.admin.max_connections == 8);
  }
  SUBCASE("errors name the key") {
    CHECK(ratewall::testing::config_error_of(std::string(k_minimal) +
                                             "admin: { allowed_hosts: [\"http://a\"] }\n")
              .find("admin.allowed_hosts[0]: \"http://a\" is not a host name") !=
          std::string::npos);
    CHECK(ratewall::testing::config_error_of(std::string(k_minimal) + "store: { on_full: drop }\n")
              .find("store.on_full") != std::string::npos);
    CHECK(ratewall::testing::config_error_of(std::string(k_minimal) +
                                             "admin: { max_connections: 0 }\n")
              .find("admin.max_connections") != std::string::npos);
  }
}

TEST_CASE("admin.top_window: 10m by default, from 1s to 24h") {
  const auto with_window = [](std::string_view value) {
    return std::string(k_minimal) + "admin:\n  top_window: " + std::string(value) + "\n";
  };
  CHECK(load(k_minimal).admin.top_window == 10min);
  CHECK(load(with_window("1s")).admin.top_window == 1s);
  CHECK(load(with_window("1500ms")).admin.top_window == 1500ms);
  CHECK(load(with_window("24h")).admin.top_window == 24h);
  const std::pair<std::string_view, std::string_view> bad[] = {
      {"999ms", "must be at least 1s"},
      {"25h", "must be at most 24h"},
      {"0s", "must be greater than 0"},
      {"10",
       R"(expected a duration like "250ms", "1s", "1m", "1h" or "1d" (the unit is required))"},
  };
  for (const auto& [value, error] : bad) {
    CAPTURE(value);
    CHECK(ratewall::testing::config_error_of(with_window(value)) ==
          "test.yaml:7: admin.top_window: " + std::string(error));
  }
}

TEST_CASE("upstreams keep file order") {
  config c = load(R"(upstreams:
  zeta: { targets: ["[::1]:81", backend.internal:82], max_idle: 0 }
  alpha: { targets: [127.0.0.1:83], connect_timeout: 250ms, response_timeout: 2m }
routes:
  - { name: r, upstream: alpha }
)");
  REQUIRE(c.upstreams.size() == 2);
  CHECK(c.upstreams[0].name == "zeta");
  CHECK(c.upstreams[0].targets[0].host == "::1");
  CHECK(c.upstreams[0].targets[1].host == "backend.internal");
  CHECK(c.upstreams[0].default_host == "[::1]:81");
  CHECK(c.upstreams[0].max_idle == 0);
  CHECK(c.upstreams[1].name == "alpha");
  CHECK(c.upstreams[1].connect_timeout == 250ms);
  CHECK(c.upstreams[1].response_timeout == 120s);
}

TEST_CASE("route match: exact, prefix or regex; methods upper-cased; host lower-cased") {
  SUBCASE("exact") {
    config c = load_route("match: { path_exact: /login, methods: [post, Get] }");
    CHECK(c.routes[0].match.path_exact == "/login");
    CHECK(c.routes[0].match.path_prefix.empty());
    CHECK(c.routes[0].match.methods == std::vector<std::string>{"POST", "GET"});
  }
  SUBCASE("regex") {
    config c = load_route(R"(match: { path_regex: "^/v[0-9]+/items$" })");
    CHECK(c.routes[0].match.path_regex == "^/v[0-9]+/items$");
    CHECK(c.routes[0].match.path_prefix.empty());
  }
  SUBCASE("methods only: the path defaults to prefix /") {
    config c = load_route("match: { methods: [GET], host: API.Example.com }");
    CHECK(c.routes[0].match.path_prefix == "/");
    CHECK(c.routes[0].match.host == "api.example.com");
  }
}

TEST_CASE("cost: one number, or per method with a default") {
  SUBCASE("a number") {
    config c = load_route("cost: 3");
    CHECK(c.routes[0].cost == 3);
    CHECK(c.routes[0].method_cost.empty());
  }
  SUBCASE("per method") {
    config c = load_route("cost: { default: 2, post: 5, DELETE: 7 }");
    CHECK(c.routes[0].cost == 2);
    CHECK(c.routes[0].method_cost ==
          std::map<std::string, std::uint64_t>{{"POST", 5}, {"DELETE", 7}});
  }
  SUBCASE("per method without default: the rest cost 1") {
    config c = load_route("cost: { POST: 5 }");
    CHECK(c.routes[0].cost == 1);
    CHECK(c.routes[0].method_cost.at("POST") == 5);
  }
}

TEST_CASE("limit defaults per algorithm") {
  SUBCASE("token_bucket is the default algorithm; burst defaults to the rate's count") {
    config c = load_route("limits: [{ name: l, rate: 7/m }]");
    const limit_config& l = c.routes[0].limits[0];
    CHECK(l.algo == algorithm::token_bucket);
    CHECK(l.rate.count == 7);
    CHECK(l.rate.period == 60s);
    CHECK(l.burst == 7);
    CHECK_FALSE(l.delay);
    CHECK_FALSE(l.shadow);
    CHECK_FALSE(l.on_store_error.has_value());
  }
  SUBCASE("leaky_bucket: burst defaults to 0, delay allowed") {
    config c =
        load_route("limits: [{ name: l, algorithm: leaky_bucket, rate: 5/60s, delay: true }]");
    const limit_config& l = c.routes[0].limits[0];
    CHECK(l.algo == algorithm::leaky_bucket);
    CHECK(l.rate.period == 60s);
    CHECK(l.burst == 0);
    CHECK(l.delay);
  }
  SUBCASE("window algorithms") {
    for (const char* name : {"fixed_window", "sliding_window_log", "sliding_window_counter"}) {
      CAPTURE(name);
      config c = load_route(std::string("limits: [{ name: l, algorithm: ") + name +
                            ", limit: 100, window: 1h }]");
      CHECK(c.routes[0].limits[0].limit == 100);
      CHECK(c.routes[0].limits[0].window == 1h);
    }
  }
  SUBCASE("concurrency, shadow and on_store_error") {
    config c = load_route(
        "limits: [{ name: l, algorithm: concurrency, limit: 4, shadow: true, "
        "on_store_error: deny }]");
    const limit_config& l = c.routes[0].limits[0];
    CHECK(l.algo == algorithm::concurrency);
    CHECK(l.limit == 4);
    CHECK(l.shadow);
    CHECK(l.on_store_error == store_failure::deny);
  }
}

TEST_CASE("per-plan overrides: unset fields keep the limit's value") {
  const std::string plans = "plans: { free: {}, pro: {} }\n";
  SUBCASE("an explicit burst is kept when only the rate is overridden") {
    config c =
        load(plans + k_minimal +
             "    limits: [{ name: l, rate: 10/s, burst: 30, plans: { pro: { rate: 100/s } } }]\n");
    const limit_override& pro = c.routes[0].limits[0].plans.at("pro");
    CHECK(pro.rate->count == 100);
    CHECK_FALSE(pro.burst.has_value());
  }
  SUBCASE("a defaulted burst follows the plan's rate") {
    config c = load(plans + k_minimal +
                    "    limits: [{ name: l, rate: 10/s, plans: { pro: { rate: 100/s } } }]\n");
    CHECK(c.routes[0].limits[0].burst == 10);
    CHECK(c.routes[0].limits[0].plans.at("pro").burst == std::optional<std::uint64_t>(100));
  }
  SUBCASE("window overrides, and an empty override") {
    config c = load(plans + k_minimal +
                    "    limits: [{ name: l, algorithm: fixed_window, limit: 10, window: 1m,\n"
                    "               plans: { pro: { limit: 1000, window: 1h }, free: {} } }]\n");
    const limit_config& l = c.routes[0].limits[0];
    CHECK(l.plans.at("pro").limit == std::optional<std::uint64_t>(1000));
    CHECK(l.plans.at("pro").window == std::optional<nanos>(1h));
    CHECK_FALSE(l.plans.at("free").limit.has_value());
  }
}

TEST_CASE("api keys: raw keys are hashed, hashes accepted in either case") {
  config c = load(std::string(k_minimal) + R"(plans:
  gold:
api_keys:
  - { key: s3cret, plan: gold }
  - { key_sha256: FCDE2B2EDBA56BF408601FB721FE9B5C338D10EE429EA04FAE5511B68FBF8FB9, plan: gold }
)");
  CHECK(c.plans == std::vector<std::string>{"gold"});  // `gold:` with nothing = no settings
  REQUIRE(c.api_keys.size() == 2);
  CHECK(c.api_keys[0].sha256 == sha256("s3cret"));
  CHECK(c.api_keys[1].sha256 == sha256("bar"));
}

TEST_CASE("sections may come in any order") {
  config c = load(R"(routes:
  - { name: r, upstream: api, limits: [{ name: l, rate: 1/s, plans: { p: { rate: 2/s } } }] }
plans: { p: {} }
upstreams:
  api: { targets: [127.0.0.1:8000] }
)");
  CHECK(c.routes[0].limits[0].plans.count("p") == 1);
}

TEST_CASE("anchors and aliases work as YAML says") {
  config c = load(R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: a
    upstream: api
    limits: &shared
      - { name: l, rate: 10/s }
  - name: b
    upstream: api
    limits: *shared
)");
  CHECK(c.routes[1].limits[0].rate.count == 10);
}

TEST_CASE("warnings: a path_regex anchored at one end only, a trusted proxy that is everyone") {
  // Valid, loaded, and most likely not what was meant: each names file, line and key.
  CHECK(load(k_minimal).warnings.empty());
  const config prefix_like = load_route(R"(match: { path_regex: "^/api/v[0-9]+/" })");
  REQUIRE(prefix_like.warnings.size() == 1);
  CHECK(prefix_like.warnings[0].rfind("test.yaml:6: routes[0].match.path_regex: \"^/api/v[0-9]+/\" "
                                      "must match the whole path, not a part of it: add \".*\" at "
                                      "its end",
                                      0) == 0);
  const config suffix_like = load_route(R"(match: { path_regex: "/login$" })");
  REQUIRE(suffix_like.warnings.size() == 1);
  CHECK(suffix_like.warnings[0].find("add \".*\" at its start") != std::string::npos);
  const config escaped_dollar = load_route(R"(match: { path_regex: "^/a\\$" })");
  CHECK(escaped_dollar.warnings.size() == 1);  // a literal '$': anchored at its start only
  for (const char* meant : {"^/api/v[0-9]+/.*", "^/x$", "/api/v[0-9]+/.*", ".*/login", "^/api/.+",
                            "^/api(/.*)?", "/a\\\\$"}) {
    CAPTURE(meant);
    CHECK(load_route(std::string("match: { path_regex: \"") + meant + "\" }").warnings.empty());
  }
  for (const char* everyone : {"0.0.0.0/0", "::/0", "::/8", "::/80", "0.0.0.0/1", "2000::/3"}) {
    CAPTURE(everyone);
    const config c = load(std::string("identity:\n  trusted_proxies: [10.0.0.0/8, ") + everyone +
                          "]\n" + k_minimal);
    REQUIRE(c.warnings.size() == 1);
    CHECK(c.warnings[0].rfind("test.yaml:2: identity.trusted_proxies[1]: trusts every address",
                              0) == 0);
    CHECK(c.warnings[0].find("X-User-ID") != std::string::npos);
  }
  CHECK(load(std::string("identity:\n  trusted_proxies: [10.0.0.0/8, 172.16.0.0/12, fd00::/8]\n") +
             k_minimal)
            .warnings.empty());
}

TEST_CASE("identity.user_header: a standard request field is refused, in either spelling") {
  // The user header reaches the upstream from trusted proxies alone: a field such as
  // Authorization would be dropped from every other client's request.
  for (const char* field : {"Authorization", "cookie", "Content_Type", "Host", "X-Forwarded-For"}) {
    CAPTURE(field);
    const std::string error = ratewall::testing::config_error_of(
        std::string("identity:\n  user_header: ") + field + "\n" + k_minimal);
    CHECK(error == std::string("test.yaml:2: identity.user_header: \"") + field +
                       "\" is a standard request field: the user header reaches the upstream "
                       "from trusted proxies alone, so every other client's would be dropped; "
                       "name a field of your own (X-User-ID)");
  }
  // Nor a field the gateway keeps for a role of its own, said as such (it said "standard").
  for (const char* field : {"X-Host", "SCRIPT_NAME", "X-Client-IP", "X-Original-URL"}) {
    CAPTURE(field);
    CHECK(ratewall::testing::config_error_of(std::string("identity:\n  user_header: ") + field +
                                             "\n" + k_minimal) ==
          std::string("test.yaml:2: identity.user_header: \"") + field +
              "\" is a field the gateway reads, writes or drops for its own purpose: the user "
              "header reaches the upstream from trusted proxies alone, so every other client's "
              "would be dropped; name a field of your own (X-User-ID)");
  }
  CHECK(load(std::string("identity:\n  user_header: X-Authenticated-User\n") + k_minimal)
            .identity.user_header == "X-Authenticated-User");
}

TEST_CASE("identity.user_header: the API key's field is refused, in either spelling") {
  // The user header is dropped from an untrusted client's request in either spelling: named
  // X_API_Key, it would drop every client's X-API-Key before the upstream.
  for (const char* field : {"X-API-Key", "x-api-key", "X_API_Key", "x_Api_key"}) {
    CAPTURE(field);
    CHECK(ratewall::testing::config_error_of(std::string("identity:\n  user_header: ") + field +
                                             "\n" + k_minimal) ==
          "test.yaml:2: identity.user_header: must differ from identity.api_key_header "
          "(\"X-API-Key\"), '_' read as '-'");
  }
  CHECK(
      ratewall::testing::config_error_of(
          std::string("identity:\n  api_key_header: X_Key\n  user_header: X-Key\n") + k_minimal) ==
      "test.yaml:3: identity.user_header: must differ from "
      "identity.api_key_header (\"X_Key\"), '_' read as '-'");
  CHECK(load(std::string("identity:\n  user_header: X-API-Keys\n") + k_minimal)
            .identity.user_header == "X-API-Keys");
}

TEST_CASE("identity.api_key_header: a field the gateway reads, writes or drops is refused") {
  // X-Real-IP from an untrusted client is dropped before the upstream and X-Forwarded-For
  // replaced: the gateway read the key where the application never saw it. Connection and TE
  // are HTTP's own, Cookie is cookie:NAME's.
  for (const char* field : {"X-Real-IP", "X_Real_IP", "X-Forwarded-For", "X-Client-IP", "Forwarded",
                            "X-Original-URL", "X-Request-Id", "Connection", "TE", "Host",
                            "Content-Length", "Transfer_Encoding", "Cookie", "cookie"}) {
    CAPTURE(field);
    CHECK(ratewall::testing::config_error_of(std::string("identity:\n  api_key_header: ") + field +
                                             "\n" + k_minimal) ==
          "test.yaml:2: identity.api_key_header: \"" + std::string(field) +
              "\": the gateway reads, writes or drops this field for its own purpose, so it "
              "cannot carry an API key; name a field of your own (X-API-Key)");
  }
  for (const char* field : {"X-API-Key", "Authorization", "X-Client-Key", "Api-Key"}) {
    CAPTURE(field);
    CHECK(load(std::string("identity:\n  api_key_header: ") + field + "\n" + k_minimal)
              .identity.api_key_header == field);
  }
  // The user header's default too: it is dropped from untrusted clients, the key with it.
  for (const char* field : {"X-User-ID", "X_User_Id"}) {
    CAPTURE(field);
    CHECK(ratewall::testing::config_error_of(std::string("identity:\n  api_key_header: ") + field +
                                             "\n" + k_minimal) ==
          "test.yaml:2: identity.api_key_header: must differ from identity.user_header "
          "(\"X-User-ID\", its default), '_' read as '-'");
  }
  CHECK(load(std::string("identity:\n  api_key_header: X-User-ID\n  user_header: X-Who\n") +
             k_minimal)
            .identity.api_key_header == "X-User-ID");
  // The user header too: X-Client-IP is a client's claim about its address.
  CHECK(ratewall::testing::config_error_of(std::string("identity:\n  user_header: X-Client-IP\n") +
                                           k_minimal)
            .find("test.yaml:2: identity.user_header: \"X-Client-IP\"") == 0);
}
