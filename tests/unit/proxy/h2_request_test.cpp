// HTTP/2 request heads as a hostile table (STYLE 12): each row the fields nghttp2 would hand
// the builder, and the refusal or the HTTP/1.1 head the pipeline gets. nghttp2 refuses many of
// these rows itself; the builder must answer them anyway.

#include "ratewall/proxy/h2_request.hpp"

#include <doctest/doctest.h>

#include <string>
#include <utility>

#include "head_fixtures.hpp"
#include "ratewall/proxy/http_head.hpp"
#include "ratewall/proxy/request_hygiene.hpp"

using namespace ratewall;
using ratewall::testing::field_pairs;

namespace {

constexpr std::size_t k_max = 16 * 1024;

struct built {
  unsigned status = 0;
  std::string reason;
  std::string method;
  std::string target;
  unsigned version = 0;
  field_pairs fields;  // the head's, in order
};

built build(h2_request_builder& b, const field_pairs& block) {
  for (const auto& [name, value] : block) {
    b.add(name, value);
  }
  request_head head;
  built r;
  r.status = b.finish(head);
  r.reason = b.reason();
  r.method = head.method_string();
  r.target = head.target();
  r.version = head.version();
  for (const auto& f : head) {
    r.fields.emplace_back(f.name_string(), f.value());
  }
  return r;
}

built build(const field_pairs& block, std::size_t max = k_max) {
  h2_request_builder b(max);
  return build(b, block);
}

field_pairs with(field_pairs block, const field_pairs& more) {
  block.insert(block.end(), more.begin(), more.end());
  return block;
}

field_pairs without(field_pairs block, std::string_view name) {
  std::erase_if(block, [&](const auto& f) { return f.first == name; });
  return block;
}

// The four pseudo-headers of a request, as a client sends them.
field_pairs pseudo(std::string method, std::string path, std::string authority = "h") {
  return {{":method", std::move(method)},
          {":scheme", "https"},
          {":authority", std::move(authority)},
          {":path", std::move(path)}};
}

const field_pairs k_get = pseudo("GET", "/v1/items?x=1", "api.example");

}  // namespace

TEST_CASE("h2 request: a plain GET is an HTTP/1.1 head with Host from :authority") {
  const built r = build(with(k_get, {{"accept", "*/*"}, {"x-request-id", "abc"}}));
  CHECK(r.status == 0);
  CHECK(r.reason.empty());
  CHECK(r.method == "GET");
  CHECK(r.target == "/v1/items?x=1");
  CHECK(r.version == 11);
  CHECK(r.fields ==
        field_pairs{{"Host", "api.example"}, {"accept", "*/*"}, {"x-request-id", "abc"}});
}

TEST_CASE("h2 request: a method Beast does not know is kept as sent") {
  const built r = build({{":method", "PURGE"},
                         {":scheme", "http"},
                         {":authority", "cache.example"},
                         {":path", "/img/1.png"}});
  CHECK(r.status == 0);
  CHECK(r.method == "PURGE");
  CHECK(r.fields == field_pairs{{"Host", "cache.example"}});
}

