// The TLS listener's certificates: load errors, SNI, versions, ALPN and resumption, each checked
// with an in-memory handshake.

#include "ratewall/tls/server_tls.hpp"

#include <doctest/doctest.h>

#include <boost/asio/ssl/context.hpp>
#include <fstream>
#include <iterator>

#include "memory_handshake.hpp"
#include "ratewall/config/loader.hpp"
#include "support/test_pki.hpp"

using namespace ratewall;
using ratewall::testing::test_pki;

namespace {

constexpr const char* k_routes = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - { name: all, upstream: api }
)";

// server.tls with one certificate entry per pair, in a config file inside the pki's directory.
struct tls_file {
  std::string config_file;
  config cfg;
};

tls_file config_with(const test_pki& pki,
                     const std::vector<std::pair<std::string, std::string>>& certificates,
                     const std::string& extra = {}) {
  std::string yaml = std::string(k_routes) + "server:\n  tls:\n    certificates:\n";
  for (const auto& [cert, key] : certificates) {
    yaml += "      - cert: " + cert + "\n        key: " + key + "\n";
  }
  yaml += extra;
  tls_file out;
  out.config_file = pki.dir() + "/ratewall.yaml";
  out.cfg = parse_config(yaml, out.config_file);
  return out;
}

std::shared_ptr<const server_tls> load(const test_pki& pki,
                                       const std::vector<test_pki::issued>& certificates,
                                       const std::string& extra = {}) {
  std::vector<std::pair<std::string, std::string>> paths;
  for (const auto& c : certificates) {
    paths.emplace_back(c.cert, c.key);
  }
  tls_file f = config_with(pki, paths, extra);
  return server_tls::load(*f.cfg.server.tls, false, f.config_file);
}

// The config_error server_tls::load raises for the single certificate entry (cert, key).
config_error load_error(const test_pki& pki, const std::string& cert, const std::string& key) {
  tls_file f = config_with(pki, {{cert, key}});
  try {
    server_tls::load(*f.cfg.server.tls, false, f.config_file);
  } catch (const config_error& e) {
    return e;
  }
  FAIL("expected a config_error");
  return config_error("", 0, "", "");
}

// Handshakes `client` against a new connection of `tls`; the certificate's CN the client saw.
std::string handshake_sees(const server_tls& tls, SSL* client) {
  testing::ssl_ptr server(SSL_new(tls.context().native_handle()));
  if (!testing::handshake(client, server.get())) {
    return "handshake failed";
  }
  testing::close_both(client, server.get());
  return testing::peer_common_name(client);
}

std::string certificate_for(const server_tls& tls, const std::string& sni) {
  auto ctx = testing::plain_client_context();
  auto client = testing::client_of(ctx.get(), sni);
  return handshake_sees(tls, client.get());
}

}  // namespace

TEST_CASE("server.tls: certificate files relative to the config file's directory") {
  test_pki pki;
  auto issued = pki.issue("api", {"api.test"});
  const std::string cert = issued.cert.substr(pki.dir().size() + 1);
  const std::string key = issued.key.substr(pki.dir().size() + 1);
  REQUIRE(cert.find('/') == std::string::npos);
  tls_file f = config_with(pki, {{cert, key}});
  CHECK(f.cfg.server.tls->certificates[0].cert == cert);  // kept as written
  auto tls = server_tls::load(*f.cfg.server.tls, false, f.config_file);
  REQUIRE(tls->size() == 1);
  CHECK(tls->names(0) == std::vector<std::string>{"api.test"});
  CHECK(resolve_config_path(cert, f.config_file) == issued.cert);
  CHECK(resolve_config_path("/etc/x.pem", f.config_file) == "/etc/x.pem");
  CHECK(resolve_config_path("x.pem", "ratewall.yaml") == "x.pem");  // the cwd's
}

