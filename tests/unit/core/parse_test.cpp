#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <string_view>

#include "ratewall/core/parse.hpp"

using namespace ratewall;
using namespace std::chrono_literals;

namespace {

ip_address ip(std::string_view text) {
  auto parsed = parse_ip(text);
  REQUIRE_MESSAGE(parsed.has_value(), text);
  return *parsed;
}

std::string error_of(const parse_result<nanos>& r) {
  return r.error();
}

}  // namespace

TEST_CASE("a token is one or more tchar (RFC 9110 §5.6.2)") {
  CHECK_FALSE(is_token(""));
  CHECK(is_token("a"));
  CHECK(is_token("~"));
  // Every tchar that is not a letter or digit, with both ends of each letter and digit range.
  CHECK(is_token("!#$%&'*+-.^_`|~azAZ09"));
  CHECK(is_token("GET"));
  CHECK(is_token("x-request-id"));
  // The delimiters: DQUOTE and "(),/:;<=>?@[\]{}"; then white space, controls, DEL and bytes
  // above 0x7f, which are no tchar either.
  for (char delimiter : std::string_view("\"(),/:;<=>?@[\\]{}")) {
    CAPTURE(delimiter);
    CHECK_FALSE(is_token(std::string(1, delimiter)));
    CHECK_FALSE(is_token("a" + std::string(1, delimiter) + "b"));
  }
  for (std::string_view bad :
       {std::string_view(" "), std::string_view("\t"), std::string_view("\0", 1),
        std::string_view("\r\n"), std::string_view("\x7f"), std::string_view("\x80"),
        std::string_view("caf\xc3\xa9"), std::string_view("a\xff")}) {
    CAPTURE(bad);
    CHECK_FALSE(is_token(bad));
  }
}

TEST_CASE("durations take a whole number and one unit: ms, s, m, h, d") {
  CHECK(*parse_duration("250ms") == 250ms);
  CHECK(*parse_duration("1s") == 1s);
  CHECK(*parse_duration("1m") == 60s);
  CHECK(*parse_duration("1h") == 3600s);
  CHECK(*parse_duration("1d") == 86400s);
  CHECK(*parse_duration("0s") == 0s);
  CHECK(*parse_duration("007s") == 7s);
  CHECK(parse_duration("1s").error().empty());
}

TEST_CASE("durations reject signs, fractions, missing units, spaces and garbage") {
  const std::string hint = R"(expected a duration like "250ms", "1s", "1m", "1h" or "1d")";
  CHECK(error_of(parse_duration("-1s")) == "a duration cannot be negative");
  CHECK(error_of(parse_duration("10")) == hint + " (the unit is required)");
  CHECK(error_of(parse_duration("1.5s")) == hint + R"( (whole numbers only, e.g. "1500ms"))");
  for (const char* bad : {"", "s", "ms", "+1s", " 1s", "1s ", "1 s", "1S", "1sec", "1us", "1ns",
                          "1w", "1ms5", "1m30s", "0x10s"}) {
    CAPTURE(bad);
    auto r = parse_duration(bad);
    CHECK_FALSE(r.ok());
    CHECK_FALSE(r.error().empty());
  }
}

TEST_CASE("durations stop exactly at 10000 days, in every unit") {
  // A clock reading plus twice the longest duration must fit 64-bit nanoseconds for a
  // century of uptime; INT64_MAX ns (106751 days) would overflow after one day.
  CHECK(k_max_duration == std::chrono::hours(24) * 10000);
  CHECK(*parse_duration("10000d") == k_max_duration);
  CHECK(error_of(parse_duration("10001d")) == "duration too large (at most 10000d)");
  CHECK(*parse_duration("240000h") == k_max_duration);
  CHECK_FALSE(parse_duration("240001h").ok());
  CHECK(*parse_duration("14400000m") == k_max_duration);
  CHECK_FALSE(parse_duration("14400001m").ok());
  CHECK(*parse_duration("864000000s") == k_max_duration);
  CHECK_FALSE(parse_duration("864000001s").ok());
  CHECK(*parse_duration("864000000000ms") == k_max_duration);
  CHECK(error_of(parse_duration("864000000001ms")) == "duration too large (at most 10000d)");
  CHECK_FALSE(parse_duration("106751d").ok());
  CHECK_FALSE(parse_duration("99999999999999999999999s").ok());
}

