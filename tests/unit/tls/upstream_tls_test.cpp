// The client side towards https upstreams: verification, names, client certificates, sessions.

#include "ratewall/tls/upstream_tls.hpp"

#include <doctest/doctest.h>

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>

#include "memory_handshake.hpp"
#include "ratewall/config/loader.hpp"
#include "ratewall/tls/server_tls.hpp"
#include "support/test_pki.hpp"

using namespace ratewall;
using ratewall::testing::test_pki;

namespace {

// `tls_yaml` under upstreams.api, whose target is `target`; the config file sits in the pki's
// directory.
upstream_config upstream_with(const test_pki& pki, const std::string& target,
                              const std::string& tls_yaml = {}) {
  std::string yaml = "upstreams:\n  api:\n    targets: [\"https://" + target + "\"]\n";
  if (!tls_yaml.empty()) {
    yaml += "    tls:\n" + tls_yaml;
  }
  yaml += "routes:\n  - { name: all, upstream: api }\n";
  return parse_config(yaml, pki.dir() + "/ratewall.yaml").upstreams.at(0);
}

std::shared_ptr<const upstream_tls> load(const test_pki& pki, const upstream_config& u) {
  return upstream_tls::load(u, pki.dir() + "/ratewall.yaml");
}

// An upstream serving `cert` (through server_tls, as ratewall's own listener would).
std::shared_ptr<const server_tls> upstream_server(const test_pki& pki,
                                                  const test_pki::issued& cert) {
  server_tls_config cfg;
  cfg.certificates.push_back(tls_certificate_files{cert.cert, cert.key, {}, {}});
  return server_tls::load(cfg, false, pki.dir() + "/upstream.yaml");
}

struct outcome {
  bool ok = false;
  std::string reason;      // upstream_tls::failure_reason when not ok
  std::string server_sni;  // what the upstream was asked for
  std::string alpn;        // what it chose
  bool resumed = false;
};

outcome connect(const upstream_tls& client_tls, const server_tls& server, const std::string& host,
                std::uint16_t port = 443) {
  testing::ssl_ptr client(SSL_new(client_tls.context().native_handle()));
  REQUIRE(client_tls.prepare(client.get(), host, port));
  testing::ssl_ptr upstream(SSL_new(server.context().native_handle()));
  outcome o;
  o.ok = testing::handshake(client.get(), upstream.get());
  if (!o.ok) {
    o.reason =
        upstream_tls::failure_reason(client.get(), boost::asio::ssl::error::stream_truncated);
  }
  const char* sni = SSL_get_servername(upstream.get(), TLSEXT_NAMETYPE_host_name);
  o.server_sni = sni != nullptr ? sni : "";
  o.alpn = testing::alpn_selected(client.get());
  o.resumed = SSL_session_reused(client.get()) == 1;
  return o;
}

config_error load_error(const test_pki& pki, const upstream_config& u) {
  try {
    load(pki, u);
  } catch (const config_error& e) {
    return e;
  }
  FAIL("expected a config_error");
  return config_error("", 0, "", "");
}

}  // namespace

