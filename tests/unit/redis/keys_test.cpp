#include <doctest/doctest.h>

#include <regex>
#include <string>

#include "ratewall/redis/crc16.hpp"
#include "ratewall/redis/keys.hpp"
#include "ratewall/redis/scripts.hpp"

using namespace ratewall;
using namespace ratewall::redis;

TEST_CASE("crc16 is the Redis Cluster CRC16: \"123456789\" gives 0x31C3") {
  CHECK(crc16("123456789") == 0x31C3);
  CHECK(crc16("") == 0);
}

TEST_CASE("key_slot hashes the hash tag when there is a non-empty one") {
  // Values from the Redis Cluster specification and CLUSTER KEYSLOT.
  CHECK(key_slot("123456789") == 0x31C3 % 16384);
  CHECK(key_slot("foo") == 12182);
  CHECK(key_slot("{user1000}.following") == key_slot("user1000"));
  CHECK(key_slot("{user1000}.followers") == key_slot("{user1000}.following"));
  SUBCASE("the first { and the next } delimit the tag") {
    CHECK(key_slot("foo{bar}{zap}") == key_slot("bar"));
    CHECK(key_slot("foo{{bar}}zap") == key_slot("{bar"));
  }
  SUBCASE("an empty or unclosed tag hashes the whole key") {
    CHECK(key_slot("foo{}{bar}") == crc16("foo{}{bar}") % 16384);
    CHECK(key_slot("foo{bar") == crc16("foo{bar") % 16384);
  }
}

TEST_CASE("limit keys are rw:v1:{<16 hex>}:<route>:<limit>:<signature>") {
  const std::string tag = subject_tag("secret", "key:0123456789abcdef0123456789abcdef");
  CHECK(std::regex_match(tag, std::regex("[0-9a-f]{16}")));
  const std::string key = limit_key(tag, "search:burst:0e7ff3e1");
  CHECK(key == "rw:v1:{" + tag + "}:search:burst:0e7ff3e1");

  SUBCASE("the tag is keyed: another secret names the subject otherwise") {
    CHECK(subject_tag("other", "key:0123456789abcdef0123456789abcdef") != tag);
    CHECK(subject_tag("secret", "key:0123456789abcdef0123456789abcdef") == tag);
    CHECK(subject_tag(hmac_sha256_key("secret"), "key:0123456789abcdef0123456789abcdef") == tag);
  }
  SUBCASE("the tag keeps client addresses out of Redis") {
    const std::string ip_tag = subject_tag("secret", "ip:203.0.113.7");
    CHECK(ip_tag.find("203") == std::string::npos);
    CHECK(limit_key(ip_tag, "r:l:00000000").find("203.0.113.7") == std::string::npos);
  }
  SUBCASE("every key of a subject is in one cluster slot: the tag's") {
    CHECK(key_slot(limit_key(tag, "a:b:1")) == key_slot(limit_key(tag, "c:d:2")));
    CHECK(key_slot(limit_key(tag, "a:b:1")) == crc16(tag) % 16384);
  }
}

TEST_CASE("the script is named by its SHA-1, as SCRIPT LOAD names it") {
  CHECK(sha1_hex("abc") == "a9993e364706816aba3e25717850c26c9cd0d89d");
  CHECK(sha1_hex("") == "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  CHECK(sha1_hex(std::string(1000, 'a')) == "291e9a6c66994949b57ba5e650361e98fc36b1ba");
  CHECK(limiter_script_sha() == sha1_hex(limiter_script()));
  CHECK(limiter_script_sha().size() == 40);
}

TEST_CASE("a route's script holds the units of its algorithms only") {
  const unsigned tb = script_bit(algorithm::token_bucket);
  const unsigned conc = script_bit(algorithm::concurrency);
  CHECK(limiter_script(tb).find("L[1] =") != std::string_view::npos);
  CHECK(limiter_script(tb).find("L[6] =") == std::string_view::npos);
  CHECK(limiter_script(tb | conc).find("L[6] =") != std::string_view::npos);
  CHECK(limiter_script_sha(tb) != limiter_script_sha(tb | conc));
  CHECK(limiter_script_sha(tb) == sha1_hex(limiter_script(tb)));
  CHECK(limiter_script() == limiter_script(k_all_script_algorithms));
}
