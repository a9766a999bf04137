#include "ratewall/proxy/h2_fields.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <optional>

#include <string>
#include <vector>

#include "head_fixtures.hpp"

using namespace ratewall;
using ratewall::testing::field_pairs;
using ratewall::testing::listed;
using ratewall::testing::parse_head;

TEST_CASE("h2 fields: names in lower case, values as given, in order") {
  h2_fields block;
  block.add("Content-Type", "Text/Plain");
  block.add("X-ID", "AbC");
  block.add("x-id", "second");
  CHECK(listed(block) ==
        field_pairs{{"content-type", "Text/Plain"}, {"x-id", "AbC"}, {"x-id", "second"}});
  SUBCASE("a value written in pieces") {
    block.add("X-Pieces", "a");
    block.extend_value("bc");
    block.extend_value("");
    block.extend_value("d");
    CHECK(block[3].value == "abcd");
    CHECK(block[2].value == "second");
  }
  SUBCASE("an empty value; a block past its first room keeps every field") {
    block.add("X-Empty", "");
    field_pairs expected = listed(block);
    for (int i = 0; i < 40; ++i) {
      const std::string value = std::string(30, char('a' + i % 26)) + std::to_string(i);
      block.add("X-Many-" + std::to_string(i), value);
      expected.emplace_back("x-many-" + std::to_string(i), value);
    }
    CHECK(block[3].name == "x-empty");
    CHECK(block[3].value.empty());
    CHECK(listed(block) == expected);
  }
  SUBCASE("cleared, it starts empty") {
    block.clear();
    CHECK(block.size() == 0);
    block.add("A", "1");
    CHECK(listed(block) == field_pairs{{"a", "1"}});
  }
  SUBCASE("a name already in lower case is copied as it is") {
    block.add_lowercase(":path", "/A");
    CHECK(block[3].name == ":path");
    CHECK(block[3].value == "/A");
  }
  SUBCASE("a large block is let go when cleared; moved, the list goes with it") {
    block.add("X-Large", std::string(5000, 'v'));
    CHECK(block.room_bytes() > 5000);
    block.clear();
    CHECK(block.room_bytes() < 5000);
    block.add("B", "2");
    h2_fields moved = std::move(block);
    CHECK(listed(moved) == field_pairs{{"b", "2"}});
    block = h2_fields();
    block.add("C", "3");
    CHECK(listed(block) == field_pairs{{"c", "3"}});
  }
}

TEST_CASE("h2 response fields: :status first, connection fields out, Content-Length kept") {
  upstream_response res;
  parse_head(res,
             "HTTP/1.1 201 Created\r\n"
             "Content-Type: application/json\r\n"
             "Connection: keep-alive, X-Internal\r\n"
             "Keep-Alive: timeout=5\r\n"
             "Proxy-Connection: keep-alive\r\n"
             "Upgrade: websocket\r\n"
             "TE: trailers\r\n"
             "Trailer: X-Sum\r\n"
             "Proxy-Authenticate: Basic\r\n"
             "X-Internal: hop\r\n"
             "Set-Cookie: a=1\r\n"
             "set-cookie: b=2\r\n"
             "Content-Length: 12\r\n"
             "\r\n");
  h2_fields block;
  h2_response_fields(res, 12, {}, block);
  CHECK(listed(block) == field_pairs{{":status", "201"},
                                     {"content-type", "application/json"},
                                     {"set-cookie", "a=1"},
                                     {"set-cookie", "b=2"},
                                     {"content-length", "12"}});
}