TEST_CASE("h2 request: hostile heads and their answers") {
  struct row {
    const char* why;
    field_pairs block;
    unsigned status;
  };
  const row rows[] = {
      {"no :method", without(k_get, ":method"), 400},
      {"no :scheme", without(k_get, ":scheme"), 400},
      {"no :path", without(k_get, ":path"), 400},
      {"no :authority and no host", without(k_get, ":authority"), 400},
      {"no :authority, a host", with(without(k_get, ":authority"), {{"host", "h"}}), 0},
      {":protocol (extended CONNECT is not offered)", with(k_get, {{":protocol", "websocket"}}),
       400},
      {":status in a request", with(k_get, {{":status", "200"}}), 400},
      {"CONNECT", {{":method", "CONNECT"}, {":authority", "db.internal:5432"}}, 501},
      {"extended CONNECT",
       {{":method", "CONNECT"},
        {":protocol", "websocket"},
        {":scheme", "https"},
        {":path", "/chat"},
        {":authority", "h"}},
       400},
      {":path empty", pseudo("GET", ""), 400},
      {":path * with OPTIONS", pseudo("OPTIONS", "*"), 0},
      {":path * with GET", pseudo("GET", "*"), 400},
      {":authority and host equal but for case", with(k_get, {{"host", "API.Example"}}), 0},
      {":authority and host differ", with(k_get, {{"host", "admin.example"}}), 400},
      {"two hosts", with(without(k_get, ":authority"), {{"host", "h"}, {"host", "h"}}), 400},
      {":authority empty", pseudo("GET", "/", ""), 400},
      {"host empty", with(without(k_get, ":authority"), {{"host", ""}}), 400},
      {"a repeated :path", with(k_get, {{":path", "/admin"}}), 400},
      {"a pseudo-header after a field",
       {{":method", "GET"},
        {":scheme", "https"},
        {"accept", "*/*"},
        {":authority", "h"},
        {":path", "/"}},
       400},
      {"an upper-case name", with(k_get, {{"X-Id", "1"}}), 400},
      {"an empty name", with(k_get, {{"", "1"}}), 400},
      {"a name with a space", with(k_get, {{"x id", "1"}}), 400},
      {"connection", with(k_get, {{"connection", "close"}}), 400},
      {"keep-alive", with(k_get, {{"keep-alive", "5"}}), 400},
      {"proxy-connection", with(k_get, {{"proxy-connection", "close"}}), 400},
      {"transfer-encoding", with(k_get, {{"transfer-encoding", "chunked"}}), 400},
      {"upgrade", with(k_get, {{"upgrade", "websocket"}}), 400},
      {"te other than trailers", with(k_get, {{"te", "gzip"}}), 400},
      {"a value with CR LF (a field smuggled into the upstream's head)",
       with(k_get, {{"x-a", "1\r\nx-admin: yes"}}), 400},
      {"a value with LF", with(k_get, {{"x-a", "1\nx"}}), 400},
      {"a value with NUL", with(k_get, {{"x-a", std::string("1\0x", 3)}}), 400},
      {"a value with a space at its start", with(k_get, {{"x-a", " 1"}}), 400},
      {"a value with a tab at its end", with(k_get, {{"x-a", "1\t"}}), 400},
      {"a value with a space inside", with(k_get, {{"x-a", "1 2"}}), 0},
      {"a :path with CR LF", pseudo("GET", "/\r\nx: y"), 400},
      {"a :method that is not a token (split request line)", pseudo("GET / HTTP/1.1", "/"), 400},
      {"an empty :method", pseudo("", "/"), 400},
      {"a :path in absolute form", pseudo("GET", "http://internal.example/admin"), 400},
      {"a :path without its slash", pseudo("GET", "admin"), 400},
      {"a :scheme of ftp",
       {{":method", "GET"}, {":scheme", "ftp"}, {":authority", "h"}, {":path", "/"}},
       400},
      {"a :scheme of http", with(without(k_get, ":scheme"), {{":scheme", "http"}}), 0},
  };
  for (const row& r : rows) {
    CAPTURE(r.why);
    const built b = build(r.block);
    CHECK(b.status == r.status);
    CHECK(b.reason.empty() == (r.status == 0));
    if (r.status != 0) {
      CHECK(b.fields.empty());  // a refused request leaves no head behind
    }
  }
}

TEST_CASE("h2 request: only a host gives Host") {
  const built r = build(with(without(k_get, ":authority"), {{"host", "api.example:8443"}}));
  CHECK(r.status == 0);
  CHECK(r.fields == field_pairs{{"Host", "api.example:8443"}});
}

TEST_CASE("h2 request: :authority and host alike, :authority is the Host sent") {
  const built r = build(with(k_get, {{"host", "API.EXAMPLE"}}));
  CHECK(r.status == 0);
  CHECK(r.fields == field_pairs{{"Host", "api.example"}});
}

TEST_CASE("h2 request: cookie crumbs are one Cookie") {
  const built r =
      build(with(k_get, {{"cookie", "a=1"}, {"accept", "*/*"}, {"cookie", ""}, {"cookie", "b=2"}}));
  CHECK(r.status == 0);
  CHECK(r.fields ==
        field_pairs{{"Host", "api.example"}, {"accept", "*/*"}, {"Cookie", "a=1; b=2"}});
  SUBCASE("one crumb is the Cookie as sent") {
    CHECK(build(with(k_get, {{"cookie", "a=1; b=2"}})).fields ==
          field_pairs{{"Host", "api.example"}, {"Cookie", "a=1; b=2"}});
  }
}

TEST_CASE("h2 request: te: trailers is flagged, not forwarded") {
  h2_request_builder b(k_max);
  const built r = build(b, with(k_get, {{"te", "trailers"}, {"content-type", "application/grpc"}}));
  CHECK(r.status == 0);
  CHECK(b.te_trailers());
  CHECK(r.fields == field_pairs{{"Host", "api.example"}, {"content-type", "application/grpc"}});
  h2_request_builder plain(k_max);
  CHECK(build(plain, k_get).status == 0);
  CHECK_FALSE(plain.te_trailers());
}

