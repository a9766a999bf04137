#include "ratewall/proxy/grpc_status.hpp"

#include <doctest/doctest.h>

#include "head_fixtures.hpp"

using namespace ratewall;
using ratewall::testing::field_pairs;
using ratewall::testing::listed;

TEST_CASE("gRPC: the code a gateway's HTTP status becomes") {
  struct row {
    unsigned http_status;
    grpc_code code;
    unsigned number;  // as sent in grpc-status
  };
  const row rows[] = {
      {429, grpc_code::resource_exhausted, 8},
      {413, grpc_code::resource_exhausted, 8},
      {431, grpc_code::resource_exhausted, 8},
      {401, grpc_code::unauthenticated, 16},
      {403, grpc_code::permission_denied, 7},
      {404, grpc_code::unimplemented, 12},
      {400, grpc_code::internal, 13},
      {408, grpc_code::deadline_exceeded, 4},
      {502, grpc_code::unavailable, 14},
      {503, grpc_code::unavailable, 14},
      {504, grpc_code::unavailable, 14},
      {500, grpc_code::unknown, 2},
      {501, grpc_code::unknown, 2},
      {405, grpc_code::unknown, 2},
      {200, grpc_code::unknown, 2},  // a gateway answer is never a success
      {0, grpc_code::unknown, 2},
  };
  for (const row& r : rows) {
    CAPTURE(r.http_status);
    CHECK(grpc_code_for(r.http_status) == r.code);
    CHECK(static_cast<unsigned>(grpc_code_for(r.http_status)) == r.number);
  }
}

TEST_CASE("gRPC: grpc-message keeps printable ASCII and percent-encodes every other byte") {
  struct row {
    std::string_view text;
    std::string_view sent;
  };
  const row rows[] = {
      {"", ""},
      {"rate limited: retry in 3 s", "rate limited: retry in 3 s"},
      {"~!\"#$&'()*+,-./:;<=>?@[\\]^_`{|}", "~!\"#$&'()*+,-./:;<=>?@[\\]^_`{|}"},
      // A space inside as it is; at either end encoded (no field value begins or ends with one).
      {"a b", "a b"},
      {" a ", "%20a%20"},
      {" ", "%20"},
      {"  ", "%20%20"},
      {"100%", "100%25"},
      {"%25", "%2525"},  // already encoded text is encoded again: it is text, not a code
      {"a\r\nb", "a%0D%0Ab"},
      {"tab\there", "tab%09here"},
      {std::string_view("nul\0end", 7), "nul%00end"},
      {"\x1f\x7f", "%1F%7F"},        // just below and just above 0x20..0x7E
      {"caf\xc3\xa9", "caf%C3%A9"},  // UTF-8 "café", byte by byte, upper-case hex
      {"\xff", "%FF"},
  };
  for (const row& r : rows) {
    CAPTURE(r.text);
    CHECK(percent_encode_grpc_message(r.text) == r.sent);
  }
}

TEST_CASE("gRPC: a request is gRPC by its content-type alone") {
  struct row {
    std::string_view content_type;
    bool grpc;
  };
  const row rows[] = {
      {"application/grpc", true},
      {"application/grpc+proto", true},
      {"application/grpc+json", true},
      {"application/grpc;charset=x", true},
      {"Application/GRPC", true},
      {"APPLICATION/GRPC+PROTO", true},
      {"application/grpcx", false},
      {"application/grpc-web", false},  // another protocol, for browsers
      {"application/grpc-web+proto", false},
      {"application/json", false},
      {"application/grp", false},
      {"application/grpc ", false},  // HTTP/2 field values have no trailing whitespace
      {" application/grpc", false},
      {"text/application/grpc", false},
      {"", false},
  };
  for (const row& r : rows) {
    CAPTURE(r.content_type);
    CHECK(is_grpc_request(r.content_type) == r.grpc);
  }
}

TEST_CASE("gRPC: a Trailers-Only answer, field by field and in order") {
  const header_list extra{
      {"X-RateLimit-Limit", "10"}, {"X-RateLimit-Remaining", "0"}, {"Retry-After", "3"}};
  h2_fields block;
  SUBCASE("a 429 with its rate-limit headers") {
    grpc_trailers_only(grpc_code_for(429), "rate limited 100%", extra, block);
    CHECK(listed(block) == field_pairs{{":status", "200"},
                                       {"content-type", "application/grpc"},
                                       {"grpc-status", "8"},
                                       {"grpc-message", "rate limited 100%25"},
                                       {"x-ratelimit-limit", "10"},
                                       {"x-ratelimit-remaining", "0"},
                                       {"retry-after", "3"}});
  }
  SUBCASE("a two-digit code; no message, no grpc-message") {
    grpc_trailers_only(grpc_code::unauthenticated, "", {}, block);
    CHECK(listed(block) == field_pairs{{":status", "200"},
                                       {"content-type", "application/grpc"},
                                       {"grpc-status", "16"}});
  }
  SUBCASE("a message encoded in several pieces, with fields after it") {
    grpc_trailers_only(grpc_code::unavailable, "\xc3\xa9t\xc3\xa9 %", {{"X-A", "b"}}, block);
    REQUIRE(block.size() == 5);
    CHECK(block[3].value == "%C3%A9t%C3%A9 %25");
    CHECK(block[4].name == "x-a");
    CHECK(block[4].value == "b");
  }
}