TEST_CASE("rate periods stop at 10000 days too, and the count at one per nanosecond") {
  auto longest = parse_rate("1/10000d");
  REQUIRE(longest.ok());
  CHECK(longest->period == k_max_duration);
  CHECK(parse_rate("1/10001d").error() ==
        R"(expected "<count>/<unit>" like "10/s": period: duration too large (at most 10000d))");
  // The largest count of all: one per nanosecond over the longest period.
  auto largest = parse_rate("864000000000000000/10000d");
  REQUIRE(largest.ok());
  CHECK(largest->count == 864'000'000'000'000'000u);
  CHECK(parse_rate("864000000000000001/10000d").error() ==
        "rate too high (more than one per nanosecond)");
  // The largest count with the shortest period.
  auto finest = parse_rate("1000000/1ms");
  REQUIRE(finest.ok());
  CHECK(finest->count == 1'000'000u);
  CHECK(finest->period == std::chrono::milliseconds(1));
  CHECK(parse_rate("1000001/1ms").error() == "rate too high (more than one per nanosecond)");
}

TEST_CASE("format_duration picks the largest exact unit and round-trips") {
  CHECK(format_duration(0s) == "0s");
  CHECK(format_duration(1500ms) == "1500ms");
  CHECK(format_duration(120s) == "2m");
  CHECK(format_duration(24h) == "1d");
  CHECK(format_duration(1500ns) == "1500ns");
  for (const char* text : {"250ms", "59s", "90m", "25h", "7d"}) {
    CHECK(format_duration(*parse_duration(text)) == text);
  }
}

TEST_CASE("rates are <count>/<unit> or <count>/<duration>") {
  auto r = parse_rate("10/s");
  REQUIRE(r.ok());
  CHECK(r->count == 10);
  CHECK(r->period == 1s);
  CHECK(parse_rate("1000/h")->period == 1h);
  CHECK(parse_rate("100/m")->period == 60s);
  CHECK(parse_rate("1/d")->period == 24h);
  CHECK(parse_rate("5/60s")->count == 5);
  CHECK(parse_rate("5/60s")->period == 60s);
  CHECK(parse_rate("3/250ms")->period == 250ms);
  CHECK(parse_rate("2/ms")->period == 1ms);
  CHECK(format_rate(*parse_rate("5/60s")) == "5/m");
  CHECK(format_rate(*parse_rate("5/90s")) == "5/90s");
  CHECK(format_rate(*parse_rate("10/s")) == "10/s");
}

TEST_CASE("rates reject zero, negatives, bad units and overflow") {
  const std::string hint = R"(expected "<count>/<unit>" like "10/s")";
  CHECK(parse_rate("10/x").error() == hint);
  CHECK(parse_rate("10 per second").error() == hint);
  CHECK(parse_rate("10").error() == hint);
  CHECK(parse_rate("/s").error() == hint);
  CHECK(parse_rate("10/").error() == hint);
  CHECK(parse_rate("1.5/s").error() == hint);
  CHECK(parse_rate("-1/s").error() == "a rate cannot be negative");
  CHECK(parse_rate("0/s").error() == "a rate needs a count greater than 0");
  CHECK(parse_rate("1/0s").error() == "a rate needs a period greater than 0");
  CHECK(parse_rate("1/60").error() ==
        hint +
            R"(: period: expected a duration like "250ms", "1s", "1m", "1h" or "1d" (the unit is)"
            R"( required))");
  CHECK(parse_rate("99999999999999999999/s").error() == "rate count too large");
  // One event per nanosecond is the finest rate GCRA can represent.
  CHECK(parse_rate("1000000000/s").ok());
  CHECK(parse_rate("1000000001/s").error() == "rate too high (more than one per nanosecond)");
}

TEST_CASE("endpoints are host:port, with IPv6 hosts in brackets") {
  auto e = parse_endpoint("127.0.0.1:8080");
  REQUIRE(e.ok());
  CHECK(e->host == "127.0.0.1");
  CHECK(e->port == 8080);
  CHECK(parse_endpoint("[::]:8080")->host == "::");
  CHECK(parse_endpoint("[::1]:9090")->host == "::1");
  CHECK(parse_endpoint("[::1]:9090")->port == 9090);
  CHECK(parse_endpoint("api.internal:8000")->host == "api.internal");
  CHECK(parse_endpoint("localhost:0")->port == 0);
  CHECK(parse_endpoint("localhost:65535")->port == 65535);
}

TEST_CASE("endpoints reject missing parts, bad ports and unbracketed IPv6") {
  const std::string hint = R"(expected "<host>:<port>" like "127.0.0.1:8080" or "[::]:8080")";
  CHECK(parse_endpoint("localhost").error() == hint + " (the port is required)");
  CHECK(parse_endpoint(":8080").error() == hint + " (the host is required)");
  CHECK(parse_endpoint("localhost:65536").error() == "port must be a number from 0 to 65535");
  CHECK(parse_endpoint("localhost:").error() == "port must be a number from 0 to 65535");
  CHECK(parse_endpoint("localhost:-1").error() == "port must be a number from 0 to 65535");
  CHECK(parse_endpoint("localhost:http").error() == "port must be a number from 0 to 65535");
  CHECK(parse_endpoint("::1:8080").error() == R"(IPv6 addresses need brackets, like "[::1]:8080")");
  CHECK(parse_endpoint("[::1]").error() == hint);
  CHECK(parse_endpoint("[::1]8080").error() == hint);
  CHECK(parse_endpoint("[1.2.3.4]:80").error() == R"("1.2.3.4" is not a valid IPv6 address)");
  CHECK(parse_endpoint("300.1.1.1:80").error() == R"("300.1.1.1" is not a valid IPv4 address)");
  CHECK(parse_endpoint("exa mple:80").error() == hint + " (invalid character in host)");
}

TEST_CASE("parse_ip gives IPv4 and its v4-mapped spelling the same 16 bytes") {
  ip_address v4 = ip("192.0.2.1");
  CHECK(v4 == ip("::ffff:192.0.2.1"));
  CHECK(is_v4_mapped(v4));
  CHECK(v4[10] == 0xff);
  CHECK(v4[11] == 0xff);
  CHECK(v4[12] == 192);
  CHECK(v4[15] == 1);
  CHECK_FALSE(is_v4_mapped(ip("::1")));
  CHECK(ip("::1")[15] == 1);
  CHECK(format_ip(v4) == "192.0.2.1");
  CHECK(format_ip(ip("2001:DB8::1")) == "2001:db8::1");
  for (const char* bad : {"", "1.2.3", "1.2.3.256", "01.2.3.4", "1.2.3.4/32", "[::1]", "::1%eth0",
                          "example.com", "1.2.3.4 "}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_ip(bad).has_value());
  }
  CHECK_FALSE(parse_ip(std::string_view("1.2.3.4\0", 8)).has_value());
}

