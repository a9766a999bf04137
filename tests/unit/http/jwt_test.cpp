// identity.jwt and jwt:CLAIM descriptors: tokens minted here with OpenSSL (RS256, ES256,
// HS256), valid and not, read through the config loader and the identity resolver as a
// request would be; then the config errors of a secret or key set that does not load.
#include <doctest/doctest.h>
#include <openssl/err.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ratewall/config/loader.hpp"
#include "ratewall/http/identity.hpp"
#include "ratewall/http/jwt.hpp"
#include "support/jwt_mint.hpp"
#include "support/temp_dir.hpp"

using namespace ratewall;
using namespace ratewall::testing;
using nlohmann::json;

namespace {

constexpr const char* k_secret_env = "RATEWALL_TEST_JWT_SECRET";
const std::string k_secret = "0123456789abcdef0123456789abcdef-test";

// The keys every case signs with, made once: RSA generation takes a while.
struct keys {
  jwt_signer rsa = jwt_signer::rsa("rsa-1");
  jwt_signer ec = jwt_signer::ec("ec-1");
  jwt_signer hs = jwt_signer::hs(k_secret);
  jwt_signer stranger = jwt_signer::rsa("rsa-1");  // same kid, another key
};
const keys& test_keys() {
  static const keys k;
  return k;
}

/// A gateway's identity with identity.jwt set as `jwt_yaml` (keys given as a flow mapping's
/// inside) and one route identified by `identify_by`.
struct fixture {
  explicit fixture(const std::string& jwt_yaml = "",
                   const std::string& identify_by = "[jwt:sub, ip]")
      : jwks(dir.write("jwks.json", jwks_of({&test_keys().rsa, &test_keys().ec}))),
        cfg(parse_config(
            "identity:\n  jwt: { jwks_file: " + jwks + ", hs256_secret_env: " + k_secret_env +
                ", algorithms: [RS256, ES256, HS256]" + (jwt_yaml.empty() ? "" : ", " + jwt_yaml) +
                " }\nplans: { gold: {}, silver: {} }\n"
                "upstreams:\n  api: { targets: [127.0.0.1:8000] }\n"
                "routes:\n  - { name: r, upstream: api, identify_by: " +
                identify_by + " }\n",
            dir.path + "/test.yaml")),
        resolver((::setenv(k_secret_env, k_secret.c_str(), 1), cfg), "hash-key") {}

  identity_result resolve(const std::string& token, const request_fields* fields = nullptr,
                          const token_check_budget* budget = nullptr) const {
    const std::string authorization = "Bearer " + token;
    identity_input in;
    in.peer_ip = "203.0.113.9";
    in.authorization = authorization;
    in.fields = fields;
    in.token_budget = budget;
    return resolver.resolve(cfg.routes.front(), in);
  }

  temp_dir dir;
  std::string jwks;
  config cfg;
  identity_resolver resolver;
};

// The Authorization fields of a request, `n` of them.
class authorization_fields final : public request_fields {
 public:
  authorization_fields(std::string value, std::size_t n) : value_(std::move(value)), n_(n) {}
  std::optional<std::string_view> value(std::string_view name, std::size_t index) const override {
    return name == "authorization" && index < n_ ? std::optional<std::string_view>(value_)
                                                 : std::nullopt;
  }
  std::size_t count_like(std::string_view name, std::string_view& first) const override {
    first = value_;
    return name == "authorization" ? n_ : 0;
  }

 private:
  std::string value_;
  std::size_t n_;
};

// identity.reject_limit as a test sets it: spent or not, and what was charged.
struct fake_budget final : token_check_budget {
  bool spent = false;
  mutable std::vector<std::string> charged;
  bool available(std::string_view) const override { return !spent; }
  void charge(std::string_view ip_subject) const override { charged.emplace_back(ip_subject); }
};

json claims(json extra = json::object()) {
  json c{{"sub", "alice"}, {"exp", unix_now() + 600}};
  for (const auto& [k, v] : extra.items()) {
    c[k] = v;
  }
  return c;
}

}  // namespace