TEST_CASE("verify on: the upstream's certificate must chain to ca_file and carry the name") {
  test_pki pki;
  auto server = upstream_server(pki, pki.issue("api", {"api.test"}));
  const std::string ca = "      ca_file: " + pki.ca_cert() + "\n";

  SUBCASE("the right CA and name: connected, SNI sent, http/1.1 offered and chosen") {
    auto tls = load(pki, upstream_with(pki, "api.test:443", ca));
    outcome o = connect(*tls, *server, "api.test");
    CHECK(o.ok);
    CHECK(o.server_sni == "api.test");
    CHECK(o.alpn == "http/1.1");
  }
  SUBCASE("a certificate from another CA") {
    test_pki other;
    auto tls =
        load(pki, upstream_with(pki, "api.test:443", "      ca_file: " + other.ca_cert() + "\n"));
    outcome o = connect(*tls, *server, "api.test");
    CHECK_FALSE(o.ok);
    CHECK(o.reason == "certificate verify failed: unable to get local issuer certificate");
  }
  SUBCASE("the system's CAs do not know the test CA") {
    auto tls = load(pki, upstream_with(pki, "api.test:443"));
    outcome o = connect(*tls, *server, "api.test");
    CHECK_FALSE(o.ok);
    CHECK(o.reason.find("certificate verify failed") == 0);
  }
  SUBCASE("a name the certificate does not carry") {
    auto tls = load(pki, upstream_with(pki, "other.test:443", ca));
    outcome o = connect(*tls, *server, "other.test");
    CHECK_FALSE(o.ok);
    CHECK(o.reason == "certificate verify failed: hostname mismatch");
  }
  SUBCASE("server_name replaces the target's host for SNI and verification") {
    auto tls = load(pki, upstream_with(pki, "10.0.0.7:443", ca + "      server_name: API.test\n"));
    outcome o = connect(*tls, *server, "10.0.0.7");
    CHECK(o.ok);
    CHECK(o.server_sni == "api.test");
  }
  SUBCASE("a partial wildcard does not cover a name") {
    auto partial = upstream_server(pki, pki.issue("partial", {"a*.test"}));
    auto tls = load(pki, upstream_with(pki, "ab.test:443", ca));
    CHECK(connect(*tls, *partial, "ab.test").reason ==
          "certificate verify failed: hostname mismatch");
  }
}

TEST_CASE("an IP literal target: no SNI, verified against the certificate's IP addresses") {
  test_pki pki;
  const std::string ca = "      ca_file: " + pki.ca_cert() + "\n";
  SUBCASE("IPv4 in the certificate") {
    auto server = upstream_server(pki, pki.issue("ip", {"api.test"}, {"127.0.0.1"}));
    auto tls = load(pki, upstream_with(pki, "127.0.0.1:8443", ca));
    outcome o = connect(*tls, *server, "127.0.0.1");
    CHECK(o.ok);
    CHECK(o.server_sni.empty());
  }
  SUBCASE("IPv6 in the certificate") {
    auto server = upstream_server(pki, pki.issue("ip6", {}, {"::1"}));
    auto tls = load(pki, upstream_with(pki, "[::1]:8443", ca));
    CHECK(connect(*tls, *server, "::1").ok);
  }
  SUBCASE("an address the certificate does not carry") {
    auto server = upstream_server(pki, pki.issue("ip", {"127.0.0.1"}, {"127.0.0.2"}));
    auto tls = load(pki, upstream_with(pki, "127.0.0.1:8443", ca));
    outcome o = connect(*tls, *server, "127.0.0.1");
    CHECK_FALSE(o.ok);  // a DNS name spelled like the address does not count
    CHECK(o.reason == "certificate verify failed: IP address mismatch");
  }
}

TEST_CASE("verify off: any certificate is taken, and a failure is not blamed on it") {
  test_pki pki;
  test_pki other;
  auto tls = load(pki, upstream_with(pki, "wrong.test:443", "      verify: false\n"));
  auto server = upstream_server(other, other.issue("api", {"api.test"}));
  CHECK(connect(*tls, *server, "wrong.test").ok);

  // A handshake that fails for another reason: TLS 1.2 at most against a 1.3-only upstream.
  server_tls_config only_13;
  const auto cert = other.issue("api", {"api.test"});
  only_13.certificates.push_back(tls_certificate_files{cert.cert, cert.key, {}, {}});
  only_13.min_version = tls_version::v1_3;
  auto strict = server_tls::load(only_13, false, other.dir() + "/upstream.yaml");
  SSL_CTX_set_max_proto_version(tls->context().native_handle(), TLS1_2_VERSION);
  outcome o = connect(*tls, *strict, "wrong.test");
  CHECK_FALSE(o.ok);
  CHECK(o.reason == boost::system::error_code(boost::asio::ssl::error::stream_truncated).message());
}