TEST_CASE("every certificate problem is a config_error naming the file, line and key") {
  test_pki pki;
  const auto good = pki.issue("api", {"api.test"});
  const std::string config_file = pki.dir() + "/ratewall.yaml";
  // The entry is on lines 8 (cert) and 9 (key) of the file config_with writes.
  SUBCASE("a missing certificate file") {
    config_error e = load_error(pki, "missing.pem", good.key);
    CHECK(std::string(e.what()) ==
          config_file + ":8: server.tls.certificates[0].cert: cannot read certificate file " +
              pki.dir() + "/missing.pem: No such file or directory");
    CHECK(e.file() == config_file);
  }
  SUBCASE("a missing key file") {
    config_error e = load_error(pki, good.cert, pki.dir() + "/missing.key");
    CHECK(std::string(e.what()) == config_file +
                                       ":9: server.tls.certificates[0].key: cannot read key file " +
                                       pki.dir() + "/missing.key: No such file or directory");
  }
  SUBCASE("a directory") {
    config_error e = load_error(pki, pki.dir(), good.key);
    CHECK(e.message() == "cannot read certificate file " + pki.dir() + ": Is a directory");
  }
  SUBCASE("a certificate file that is not PEM") {
    const std::string der = pki.write_file("cert.der", std::string("\x30\x82\x01\x0a", 4));
    config_error e = load_error(pki, der, good.key);
    CHECK(e.key_path() == "server.tls.certificates[0].cert");
    CHECK(e.message() ==
          "certificate file " + der + " is not PEM (expected -----BEGIN CERTIFICATE----- blocks)");
  }
  SUBCASE("a key file where the certificate belongs") {
    config_error e = load_error(pki, good.key, good.key);
    CHECK(e.message() == "certificate file " + good.key +
                             " is not PEM (expected -----BEGIN CERTIFICATE----- blocks)");
  }
  SUBCASE("a damaged block after the first certificate") {
    std::ifstream in(good.cert);
    std::string pem((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string damaged = pki.write_file(
        "damaged.pem", pem + "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n");
    config_error e = load_error(pki, damaged, good.key);
    CHECK(e.message().find(damaged + " is not PEM") != std::string::npos);
    CHECK(e.message().find("block 2 cannot be read") != std::string::npos);
  }
  SUBCASE("a key file that is not PEM") {
    const std::string text = pki.write_file("key.txt", "not a key\n");
    config_error e = load_error(pki, good.cert, text);
    CHECK(e.line() == 9);
    CHECK(e.key_path() == "server.tls.certificates[0].key");
    CHECK(e.message().rfind("key file " + text + " is not a PEM private key", 0) == 0);
  }
  SUBCASE("a key that does not match its certificate") {
    const auto mismatch = pki.key_mismatch("api", {"api.test"});
    config_error e = load_error(pki, mismatch.cert, mismatch.key);
    CHECK(e.key_path() == "server.tls.certificates[0].key");
    CHECK(e.message().rfind(
              "key file " + mismatch.key + " does not match certificate " + mismatch.cert, 0) == 0);
  }
  SUBCASE("the key of another certificate") {
    const auto other = pki.issue("other", {"other.test"});
    config_error e = load_error(pki, good.cert, other.key);
    CHECK(e.message().find("does not match certificate " + good.cert) != std::string::npos);
  }
  SUBCASE("an expired certificate") {
    const auto expired = pki.issue("old", {"api.test"}, {}, -30, -1);
    config_error e = load_error(pki, expired.cert, expired.key);
    CHECK(e.line() == 8);
    CHECK(e.key_path() == "server.tls.certificates[0].cert");
    CHECK(e.message().rfind("certificate " + expired.cert + " expired on ", 0) == 0);
  }
  SUBCASE("a certificate not valid yet") {
    const auto future = pki.issue("new", {"api.test"}, {}, 2, 30);
    config_error e = load_error(pki, future.cert, future.key);
    CHECK(e.message().rfind("certificate " + future.cert + " is not valid before ", 0) == 0);
  }
  SUBCASE("the second certificate is named by its own entry") {
    const auto expired = pki.issue("old", {"old.test"}, {}, -30, -1);
    tls_file f = config_with(pki, {{good.cert, good.key}, {expired.cert, expired.key}});
    try {
      server_tls::load(*f.cfg.server.tls, false, f.config_file);
      FAIL("expected a config_error");
    } catch (const config_error& e) {
      CHECK(e.line() == 10);
      CHECK(e.key_path() == "server.tls.certificates[1].cert");
    }
  }
}

TEST_CASE("SNI chooses the certificate whose names match; anything else gets the first") {
  test_pki pki;
  auto tls = load(pki, {pki.issue("default", {"default.test"}), pki.issue("a", {"a.test"}),
                        pki.issue("b", {"*.b.test"})});
  CHECK(tls->names(2) == std::vector<std::string>{"*.b.test"});
  CHECK(certificate_for(*tls, "a.test") == "a");
  CHECK(certificate_for(*tls, "A.Test") == "a");
  CHECK(certificate_for(*tls, "x.b.test") == "b");
  CHECK(certificate_for(*tls, "b.test") == "default");      // the wildcard needs a label
  CHECK(certificate_for(*tls, "y.x.b.test") == "default");  // and only one
  CHECK(certificate_for(*tls, "none.test") == "default");
  CHECK(certificate_for(*tls, "") == "default");  // no SNI at all
  CHECK(certificate_for(*tls, "default.test") == "default");
}

TEST_CASE("SNI: an exact name wins over an earlier wildcard; a trailing dot is ignored") {
  test_pki pki;
  auto tls = load(pki, {pki.issue("default", {"default.test"}), pki.issue("wild", {"*.b.test"}),
                        pki.issue("exact", {"exact.b.test", "other.test"})});
  CHECK(tls->select("exact.b.test") == 2);
  CHECK(tls->select("EXACT.B.TEST.") == 2);
  CHECK(tls->select("x.b.test") == 1);
  CHECK(tls->select("other.test") == 2);
  CHECK(tls->select("") == 0);
  CHECK(certificate_for(*tls, "exact.b.test") == "exact");
}

TEST_CASE("SNI: the common name counts only for a certificate without DNS names") {
  test_pki pki;
  auto tls = load(pki, {pki.issue("default", {"default.test"}), pki.issue("cn-only.test", {}),
                        pki.issue("cn-ignored.test", {"san.test"})});
  CHECK(tls->names(1) == std::vector<std::string>{"cn-only.test"});
  CHECK(tls->names(2) == std::vector<std::string>{"san.test"});
  CHECK(certificate_for(*tls, "cn-only.test") == "cn-only.test");
  CHECK(certificate_for(*tls, "cn-ignored.test") == "default");
  CHECK(certificate_for(*tls, "san.test") == "cn-ignored.test");
}

TEST_CASE("certificate names against the names clients ask for (hostile table)") {
  struct row {
    const char* pattern;
    const char* host;
    bool matches;
  };
  const row rows[] = {
      {"a.test", "a.test", true},
      {"a.test", "A.TEST", true},
      {"A.Test", "a.test", true},
      {"a.test", "a.test.evil", false},
      {"a.test", "xa.test", false},
      {"a.test", "", false},
      {"*.b.test", "x.b.test", true},
      {"*.b.test", "X.B.Test", true},
      {"*.b.test", "b.test", false},      // a wildcard covers one label, never none
      {"*.b.test", ".b.test", false},     // an empty label
      {"*.b.test", "y.x.b.test", false},  // nor two
      {"*.b.test", "xb.test", false},
      {"*.b.test", "x.b.test.evil", false},
      {"*.b.test", "*.b.test", false},  // a literal '*' is no host name
      {"*.b.test", "a_b.b.test", true},
      {"a*.b.test", "ab.b.test", false},  // no partial wildcards
      {"*", "a", false},
      {"*.", "a.", false},
      {"", "", false},
  };
  for (const auto& r : rows) {
    CAPTURE(r.pattern);
    CAPTURE(r.host);
    CHECK(server_name_matches(r.pattern, r.host) == r.matches);
  }
  // A NUL inside either name is never a match (string views keep it).
  CHECK_FALSE(server_name_matches(std::string_view("a.test\0x", 8), "a.test"));
  CHECK_FALSE(server_name_matches("*.b.test", std::string_view("x\0.b.test", 9)));
}

TEST_CASE("min_version: 1.3 refuses a client that stops at TLS 1.2; 1.2 takes it") {
  test_pki pki;
  const auto cert = pki.issue("api", {"api.test"});
  auto tls12_only = testing::plain_client_context();
  SSL_CTX_set_max_proto_version(tls12_only.get(), TLS1_2_VERSION);

  SUBCASE("1.3") {
    auto tls = load(pki, {cert}, "    min_version: \"1.3\"\n");
    auto refused = testing::client_of(tls12_only.get(), "api.test");
    CHECK(handshake_sees(*tls, refused.get()) == "handshake failed");
    auto ctx = testing::plain_client_context();
    auto client = testing::client_of(ctx.get(), "api.test");
    CHECK(handshake_sees(*tls, client.get()) == "api");
    CHECK(SSL_version(client.get()) == TLS1_3_VERSION);
  }
  SUBCASE("1.2, the default") {
    auto tls = load(pki, {cert});
    auto client = testing::client_of(tls12_only.get(), "api.test");
    CHECK(handshake_sees(*tls, client.get()) == "api");
    CHECK(SSL_version(client.get()) == TLS1_2_VERSION);
  }
  SUBCASE("below 1.2 never") {
    auto tls = load(pki, {cert});
    auto old = testing::plain_client_context();
    SSL_CTX_set_security_level(old.get(), 0);
    SSL_CTX_set_min_proto_version(old.get(), TLS1_VERSION);
    SSL_CTX_set_max_proto_version(old.get(), TLS1_1_VERSION);
    auto client = testing::client_of(old.get(), "api.test");
    CHECK(handshake_sees(*tls, client.get()) == "handshake failed");
  }
}

TEST_CASE("TLS 1.2 takes only ECDHE with AEAD suites") {
  test_pki pki;
  auto tls = load(pki, {pki.issue("api", {"api.test"})});
  auto ctx = testing::plain_client_context();
  SSL_CTX_set_max_proto_version(ctx.get(), TLS1_2_VERSION);
  SUBCASE("CBC without forward secrecy is refused") {
    SSL_CTX_set_cipher_list(ctx.get(), "AES128-SHA:AES256-SHA256");
    auto client = testing::client_of(ctx.get(), "api.test");
    CHECK(handshake_sees(*tls, client.get()) == "handshake failed");
  }
  SUBCASE("ECDHE-ECDSA-AES128-GCM-SHA256 is taken") {
    SSL_CTX_set_cipher_list(ctx.get(), "ECDHE-ECDSA-AES128-GCM-SHA256");
    auto client = testing::client_of(ctx.get(), "api.test");
    CHECK(handshake_sees(*tls, client.get()) == "api");
  }
}

TEST_CASE("ALPN: http/1.1 is chosen; no ALPN is fine; a client without http/1.1 is refused") {
  test_pki pki;
  auto tls = load(pki, {pki.issue("api", {"api.test"})});
  auto ctx = testing::plain_client_context();
  auto client = testing::client_of(ctx.get(), "api.test");
  SUBCASE("h2 and http/1.1 offered") {
    static constexpr unsigned char k_offer[] = "\x02h2\x08http/1.1";
    SSL_set_alpn_protos(client.get(), k_offer, sizeof k_offer - 1);
    CHECK(handshake_sees(*tls, client.get()) == "api");
    CHECK(testing::alpn_selected(client.get()) == "http/1.1");
  }
  SUBCASE("no ALPN") {
    CHECK(handshake_sees(*tls, client.get()) == "api");
    CHECK(testing::alpn_selected(client.get()).empty());
  }
  SUBCASE("only h2: no_application_protocol, as nginx answers") {
    static constexpr unsigned char k_offer[] = "\x02h2";
    SSL_set_alpn_protos(client.get(), k_offer, sizeof k_offer - 1);
    CHECK(handshake_sees(*tls, client.get()) == "handshake failed");
  }
  SUBCASE("after SNI chose another certificate") {
    auto two = load(pki, {pki.issue("default", {"default.test"}), pki.issue("a", {"a.test"})});
    auto a = testing::client_of(ctx.get(), "a.test");
    static constexpr unsigned char k_offer[] = "\x08http/1.1";
    SSL_set_alpn_protos(a.get(), k_offer, sizeof k_offer - 1);
    CHECK(handshake_sees(*two, a.get()) == "a");
    CHECK(testing::alpn_selected(a.get()) == "http/1.1");
  }
}

TEST_CASE("every context: no renegotiation, no compression") {
  test_pki pki;
  auto tls = load(pki, {pki.issue("api", {"api.test"})}, "    min_version: \"1.3\"\n");
  SSL_CTX* ctx = tls->context().native_handle();
  CHECK((SSL_CTX_get_options(ctx) & SSL_OP_NO_RENEGOTIATION) != 0);
  CHECK((SSL_CTX_get_options(ctx) & SSL_OP_NO_COMPRESSION) != 0);
  CHECK(SSL_CTX_get_min_proto_version(ctx) == TLS1_3_VERSION);
}

TEST_CASE("sessions resume, also on a certificate SNI chose") {
  test_pki pki;
  auto tls = load(pki, {pki.issue("default", {"default.test"}), pki.issue("a", {"a.test"})});
  for (int max_version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    for (const std::string sni : {"default.test", "a.test"}) {
      for (bool tickets : {true, false}) {
        CAPTURE(max_version);
        CAPTURE(sni);
        CAPTURE(tickets);
        auto ctx = testing::plain_client_context();
        SSL_CTX_set_max_proto_version(ctx.get(), max_version);
        if (!tickets) {
          // TLS 1.2 without tickets resumes from the server's session cache.
          SSL_CTX_set_options(ctx.get(), SSL_OP_NO_TICKET);
        }
        auto first = testing::client_of(ctx.get(), sni);
        REQUIRE(handshake_sees(*tls, first.get()) != "handshake failed");
        SSL_SESSION* session = SSL_get1_session(first.get());
        REQUIRE(session != nullptr);
        auto second = testing::client_of(ctx.get(), sni);
        SSL_set_session(second.get(), session);
        SSL_SESSION_free(session);
        CHECK(handshake_sees(*tls, second.get()) != "handshake failed");
        CHECK(SSL_session_reused(second.get()) == 1);
      }
    }
  }
}
