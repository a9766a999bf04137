// identity.jwt through the gateway (issue 13, item 2): tokens minted here with OpenSSL name the
// client their route limits and pick its plan; a token that does not verify is answered 401
// with a problem body and never reaches the upstream; the real binary reloads its JWKS file on
// SIGHUP, and a key set that does not load keeps the old one.

#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/gateway_harness.hpp"
#include "support/http_client.hpp"
#include "support/jwt_mint.hpp"
#include "support/temp_dir.hpp"
#include "support/test_upstream.hpp"

using namespace ratewall::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

const std::string k_secret = "integration-test-secret-0123456789abcdef";

// Two requests a minute per subject on the default plan, five on gold.
std::string config_for(const std::string& jwks_path, const std::string& extra = "") {
  return R"(
identity:
  jwt:
    jwks_file: )" +
         jwks_path + R"(
    hs256_secret_env: RATEWALL_IT_JWT_SECRET
    audience: orders-api
    plan_claim: tier)" +
         extra + R"(
plans: { gold: {} }
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
  - name: orders
    match: { path_prefix: /orders }
    upstream: api
    identify_by: [jwt:sub, ip]
    limits:
      - { name: per-client, rate: 1/m, burst: 2, plans: { gold: { rate: 1/m, burst: 5 } } }
)";
}

header_pairs bearer(const std::string& token) {
  return {{"Authorization", "Bearer " + token}};
}

json claims(const std::string& sub, json extra = json::object()) {
  json c{{"sub", sub}, {"aud", "orders-api"}, {"exp", unix_now() + 600}};
  for (const auto& [k, v] : extra.items()) {
    c[k] = v;
  }
  return c;
}

}  // namespace

TEST_CASE(
    "JWT: the token's subject is the client its limits count; its tier claim picks the plan") {
  ::setenv("RATEWALL_IT_JWT_SECRET", k_secret.c_str(), 1);
  temp_dir dir;
  const jwt_signer rsa = jwt_signer::rsa("k1");
  const jwt_signer ec = jwt_signer::ec("k2");
  const jwt_signer hs = jwt_signer::hs(k_secret);
  const std::string jwks = dir.write("jwks.json", jwks_of({&rsa, &ec}));
  test_upstream upstream;
  gateway_harness gw(config_for(jwks), upstream.port());
  http_client client(gw.port());

  // alice's budget of two is spent by tokens of any algorithm; the Authorization field reaches
  // the upstream as it was sent.
  const std::string alice = rsa.sign(claims("alice"));
  const http_reply first = client.get("/orders", bearer(alice));
  CHECK(first.status == 200);
  CHECK(first.header("x-ratelimit-remaining") == "1");
  CHECK(client.get("/orders", bearer(ec.sign(claims("alice")))).status == 200);
  CHECK(client.get("/orders", bearer(hs.sign(claims("alice")))).status == 429);
  REQUIRE(upstream.requests().size() == 2);
  CHECK(upstream.requests().front().header("authorization") == "Bearer " + alice);
  // bob is another client; carol's tier claim gives her gold's five.
  CHECK(client.get("/orders", bearer(rsa.sign(claims("bob")))).status == 200);
  const std::string carol = ec.sign(claims("carol", {{"tier", "gold"}}));
  for (int i = 0; i < 5; ++i) {
    CHECK(client.get("/orders", bearer(carol)).status == 200);
  }
  CHECK(client.get("/orders", bearer(carol)).status == 429);
  // No token: the next source, the address.
  CHECK(client.get("/orders").status == 200);
}