TEST_CASE("CIDR ranges store IPv4 v4-mapped with the prefix counted on 128 bits") {
  auto net = parse_cidr("10.0.0.0/8");
  REQUIRE(net.ok());
  CHECK(net->prefix == 104);
  CHECK(net->address == ip("10.0.0.0"));
  CHECK(parse_cidr("127.0.0.1/32")->prefix == 128);
  CHECK(parse_cidr("127.0.0.1")->prefix == 128);
  CHECK(parse_cidr("0.0.0.0/0")->prefix == 96);
  CHECK(parse_cidr("::1/128")->prefix == 128);
  CHECK(parse_cidr("::1")->prefix == 128);
  CHECK(parse_cidr("fd00::/8")->prefix == 8);
  CHECK(parse_cidr("::/0")->prefix == 0);
}

TEST_CASE("CIDR ranges reject long prefixes, stray host bits and garbage") {
  const std::string hint = R"(expected an address or CIDR range like "10.0.0.0/8" or "fd00::/8")";
  CHECK(parse_cidr("10.0.0.0/33").error() ==
        "prefix /33 is too long for an IPv4 address (at most /32)");
  CHECK(parse_cidr("::/129").error() ==
        "prefix /129 is too long for an IPv6 address (at most /128)");
  CHECK(parse_cidr("10.0.0.1/8").error() ==
        R"("10.0.0.1/8" has bits set outside its /8 prefix (did you mean "10.0.0.0/8"?))");
  CHECK(parse_cidr("fd00::1/8").error() ==
        R"("fd00::1/8" has bits set outside its /8 prefix (did you mean "fd00::/8"?))");
  CHECK(parse_cidr("10.0.0.0/").error() == hint);
  CHECK(parse_cidr("10.0.0.0/-1").error() == hint);
  CHECK(parse_cidr("10.0.0.0/8/8").error() == hint);
  CHECK(parse_cidr("10.0.0/8").error() == hint);
  CHECK(parse_cidr("").error() == hint);
}

