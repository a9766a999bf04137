// Every config error names file, line and key path: "<file>:<line>: <key.path>: <message>".

#include <doctest/doctest.h>

#include "config_test_support.hpp"

using namespace ratewall;
using ratewall::testing::config_error_of;

TEST_CASE("the example from the issue: a bad rate in the second route") {
  const char* yaml = R"(# A config with two routes; the second has a typo in its rate.
upstreams:
  api:
    targets: [127.0.0.1:8000]
routes:
  - name: search
    match: { path_prefix: /api/search }
    upstream: api
  - name: default
    upstream: api
    limits:
      - name: default
        algorithm: token_bucket
        rate: 10/sec
        burst: 10
)";
  CHECK(config_error_of(yaml, "config/ratewall.yaml") ==
        R"(config/ratewall.yaml:14: routes[1].limits[0].rate: )"
        R"(expected "<count>/<unit>" like "10/s")");
}

TEST_CASE("config_error keeps the parts of its message") {
  try {
    parse_config("server:\n  threads: many\n", "a.yaml");
    FAIL("expected a config_error");
  } catch (const config_error& e) {
    CHECK(e.file() == "a.yaml");
    CHECK(e.line() == 2);
    CHECK(e.key_path() == "server.threads");
    CHECK(e.message() == "expected a non-negative integer");
    CHECK(std::string(e.what()) == "a.yaml:2: server.threads: expected a non-negative integer");
  }
}

TEST_CASE("wrong types") {
  SUBCASE("text where a number belongs") {
    CHECK(config_error_of("server:\n  threads: many\n") ==
          "test.yaml:2: server.threads: expected a non-negative integer");
  }
  SUBCASE("a negative number") {
    CHECK(config_error_of("server:\n  threads: -1\n") ==
          "test.yaml:2: server.threads: expected a non-negative integer");
  }
  SUBCASE("a list where a number belongs") {
    CHECK(config_error_of("server:\n  threads: [4]\n") ==
          "test.yaml:2: server.threads: expected a non-negative integer");
  }
  SUBCASE("a number where a mapping belongs") {
    CHECK(config_error_of("server: 5\n") == "test.yaml:1: server: expected a mapping");
  }
  SUBCASE("a mapping where a list belongs") {
    CHECK(config_error_of("identity:\n  trusted_proxies: { a: 1 }\n") ==
          "test.yaml:2: identity.trusted_proxies: expected a list");
  }
  SUBCASE("a mapping where text belongs") {
    CHECK(config_error_of("admin:\n  token_env: { a: 1 }\n") ==
          "test.yaml:2: admin.token_env: expected a string");
  }
  SUBCASE("yes is not a boolean") {
    CHECK(config_error_of("store:\n  redis:\n    cluster: yes\n") ==
          "test.yaml:3: store.redis.cluster: expected true or false");
  }
  SUBCASE("a word outside its set") {
    CHECK(config_error_of("identity:\n  unknown_api_key: deny\n") ==
          "test.yaml:2: identity.unknown_api_key: expected one of: ip, reject, allow");
    CHECK(config_error_of("store:\n  type: postgres\n") ==
          "test.yaml:2: store.type: expected one of: memory, redis");
    CHECK(config_error_of("store:\n  redis:\n    on_error: retry\n") ==
          "test.yaml:3: store.redis.on_error: expected one of: allow, deny, local");
  }
  SUBCASE("the document is not a mapping") {
    CHECK(config_error_of("- a\n- b\n") ==
          "test.yaml:1: expected a mapping with the sections server, admin, identity, store, "
          "upstreams, plans, api_keys and routes");
  }
}

TEST_CASE("unknown keys are errors at every level, on the key's line") {
  SUBCASE("top level") {
    CHECK(config_error_of("server: {}\n\nrotues: []\n") ==
          "test.yaml:3: rotues: unknown key (expected one of: server, admin, identity, store, "
          "log, headers, upstreams, plans, api_keys, routes)");
  }
  SUBCASE("in a limit") {
    const char* yaml = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: r
    upstream: api
    limits:
      - name: l
        rate: 1/s
        burts: 5
)";
    CHECK(config_error_of(yaml) ==
          "test.yaml:9: routes[0].limits[0].burts: unknown key (expected one of: name, "
          "algorithm, rate, burst, limit, window, delay, plans, on_store_error, shadow)");
  }
  SUBCASE("in a flow mapping") {
    const char* yaml = R"(upstreams:
  api: { targets: [127.0.0.1:8000], timeout: 1s }
)";
    CHECK(config_error_of(yaml) ==
          "test.yaml:2: upstreams.api.timeout: unknown key (expected one of: targets, "
          "connect_timeout, response_timeout, read_timeout, max_idle, max_connections, "
          "queue_timeout, tls)");
  }
  SUBCASE("in a route match") {
    const char* yaml = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: r
    upstream: api
    match:
      path: /x
)";
    CHECK(config_error_of(yaml) ==
          "test.yaml:7: routes[0].match.path: unknown key (expected one of: path_exact, "
          "path_prefix, path_regex, path_template, methods, host, case_insensitive)");
  }
  SUBCASE("in a plan, which takes no settings yet") {
    CHECK(config_error_of("plans:\n  free: { rate: 1/s }\n") ==
          "test.yaml:2: plans.free.rate: unknown key (a plan takes no settings yet; write "
          "\"free: {}\" and set its limits under routes[].limits[].plans)");
  }
  SUBCASE("a key given twice") {
    CHECK(config_error_of("server:\n  threads: 1\n  threads: 2\n") ==
          "test.yaml:3: server.threads: duplicate key (first set on line 2)");
  }
}