TEST_CASE("jwt:sub names the client by a verified token's claim, for each algorithm") {
  fixture f;
  const keys& k = test_keys();
  const auto rs = f.resolve(k.rsa.sign(claims()));
  CHECK_FALSE(rs.rejected);
  CHECK(rs.source == identity_source::jwt);
  CHECK(rs.subject.starts_with("jwt:sub="));
  CHECK(rs.subject.find("alice") == std::string::npos);  // never in clear
  // The same claim signed another way, or minted again later: the same client.
  CHECK(f.resolve(k.ec.sign(claims())).subject == rs.subject);
  CHECK(f.resolve(k.hs.sign(claims())).subject == rs.subject);
  CHECK(f.resolve(k.rsa.sign(claims({{"iat", 1}}))).subject == rs.subject);
  CHECK(f.resolve(k.rsa.sign(claims({{"sub", "bob"}}))).subject != rs.subject);
  // An integer claim reads as its digits.
  CHECK(f.resolve(k.rsa.sign(claims({{"sub", 42}}))).subject ==
        f.resolve(k.rsa.sign(claims({{"sub", "42"}}))).subject);
  // A token without a kid is checked against every key of its algorithm.
  CHECK(f.resolve(k.rsa.sign(claims(), {{"kid", nullptr}})).rejected);  // kid must be a string
  jwt_signer no_kid = jwt_signer::ec("");
  CHECK(f.resolve(no_kid.sign(claims())).rejected);  // not a key of the set
}

TEST_CASE("a token that does not verify is refused with what is wrong, under on_invalid: reject") {
  fixture f("issuer: https://issuer.example, audience: [api, admin], leeway: 30s");
  const keys& k = test_keys();
  const json good = claims({{"iss", "https://issuer.example"}, {"aud", "api"}});
  REQUIRE_FALSE(f.resolve(k.rsa.sign(good)).rejected);
  auto reason = [&](const std::string& token) {
    const identity_result r = f.resolve(token);
    CHECK(r.rejected);
    CHECK(r.source == identity_source::jwt);
    CHECK(r.subject == "ip:203.0.113.9");  // what reject_limit counts by
    return std::string(r.rejected_for);
  };
  CHECK(reason(k.stranger.sign(good)) == "the bearer token's signature does not verify");
  CHECK(reason(k.rsa.sign(good, {{"kid", "rsa-9"}})) ==
        "the bearer token's key id names no known key");
  CHECK(reason(k.rsa.sign(good, {{"alg", "RS512"}})) ==
        "the bearer token's algorithm is not accepted");
  CHECK(reason(k.rsa.sign(good, {{"crit", {"exp"}}})) ==
        "the bearer token's algorithm is not accepted");
  // alg none: no signature at all.
  CHECK(reason(base64url(R"({"alg":"none"})") + "." + base64url(good.dump()) + ".") ==
        "the bearer token's algorithm is not accepted");
  // HS256 with the RSA public key as its secret (the classic confusion): the secret is ours.
  jwt_signer confused = jwt_signer::hs(k.rsa.public_jwk()["n"].get<std::string>());
  CHECK(reason(confused.sign(good, {{"kid", "rsa-1"}})) ==
        "the bearer token's signature does not verify");
  // A payload changed after signing.
  const std::string token = k.ec.sign(good);
  const auto dot1 = token.find('.');
  const auto dot2 = token.find('.', dot1 + 1);
  json changed = good;
  changed["sub"] = "root";
  CHECK(reason(token.substr(0, dot1 + 1) + base64url(changed.dump()) + token.substr(dot2)) ==
        "the bearer token's signature does not verify");
  CHECK(reason(k.rsa.sign(claims({{"iss", "https://evil.example"}, {"aud", "api"}}))) ==
        "the bearer token's issuer is not accepted");
  CHECK(reason(k.rsa.sign(claims({{"iss", "https://issuer.example"}, {"aud", "web"}}))) ==
        "the bearer token is not for this audience");
  CHECK_FALSE(
      f.resolve(k.rsa.sign(claims({{"iss", "https://issuer.example"}, {"aud", {"web", "admin"}}})))
          .rejected);
  json no_exp = good;
  no_exp.erase("exp");
  CHECK(reason(k.rsa.sign(no_exp)) == "the bearer token has no expiry");
  json expired = good;
  expired["exp"] = unix_now() - 31;
  CHECK(reason(k.rsa.sign(expired)) == "the bearer token has expired");
  expired["exp"] = unix_now() - 20;  // within the leeway
  CHECK_FALSE(f.resolve(k.rsa.sign(expired)).rejected);
  json early = good;
  early["nbf"] = unix_now() + 60;
  CHECK(reason(k.rsa.sign(early)) == "the bearer token is not valid yet");
  early["nbf"] = unix_now() + 10;
  CHECK_FALSE(f.resolve(k.rsa.sign(early)).rejected);
  json bad_exp = good;
  bad_exp["exp"] = "tomorrow";
  CHECK(reason(k.rsa.sign(bad_exp)) == "the bearer token is not a well-formed JWT");

  SUBCASE("malformed text") {
    for (const std::string& bad :
         std::vector<std::string>{"abc", "a.b", "a.b.c.d", "..", "eyJhbGciOiJSUzI1NiJ9.e30.!!!!",
                                  "e30.e30.e30", std::string(k_max_jwt_bytes + 1, 'a')}) {
      CAPTURE(bad.substr(0, 40));
      CHECK(reason(bad) != "");
    }
    // Padding, or a last character with its unused bits set: not the one spelling.
    CHECK(reason(token + "=") == "the bearer token is not a well-formed JWT");
    std::string tweaked = token;
    char& last = tweaked.back();
    last = last == 'A' ? 'B' : static_cast<char>(last + 1);
    CHECK(f.resolve(tweaked).rejected);
  }
}

