// server.http2 and routes[].grpc (issue 16): defaults, every key, and each bound at its edge,
// with errors naming file, line and key. Only the configuration: nothing serves HTTP/2 yet.

#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "config_test_support.hpp"

using namespace ratewall;
using namespace std::chrono_literals;
using ratewall::testing::config_error_of;

namespace {

constexpr const char* k_api = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
)";

constexpr const char* k_routes = R"(routes:
  - { name: all, upstream: api }
)";

// `server.http2` holding `keys`: `http2:` is line 6, the first key line 7.
std::string with_http2(const std::string& keys) {
  return std::string(k_api) + k_routes + "server:\n  http2:\n" + keys;
}

http2_config load_http2(const std::string& keys) {
  return parse_config(with_http2(keys), "test.yaml").server.http2;
}

std::string http2_error(const std::string& keys) {
  return config_error_of(with_http2(keys));
}

// One route holding `fields` (its first field is line 6).
std::string with_route(const std::string& fields) {
  return std::string(k_api) + "routes:\n  - name: r\n    upstream: api\n" + fields;
}

route_config load_route(const std::string& fields) {
  return parse_config(with_route(fields), "test.yaml").routes[0];
}

}  // namespace

TEST_CASE("server.http2: defaults when absent or empty") {
  for (const std::string& yaml :
       {std::string(k_api) + k_routes, std::string(k_api) + k_routes + "server:\n  http2:\n"}) {
    CAPTURE(yaml);
    const http2_config h = parse_config(yaml, "test.yaml").server.http2;
    CHECK_FALSE(h.enabled);  // off unless asked for
    CHECK(h.max_concurrent_streams == 100);
    CHECK(h.initial_window == 64 * 1024);
    CHECK(h.connection_window == 1024 * 1024);
    CHECK(h.max_resets_per_second == 100);
    CHECK(h.header_table_size == 4096);
    CHECK(h.settings_timeout == 10s);
  }
}

TEST_CASE("server.http2: every key, sizes with units") {
  const http2_config h = load_http2(R"(    enabled: true
    max_concurrent_streams: 250
    initial_window: 128KiB
    connection_window: 4MiB
    max_resets_per_second: 50
    header_table_size: 8KiB
    settings_timeout: 2s
)");
  CHECK(h.enabled);
  CHECK(h.max_concurrent_streams == 250);
  CHECK(h.initial_window == 128 * 1024);
  CHECK(h.connection_window == 4 * 1024 * 1024);
  CHECK(h.max_resets_per_second == 50);
  CHECK(h.header_table_size == 8 * 1024);
  CHECK(h.settings_timeout == 2s);
  // Plain byte counts too.
  CHECK(load_http2("    initial_window: 65535\n").initial_window == 65535);
  CHECK(load_http2("    header_table_size: 0\n").header_table_size == 0);  // no dynamic table
}

TEST_CASE("server.http2: the bounds themselves are accepted") {
  CHECK(load_http2("    max_concurrent_streams: 1\n").max_concurrent_streams == 1);
  CHECK(load_http2("    max_concurrent_streams: 1000\n").max_concurrent_streams == 1000);
  const http2_config smallest =
      load_http2("    initial_window: 16KiB\n    connection_window: 65535\n");
  CHECK(smallest.initial_window == 16384);
  CHECK(smallest.connection_window == 65535);
  const http2_config largest =
      load_http2("    initial_window: 2147483647\n    connection_window: 2147483647\n");
  CHECK(largest.initial_window == 2147483647);
  CHECK(largest.connection_window == 2147483647);
  CHECK(load_http2("    max_resets_per_second: 1\n").max_resets_per_second == 1);
  CHECK(load_http2("    max_resets_per_second: 100000\n").max_resets_per_second == 100000);
  CHECK(load_http2("    header_table_size: 64KiB\n").header_table_size == 65536);
  CHECK(load_http2("    settings_timeout: 1s\n").settings_timeout == 1s);
  CHECK(load_http2("    settings_timeout: 1000ms\n").settings_timeout == 1s);
  CHECK(load_http2("    settings_timeout: 5m\n").settings_timeout == 5min);
  CHECK(load_http2("    settings_timeout: 300s\n").settings_timeout == 5min);
}

