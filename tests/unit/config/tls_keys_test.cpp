// The TLS keys: server.listen off, server.tunnel_idle_timeout, server.tls, https:// targets and
// upstreams.<name>.tls. Only their shape: the files are opened by the tls module (tests/unit/tls).

#include <doctest/doctest.h>

#include <chrono>

#include "config_test_support.hpp"

using namespace ratewall;
using namespace std::chrono_literals;
using ratewall::testing::config_error_of;

namespace {

constexpr const char* k_routes = R"(routes:
  - { name: all, upstream: api }
)";

constexpr const char* k_api = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
)";

config load(const std::string& yaml) {
  return parse_config(yaml, "test.yaml");
}

// `server:` body below k_api and k_routes (which take lines 1 to 4; `server:` is line 5).
std::string server_error(const std::string& body) {
  return config_error_of(std::string(k_api) + k_routes + "server:\n" + body);
}

// `upstreams.api` body, then k_routes (`api:` is line 2).
std::string upstream_error(const std::string& body) {
  return config_error_of("upstreams:\n  api:\n" + body + k_routes);
}

}  // namespace

TEST_CASE("TLS defaults: a plain listener only, tunnels idle for up to 1h, http upstreams") {
  config c = load(std::string(k_api) + k_routes);
  CHECK(c.server.plain_listener);
  CHECK_FALSE(c.server.tls.has_value());
  CHECK(c.server.tunnel_idle_timeout == 1h);
  CHECK_FALSE(c.upstreams[0].https);
  CHECK(c.upstreams[0].tls.verify);
}

TEST_CASE("server.tls: every key") {
  config c = load(std::string(k_api) + k_routes + R"(server:
  listen: off
  tunnel_idle_timeout: 5m
  tls:
    listen: "[::]:443"
    certificates:
      - cert: /etc/ratewall/api.pem
        key: /etc/ratewall/api.key
      - { cert: certs/other.pem, key: certs/other.key }
    min_version: "1.3"
)");
  CHECK_FALSE(c.server.plain_listener);
  CHECK(c.server.tunnel_idle_timeout == 5min);
  REQUIRE(c.server.tls.has_value());
  const server_tls_config& tls = *c.server.tls;
  CHECK(tls.listen.host == "::");
  CHECK(tls.listen.port == 443);
  CHECK(tls.min_version == tls_version::v1_3);
  REQUIRE(tls.certificates.size() == 2);
  CHECK(tls.certificates[0].cert == "/etc/ratewall/api.pem");
  CHECK(tls.certificates[0].key == "/etc/ratewall/api.key");
  CHECK(tls.certificates[1].cert == "certs/other.pem");  // as written
  // Where each file was named, for the errors of loading it.
  CHECK(tls.certificates[0].cert_at.line == 11);
  CHECK(tls.certificates[0].cert_at.key_path == "server.tls.certificates[0].cert");
  CHECK(tls.certificates[0].key_at.line == 12);
  CHECK(tls.certificates[0].key_at.key_path == "server.tls.certificates[0].key");
  CHECK(tls.certificates[1].key_at.line == 13);
  CHECK(tls.certificates[1].key_at.key_path == "server.tls.certificates[1].key");
}

TEST_CASE("server.tls: defaults, and both listeners") {
  config c = load(std::string(k_api) + k_routes + R"(server:
  tls:
    certificates: [{ cert: a.pem, key: a.key }]
)");
  CHECK(c.server.plain_listener);
  CHECK(c.server.listen.port == 8080);
  CHECK(c.server.tls->listen.host == "0.0.0.0");
  CHECK(c.server.tls->listen.port == 8443);
  CHECK(c.server.tls->min_version == tls_version::v1_2);
  // Port 0 twice is two ephemeral ports, as tests bind.
  CHECK(load(std::string(k_api) + k_routes + R"(server:
  listen: 127.0.0.1:0
  tls: { listen: 127.0.0.1:0, certificates: [{ cert: a.pem, key: a.key }] }
)")
            .server.tls->listen.port == 0);
}

