// The operational keys: log, headers (top level and per route) and routes[].deny.

#include <doctest/doctest.h>

#include "config_test_support.hpp"

using namespace ratewall;
using ratewall::testing::config_error_of;

namespace {

constexpr const char* k_base = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
)";

config load(const std::string& yaml) {
  return parse_config(std::string(k_base) + yaml, "test.yaml");
}

std::string error_of(const std::string& yaml) {
  return config_error_of(std::string(k_base) + yaml);
}

constexpr const char* k_one_route = R"(routes:
  - name: all
    upstream: api
)";

}  // namespace

TEST_CASE("log: defaults are no access log and level info") {
  config c = load(k_one_route);
  CHECK(c.log.access == access_log_sink::off);
  CHECK(c.log.access_path.empty());
  CHECK(c.log.level == log_level::info);
  CHECK(c.log.client_address == client_address_log::hashed);
}

TEST_CASE("log.client_address: raw, hashed or off") {
  CHECK(load(std::string(k_one_route) + "log: { client_address: raw }\n").log.client_address ==
        client_address_log::raw);
  CHECK(load(std::string(k_one_route) + "log: { client_address: off }\n").log.client_address ==
        client_address_log::off);
  CHECK(error_of(std::string(k_one_route) + "log:\n  client_address: clear\n") ==
        "test.yaml:7: log.client_address: expected one of: raw, hashed, off");
}

TEST_CASE("log.access: off, stdout, stderr or a file path") {
  CHECK(load(std::string(k_one_route) + "log: { access: off }\n").log.access ==
        access_log_sink::off);
  CHECK(load(std::string(k_one_route) + "log: { access: stdout }\n").log.access ==
        access_log_sink::stdout_stream);
  CHECK(load(std::string(k_one_route) + "log: { access: stderr }\n").log.access ==
        access_log_sink::stderr_stream);
  config c = load(std::string(k_one_route) + "log: { access: /var/log/ratewall/access.log }\n");
  CHECK(c.log.access == access_log_sink::file);
  CHECK(c.log.access_path == "/var/log/ratewall/access.log");
  CHECK(load(std::string(k_one_route) + "log: { access: logs/access.log }\n").log.access_path ==
        "logs/access.log");
}

TEST_CASE("log: errors name file, line and key") {
  CHECK(error_of(std::string(k_one_route) + "log:\n  access: /var/log/\n") ==
        "test.yaml:7: log.access: expected a file path, not a directory (off, stdout, stderr or "
        "a file path)");
  CHECK(error_of(std::string(k_one_route) + "log:\n  access: \"\"\n") ==
        "test.yaml:7: log.access: must not be empty");
  CHECK(error_of(std::string(k_one_route) + "log:\n  level: verbose\n") ==
        "test.yaml:7: log.level: expected one of: debug, info, warn, error");
  CHECK(error_of(std::string(k_one_route) + "log:\n  format: json\n")
            .find("test.yaml:7: log.format: unknown key") == 0);
  CHECK(load(std::string(k_one_route) + "log: { level: debug }\n").log.level == log_level::debug);
  CHECK(load(std::string(k_one_route) + "log: { level: warn }\n").log.level == log_level::warn);
  CHECK(load(std::string(k_one_route) + "log: { level: error }\n").log.level == log_level::error);
}

TEST_CASE("headers: defaults, top level, and per-route overrides key by key") {
  SUBCASE("defaults") {
    config c = load(k_one_route);
    CHECK(c.headers.enabled);
    CHECK_FALSE(c.headers.reset_epoch);
    CHECK_FALSE(c.headers.ietf_draft);
    CHECK(c.routes[0].headers.enabled);
    CHECK_FALSE(c.routes[0].headers.reset_epoch);
    CHECK_FALSE(c.routes[0].headers.ietf_draft);
  }
  SUBCASE("the top level applies to every route") {
    config c = load(std::string(k_one_route) + "headers: { reset: epoch, ietf_draft: true }\n");
    CHECK(c.headers.reset_epoch);
    CHECK(c.routes[0].headers.enabled);
    CHECK(c.routes[0].headers.reset_epoch);
    CHECK(c.routes[0].headers.ietf_draft);
  }
  SUBCASE("a route overrides only the keys it sets, wherever the top level is in the file") {
    config c = load(R"(routes:
  - name: quiet
    upstream: api
    headers: { enabled: false }
  - name: delta
    upstream: api
    headers: { reset: delta }
  - name: plain
    upstream: api
headers:
  reset: epoch
  ietf_draft: true
)");
    CHECK_FALSE(c.routes[0].headers.enabled);
    CHECK(c.routes[0].headers.reset_epoch);
    CHECK(c.routes[0].headers.ietf_draft);
    CHECK(c.routes[1].headers.enabled);
    CHECK_FALSE(c.routes[1].headers.reset_epoch);
    CHECK(c.routes[1].headers.ietf_draft);
    CHECK(c.routes[2].headers.reset_epoch);
  }
}