TEST_CASE("on_invalid: ip takes a bad token as no token; no token is the next source") {
  fixture f("on_invalid: ip", "[jwt:sub, header:X-Tenant, ip]");
  const keys& k = test_keys();
  const identity_result bad = f.resolve(k.stranger.sign(claims()));
  CHECK_FALSE(bad.rejected);
  CHECK(bad.subject == "ip:203.0.113.9");
  identity_input none;
  none.peer_ip = "203.0.113.9";
  CHECK(f.resolver.resolve(f.cfg.routes.front(), none).subject == "ip:203.0.113.9");
  // A valid token without the claim: the descriptor is absent, the next one is tried.
  json no_sub = claims();
  no_sub.erase("sub");
  CHECK(f.resolve(k.rsa.sign(no_sub)).subject == "ip:203.0.113.9");
  CHECK(f.resolve(k.rsa.sign(claims({{"sub", ""}}))).subject == "ip:203.0.113.9");
  CHECK(f.resolve(k.rsa.sign(claims({{"sub", json::object()}}))).subject == "ip:203.0.113.9");
}

TEST_CASE("plan_claim picks a declared plan; any other value is the default plan") {
  fixture f("plan_claim: tier");
  const keys& k = test_keys();
  CHECK(f.resolve(k.rsa.sign(claims({{"tier", "gold"}}))).plan == "gold");
  CHECK(f.resolve(k.ec.sign(claims({{"tier", "silver"}}))).plan == "silver");
  CHECK(f.resolve(k.rsa.sign(claims({{"tier", "platinum"}}))).plan == "");
  CHECK(f.resolve(k.rsa.sign(claims())).plan == "");
  // The plan does not change who the client is.
  CHECK(f.resolve(k.rsa.sign(claims({{"tier", "gold"}}))).subject ==
        f.resolve(k.rsa.sign(claims())).subject);
}

TEST_CASE("a composite of a claim and the address; bearer: jwt is not an API key") {
  fixture f("", "[[jwt:tenant, ip], api_key, ip]");
  const keys& k = test_keys();
  const identity_result a = f.resolve(k.rsa.sign(claims({{"tenant", "acme"}})));
  CHECK(a.subject.starts_with("jwt:tenant+ip="));
  identity_input other;
  other.peer_ip = "198.51.100.7";
  const std::string authorization = "Bearer " + k.rsa.sign(claims({{"tenant", "acme"}}));
  other.authorization = authorization;
  CHECK(f.resolver.resolve(f.cfg.routes.front(), other).subject != a.subject);
  // Under bearer: jwt the token is never read as an API key: with no tenant claim the client
  // falls through api_key (no X-API-Key sent) to its address.
  CHECK(f.resolve(k.rsa.sign(claims())).subject == "ip:203.0.113.9");
  CHECK(f.resolve("just-an-api-key").rejected);  // not a JWT: refused under on_invalid: reject
}

TEST_CASE("exp is checked at every use, not only when the token was first verified") {
  fixture f("leeway: 0s");
  const keys& k = test_keys();
  // Valid for the rest of this second and the next (exp + 1 expired when the second turned
  // between signing and the first use), expired 2.1 s on whatever the fraction.
  const std::string token = k.rsa.sign(claims({{"exp", unix_now() + 2}}));
  CHECK_FALSE(f.resolve(token).rejected);  // verified once, then remembered
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  CHECK(f.resolve(token).rejected_for == "the bearer token has expired");
}