TEST_CASE("JWT: a token that does not verify gets 401 with what is wrong, and is not forwarded") {
  ::setenv("RATEWALL_IT_JWT_SECRET", k_secret.c_str(), 1);
  temp_dir dir;
  const jwt_signer rsa = jwt_signer::rsa("k1");
  const jwt_signer stranger = jwt_signer::rsa("k1");
  const std::string jwks = dir.write("jwks.json", jwks_of({&rsa}));
  test_upstream upstream;
  gateway_harness gw(config_for(jwks), upstream.port());
  http_client client(gw.port());

  struct bad {
    std::string token;
    std::string detail;
  };
  const bad table[] = {
      {rsa.sign(claims("alice", {{"exp", unix_now() - 120}})), "the bearer token has expired"},
      {stranger.sign(claims("alice")), "the bearer token's signature does not verify"},
      {rsa.sign(claims("alice", {{"aud", "billing-api"}})),
       "the bearer token is not for this audience"},
      {rsa.sign(claims("alice"), {{"alg", "HS512"}}),
       "the bearer token's algorithm is not accepted"},
      {"not-a-jwt", "the bearer token is not a well-formed JWT"},
  };
  for (const bad& b : table) {
    CAPTURE(b.detail);
    const http_reply r = client.get("/orders", bearer(b.token));
    CHECK(r.status == 401);
    CHECK(r.header("content-type") == "application/problem+json");
    CHECK(r.header("www-authenticate") == "Bearer error=\"invalid_token\"");
    CHECK(json::parse(r.body)["detail"] == b.detail);
  }
  CHECK(upstream.requests().empty());
  // Authorization twice: the gateway would read one and the upstream maybe the other.
  const http_reply twice = client.get(
      "/orders",
      {{"Authorization", "Basic eA=="}, {"Authorization", "Bearer " + rsa.sign(claims("alice"))}});
  CHECK(twice.status == 400);
  CHECK(json::parse(twice.body)["detail"] ==
        "the authorization header names the client and was sent more than once");
  CHECK(upstream.requests().empty());
  // The same client's 401s are bounded by identity.reject_limit (burst 20 by default): made-up
  // tokens cannot keep the gateway checking signatures at line rate.
  unsigned limited = 0;
  for (int i = 0; i < 30; ++i) {
    const http_reply r = client.get("/orders", bearer(stranger.sign(claims(std::to_string(i)))));
    limited += r.status == 429 ? 1 : 0;
  }
  CHECK(limited > 0);
  CHECK(upstream.requests().empty());
}

TEST_CASE("JWT: SIGHUP reloads the key set; a key set that does not load keeps the old one") {
  temp_dir dir;
  const jwt_signer before = jwt_signer::ec("2026-a");
  const jwt_signer after = jwt_signer::ec("2026-b");
  dir.write("jwks.json", jwks_of({&before}));
  test_upstream upstream;
  const std::string config_path = dir.write(
      "ratewall.yaml", "server: { listen: 127.0.0.1:0, threads: 1 }\nadmin: { enabled: false }\n" +
                           replace_all(config_for("jwks.json"), "${UPSTREAM}",
                                       "127.0.0.1:" + std::to_string(upstream.port())));
  child_process gw({RATEWALL_BINARY, "--config", config_path},
                   {"RATEWALL_HASH_KEY=jwt-test", "RATEWALL_IT_JWT_SECRET=" + k_secret});
  REQUIRE(gw.wait_for_output("listening on", 10s));
  http_client client(listening_port(gw.output()));
  CHECK(client.get("/orders", bearer(before.sign(claims("a")))).status == 200);
  CHECK(client.get("/orders", bearer(after.sign(claims("b")))).status == 401);

  // Key rotation: the new set holds the next key only.
  dir.write("jwks.json", jwks_of({&after}));
  gw.signal(SIGHUP);
  CHECK(eventually(
      [&] { return client.get("/orders", bearer(after.sign(claims("c")))).status == 200; }));
  CHECK(client.get("/orders", bearer(before.sign(claims("d")))).status == 401);

  // A set that does not parse: the reload is refused naming the file, and the keys stay.
  dir.write("jwks.json", "{\"keys\": [");
  gw.signal(SIGHUP);
  CHECK(gw.wait_for_output("reload refused", 5s));
  CHECK(gw.output().find("jwks.json: not a JWK set") != std::string::npos);
  CHECK(client.get("/orders", bearer(after.sign(claims("e")))).status == 200);
  gw.signal(SIGTERM);
  CHECK(gw.wait_exit(10s) == 0);
}