TEST_CASE("bad durations") {
  SUBCASE("no unit") {
    CHECK(config_error_of("server:\n  header_timeout: 10\n") ==
          R"(test.yaml:2: server.header_timeout: expected a duration like "250ms", "1s", "1m",)"
          R"( "1h" or "1d" (the unit is required))");
  }
  SUBCASE("unknown unit") {
    CHECK(config_error_of("server:\n  idle_timeout: 1w\n") ==
          R"(test.yaml:2: server.idle_timeout: expected a duration like "250ms", "1s", "1m",)"
          R"( "1h" or "1d")");
  }
  SUBCASE("negative") {
    CHECK(config_error_of("store:\n  redis:\n    timeout: -5ms\n") ==
          "test.yaml:3: store.redis.timeout: a duration cannot be negative");
  }
  SUBCASE("zero where it makes no sense") {
    CHECK(config_error_of("server:\n  header_timeout: 0s\n") ==
          "test.yaml:2: server.header_timeout: must be greater than 0");
  }
  SUBCASE("too large") {
    CHECK(config_error_of("server:\n  idle_timeout: 200000d\n") ==
          "test.yaml:2: server.idle_timeout: duration too large (at most 10000d)");
  }
}

TEST_CASE("bad values of the small syntaxes") {
  SUBCASE("endpoint") {
    CHECK(config_error_of("server:\n  listen: 8080\n") ==
          R"(test.yaml:2: server.listen: expected "<host>:<port>" like "127.0.0.1:8080" or)"
          R"( "[::]:8080" (the port is required))");
  }
  SUBCASE("unquoted IPv6 endpoint is a YAML list, with a hint") {
    CHECK(config_error_of("server:\n  listen: [::]:8080\n") ==
          R"(test.yaml:2: invalid YAML: end of map not found (quote IPv6 endpoints: "[::]:8080"))");
  }
  SUBCASE("upstream target on port 0") {
    CHECK(config_error_of("upstreams:\n  api:\n    targets: [127.0.0.1:0]\n") ==
          "test.yaml:3: upstreams.api.targets[0]: an upstream target needs a port other than 0");
  }
  SUBCASE("CIDR") {
    CHECK(config_error_of("identity:\n  trusted_proxies:\n    - 10.0.0.0/8\n    - 10.0.0.1/8\n") ==
          R"(test.yaml:4: identity.trusted_proxies[1]: "10.0.0.1/8" has bits set outside its /8)"
          R"( prefix (did you mean "10.0.0.0/8"?))");
  }
  SUBCASE("byte size") {
    CHECK(config_error_of("server:\n  max_body_bytes: 10MB\n") ==
          R"(test.yaml:2: server.max_body_bytes: expected a byte size like 16384, "64KiB" or)"
          R"( "10MiB")");
  }
  SUBCASE("number out of range") {
    CHECK(config_error_of("identity:\n  ipv6_prefix: 129\n") ==
          "test.yaml:2: identity.ipv6_prefix: must be at most 128");
    CHECK(config_error_of("store:\n  max_keys: 0\n") ==
          "test.yaml:2: store.max_keys: must be at least 1");
  }
  SUBCASE("redis url") {
    CHECK(config_error_of("store:\n  redis:\n    url: http://127.0.0.1:6379\n") ==
          R"(test.yaml:3: store.redis.url: expected a URL like "redis://127.0.0.1:6379/0")");
  }
  SUBCASE("header name") {
    CHECK(config_error_of("identity:\n  api_key_header: X API Key\n") ==
          R"(test.yaml:2: identity.api_key_header: "X API Key" is not a valid HTTP token)");
  }
}

TEST_CASE("bad rates") {
  const char* yaml = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: r
    upstream: api
    limits:
      - name: l
        rate: RATE
)";
  auto with_rate = [&](const std::string& rate) {
    std::string text = yaml;
    text.replace(text.find("RATE"), 4, rate);
    return config_error_of(text);
  };
  CHECK(with_rate("10 per second") ==
        R"(test.yaml:8: routes[0].limits[0].rate: expected "<count>/<unit>" like "10/s")");
  CHECK(with_rate("0/s") ==
        "test.yaml:8: routes[0].limits[0].rate: a rate needs a count greater than 0");
  CHECK(with_rate("10/0s") ==
        "test.yaml:8: routes[0].limits[0].rate: a rate needs a period greater than 0");
  CHECK(with_rate("10/s") == "loaded");
}