TEST_CASE("upstream TLS file problems are config_errors naming the file, line and key") {
  test_pki pki;
  const std::string config_file = pki.dir() + "/ratewall.yaml";
  const auto client = pki.issue("gateway", {"gateway.test"});
  // upstream_with puts the tls keys on lines 5 and on.
  SUBCASE("a missing ca_file, relative to the config file") {
    config_error e =
        load_error(pki, upstream_with(pki, "api.test:443", "      ca_file: ca/x.pem\n"));
    CHECK(std::string(e.what()) == config_file +
                                       ":5: upstreams.api.tls.ca_file: cannot read CA file " +
                                       pki.dir() + "/ca/x.pem: No such file or directory");
  }
  SUBCASE("a ca_file that is not PEM") {
    const std::string text = pki.write_file("ca.txt", "hello\n");
    config_error e =
        load_error(pki, upstream_with(pki, "api.test:443", "      ca_file: " + text + "\n"));
    CHECK(e.key_path() == "upstreams.api.tls.ca_file");
    CHECK(e.message() ==
          "CA file " + text + " is not PEM (expected -----BEGIN CERTIFICATE----- blocks)");
  }
  SUBCASE("a missing client certificate") {
    config_error e = load_error(
        pki, upstream_with(pki, "api.test:443",
                           "      client_cert: nope.pem\n      client_key: " + client.key + "\n"));
    CHECK(e.line() == 5);
    CHECK(e.key_path() == "upstreams.api.tls.client_cert");
    CHECK(e.message().find(pki.dir() + "/nope.pem") != std::string::npos);
  }
  SUBCASE("a missing client key") {
    config_error e = load_error(
        pki, upstream_with(pki, "api.test:443",
                           "      client_cert: " + client.cert + "\n      client_key: no.key\n"));
    CHECK(e.line() == 6);
    CHECK(e.key_path() == "upstreams.api.tls.client_key");
    CHECK(e.message().find(pki.dir() + "/no.key") != std::string::npos);
  }
  SUBCASE("a client key that does not match") {
    const auto mismatch = pki.key_mismatch("gateway", {"gateway.test"});
    config_error e =
        load_error(pki, upstream_with(pki, "api.test:443",
                                      "      client_cert: " + mismatch.cert +
                                          "\n      client_key: " + mismatch.key + "\n"));
    CHECK(e.key_path() == "upstreams.api.tls.client_key");
    CHECK(e.message().rfind(
              "key file " + mismatch.key + " does not match certificate " + mismatch.cert, 0) == 0);
  }
  SUBCASE("an expired client certificate") {
    const auto expired = pki.issue("gateway", {"gateway.test"}, {}, -10, -1);
    config_error e =
        load_error(pki, upstream_with(pki, "api.test:443",
                                      "      client_cert: " + expired.cert +
                                          "\n      client_key: " + expired.key + "\n"));
    CHECK(e.key_path() == "upstreams.api.tls.client_cert");
    CHECK(e.message().rfind("certificate " + expired.cert + " expired on ", 0) == 0);
  }
  SUBCASE("a good client certificate is loaded into the context") {
    auto tls = load(pki, upstream_with(pki, "api.test:443",
                                       "      client_cert: " + client.cert +
                                           "\n      client_key: " + client.key + "\n"));
    CHECK(SSL_CTX_get0_certificate(tls->context().native_handle()) != nullptr);
  }
}

TEST_CASE("reconnecting to a target resumes its last session") {
  test_pki pki;
  auto server = upstream_server(pki, pki.issue("api", {"api.test"}));
  for (int max_version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    CAPTURE(max_version);
    auto tls =
        load(pki, upstream_with(pki, "api.test:443", "      ca_file: " + pki.ca_cert() + "\n"));
    SSL_CTX_set_max_proto_version(tls->context().native_handle(), max_version);
    CHECK_FALSE(connect(*tls, *server, "api.test", 443).resumed);
    outcome again = connect(*tls, *server, "api.test", 443);
    CHECK(again.ok);
    CHECK(again.resumed);
    CHECK_FALSE(connect(*tls, *server, "api.test", 8443).resumed);  // another target
  }
}

TEST_CASE("the client context: TLS 1.2 or later, no renegotiation") {
  test_pki pki;
  auto tls = load(pki, upstream_with(pki, "api.test:443"));
  SSL_CTX* ctx = tls->context().native_handle();
  CHECK(SSL_CTX_get_min_proto_version(ctx) == TLS1_2_VERSION);
  CHECK((SSL_CTX_get_options(ctx) & SSL_OP_NO_RENEGOTIATION) != 0);
  CHECK(SSL_CTX_get_verify_mode(ctx) == SSL_VERIFY_PEER);
}
