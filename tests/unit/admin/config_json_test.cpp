// GET /admin/config's body for the TLS and HTTP/2 keys: every key shown, file paths but never
// contents.

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "ratewall/admin/admin_server.hpp"
#include "ratewall/config/loader.hpp"

using namespace ratewall;
using json = nlohmann::json;

namespace {

json dump(const std::string& yaml) {
  return json::parse(effective_config_json(parse_config(yaml, "test.yaml"), false));
}

constexpr const char* k_routes = R"(routes:
  - { name: all, upstream: api }
)";

}  // namespace

TEST_CASE("/admin/config: the TLS listener, tunnels and https upstreams") {
  json j = dump(std::string(k_routes) + R"(server:
  listen: off
  tunnel_idle_timeout: 10m
  tls:
    listen: "[::]:443"
    certificates:
      - { cert: /etc/ratewall/api.pem, key: /etc/ratewall/api.key }
      - { cert: other.pem, key: other.key }
    min_version: "1.3"
upstreams:
  api:
    targets: ["https://10.0.0.7:443", "https://[fd00::7]:443"]
    tls:
      ca_file: ca.pem
      server_name: api.internal
      client_cert: client.pem
      client_key: client.key
  plain: { targets: [127.0.0.1:8000] }
)");
  const json& server = j["server"];
  CHECK(server["listen"] == "off");
  CHECK(server["tunnel_idle_timeout"] == "10m");
  CHECK(server["tls"]["listen"] == "[::]:443");
  CHECK(server["tls"]["min_version"] == "1.3");
  CHECK(server["tls"]["certificates"] ==
        json::parse(R"([{"cert": "/etc/ratewall/api.pem", "key": "/etc/ratewall/api.key"},
                        {"cert": "other.pem", "key": "other.key"}])"));
  const json& api = j["upstreams"]["api"];
  CHECK(api["targets"] == json::parse(R"(["https://10.0.0.7:443", "https://[fd00::7]:443"])"));
  CHECK(api["tls"] == json::parse(R"({"verify": true, "ca_file": "ca.pem",
                                      "server_name": "api.internal", "client_cert": "client.pem",
                                      "client_key": "client.key"})"));
  CHECK(j["upstreams"]["plain"]["targets"][0] == "127.0.0.1:8000");
  CHECK(j["upstreams"]["plain"]["tls"].is_null());
}

TEST_CASE("/admin/config: defaults of the TLS keys") {
  json j = dump(std::string(k_routes) + R"(upstreams:
  api: { targets: ["https://api.internal:443"] }
)");
  CHECK(j["server"]["listen"] == "0.0.0.0:8080");
  CHECK(j["server"]["tunnel_idle_timeout"] == "1h");
  CHECK(j["server"]["tls"].is_null());
  CHECK(j["upstreams"]["api"]["tls"] ==
        json::parse(R"({"verify": true, "ca_file": null, "server_name": null,
                        "client_cert": null, "client_key": null})"));
}

TEST_CASE("/admin/config: server.http2 and each route's grpc") {
  json j = dump(R"(server:
  http2: { enabled: false, max_concurrent_streams: 500, initial_window: 256KiB,
           connection_window: 8MiB, max_resets_per_second: 20, header_table_size: 16KiB,
           settings_timeout: 1500ms }
upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - { name: calls, upstream: api, grpc: true }
  - { name: all, upstream: api }
)");
  CHECK(j["server"]["http2"] == json::parse(R"({"enabled": false, "max_concurrent_streams": 500,
                                               "initial_window": 262144,
                                               "connection_window": 8388608,
                                               "max_resets_per_second": 20,
                                               "header_table_size": 16384,
                                               "settings_timeout": "1500ms"})"));
  CHECK(j["routes"][0]["grpc"] == true);
  CHECK(j["routes"][0]["request_buffering"] == false);  // a grpc route's bodies stream
  CHECK(j["routes"][1]["grpc"] == false);
  CHECK(j["routes"][1]["request_buffering"] == true);
}

TEST_CASE("/admin/config: defaults of server.http2") {
  json j = dump(std::string(k_routes) + "upstreams:\n  api: { targets: [127.0.0.1:8000] }\n");
  const json& http2 = j["server"]["http2"];
  CHECK(http2.size() == 7);  // every key, though nothing was written
  CHECK(http2["enabled"] == false);
  CHECK(http2["initial_window"] == 65536);
  CHECK(http2["settings_timeout"] == "10s");
  CHECK(j["routes"][0]["grpc"] == false);
}

TEST_CASE("/admin/config: a Redis password is hidden whatever it holds") {
  // The user part ends at the URL's last '@', as the store reads it: a password with '/' or
  // '@' in it (base64 makes them) must not be shown.
  const auto shown = [](const std::string& url) {
    return dump(std::string(k_routes) + "upstreams:\n  api: { targets: [127.0.0.1:1] }\n" +
                "store:\n  redis:\n    url: " + url + "\n")["store"]["redis"]["url"]
        .get<std::string>();
  };
  CHECK(shown("redis://ops:hunter2@127.0.0.1:6379/0") == "redis://ops:***@127.0.0.1:6379/0");
  CHECK(shown("redis://:ab/cd@127.0.0.1:6379/0") == "redis://:***@127.0.0.1:6379/0");
  CHECK(shown("redis://ab/c@d@127.0.0.1:6379") == "redis://***@127.0.0.1:6379");
  CHECK(shown("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0");
}