TEST_CASE("missing upstream") {
  SUBCASE("a route names an upstream that is not declared") {
    const char* yaml = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
  admin: { targets: [127.0.0.1:8001] }
routes:
  - name: r
    upstream: apii
)";
    CHECK(config_error_of(yaml) ==
          R"(test.yaml:6: routes[0].upstream: unknown upstream "apii" (declared under upstreams:)"
          R"( api, admin))");
  }
  SUBCASE("a route without upstream: reported on the route's line") {
    const char* yaml = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: r
    limits: []
)";
    CHECK(config_error_of(yaml) == "test.yaml:4: routes[0].upstream: missing required key");
  }
  SUBCASE("no upstreams section at all") {
    CHECK(config_error_of("\n# nothing but routes\nroutes: []\n") ==
          "test.yaml:3: upstreams: missing required key");
  }
  SUBCASE("an upstream without targets") {
    CHECK(config_error_of("upstreams:\n  api:\n    targets: []\n") ==
          "test.yaml:3: upstreams.api.targets: expected at least one target");
  }
}

TEST_CASE("undeclared plans") {
  SUBCASE("in a limit's per-plan overrides") {
    const char* yaml = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
plans:
  free: {}
  premium: {}
routes:
  - name: r
    upstream: api
    limits:
      - name: l
        rate: 1/s
        plans:
          gold: { rate: 100/s }
)";
    CHECK(config_error_of(yaml) ==
          R"(test.yaml:13: routes[0].limits[0].plans.gold: unknown plan "gold" (declared under)"
          R"( plans: free, premium))");
  }
  SUBCASE("in an api key") {
    const char* yaml = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
api_keys:
  - key: k
    plan: gold
)";
    CHECK(config_error_of(yaml) ==
          R"(test.yaml:5: api_keys[0].plan: unknown plan "gold" (declared under plans: none))");
  }
}

TEST_CASE("api keys") {
  SUBCASE("both key and key_sha256") {
    const char* yaml = R"(plans: { free: {} }
api_keys:
  - key: k
    key_sha256: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae
    plan: free
)";
    CHECK(config_error_of(yaml) ==
          "test.yaml:4: api_keys[0].key_sha256: set either key or key_sha256, not both");
  }
  SUBCASE("neither") {
    CHECK(config_error_of("plans: { free: {} }\napi_keys:\n  - plan: free\n") ==
          "test.yaml:3: api_keys[0]: expected one of key (the raw key) or key_sha256 (its "
          "SHA-256 in hex)");
  }
  SUBCASE("a hash that is not 64 hex digits") {
    CHECK(
        config_error_of("plans: { free: {} }\napi_keys:\n  - key_sha256: abc\n    plan: free\n") ==
        "test.yaml:3: api_keys[0].key_sha256: expected 64 hex digits (the SHA-256 of the key)");
  }
  SUBCASE("the same key twice, once raw and once hashed") {
    const char* yaml = R"(plans: { free: {} }
api_keys:
  - key: foo
    plan: free
  - key_sha256: 2C26B46B68FFC68FF99B453C1D30413413422D706483BFA0F98A5E886266E7AE
    plan: free
)";
    CHECK(config_error_of(yaml) == "test.yaml:5: api_keys[1]: the same key as api_keys[0]");
  }
  SUBCASE("a key without plan") {
    CHECK(config_error_of("api_keys:\n  - key: k\n") ==
          "test.yaml:2: api_keys[0].plan: missing required key");
  }
  SUBCASE("a name that logs and JSON could not carry as it is") {
    CHECK(config_error_of(
              "plans: { free: {} }\napi_keys:\n  - { key: k, plan: free, name: \"\" }\n") ==
          "test.yaml:3: api_keys[0].name: a key name has 1 to 64 characters");
    CHECK(config_error_of(
              "plans: { free: {} }\napi_keys:\n  - key: k\n    plan: free\n    name: 'a\"b'\n") ==
          "test.yaml:5: api_keys[0].name: a key name is printable ASCII without quotes or "
          "backslashes");
  }
}

TEST_CASE("admin.listen_without_token must be a loopback address") {
  CHECK(config_error_of("admin:\n  listen: 0.0.0.0:9090\n  listen_without_token: 0.0.0.0:9091\n") ==
        "test.yaml:3: admin.listen_without_token: expected a loopback address (127.0.0.1:9090): "
        "without a token the admin API must not be reachable from other hosts");
}