TEST_CASE("identity.jwt: a secret or key set that does not load names the file, line and key") {
  temp_dir dir;
  const keys& k = test_keys();
  const std::string jwks = dir.write("jwks.json", jwks_of({&k.rsa}));
  ::setenv(k_secret_env, k_secret.c_str(), 1);
  auto error = [&](const std::string& jwt_yaml) -> std::string {
    try {
      const config cfg = parse_config("identity:\n  jwt: { " + jwt_yaml +
                                          " }\nupstreams:\n  api: { targets: [127.0.0.1:8000] }\n"
                                          "routes:\n  - { name: r, upstream: api }\n",
                                      dir.path + "/test.yaml");
      identity_resolver resolver(cfg, "hash-key");
    } catch (const config_error& e) {
      return e.what();
    }
    return "";
  };
  const std::string file = dir.path + "/test.yaml";
  CHECK(error("jwks_file: " + jwks) == "");
  CHECK(error("jwks_file: jwks.json") == "");  // relative to the config's directory
  CHECK(error("jwks_file: missing.json") ==
        file +
            ":2: identity.jwt.jwks_file: missing.json: cannot read the file: No such file or "
            "directory");
  const std::string junk = dir.write("junk.json", "{\"keys\": 3}");
  CHECK(error("jwks_file: " + junk) == file + ":2: identity.jwt.jwks_file: " + junk +
                                           ": not a JWK set (a JSON object with a \"keys\" list)");
  json with_private = k.rsa.public_jwk();
  with_private["d"] = "AQAB";
  const std::string private_set = dir.write("private.json", json{{"keys", {with_private}}}.dump());
  CHECK(error("jwks_file: " + private_set)
            .ends_with("keys[0] holds a private key (\"d\"): give the public keys only"));
  jwt_signer weak = jwt_signer::rsa("weak", 1024);
  const std::string weak_set = dir.write("weak.json", jwks_of({&weak}));
  CHECK(error("jwks_file: " + weak_set)
            .ends_with("keys[0] is an RSA key of 1024 bits; at least 2048 are needed"));
  json off_curve = k.ec.public_jwk();
  off_curve["y"] = off_curve["x"];
  const std::string off_set = dir.write("off.json", json{{"keys", {off_curve}}}.dump());
  CHECK(error("jwks_file: " + off_set)
            .ends_with("keys[0] is not a valid P-256 public key (a point on the curve)"));
  CHECK(error("jwks_file: " + jwks + ", algorithms: [ES256]") ==
        file + ":2: identity.jwt.jwks_file: " + jwks +
            ": no ES256 key (identity.jwt.algorithms lists it)");

  CHECK(error("hs256_secret_env: RATEWALL_TEST_JWT_UNSET") ==
        file +
            ":2: identity.jwt.hs256_secret_env: the environment variable "
            "RATEWALL_TEST_JWT_UNSET (the HS256 secret) is not set");
  ::setenv("RATEWALL_TEST_JWT_SHORT", "too-short", 1);
  CHECK(error("hs256_secret_env: RATEWALL_TEST_JWT_SHORT") ==
        file +
            ":2: identity.jwt.hs256_secret_env: the HS256 secret in RATEWALL_TEST_JWT_SHORT has 9 "
            "bytes; at least 32 are needed (RFC 7518 §3.2)");
  CHECK(error("algorithms: [HS256]") ==
        file +
            ":2: identity.jwt.algorithms[0]: HS256 needs identity.jwt.hs256_secret_env (the "
            "variable holding the secret)");
  CHECK(error("issuer: x") ==
        file + ":2: identity.jwt: needs jwks_file (RS256, ES256) or hs256_secret_env (HS256)");
  CHECK(error("jwks_file: " + jwks + ", leeway: 10m") ==
        file +
            ":2: identity.jwt.leeway: at most 5m: a leeway stretches every token's lifetime by "
            "as much");
}

TEST_CASE("a spent reject_limit stops new tokens from being checked; failures spend it") {
  const keys& k = test_keys();
  fake_budget budget;
  SUBCASE("on_invalid: reject: a token never seen is not checked, a remembered one still works") {
    fixture f;
    const std::string known = k.rsa.sign(claims({{"sub", "known"}}));
    REQUIRE_FALSE(f.resolve(known, nullptr, &budget).rejected);
    budget.spent = true;
    CHECK_FALSE(f.resolve(known, nullptr, &budget).rejected);  // already checked: costs nothing
    // A valid token this thread has not seen is refused unchecked (the 401 turns 429).
    const identity_result fresh =
        f.resolve(k.ec.sign(claims({{"sub", "fresh"}})), nullptr, &budget);
    CHECK(fresh.rejected);
    CHECK(fresh.rejected_for == "too many invalid bearer tokens from this client");
    CHECK(budget.charged.empty());  // under reject, admission charges the 401 itself
  }
  SUBCASE("on_invalid: ip: each failed check is charged to the client's address") {
    fixture f("on_invalid: ip");
    const std::string bad = k.stranger.sign(claims());
    CHECK(f.resolve(bad, nullptr, &budget).subject == "ip:203.0.113.9");
    CHECK(f.resolve(bad, nullptr, &budget).subject == "ip:203.0.113.9");  // remembered: free
    CHECK(budget.charged == std::vector<std::string>{"ip:203.0.113.9"});
    budget.spent = true;
    CHECK(f.resolve(k.rsa.sign(claims({{"sub", "x"}})), nullptr, &budget).subject ==
          "ip:203.0.113.9");
  }
}