TEST_CASE("cidr_contains compares exactly the prefix bits") {
  cidr ten = *parse_cidr("10.0.0.0/8");
  CHECK(cidr_contains(ten, ip("10.0.0.0")));
  CHECK(cidr_contains(ten, ip("10.255.255.255")));
  CHECK_FALSE(cidr_contains(ten, ip("11.0.0.0")));
  CHECK_FALSE(cidr_contains(ten, ip("9.255.255.255")));
  // An IPv4 range never contains an IPv6 address that merely ends in the same bytes.
  CHECK_FALSE(cidr_contains(ten, ip("::10.0.0.1")));

  cidr slash25 = *parse_cidr("192.168.1.0/25");
  CHECK(cidr_contains(slash25, ip("192.168.1.127")));
  CHECK_FALSE(cidr_contains(slash25, ip("192.168.1.128")));

  cidr host = *parse_cidr("127.0.0.1");
  CHECK(cidr_contains(host, ip("127.0.0.1")));
  CHECK_FALSE(cidr_contains(host, ip("127.0.0.2")));

  cidr ula = *parse_cidr("fd00::/8");
  CHECK(cidr_contains(ula, ip("fdff:ffff::1")));
  CHECK_FALSE(cidr_contains(ula, ip("fe00::1")));

  cidr all_v4 = *parse_cidr("0.0.0.0/0");
  CHECK(cidr_contains(all_v4, ip("203.0.113.9")));
  CHECK_FALSE(cidr_contains(all_v4, ip("2001:db8::1")));
  CHECK(cidr_contains(*parse_cidr("::/0"), ip("203.0.113.9")));
}

TEST_CASE("mask_ip keeps the first prefix bits and clears the rest") {
  CHECK(format_ip(mask_ip(ip("2001:db8:1:2:3:4:5:6"), 64)) == "2001:db8:1:2::");
  CHECK(format_ip(mask_ip(ip("2001:db8:1:2:3:4:5:6"), 60)) == "2001:db8:1::");
  CHECK(mask_ip(ip("2001:db8::1"), 128) == ip("2001:db8::1"));
  CHECK(mask_ip(ip("2001:db8::1"), 200) == ip("2001:db8::1"));
  CHECK(mask_ip(ip("2001:db8::1"), 0) == ip("::"));
  CHECK(format_ip(mask_ip(ip("10.1.2.3"), 120)) == "10.1.2.0");
}

TEST_CASE("byte sizes are plain numbers or KiB, MiB, GiB") {
  CHECK(*parse_byte_size("16384") == 16384);
  CHECK(*parse_byte_size("0") == 0);
  CHECK(*parse_byte_size("64KiB") == 64 * 1024);
  CHECK(*parse_byte_size("10MiB") == 10 * 1024 * 1024);
  CHECK(*parse_byte_size("1GiB") == 1024ULL * 1024 * 1024);
  CHECK(*parse_byte_size("18446744073709551615") == UINT64_MAX);
  CHECK(parse_byte_size("18446744073709551616").error() == "byte size too large");
  CHECK(parse_byte_size("17179869184GiB").error() == "byte size too large");
  const std::string hint = R"(expected a byte size like 16384, "64KiB" or "10MiB")";
  for (const char* bad : {"", "-1", "10MB", "10 MiB", "10mib", "1.5MiB", "KiB", "10k"}) {
    CAPTURE(bad);
    CHECK(parse_byte_size(bad).error() == hint);
  }
}