TEST_CASE("the admin API needs a port of its own: the proxy listeners' on an address they cover") {
  // `check` passed these and the start failed on the second bind.
  const std::string own_port =
      "the same port as server.listen on an address it covers (the admin API needs a port of its "
      "own)";
  CHECK(config_error_of("server:\n  listen: 0.0.0.0:9000\nadmin:\n  listen: 127.0.0.1:9000\n") ==
        "test.yaml:4: admin.listen: " + own_port);
  CHECK(config_error_of("server:\n  listen: \"[::]:9000\"\nadmin:\n  listen: 127.0.0.1:9000\n") ==
        "test.yaml:4: admin.listen: " + own_port);
  CHECK(config_error_of("server:\n  listen: 127.0.0.1:9090\n") ==
        "test.yaml: admin.listen: " + own_port);  // the admin API's default address
  CHECK(config_error_of("server:\n  listen: 127.0.0.1:9000\nadmin:\n  listen: 0.0.0.0:9001\n  "
                        "listen_without_token: 127.0.0.1:9000\n") ==
        "test.yaml:5: admin.listen_without_token: " + own_port);
  CHECK(config_error_of("server:\n  listen: off\n  tls:\n    listen: 127.0.0.1:9443\n    "
                        "certificates: [{ cert: a.pem, key: a.key }]\nadmin:\n  listen: "
                        "0.0.0.0:9443\n")
            .find("test.yaml:7: admin.listen: the same port as server.tls.listen") !=
        std::string::npos);
  // Another address, another port, or no admin API at all: no clash (the
  // files stop later, for want of upstreams).
  CHECK(config_error_of("server:\n  listen: 127.0.0.1:9000\nadmin:\n  listen: 127.0.0.2:9000\n")
            .find("a port of its own") == std::string::npos);
  // 0.0.0.0 takes every IPv4 address, not ::1 ([::] takes both families).
  CHECK(config_error_of("server:\n  listen: 0.0.0.0:9000\nadmin:\n  listen: \"[::1]:9000\"\n")
            .find("a port of its own") == std::string::npos);
  CHECK(config_error_of("server:\n  listen: \"[::1]:9000\"\nadmin:\n  listen: 0.0.0.0:9000\n")
            .find("a port of its own") == std::string::npos);
  CHECK(config_error_of("server:\n  listen: \"[::]:9000\"\nadmin:\n  listen: \"[::1]:9000\"\n") ==
        "test.yaml:4: admin.listen: " + own_port);
  CHECK(config_error_of("server:\n  listen: 127.0.0.1:9000\nadmin:\n  listen: 127.0.0.1:0\n")
            .find("a port of its own") == std::string::npos);
  CHECK(config_error_of("server:\n  listen: 127.0.0.1:9090\nadmin: { enabled: false }\n")
            .find("a port of its own") == std::string::npos);
}

TEST_CASE("a secret's environment variable is never RATEWALL_HASH_KEY") {
  // The secret that names clients would be handed to whoever holds the other one: an admin
  // client, Redis (in AUTH), a JWT issuer.
  const std::string own =
      ": must not be RATEWALL_HASH_KEY: the secret that names clients in logs, metrics and stores "
      "would be handed to whoever holds this one; give each secret a variable of its own";
  CHECK(config_error_of("admin:\n  token_env: RATEWALL_HASH_KEY\n") ==
        "test.yaml:2: admin.token_env" + own);
  CHECK(config_error_of("store:\n  type: redis\n  redis:\n    password_env: RATEWALL_HASH_KEY\n") ==
        "test.yaml:4: store.redis.password_env" + own);
  CHECK(config_error_of("identity:\n  jwt:\n    hs256_secret_env: RATEWALL_HASH_KEY\n") ==
        "test.yaml:3: identity.jwt.hs256_secret_env" + own);
  CHECK(config_error_of("identity:\n  jwt:\n    hs256_secret_env: 1BAD\n") ==
        "test.yaml:3: identity.jwt.hs256_secret_env: \"1BAD\" is not a valid environment variable "
        "name");
}

TEST_CASE("an address to listen on is an IP address or localhost, never a name to look up") {
  const std::string refused =
      " is not an IP address: listen on one (127.0.0.1:8080, [::1]:8080, 0.0.0.0:8080 for "
      "every interface); host names are not looked up";
  CHECK(config_error_of("server:\n  listen: api.internal:8080\n") ==
        "test.yaml:2: server.listen: \"api.internal\"" + refused);
  CHECK(config_error_of("server:\n  tls:\n    listen: gateway:8443\n") ==
        "test.yaml:3: server.tls.listen: \"gateway\"" + refused);
  CHECK(config_error_of("admin:\n  listen: admin.local:9090\n") ==
        "test.yaml:2: admin.listen: \"admin.local\"" + refused);
  CHECK(config_error_of("admin:\n  listen_without_token: lo:9091\n") ==
        "test.yaml:2: admin.listen_without_token: \"lo\"" + refused);

  // localhost is the IPv4 loopback, as the admin API always took it.
  const std::string rest =
      "upstreams:\n  api: { targets: ['127.0.0.1:9000'] }\nroutes:\n  - { name: all, match: { "
      "path_prefix: / }, upstream: api }\n";
  const config cfg = parse_config(
      "server:\n  listen: localhost:8080\nadmin:\n  listen: localhost:9090\n" + rest, "test.yaml");
  CHECK(cfg.server.listen.host == "127.0.0.1");
  CHECK(cfg.server.listen.port == 8080);
  CHECK(cfg.admin.listen.host == "127.0.0.1");
  CHECK(parse_config("server:\n  listen: '[::1]:8080'\n" + rest, "test.yaml").server.listen.host ==
        "::1");
}