TEST_CASE("server.http2: one past each bound is an error naming file, line and key") {
  const std::string at = "test.yaml:7: server.http2.";
  SUBCASE("max_concurrent_streams: 1 to 1000") {
    CHECK(http2_error("    max_concurrent_streams: 0\n") ==
          at + "max_concurrent_streams: must be at least 1");
    CHECK(http2_error("    max_concurrent_streams: 1001\n") ==
          at + "max_concurrent_streams: must be at most 1000 (each stream may hold an upstream "
               "connection and a window of request body)");
  }
  SUBCASE("initial_window from 16KiB, connection_window from 65535, both to 2GiB - 1") {
    CHECK(http2_error("    initial_window: 16383\n") ==
          at + "initial_window: must be at least 16384 (16KiB: one DATA frame of the default "
               "size)");
    CHECK(http2_error("    initial_window: 16KiB\n    connection_window: 65534\n") ==
          "test.yaml:8: server.http2.connection_window: must be at least 65535 (a "
          "connection's window starts at 65535 and can only grow)");
    for (const char* key : {"initial_window", "connection_window"}) {
      CAPTURE(key);
      CHECK(http2_error(std::string("    ") + key + ": 2147483648\n") ==
            at + key + ": must be at most 2147483647 (2GiB - 1): the largest HTTP/2 window");
      CHECK(http2_error(std::string("    ") + key + ": 2GiB\n") ==
            at + key + ": must be at most 2147483647 (2GiB - 1): the largest HTTP/2 window");
    }
  }
  SUBCASE("max_resets_per_second: 1 to 100000") {
    CHECK(http2_error("    max_resets_per_second: 0\n") ==
          at + "max_resets_per_second: must be at least 1");
    CHECK(http2_error("    max_resets_per_second: 100001\n") ==
          at + "max_resets_per_second: must be at most 100000");
  }
  SUBCASE("header_table_size: 0 to 64KiB") {
    CHECK(http2_error("    header_table_size: 65537\n") ==
          at + "header_table_size: must be at most 65536 (64KiB: the table is kept per "
               "connection)");
    CHECK(http2_error("    header_table_size: 1MiB\n") ==
          at + "header_table_size: must be at most 65536 (64KiB: the table is kept per "
               "connection)");
  }
  SUBCASE("settings_timeout: 1s to 5m") {
    const std::string too_short = at +
                                  "settings_timeout: must be at least 1s (a client needs a "
                                  "round trip to acknowledge SETTINGS)";
    CHECK(http2_error("    settings_timeout: 999ms\n") == too_short);
    CHECK(http2_error("    settings_timeout: 1ms\n") == too_short);
    CHECK(http2_error("    settings_timeout: 0s\n") == too_short);
    const std::string too_long = at +
                                 "settings_timeout: must be at most 5m (a client that never "
                                 "acknowledges SETTINGS holds its connection that long)";
    CHECK(http2_error("    settings_timeout: 300001ms\n") == too_long);
    CHECK(http2_error("    settings_timeout: 301s\n") == too_long);
    CHECK(http2_error("    settings_timeout: 1h\n") == too_long);
  }
  SUBCASE("values of the wrong kind") {
    CHECK(http2_error("    enabled: yes\n") == at + "enabled: expected true or false");
    CHECK(http2_error("    initial_window: 64KB\n") ==
          at + R"(initial_window: expected a byte size like 16384, "64KiB" or "10MiB")");
    CHECK(http2_error("    settings_timeout: 10\n").rfind(at + "settings_timeout: ", 0) == 0);
  }
}

TEST_CASE("server.http2: connection_window below initial_window") {
  const std::string below =
      " server.http2.connection_window: must be at least server.http2.initial_window";
  CHECK(http2_error("    initial_window: 128KiB\n    connection_window: 64KiB\n") ==
        "test.yaml:8:" + below + " (131072)");
  // In either order in the file; and below the default initial window (64KiB).
  CHECK(http2_error("    connection_window: 64KiB\n    initial_window: 128KiB\n") ==
        "test.yaml:7:" + below + " (131072)");
  CHECK(http2_error("    connection_window: 65535\n") == "test.yaml:7:" + below + " (65536)");
  // An initial window above the default connection window (1MiB) names the key to raise.
  CHECK(http2_error("    initial_window: 2MiB\n") ==
        "test.yaml:7: server.http2.initial_window: must be at most "
        "server.http2.connection_window (1048576, its default)");
  // Equal is enough.
  const http2_config equal = load_http2("    initial_window: 2MiB\n    connection_window: 2MiB\n");
  CHECK(equal.connection_window == equal.initial_window);
}

TEST_CASE("server.http2: unknown keys and a value that is not a mapping") {
  CHECK(http2_error("    max_streams: 10\n") ==
        "test.yaml:7: server.http2.max_streams: unknown key (expected one of: enabled, "
        "max_concurrent_streams, initial_window, connection_window, max_resets_per_second, "
        "header_table_size, settings_timeout)");
  CHECK(config_error_of(std::string(k_api) + k_routes + "server:\n  http2: true\n") ==
        "test.yaml:6: server.http2: expected a mapping");
}