TEST_CASE("Authorization sent twice is refused: the upstream could read the other one") {
  fixture f;
  const std::string token = test_keys().rsa.sign(claims());
  const authorization_fields once("Bearer " + token, 1);
  const authorization_fields twice("Bearer " + token, 2);
  CHECK(f.resolve(token, &once).refused.empty());
  const identity_result r = f.resolve(token, &twice);
  CHECK(r.refused == "the authorization header names the client and was sent more than once");
  CHECK(r.subject == "ip:203.0.113.9");
}

TEST_CASE("claims: only those the configuration reads are kept, however many a token has") {
  fixture f("plan_claim: tier");
  json many = claims({{"tier", "gold"}});
  for (int i = 0; i < 100; ++i) {
    many["a" + std::to_string(1000 + i)] = i;
  }
  const identity_result r = f.resolve(test_keys().rsa.sign(many));
  CHECK(r.source == identity_source::jwt);
  CHECK(r.plan == "gold");
}

TEST_CASE("integers past 2^63 are read as they are written, never wrapped") {
  fixture f;
  const keys& k = test_keys();
  const json huge = json::parse("18446744073709551615");
  CHECK(f.resolve(k.rsa.sign(claims({{"sub", huge}}))).subject !=
        f.resolve(k.rsa.sign(claims({{"sub", -1}}))).subject);
  CHECK(f.resolve(k.rsa.sign(claims({{"sub", huge}}))).subject ==
        f.resolve(k.rsa.sign(claims({{"sub", "18446744073709551615"}}))).subject);
  CHECK_FALSE(f.resolve(k.rsa.sign(claims({{"exp", huge}}))).rejected);  // never expires
  CHECK(f.resolve(k.rsa.sign(claims({{"nbf", huge}}))).rejected_for ==
        "the bearer token is not valid yet");
}

TEST_CASE("a token without kid is tried against at most three keys of its algorithm") {
  temp_dir dir;
  std::vector<jwt_signer> signers;
  for (int i = 0; i < 4; ++i) {
    signers.push_back(jwt_signer::ec("ec-" + std::to_string(i)));
  }
  const std::string jwks =
      dir.write("jwks.json", jwks_of({&signers[0], &signers[1], &signers[2], &signers[3]}));
  const config cfg = parse_config("identity:\n  jwt: { jwks_file: " + jwks +
                                      " }\nupstreams:\n  api: { targets: [127.0.0.1:8000] }\n"
                                      "routes:\n  - { name: r, upstream: api }\n",
                                  dir.path + "/test.yaml");
  const jwt_verifier verifier(*cfg.identity.jwt, cfg.source, {"sub"});
  CHECK(verifier.public_keys() == 4);
  CHECK(verifier.verify(signers[0].sign(claims(), {{"kid", nullptr}})).error ==
        jwt_error::malformed);  // kid must be a string
  auto without_kid = [&](const jwt_signer& s) {
    std::string token = s.sign(claims());
    // Re-sign with a header that has no kid at all.
    const std::string header = base64url(R"({"alg":"ES256"})");
    const std::string payload =
        token.substr(token.find('.') + 1, token.rfind('.') - token.find('.') - 1);
    return header + "." + payload + "." + base64url(s.signature(header + "." + payload));
  };
  ERR_clear_error();
  CHECK(verifier.verify(without_kid(signers[2])).error == jwt_error::none);
  // Keys 0 and 1 failed first: their reasons must not stay in this thread's OpenSSL error
  // queue, where a TLS call on the same thread would find them.
  CHECK(ERR_peek_error() == 0);
  CHECK(verifier.verify(without_kid(signers[3])).error == jwt_error::signature);
  CHECK(ERR_peek_error() == 0);
  CHECK(verifier.verify(signers[3].sign(claims())).error == jwt_error::none);  // with its kid
}