TEST_CASE("store.keys_file") {
  SUBCASE("with the Redis store, which keeps run-time keys in Redis") {
    CHECK(config_error_of("store:\n  type: redis\n  keys_file: keys.jsonl\n") ==
          "test.yaml:3: store.keys_file: the Redis store keeps run-time API keys in Redis (every "
          "gateway sees them); keys_file is for the memory store");
  }
  SUBCASE("a directory") {
    CHECK(config_error_of("store:\n  keys_file: /var/lib/ratewall/\n") ==
          "test.yaml:2: store.keys_file: expected a file path, not a directory");
  }
}

TEST_CASE("store.snapshot") {
  SUBCASE("with the Redis store, which keeps its state in Redis") {
    CHECK(config_error_of("store:\n  type: redis\n  snapshot: { path: state.bin }\n") ==
          "test.yaml:3: store.snapshot: the Redis store keeps its state in Redis; snapshot is "
          "for the memory store");
  }
  SUBCASE("without a path") {
    CHECK(config_error_of("store:\n  snapshot: { interval: 5s }\n") ==
          "test.yaml:2: store.snapshot: needs a path (the file the limit state is written to)");
  }
  SUBCASE("a directory") {
    CHECK(config_error_of("store:\n  snapshot:\n    path: /var/lib/ratewall/\n") ==
          "test.yaml:3: store.snapshot.path: expected a file path, not a directory");
  }
  SUBCASE("an interval out of bounds") {
    CHECK(config_error_of("store:\n  snapshot:\n    path: s.bin\n    interval: 100ms\n") ==
          "test.yaml:4: store.snapshot.interval: must be between 1s and 24h");
    CHECK(config_error_of("store:\n  snapshot:\n    path: s.bin\n    interval: 2d\n") ==
          "test.yaml:4: store.snapshot.interval: must be between 1s and 24h");
  }
  SUBCASE("an unknown key") {
    CHECK(config_error_of("store:\n  snapshot: { path: s.bin, every: 5s }\n")
              .find("test.yaml:2: store.snapshot") == 0);
  }
}

TEST_CASE("duplicate names") {
  SUBCASE("routes") {
    const char* yaml = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: search
    upstream: api
  - upstream: api
    name: search
)";
    CHECK(config_error_of(yaml) ==
          R"(test.yaml:7: routes[1].name: duplicate route name "search" (also routes[0]))");
  }
  SUBCASE("limits of one route") {
    const char* yaml = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: r
    upstream: api
    limits:
      - { name: l, rate: 1/s }
      - { name: l, rate: 100/h }
)";
    CHECK(config_error_of(yaml) ==
          R"(test.yaml:8: routes[0].limits[1].name: duplicate limit name "l" (also limits[0]))");
  }
  SUBCASE("limits of different routes may share a name") {
    const char* yaml = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - { name: a, upstream: api, limits: [{ name: l, rate: 1/s }] }
  - { name: b, upstream: api, limits: [{ name: l, rate: 1/s }] }
)";
    CHECK(config_error_of(yaml) == "loaded");
  }
}

TEST_CASE("YAML syntax errors carry the line yaml-cpp stopped at") {
  SUBCASE("an unclosed flow list") {
    CHECK(config_error_of(
              "server:\n  listen: 127.0.0.1:8080\nidentity:\n  trusted_proxies: [10.0.0.0/8\n") ==
          "test.yaml:5: invalid YAML: end of sequence flow not found");
  }
  SUBCASE("bad indentation") {
    CHECK(config_error_of("server:\n  threads: 1\n   listen: 127.0.0.1:80\n") ==
          "test.yaml:3: invalid YAML: illegal map value");
  }
  SUBCASE("an empty file") {
    CHECK(config_error_of("# nothing here\n") ==
          "test.yaml:1: the file is empty (expected a mapping with at least upstreams and routes)");
  }
  SUBCASE("two documents") {
    CHECK(config_error_of("server: {}\n---\nadmin: {}\n") ==
          "test.yaml:3: expected one YAML document, found more");
  }
}