TEST_CASE("h2 request: the header list is counted as RFC 9113 §6.5.2 does, to the byte") {
  // The pseudo-headers count: 7+3+32 + 7+5+32 + 10+11+32 + 5+13+32 = 189.
  h2_request_builder probe(k_max);
  for (const auto& [name, value] : k_get) {
    probe.add(name, value);
  }
  REQUIRE(probe.header_bytes() == 189);
  const std::size_t max = 1024;
  const std::string pad(max - 189 - 32 - 5, 'p');  // x-pad makes the list exactly max
  SUBCASE("exactly max_header_bytes is accepted") {
    const built r = build(with(k_get, {{"x-pad", pad}}), max);
    REQUIRE(r.status == 0);
    CHECK(r.fields.back() == std::pair<std::string, std::string>("x-pad", pad));
  }
  SUBCASE("one byte more is 431") {
    const built r = build(with(k_get, {{"x-pad", pad + "p"}}), max);
    CHECK(r.status == 431);
    CHECK(r.fields.empty());
  }
  SUBCASE("431 stands though the pseudo-headers are missing too") {
    CHECK(build({{"x-pad", pad + std::string(300, 'p')}}, max).status == 431);
  }
}

TEST_CASE("h2 request: fields past the limit are counted, not stored") {
  h2_request_builder b(4096);
  for (const auto& [name, value] : k_get) {
    b.add(name, value);
  }
  const std::string value(100, 'v');
  for (int i = 0; i < 100; ++i) {
    b.add("x-flood", value);
  }
  const std::size_t room = b.room_bytes();
  CHECK(room <= 4 * 4096);  // the text and the index, each at most twice what 4096 allows
  for (int i = 0; i < 100000; ++i) {
    b.add("x-flood", value);
    b.add("cookie", value);
  }
  b.add("x-huge", std::string(1 << 20, 'h'));
  CHECK(b.room_bytes() == room);
  CHECK(b.header_bytes() ==
        189 + 100100ULL * (7 + 100 + 32) + 100000ULL * (6 + 100 + 32) + (6 + (1 << 20) + 32));
  request_head head;
  CHECK(b.finish(head) == 431);
}

TEST_CASE("h2 request: a cleared builder starts anew and keeps the room of a usual head") {
  h2_request_builder b(1 << 20);
  for (int i = 0; i < 2000; ++i) {
    b.add(i == 0 ? ":authority" : "x-many", "0123456789012345678901234567890123456789");
    b.add("cookie", "c=0123456789");
  }
  CHECK(b.room_bytes() > 64 * 1024);
  b.clear();
  CHECK(b.room_bytes() <= 2048 + 32 * 32 + 1024);
  CHECK(b.header_bytes() == 0);
  b.add("te", "trailers");
  b.clear();
  CHECK_FALSE(b.te_trailers());
  const built r = build(b, k_get);
  CHECK(r.status == 0);
  CHECK(r.fields == field_pairs{{"Host", "api.example"}});
}

TEST_CASE("h2 request: the built head goes through the HTTP/1.1 pipeline unchanged") {
  const auto head_of = [](const field_pairs& block, request_head& head) {
    h2_request_builder b(k_max);
    for (const auto& [name, value] : block) {
      b.add(name, value);
    }
    REQUIRE(b.finish(head) == 0);
  };
  canonical_request canon;
  SUBCASE("a plain GET is accepted, host and target as for HTTP/1.1") {
    request_head head;
    head_of(with(k_get, {{"cookie", "a=1"}, {"cookie", "b=2"}}), head);
    REQUIRE(check_request_head(head, path_options{}, identity_config{}, canon) == 0);
    CHECK(canon.host == "api.example");
    CHECK(canon.target.path == "/v1/items");
    CHECK(canon.target.query == "?x=1");
    std::string wire;
    forwarding_headers fwd;
    fwd.target = "/v1/items?x=1";
    fwd.host = canon.host;
    write_upstream_request_head(head, body_framing::none, 0, fwd, wire);
    CHECK(wire.starts_with("GET /v1/items?x=1 HTTP/1.1\r\n"));
    CHECK(wire.find("Cookie: a=1; b=2\r\n") != std::string::npos);
  }
  SUBCASE("an escaped slash is refused as for HTTP/1.1") {
    request_head head;
    head_of(pseudo("GET", "/api%2Fsearch"), head);
    CHECK(check_request_head(head, path_options{}, identity_config{}, canon) == 400);
    CHECK_FALSE(canon.reason.empty());
  }
  SUBCASE("an :authority that is no authority is refused as an invalid Host") {
    request_head head;
    head_of(pseudo("GET", "/", "u@h"), head);
    CHECK(check_request_head(head, path_options{}, identity_config{}, canon) == 400);
    CHECK(canon.reason == "invalid Host");
  }
}
