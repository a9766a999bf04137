#include <doctest/doctest.h>

#include "ratewall/core/hash.hpp"

using namespace ratewall;

TEST_CASE("sha256 matches the published vector for \"foo\"") {
  // The key_sha256 of config/examples/reference.yaml is sha256("foo").
  CHECK(to_hex(sha256("foo")) ==
        "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae");
}

TEST_CASE("hmac_sha256 matches RFC 4231 test case 2") {
  CHECK(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST_CASE("sha256_from_hex accepts 64 hex digits and nothing else") {
  auto d = sha256_from_hex("2C26B46B68FFC68FF99B453C1D30413413422D706483BFA0F98A5E886266E7AE");
  REQUIRE(d.has_value());
  CHECK(*d == sha256("foo"));
  CHECK_FALSE(sha256_from_hex("2c26").has_value());
  CHECK_FALSE(sha256_from_hex(std::string(64, 'g')).has_value());
}