TEST_CASE("missing required fields") {
  const char* base = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: r
    upstream: api
    limits:
      - name: l
        LIMIT
)";
  auto with_limit = [&](const std::string& fields) {
    std::string text = base;
    text.replace(text.find("LIMIT"), 5, fields);
    return config_error_of(text);
  };
  SUBCASE("a token bucket needs a rate") {
    CHECK(with_limit("burst: 5") ==
          "test.yaml:7: routes[0].limits[0].rate: missing required key (token_bucket takes rate "
          "and burst)");
  }
  SUBCASE("a window algorithm needs limit and window") {
    CHECK(with_limit("algorithm: sliding_window_log\n        limit: 5") ==
          "test.yaml:7: routes[0].limits[0].window: missing required key (sliding_window_log "
          "takes limit and window)");
  }
  SUBCASE("a concurrency limit needs limit") {
    CHECK(with_limit("algorithm: concurrency") ==
          "test.yaml:7: routes[0].limits[0].limit: missing required key (concurrency takes "
          "limit)");
  }
  SUBCASE("a limit needs a name") {
    const char* yaml = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: r
    upstream: api
    limits:
      - rate: 1/s
)";
    CHECK(config_error_of(yaml) == "test.yaml:7: routes[0].limits[0].name: missing required key");
  }
  SUBCASE("a key the algorithm does not use") {
    CHECK(with_limit("rate: 10/s\n        window: 1m") ==
          "test.yaml:9: routes[0].limits[0].window: not used by token_bucket (it takes rate and "
          "burst)");
    CHECK(with_limit("algorithm: fixed_window\n        limit: 5\n        window: 1m\n        "
                     "burst: 2") ==
          "test.yaml:11: routes[0].limits[0].burst: not used by fixed_window (it takes limit and "
          "window)");
    CHECK(with_limit("rate: 10/s\n        delay: true") ==
          "test.yaml:9: routes[0].limits[0].delay: not used by token_bucket (it takes rate and "
          "burst)");
  }
  SUBCASE("an override key the algorithm does not use") {
    std::string text = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
plans: { pro: {} }
routes:
  - name: r
    upstream: api
    limits:
      - name: l
        rate: 10/s
        plans: { pro: { limit: 5 } }
)";
    CHECK(config_error_of(text) ==
          "test.yaml:10: routes[0].limits[0].plans.pro.limit: not used by token_bucket (it takes "
          "rate and burst)");
  }
  SUBCASE("an unknown algorithm") {
    CHECK(with_limit("algorithm: gcra\n        rate: 1/s") ==
          "test.yaml:8: routes[0].limits[0].algorithm: expected one of: token_bucket, "
          "leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter, concurrency");
  }
  SUBCASE("a token bucket with burst 0 can never admit anything") {
    CHECK(with_limit("rate: 1/s\n        burst: 0") ==
          "test.yaml:9: routes[0].limits[0].burst: must be at least 1");
  }
  SUBCASE("no routes") {
    CHECK(config_error_of("upstreams:\n  api: { targets: [127.0.0.1:8000] }\nroutes: []\n") ==
          "test.yaml:3: routes: declare at least one route");
  }
}