TEST_CASE("server TLS keys: errors name file, line and key") {
  SUBCASE("listen: off without a TLS listener") {
    CHECK(server_error("  listen: off\n") ==
          "test.yaml:6: server.listen: off needs server.tls (with neither listener nothing would "
          "be served)");
  }
  SUBCASE("tunnel_idle_timeout") {
    CHECK(server_error("  tunnel_idle_timeout: 0s\n") ==
          "test.yaml:6: server.tunnel_idle_timeout: must be greater than 0");
    CHECK(
        server_error("  tunnel_idle_timeout: 10\n") ==
        R"(test.yaml:6: server.tunnel_idle_timeout: expected a duration like "250ms", "1s", "1m",)"
        R"( "1h" or "1d" (the unit is required))");
  }
  SUBCASE("an unknown key") {
    CHECK(server_error("  tls:\n    port: 443\n") ==
          "test.yaml:7: server.tls.port: unknown key (expected one of: listen, certificates, "
          "min_version)");
  }
  SUBCASE("no certificates") {
    CHECK(server_error("  tls:\n    listen: 0.0.0.0:443\n") ==
          "test.yaml:7: server.tls.certificates: missing required key (at least one { cert, key "
          "})");
    CHECK(server_error("  tls:\n") ==
          "test.yaml:6: server.tls.certificates: missing required key (at least one { cert, key "
          "})");
    CHECK(server_error("  tls:\n    certificates: []\n") ==
          "test.yaml:7: server.tls.certificates: expected at least one certificate (the first is "
          "the default)");
  }
  SUBCASE("a certificate entry") {
    CHECK(server_error("  tls:\n    certificates:\n      - cert: a.pem\n") ==
          "test.yaml:8: server.tls.certificates[0].key: missing required key (the certificate's "
          "PEM private key)");
    CHECK(server_error("  tls:\n    certificates:\n      - key: a.key\n") ==
          "test.yaml:8: server.tls.certificates[0].cert: missing required key (a PEM certificate "
          "chain, leaf first)");
    CHECK(server_error("  tls:\n    certificates:\n      - { cert: a.pem, key: a.key, chain: "
                       "c.pem }\n") ==
          "test.yaml:8: server.tls.certificates[0].chain: unknown key (expected one of: cert, "
          "key)");
    CHECK(server_error("  tls:\n    certificates:\n      - { cert: \"\", key: a.key }\n") ==
          "test.yaml:8: server.tls.certificates[0].cert: must not be empty");
    CHECK(server_error("  tls:\n    certificates:\n      - { cert: /etc/ssl/, key: a.key }\n") ==
          "test.yaml:8: server.tls.certificates[0].cert: expected a file path, not a directory");
    CHECK(server_error("  tls:\n    certificates: a.pem\n") ==
          "test.yaml:7: server.tls.certificates: expected a list");
  }
  SUBCASE("min_version") {
    CHECK(server_error("  tls:\n    certificates: [{ cert: a.pem, key: a.key }]\n    "
                       "min_version: \"1.1\"\n") ==
          "test.yaml:8: server.tls.min_version: expected one of: 1.2, 1.3");
  }
  SUBCASE("the TLS listener on the plain listener's address") {
    CHECK(server_error("  listen: 0.0.0.0:8443\n  tls:\n    certificates: [{ cert: a.pem, key: "
                       "a.key }]\n") ==
          "test.yaml:7: server.tls: the same port as server.listen on an address it covers (the "
          "TLS listener needs a port of its own)");
    CHECK(server_error("  tls:\n    listen: 0.0.0.0:8080\n    certificates: [{ cert: a.pem, "
                       "key: a.key }]\n") ==
          "test.yaml:7: server.tls.listen: the same port as server.listen on an address it "
          "covers (the TLS listener needs a port of its own)");
    // A wildcard address takes the port on every address: the other's too, either way.
    CHECK(server_error("  listen: 0.0.0.0:8443\n  tls:\n    listen: 127.0.0.1:8443\n    "
                       "certificates: [{ cert: a.pem, key: a.key }]\n")
              .find("server.tls.listen: the same port as server.listen") != std::string::npos);
    CHECK(server_error("  listen: 127.0.0.1:8443\n  tls:\n    listen: \"[::]:8443\"\n    "
                       "certificates: [{ cert: a.pem, key: a.key }]\n")
              .find("server.tls.listen: the same port as server.listen") != std::string::npos);
    // One address in two spellings.
    CHECK(server_error("  listen: \"[::1]:8443\"\n  tls:\n    listen: \"[0:0::1]:8443\"\n    "
                       "certificates: [{ cert: a.pem, key: a.key }]\n")
              .find("server.tls.listen: the same port as server.listen") != std::string::npos);
    CHECK(server_error(
              "  listen: \"[::ffff:127.0.0.1]:8443\"\n  tls:\n    listen: 127.0.0.1:8443\n    "
              "certificates: [{ cert: a.pem, key: a.key }]\n")
              .find("server.tls.listen: the same port as server.listen") != std::string::npos);
    CHECK(server_error("  listen: 127.0.0.1:8443\n  tls:\n    listen: \"[0::0]:8443\"\n    "
                       "certificates: [{ cert: a.pem, key: a.key }]\n")
              .find("server.tls.listen: the same port as server.listen") != std::string::npos);
    CHECK(server_error("  listen: 127.0.0.1:8443\n  tls:\n    listen: 127.0.0.2:8443\n    "
                       "certificates: [{ cert: a.pem, key: a.key }]\n") == "loaded");
    // With listen: off there is no plain listener to collide with.
    CHECK(server_error("  listen: off\n  tls:\n    listen: 0.0.0.0:8080\n    certificates: [{ "
                       "cert: a.pem, key: a.key }]\n") == "loaded");
  }
}

