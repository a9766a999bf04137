#include "ratewall/proxy/upstream_response.hpp"

#include <doctest/doctest.h>

#include <boost/asio/buffer.hpp>
#include <string>
#include <utility>
#include <vector>

using namespace ratewall;
namespace http = boost::beast::http;

namespace {

/// Feeds `bytes` to `p` as the relay does, the body into `window`; returns what the body
/// window received.
std::string feed(upstream_response_parser& p, std::string_view bytes, std::size_t window) {
  std::string body;
  std::vector<char> room(window);
  p.eager(true);
  while (!p.is_done()) {
    auto& b = p.get().body();
    b.data = room.data();
    b.size = room.size();
    boost::system::error_code ec;
    const std::size_t used = p.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
    bytes.remove_prefix(used);
    body.append(room.data(), room.size() - b.size);
    if (ec && ec != http::error::need_buffer) {
      FAIL("parse error: " << ec.message());
    }
  }
  return body;
}

}  // namespace

TEST_CASE("an upstream response head: status, reason, fields in order, repeats kept") {
  upstream_response r;
  upstream_response_parser p(r);
  const std::string body = feed(p,
                                "HTTP/1.1 201 Made It\r\n"
                                "Set-Cookie: a=1\r\n"
                                "Content-Type: text/plain\r\n"
                                "X-Custom:   spaced  \r\n"
                                "set-cookie: b=2\r\n"
                                "Content-Length: 5\r\n"
                                "\r\n"
                                "hello",
                                64);
  CHECK(body == "hello");
  CHECK(r.result_int() == 201);
  CHECK(r.reason() == "Made It");
  CHECK(r.version() == 11);
  std::vector<std::pair<std::string, std::string>> seen;
  for (const auto& f : r) {
    seen.emplace_back(f.name_string(), f.value());
  }
  CHECK(seen == std::vector<std::pair<std::string, std::string>>{{"Set-Cookie", "a=1"},
                                                                 {"Content-Type", "text/plain"},
                                                                 {"X-Custom", "spaced"},
                                                                 {"set-cookie", "b=2"},
                                                                 {"Content-Length", "5"}});
  CHECK(r[http::field::set_cookie] == "a=1");  // the first of a repeated field
  CHECK(r[http::field::content_type] == "text/plain");
  CHECK(r.has(http::field::content_length));
  CHECK_FALSE(r.has(http::field::content_encoding));
  CHECK(r[http::field::content_encoding].empty());
  CHECK(p.content_length().value_or(0) == 5);
}

TEST_CASE("an upstream response body: a window smaller than the body, and chunks") {
  SUBCASE("Content-Length through a 3-byte window") {
    upstream_response r;
    upstream_response_parser p(r);
    CHECK(feed(p, "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world", 3) == "hello world");
  }
  SUBCASE("chunked, chunk sizes and extensions dropped") {
    upstream_response r;
    upstream_response_parser p(r);
    CHECK(feed(p,
               "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               "4;ext=1\r\nwiki\r\n5\r\npedia\r\n0\r\n\r\n",
               4) == "wikipedia");
    CHECK(p.chunked());
  }
}

TEST_CASE("Beast's framing checks still hold: two different Content-Length values are refused") {
  upstream_response r;
  upstream_response_parser p(r);
  const std::string head =
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!";
  boost::system::error_code ec;
  p.put(boost::asio::buffer(head.data(), head.size()), ec);
  CHECK(ec == http::error::multiple_content_length);
}

TEST_CASE("trailers are kept apart from the head, all or none within their bound") {
  upstream_response r;
  upstream_response_parser p(r);
  const std::string head =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n";
  SUBCASE("a trailer under the bound") {
    CHECK(feed(p, head + "3\r\nabc\r\n0\r\nX-Sum: 1\r\nserver-timing: db;dur=5\r\n\r\n", 16) ==
          "abc");
    CHECK(r.size() == 2);  // Transfer-Encoding and Trailer: the head's alone
    CHECK_FALSE(r.has(http::field::unknown));
    CHECK(r[http::field::unknown].empty());
    REQUIRE(r.trailer_count() == 2);
    CHECK(r.trailer(0).name_string() == "X-Sum");
    CHECK(r.trailer(0).value() == "1");
    CHECK(r.trailer(1).name_string() == "server-timing");
    CHECK(r.trailer(1).value() == "db;dur=5");
    r.clear();
    CHECK(r.trailer_count() == 0);
  }
  SUBCASE("one byte over the bound: none of it") {
    // Names and values count, and 32 a field: "X-Sum" + "1" + 32, "X-Other" + the rest + 32.
    const std::size_t rest = upstream_response::k_max_trailer_bytes - 38 - 39 + 1;
    CHECK(feed(p,
               head + "3\r\nabc\r\n0\r\nX-Sum: 1\r\nX-Other: " + std::string(rest, 't') +
                   "\r\nX-After: 2\r\n\r\n",
               16) == "abc");
    CHECK(r.trailer_count() == 0);
    CHECK(r.trailer_dropped());
    CHECK(r.size() == 2);
  }
  SUBCASE("many empty fields count 32 bytes each") {
    std::string fields;
    for (int i = 0; i < 300; ++i) {
      fields += "a:\r\n";  // 300 × 33 > 8 KiB
    }
    feed(p, head + "3\r\nabc\r\n0\r\n" + fields + "\r\n", 16);
    CHECK(r.trailer_count() == 0);
    CHECK(r.trailer_dropped());
  }
  SUBCASE("exactly the bound: all of it") {
    const std::size_t rest = upstream_response::k_max_trailer_bytes - 38 - 39;
    feed(p, head + "3\r\nabc\r\n0\r\nX-Sum: 1\r\nX-Other: " + std::string(rest, 't') + "\r\n\r\n",
         16);
    CHECK(r.trailer_count() == 2);
    CHECK_FALSE(r.trailer_dropped());
  }
  SUBCASE("no trailer") {
    feed(p, head + "3\r\nabc\r\n0\r\n\r\n", 16);
    CHECK(r.trailer_count() == 0);
    CHECK(r.size() == 2);
  }
}

TEST_CASE("the next response starts empty; a very large head's room is not kept") {
  upstream_response r;
  {
    upstream_response_parser p(r);
    const std::string big(8000, 'v');
    feed(p, "HTTP/1.1 200 OK\r\nX-Big: " + big + "\r\nContent-Length: 0\r\n\r\n", 16);
    CHECK(r[http::field::unknown].size() == big.size());
  }
  CHECK(r.room_bytes() > 8000);
  r.clear();  // as the exchange does when it ends
  CHECK(r.size() == 0);
  CHECK(r.room_bytes() < 4096);
  upstream_response_parser p(r);
  feed(p, "HTTP/1.0 304 Not Modified\r\nETag: \"x\"\r\n\r\n", 16);
  CHECK(r.result_int() == 304);
  CHECK(r.version() == 10);
  CHECK(r.size() == 1);
  CHECK(r[http::field::etag] == "\"x\"");
}