TEST_CASE("route validation") {
  const char* base = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: r
    upstream: api
    ROUTE
)";
  auto with_route = [&](const std::string& fields) {
    std::string text = base;
    text.replace(text.find("ROUTE"), 5, fields);
    return config_error_of(text);
  };
  const std::string sources =
      "api_key, user, ip, header:NAME, query:NAME, cookie:NAME, path:NAME (a {NAME} of "
      "match.path_template), jwt:CLAIM (identity.jwt)";
  SUBCASE("two path matchers") {
    CHECK(with_route("match: { path_exact: /a, path_prefix: /b }") ==
          "test.yaml:6: routes[0].match.path_prefix: set only one of path_exact, path_prefix, "
          "path_regex and path_template");
  }
  SUBCASE("a path that does not start with /") {
    CHECK(with_route("match: { path_prefix: api }") ==
          R"(test.yaml:6: routes[0].match.path_prefix: must start with "/")");
  }
  SUBCASE("a regex that does not compile") {
    std::string error = with_route(R"(match: { path_regex: "^/a(b" })");
    CHECK(error.rfind("test.yaml:6: routes[0].match.path_regex: invalid regular expression: ", 0) ==
          0);
  }
  SUBCASE("methods") {
    CHECK(with_route("match: { methods: [] }") ==
          "test.yaml:6: routes[0].match.methods: expected at least one method (leave methods out "
          "to match every method)");
    CHECK(with_route("match: { methods: [GET, get] }") ==
          "test.yaml:6: routes[0].match.methods[1]: duplicate method GET");
    CHECK(with_route(R"(match: { methods: ["GE T"] })") ==
          R"(test.yaml:6: routes[0].match.methods[0]: "GE T" is not a valid HTTP token)");
  }
  SUBCASE("host with a port") {
    CHECK(with_route("match: { host: api.example.com:8080 }") ==
          R"(test.yaml:6: routes[0].match.host: expected a host name like "api.example.com")"
          R"( (without port or path))");
  }
  SUBCASE("identify_by") {
    CHECK(with_route("identify_by: []") ==
          "test.yaml:6: routes[0].identify_by: expected at least one of: " + sources);
    CHECK(with_route("identify_by: [ip, ip]") ==
          "test.yaml:6: routes[0].identify_by[1]: listed twice");
    CHECK(with_route("identify_by: [cookie]") ==
          "test.yaml:6: routes[0].identify_by[0]: expected one of: " + sources);
    CHECK(with_route("identify_by: [header:X-Tenant, header:x-tenant]") ==
          "test.yaml:6: routes[0].identify_by[1]: listed twice");
    CHECK(with_route("identify_by: [\"header:X Tenant\"]") ==
          R"(test.yaml:6: routes[0].identify_by[0]: "X Tenant" is not a valid header name)");
    CHECK(with_route("identify_by: [\"query:\"]") ==
          R"(test.yaml:6: routes[0].identify_by[0]: "" is not a valid query name)");
    CHECK(with_route("identify_by: [header:Host]") ==
          "test.yaml:6: routes[0].identify_by[0]: the gateway rewrites or drops host before the "
          "upstream sees it: it cannot name a client");
    CHECK(with_route("identify_by: [header:X-Forwarded-For]") ==
          "test.yaml:6: routes[0].identify_by[0]: the gateway rewrites or drops x-forwarded-for "
          "before the upstream sees it: it cannot name a client");
    // Read in either spelling, and dropped in either before the upstream sees it.
    CHECK(with_route("identify_by: [header:X_Request_Id]") ==
          "test.yaml:6: routes[0].identify_by[0]: the gateway rewrites or drops x_request_id "
          "before the upstream sees it: it cannot name a client");
    CHECK(with_route("identify_by: [header:Content_Length]") ==
          "test.yaml:6: routes[0].identify_by[0]: the gateway rewrites or drops content_length "
          "before the upstream sees it: it cannot name a client");
    // A client's claim about its address (dropped unless a trusted proxy sent it), and the
    // URL IIS and Symfony serve in place of the request line.
    CHECK(with_route("identify_by: [header:X-Client-IP]") ==
          "test.yaml:6: routes[0].identify_by[0]: the gateway rewrites or drops x-client-ip "
          "before the upstream sees it: it cannot name a client");
    CHECK(with_route("identify_by: [header:X-Original-URL]") ==
          "test.yaml:6: routes[0].identify_by[0]: the gateway rewrites or drops x-original-url "
          "before the upstream sees it: it cannot name a client");
    CHECK(with_route("identify_by: [header:X-Original-URI]") ==
          "test.yaml:6: routes[0].identify_by[0]: the gateway rewrites or drops x-original-uri "
          "before the upstream sees it: it cannot name a client");
    CHECK(with_route("identify_by: [header:X-Forwarded-Uri]") ==
          "test.yaml:6: routes[0].identify_by[0]: the gateway rewrites or drops x-forwarded-uri "
          "before the upstream sees it: it cannot name a client");
    // identity.user_header is dropped from untrusted clients: `user` reads it from the others.
    CHECK(with_route("identify_by: [header:x_user_id]") ==
          "test.yaml:6: routes[0].identify_by[0]: the gateway drops x_user_id "
          "(identity.user_header) from clients other than trusted proxies before the upstream "
          "sees it: use `user` to name a client by it");
    CHECK(with_route("identify_by: [header:Cookie]") ==
          "test.yaml:6: routes[0].identify_by[0]: use cookie:NAME to name a client by a cookie");
    CHECK(with_route("identify_by: [header:a+ip]") ==
          R"(test.yaml:6: routes[0].identify_by[0]: "a+ip": '+' joins the parts of a composite )"
          "in subjects, not in names");
    CHECK(with_route("identify_by: [form:a]") ==
          R"(test.yaml:6: routes[0].identify_by[0]: unknown source "form" (expected one of: )" +
              sources + ")");
    CHECK(with_route("identify_by: [jwt:sub]") ==
          "test.yaml:6: routes[0].identify_by[0]: jwt: descriptors need identity.jwt (how bearer "
          "tokens are verified)");
    CHECK(config_error_of("identity:\n  jwt: { jwks_file: k.json }\n  bearer: api_key\n"
                          "upstreams:\n  api: { targets: [127.0.0.1:8000] }\n"
                          "routes:\n  - { name: r, upstream: api, identify_by: [jwt:sub] }\n") ==
          "test.yaml:7: routes[0].identify_by[0]: jwt: descriptors need identity.bearer: jwt "
          "(bearer tokens are read as api_key)");
    CHECK(config_error_of(
              "identity:\n  bearer: jwt\nupstreams:\n  api: { targets: [127.0.0.1:8000] }\n"
              "routes:\n  - { name: r, upstream: api }\n") ==
          "test.yaml:2: identity.bearer: bearer: jwt needs identity.jwt (how tokens are verified)");
    CHECK(config_error_of("identity:\n  jwt: { jwks_file: k.json, algorithms: [RS256, none] }\n"
                          "upstreams:\n  api: { targets: [127.0.0.1:8000] }\n"
                          "routes:\n  - { name: r, upstream: api }\n") ==
          "test.yaml:2: identity.jwt.algorithms[1]: expected one of: HS256, RS256, ES256");
    CHECK(with_route("identify_by: [path:tenant]") ==
          "test.yaml:6: routes[0].identify_by[0]: path:tenant needs match.path_template with "
          "{tenant}");
    CHECK(
        with_route("match: { path_template: \"/t/{tenant}\" }\n    identify_by: [path:team]") ==
        R"(test.yaml:7: routes[0].identify_by[0]: match.path_template "/t/{tenant}" has no {team})");
  }
  SUBCASE("composite descriptors") {
    CHECK(with_route("identify_by: [[ip]]") ==
          "test.yaml:6: routes[0].identify_by[0]: a composite (a list in identify_by) joins at "
          "least two sources");
    CHECK(with_route("identify_by: [[ip, [user, ip]]]") ==
          "test.yaml:6: routes[0].identify_by[0][1]: a composite's parts are sources, not lists");
    CHECK(with_route("identify_by: [[ip, ip]]") ==
          "test.yaml:6: routes[0].identify_by[0][1]: listed twice in this composite");
    CHECK(with_route("identify_by: [[query:a, ip], [query:a, ip]]") ==
          "test.yaml:6: routes[0].identify_by[1]: listed twice");
    CHECK(with_route("identify_by: [{ a: b }]") ==
          "test.yaml:6: routes[0].identify_by[0]: expected one of: " + sources);
  }
  SUBCASE("path_template") {
    CHECK(with_route("match: { path_template: \"t/{a}\" }") ==
          R"(test.yaml:6: routes[0].match.path_template: must start with "/")");
    CHECK(with_route("match: { path_template: \"/t//{a}\" }") ==
          "test.yaml:6: routes[0].match.path_template: empty segment (expected segments like "
          "\"/tenants/{tenant}/items\", a {name} being one whole segment)");
    CHECK(with_route("match: { path_template: \"/t/{a}/{a}\" }") ==
          "test.yaml:6: routes[0].match.path_template: {a} named twice");
    CHECK(with_route("match: { path_template: \"/t/{a-b}\" }") ==
          "test.yaml:6: routes[0].match.path_template: \"{a-b}\": a name is letters, digits and "
          "'_'");
    CHECK(with_route("match: { path_template: \"/t/x{a}\" }") ==
          "test.yaml:6: routes[0].match.path_template: \"x{a}\" is not a plain segment (expected "
          "segments like \"/tenants/{tenant}/items\", a {name} being one whole segment)");
    CHECK(with_route("match: { path_template: \"/t/a b\" }") ==
          "test.yaml:6: routes[0].match.path_template: \"a b\" is not a plain segment (expected "
          "segments like \"/tenants/{tenant}/items\", a {name} being one whole segment)");
    CHECK(with_route("match: { path_template: \"/t/..\" }") ==
          "test.yaml:6: routes[0].match.path_template: \"..\" is not a plain segment (expected "
          "segments like \"/tenants/{tenant}/items\", a {name} being one whole segment)");
    CHECK(with_route("match: { path_template: \"/t/{a}\", path_prefix: /t }") ==
          "test.yaml:6: routes[0].match.path_template: set only one of path_exact, path_prefix, "
          "path_regex and path_template");
  }
  SUBCASE("cost") {
    CHECK(with_route("cost: 0") == "test.yaml:6: routes[0].cost: must be at least 1");
    CHECK(with_route("cost: { default: 1, POST: 5, post: 6 }") ==
          "test.yaml:6: routes[0].cost.post: cost for POST set twice");
    CHECK(with_route("cost: [1]") ==
          "test.yaml:6: routes[0].cost: expected a positive integer or a mapping like { default: "
          "1, POST: 5 }");
    CHECK(with_route("cost: 5\n    limits: [{ name: l, rate: 1/s, burst: 3 }]") ==
          R"(test.yaml:6: routes[0].cost: a request costing 5 could never pass limit "l")"
          R"( (capacity 3))");
  }
  SUBCASE("route names are used in keys: no spaces or colons") {
    const char* yaml = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: a:b
    upstream: api
)";
    CHECK(config_error_of(yaml) ==
          R"(test.yaml:4: routes[0].name: "a:b" is not a valid name (use letters, digits, '_',)"
          R"( '-', '.'))");
  }
}