TEST_CASE("upstream targets: host:port and http:// are http, https:// is https") {
  config c = load(R"(upstreams:
  plain: { targets: [127.0.0.1:8000, "http://backend.internal:8001"] }
  secure: { targets: ["https://api.internal:443", "https://[::1]:8443"] }
)" + std::string("routes:\n  - { name: all, upstream: plain }\n"));
  CHECK_FALSE(c.upstreams[0].https);
  CHECK(c.upstreams[0].targets[1].host == "backend.internal");
  CHECK(c.upstreams[0].targets[1].port == 8001);
  const upstream_config& secure = c.upstreams[1];
  CHECK(secure.https);
  CHECK(secure.targets[0].host == "api.internal");
  CHECK(secure.targets[0].port == 443);
  CHECK(secure.targets[1].host == "::1");
  // Without a tls mapping: verify against the system's CAs, with the target's host.
  CHECK(secure.tls.verify);
  CHECK(secure.tls.ca_file.empty());
  CHECK(secure.tls.server_name.empty());
  CHECK(secure.tls.client_cert.empty());
  CHECK(secure.tls.at.line == 3);
  CHECK(secure.tls.at.key_path == "upstreams.secure");
}

TEST_CASE("upstreams.<name>.tls: every key") {
  config c = load(R"(upstreams:
  api:
    targets: ["https://10.0.0.7:443"]
    tls:
      verify: true
      ca_file: ca/internal.pem
      server_name: API.Internal
      client_cert: /etc/ratewall/client.pem
      client_key: /etc/ratewall/client.key
)" + std::string(k_routes));
  const upstream_tls_config& tls = c.upstreams[0].tls;
  CHECK(tls.verify);
  CHECK(tls.ca_file == "ca/internal.pem");
  CHECK(tls.server_name == "api.internal");  // names compare without case
  CHECK(tls.client_cert == "/etc/ratewall/client.pem");
  CHECK(tls.client_key == "/etc/ratewall/client.key");
  CHECK(tls.at.line == 4);
  CHECK(tls.at.key_path == "upstreams.api.tls");
  CHECK(tls.ca_file_at.line == 6);
  CHECK(tls.ca_file_at.key_path == "upstreams.api.tls.ca_file");
  CHECK(tls.client_cert_at.line == 8);
  CHECK(tls.client_key_at.line == 9);
  CHECK(tls.client_key_at.key_path == "upstreams.api.tls.client_key");

  SUBCASE("verify off, an IP address as server_name") {
    config off = load(R"(upstreams:
  api:
    targets: ["https://backend:443"]
    tls: { verify: false, server_name: "fd00::7" }
)" + std::string(k_routes));
    CHECK_FALSE(off.upstreams[0].tls.verify);
    CHECK(off.upstreams[0].tls.server_name == "fd00::7");
  }
}

