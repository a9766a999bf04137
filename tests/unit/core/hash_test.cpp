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

TEST_CASE("sha256 across block boundaries matches the FIPS 180-4 vectors") {
  CHECK(to_hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  CHECK(to_hex(sha256(million)) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  SUBCASE("fed in odd pieces") {
    sha256_hasher h;
    for (std::size_t i = 0; i < million.size(); i += 997) {
      h.update(std::string_view(million).substr(i, 997));
    }
    CHECK(to_hex(h.finish()) == to_hex(sha256(million)));
  }
}

TEST_CASE("hmac_sha256 with a key longer than a block (RFC 4231 test case 6)") {
  std::string key(131, '\xaa');
  CHECK(to_hex(hmac_sha256(key, "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  hmac_sha256_key reusable(key);
  CHECK(reusable.mac("Test Using Larger Than Block-Size Key - Hash Key First") ==
        hmac_sha256(key, "Test Using Larger Than Block-Size Key - Hash Key First"));
}