TEST_CASE("h2 response fields: a chunked response loses Transfer-Encoding") {
  upstream_response res;
  parse_head(res, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n");
  h2_fields block;
  h2_response_fields(res, std::nullopt, {}, block);
  CHECK(listed(block) == field_pairs{{":status", "200"}, {"x-a", "1"}});
}

TEST_CASE("h2 response fields: the gateway's headers replace the upstream's, lower-cased") {
  upstream_response res;
  parse_head(res,
             "HTTP/1.1 429 Too Many Requests\r\n"
             "X-RateLimit-Limit: upstream-value\r\n"
             "x-ratelimit-remaining: 99\r\n"
             "Retry-After: 60\r\n"
             "Content-Length: 0\r\n"
             "\r\n");
  const header_list extra{
      {"X-Request-Id", "rid"}, {"X-RateLimit-Limit", "10"}, {"X-RateLimit-Remaining", "0"}};
  h2_fields block;
  h2_response_fields(res, 0, extra, block);
  CHECK(listed(block) == field_pairs{{":status", "429"},
                                     {"retry-after", "60"},
                                     {"content-length", "0"},
                                     {"x-request-id", "rid"},
                                     {"x-ratelimit-limit", "10"},
                                     {"x-ratelimit-remaining", "0"}});
}

TEST_CASE("h2 response fields: the gateway's fields new in every response are never indexed") {
  upstream_response res;
  parse_head(res,
             "HTTP/1.1 200 OK\r\n"
             "Date: Sat, 28 Nov 2026 21:00:00 GMT\r\n"
             "X-Upstream-Id: u-1\r\n"
             "Content-Length: 2\r\n"
             "\r\n");
  const header_list extra{{"X-Request-Id", "rid"},          {"X-RateLimit-Limit", "10"},
                          {"X-RateLimit-Remaining", "9"},   {"X-RateLimit-Reset", "60"},
                          {"RateLimit-Policy", "10;w=60"},  {"RateLimit", "limit=10, remaining=9"},
                          {"x-request-idx", "not the same"}};
  h2_fields block;
  h2_response_fields(res, 2, extra, block);
  std::vector<std::string> unindexed;
  for (std::size_t i = 0; i < block.size(); ++i) {
    if (!block[i].indexed) {
      unindexed.emplace_back(block[i].name);
    }
  }
  // The upstream's own fields, X-Upstream-Id too, are the client's table's to keep.
  CHECK(unindexed == std::vector<std::string>{"x-request-id", "x-ratelimit-remaining",
                                              "x-ratelimit-reset", "ratelimit"});

  SUBCASE("a reset or Retry-After of one digit is indexed: ten values at most, over and over") {
    const header_list seconds{{"X-RateLimit-Reset", "1"},
                              {"Retry-After", "9"},
                              {"X-RateLimit-Reset", "10"},
                              {"Retry-After", "60"}};
    h2_fields own;
    own.add_own(seconds);
    REQUIRE(own.size() == 4);
    CHECK(own[0].indexed);
    CHECK(own[1].indexed);
    CHECK_FALSE(own[2].indexed);
    CHECK_FALSE(own[3].indexed);
  }
}

TEST_CASE("h2 response fields: a Connection that names a field in another case drops it") {
  upstream_response res;
  parse_head(res,
             "HTTP/1.1 200 OK\r\n"
             "Connection: x-secret\r\n"
             "Connection: X-Other\r\n"
             "X-SECRET: 1\r\n"
             "x-other: 2\r\n"
             "X-Kept: 3\r\n"
             "Content-Length: 0\r\n"
             "\r\n");
  h2_fields block;
  h2_response_fields(res, 0, {}, block);
  CHECK(listed(block) == field_pairs{{":status", "200"}, {"x-kept", "3"}, {"content-length", "0"}});
}

TEST_CASE("h2 response fields: the block starts anew, :status first") {
  upstream_response res;
  parse_head(res, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
  h2_fields block;
  block.add("x-before", "1");
  h2_response_fields(res, 0, {}, block);
  CHECK(listed(block) == field_pairs{{":status", "404"}, {"content-length", "0"}});
}

TEST_CASE("h2 response fields: Content-Length is one number, and none without content") {
  struct row {
    std::string_view head;
    std::optional<std::uint64_t> parsed;  // what the parser read
    field_pairs sent;
  };
  const row rows[] = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 12, 12\r\n\r\n",
       12,
       {{":status", "200"}, {"content-length", "12"}}},
      {"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 7\r\n\r\n",
       7,
       {{":status", "200"}, {"content-length", "7"}}},
      {"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", 0, {{":status", "204"}}},
      {"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\nContent-Length: 0\r\n\r\n",
       0,
       {{":status", "103"}, {"link", "</a.css>"}}},
      {"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
       5,
       {{":status", "304"}, {"content-length", "5"}}},
      {"HTTP/1.1 200 OK\r\nContent-Length: 4194304\r\n\r\n",
       4194304,
       {{":status", "200"}, {"content-length", "4194304"}}},
  };
  for (const row& r : rows) {
    CAPTURE(r.head);
    upstream_response res;
    parse_head(res, r.head);
    h2_fields block;
    h2_response_fields(res, r.parsed, {}, block);
    CHECK(listed(block) == r.sent);
  }
}

TEST_CASE(
    "h2 trailer fields: the upstream's trailer, lower-cased; hop, head-only and the gateway's "
    "fields out") {
  upstream_response res;
  upstream_response_parser p(res);
  const std::string bytes =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: X-Hop\r\n\r\n"
      // (Beast's parser refuses Content-Length and Transfer-Encoding in a trailer itself.)
      "0\r\nX-Checksum: abc\r\nHost: elsewhere\r\nConnection: close\r\nX-Hop: 1\r\n"
      "TE: trailers\r\nProxy-Authenticate: Basic\r\nX-RateLimit-Remaining: 999\r\n"
      "Content-Type: text/other\r\nSet-Cookie: s=1\r\nLocation: /elsewhere\r\n"
      "Server-Timing: db;dur=5\r\n\r\n";
  boost::system::error_code ec;
  p.eager(true);
  p.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
  REQUIRE_FALSE(ec);
  REQUIRE(p.is_done());
  h2_fields block;
  block.add("stale", "from before");
  const header_list extra{{"X-Request-Id", "rid"}, {"X-RateLimit-Remaining", "4"}};
  h2_trailer_fields(res, extra, block);
  CHECK(listed(block) == field_pairs{{"x-checksum", "abc"}, {"server-timing", "db;dur=5"}});
  SUBCASE("no trailer: an empty block") {
    upstream_response plain;
    parse_head(plain, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    h2_trailer_fields(plain, extra, block);
    CHECK(block.size() == 0);
  }
}