TEST_CASE("upstream TLS keys: errors name file, line and key") {
  SUBCASE("targets of two schemes") {
    CHECK(upstream_error("    targets: [\"https://a:443\", \"b:80\"]\n") ==
          "test.yaml:3: upstreams.api.targets[1]: all targets of an upstream use one scheme "
          "(targets[0] is https://)");
    CHECK(upstream_error("    targets:\n      - http://a:80\n      - https://b:443\n") ==
          "test.yaml:5: upstreams.api.targets[1]: all targets of an upstream use one scheme "
          "(targets[0] is http://)");
  }
  SUBCASE("another scheme") {
    CHECK(upstream_error("    targets: [\"ws://a:80\"]\n") ==
          R"(test.yaml:3: upstreams.api.targets[0]: unknown scheme "ws" (expected http:// or )"
          R"(https://))");
  }
  SUBCASE("a path, or no port") {
    CHECK(upstream_error("    targets: [\"https://a:443/api\"]\n") ==
          "test.yaml:3: upstreams.api.targets[0]: expected [http:// or https://]host:port, "
          "without a path");
    CHECK(upstream_error("    targets: [\"https://a\"]\n") ==
          R"(test.yaml:3: upstreams.api.targets[0]: expected "<host>:<port>" like "127.0.0.1:8080")"
          R"( or "[::]:8080" (the port is required))");
    CHECK(upstream_error("    targets: [\"https://a:0\"]\n") ==
          "test.yaml:3: upstreams.api.targets[0]: an upstream target needs a port other than 0");
  }
  SUBCASE("tls on an http upstream") {
    CHECK(upstream_error("    targets: [a:80]\n    tls: { verify: false }\n") ==
          "test.yaml:4: upstreams.api.tls: tls settings need https:// targets");
  }
  SUBCASE("an unknown key") {
    CHECK(upstream_error("    targets: [\"https://a:443\"]\n    tls: { sni: a }\n") ==
          "test.yaml:4: upstreams.api.tls.sni: unknown key (expected one of: verify, ca_file, "
          "server_name, client_cert, client_key)");
  }
  SUBCASE("a client certificate without its key, and the reverse") {
    CHECK(
        upstream_error("    targets: [\"https://a:443\"]\n    tls:\n      client_cert: c.pem\n") ==
        "test.yaml:5: upstreams.api.tls.client_cert: client_cert needs client_key (its private "
        "key) too");
    CHECK(upstream_error("    targets: [\"https://a:443\"]\n    tls:\n      client_key: c.key\n") ==
          "test.yaml:5: upstreams.api.tls.client_key: client_key needs client_cert (its "
          "certificate chain) too");
  }
  SUBCASE("ca_file with verify off") {
    CHECK(upstream_error("    targets: [\"https://a:443\"]\n    tls:\n      verify: false\n      "
                         "ca_file: ca.pem\n") ==
          "test.yaml:6: upstreams.api.tls.ca_file: not used with verify: false");
  }
  SUBCASE("values") {
    CHECK(upstream_error("    targets: [\"https://a:443\"]\n    tls: { verify: no }\n") ==
          "test.yaml:4: upstreams.api.tls.verify: expected true or false");
    CHECK(upstream_error("    targets: [\"https://a:443\"]\n    tls: { server_name: "
                         "\"https://a.test\" }\n") ==
          R"(test.yaml:4: upstreams.api.tls.server_name: "https://a.test" is not a host name or)"
          R"( IP address (write it without scheme, port or brackets))");
    CHECK(upstream_error("    targets: [\"https://a:443\"]\n    tls: { server_name: \"\" }\n") ==
          "test.yaml:4: upstreams.api.tls.server_name: must not be empty");
    CHECK(upstream_error("    targets: [\"https://a:443\"]\n    tls: { ca_file: \"\" }\n") ==
          "test.yaml:4: upstreams.api.tls.ca_file: must not be empty");
  }
}

TEST_CASE("resolve_config_path: relative to the config file's directory") {
  CHECK(resolve_config_path("certs/a.pem", "/etc/ratewall/ratewall.yaml") ==
        "/etc/ratewall/certs/a.pem");
  CHECK(resolve_config_path("/srv/a.pem", "/etc/ratewall/ratewall.yaml") == "/srv/a.pem");
  CHECK(resolve_config_path("a.pem", "config/ratewall.yaml") == "config/a.pem");
  CHECK(resolve_config_path("a.pem", "ratewall.yaml") == "a.pem");  // the working directory
}