TEST_CASE("routes[].grpc: off by default; a grpc route's request bodies stream") {
  SUBCASE("absent: not gRPC, bodies buffered") {
    const route_config r = load_route("");
    CHECK_FALSE(r.grpc);
    CHECK(r.request_buffering);
  }
  SUBCASE("grpc: true turns buffering off without request_buffering written") {
    const route_config r = load_route("    grpc: true\n");
    CHECK(r.grpc);
    CHECK_FALSE(r.request_buffering);
  }
  SUBCASE("grpc: true with request_buffering: false written out") {
    const route_config r = load_route("    grpc: true\n    request_buffering: false\n");
    CHECK(r.grpc);
    CHECK_FALSE(r.request_buffering);
  }
  SUBCASE("grpc: false leaves request_buffering as written") {
    CHECK(load_route("    grpc: false\n").request_buffering);
    CHECK(load_route("    grpc: false\n    request_buffering: true\n").request_buffering);
    CHECK_FALSE(load_route("    grpc: false\n    request_buffering: false\n").request_buffering);
  }
}

TEST_CASE("routes[].grpc: request_buffering: true written out is refused on its key") {
  const std::string refused =
      "request_buffering: request_buffering cannot be true on a grpc route (gRPC calls stream)";
  CHECK(config_error_of(with_route("    grpc: true\n    request_buffering: true\n")) ==
        "test.yaml:7: routes[0]." + refused);
  // In either order in the file.
  CHECK(config_error_of(with_route("    request_buffering: true\n    grpc: true\n")) ==
        "test.yaml:6: routes[0]." + refused);
  CHECK(config_error_of(with_route("    grpc: yes\n")) ==
        "test.yaml:6: routes[0].grpc: expected true or false");
}

TEST_CASE("routes[].grpc: cost_from_response from a JSON body is refused, from a header loads") {
  const std::string refused =
      "routes[0].cost_from_response.json: cannot be read on a grpc route: a gRPC response body "
      "is length-prefixed messages, never one JSON document (use header)";
  CHECK(config_error_of(
            with_route("    grpc: true\n    cost_from_response: { json: usage.total_tokens }\n")) ==
        "test.yaml:7: " + refused);
  // In either order in the file.
  CHECK(config_error_of(
            with_route("    cost_from_response: { json: usage.total_tokens }\n    grpc: true\n")) ==
        "test.yaml:6: " + refused);
  SUBCASE("a header on a grpc route") {
    const route_config r =
        load_route("    grpc: true\n    cost_from_response: { header: x-tokens-used }\n");
    REQUIRE(r.cost_from_response.has_value());
    CHECK(r.cost_from_response->from == cost_from_response_config::source::header);
    CHECK(r.cost_from_response->header == "x-tokens-used");
  }
  SUBCASE("a JSON path where grpc is false") {
    const route_config r =
        load_route("    grpc: false\n    cost_from_response: { json: usage.total_tokens }\n");
    REQUIRE(r.cost_from_response.has_value());
    CHECK(r.cost_from_response->from == cost_from_response_config::source::json);
  }
}

TEST_CASE("routes[].grpc: a denial body or content type is refused, a denial status loads") {
  const std::string why =
      ": cannot be set on a grpc route: a gRPC call is denied Trailers-Only (content-type "
      "application/grpc, grpc-status and grpc-message, no body)";
  CHECK(config_error_of(with_route("    grpc: true\n    deny:\n      body: slow down\n")) ==
        "test.yaml:8: routes[0].deny.body" + why);
  CHECK(config_error_of(
            with_route("    grpc: true\n    deny:\n      content_type: application/json\n")) ==
        "test.yaml:8: routes[0].deny.content_type" + why);
  // In either order in the file.
  CHECK(config_error_of(with_route("    deny:\n      body: slow down\n    grpc: true\n")) ==
        "test.yaml:7: routes[0].deny.body" + why);
  SUBCASE("a status on a grpc route: its grpc-status") {
    const route_config r = load_route("    grpc: true\n    deny: { status: 503 }\n");
    CHECK(r.deny.status == 503);
    CHECK_FALSE(r.deny.body.has_value());
  }
  SUBCASE("a body and content type where grpc is false") {
    const route_config r =
        load_route("    grpc: false\n    deny: { body: slow down, content_type: text/plain }\n");
    CHECK(r.deny.body == "slow down");
    CHECK(r.deny.content_type == "text/plain");
  }
}