TEST_CASE("headers: errors") {
  CHECK(error_of(std::string(k_one_route) + "headers:\n  reset: unix\n") ==
        "test.yaml:7: headers.reset: expected one of: delta, epoch");
  CHECK(error_of(std::string(k_one_route) + "headers:\n  enabled: yes\n") ==
        "test.yaml:7: headers.enabled: expected true or false");
  CHECK(error_of(std::string(k_one_route) + "headers:\n  draft: true\n")
            .find("test.yaml:7: headers.draft: unknown key") == 0);
  CHECK(error_of(R"(routes:
  - name: all
    upstream: api
    headers:
      ietf_draft: maybe
)") == "test.yaml:7: routes[0].headers.ietf_draft: expected true or false");
}

TEST_CASE("deny: default is 429 with the problem body") {
  config c = load(k_one_route);
  CHECK(c.routes[0].deny.status == 429);
  CHECK_FALSE(c.routes[0].deny.body.has_value());
  CHECK(c.routes[0].deny.content_type == "application/problem+json");
}

TEST_CASE("deny: custom status, body and content type") {
  SUBCASE("status only: the problem body, with that status") {
    config c = load(std::string(k_one_route) + "    deny: { status: 503 }\n");
    CHECK(c.routes[0].deny.status == 503);
    CHECK_FALSE(c.routes[0].deny.body.has_value());
    CHECK(c.routes[0].deny.content_type == "application/problem+json");
  }
  SUBCASE("a body is plain text unless told otherwise") {
    config c = load(std::string(k_one_route) + "    deny: { body: slow down }\n");
    CHECK(c.routes[0].deny.status == 429);
    CHECK(c.routes[0].deny.body == "slow down");
    CHECK(c.routes[0].deny.content_type == "text/plain; charset=utf-8");
  }
  SUBCASE("a block body and a content type") {
    config c = load(std::string(k_one_route) + R"(    deny:
      status: 403
      content_type: application/json
      body: |
        {"error": "quota"}
)");
    CHECK(c.routes[0].deny.status == 403);
    CHECK(c.routes[0].deny.body == "{\"error\": \"quota\"}\n");
    CHECK(c.routes[0].deny.content_type == "application/json");
  }
  SUBCASE("an empty body") {
    config c = load(std::string(k_one_route) + "    deny: { body: \"\" }\n");
    CHECK(c.routes[0].deny.body == "");
  }
}

TEST_CASE("deny: errors") {
  CHECK(error_of(std::string(k_one_route) + "    deny:\n      status: 200\n") ==
        "test.yaml:7: routes[0].deny.status: expected an error status from 400 to 599");
  CHECK(error_of(std::string(k_one_route) + "    deny:\n      status: 600\n") ==
        "test.yaml:7: routes[0].deny.status: expected an error status from 400 to 599");
  CHECK(error_of(std::string(k_one_route) + "    deny:\n      status: many\n") ==
        "test.yaml:7: routes[0].deny.status: expected a non-negative integer");
  CHECK(error_of(std::string(k_one_route) + "    deny:\n      content_type: json\n") ==
        "test.yaml:7: routes[0].deny.content_type: expected a media type like "
        "\"application/json\" or \"text/html; charset=utf-8\"");
  CHECK(error_of(std::string(k_one_route) +
                 "    deny:\n      content_type: \"text/plain\\r\\nSet-Cookie: a=b\"\n")
            .find("routes[0].deny.content_type: expected a media type") != std::string::npos);
  CHECK(error_of(std::string(k_one_route) + "    deny:\n      headers: {}\n")
            .find("test.yaml:7: routes[0].deny.headers: unknown key") == 0);
  CHECK(error_of(std::string(k_one_route) + "    deny:\n      body: \"" +
                 std::string(64 * 1024 + 1, 'x') + "\"\n") ==
        "test.yaml:7: routes[0].deny.body: at most 65536 bytes");
}

TEST_CASE("the reference file still loads and the shipped examples load") {
  for (const char* file : {"config/examples/reference.yaml", "config/ratewall.yaml",
                           "config/examples/simulate.yaml", "config/examples/operations.yaml"}) {
    CAPTURE(file);
    CHECK_NOTHROW(load_config_file(ratewall::testing::repo_file(file)));
  }
}

TEST_CASE("store.snapshot: off by default; a path and an interval") {
  const config off = load(k_one_route);
  CHECK(off.store.snapshot_path.empty());
  const config on =
      load(std::string(k_one_route) + "store: { snapshot: { path: state.bin, interval: 30s } }\n");
  CHECK(on.store.snapshot_path == "state.bin");
  CHECK(on.store.snapshot_interval == std::chrono::seconds(30));
  CHECK(load(std::string(k_one_route) + "store: { snapshot: { path: s.bin } }\n")
            .store.snapshot_interval == std::chrono::seconds(10));
}
