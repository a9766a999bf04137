// The canonical request-target, against a hostile table (STYLE 12): each row the target as
// sent and the canonical path the router and the upstream both get, or the refusal.

#include <doctest/doctest.h>

#include <string>

#include "ratewall/http/request_target.hpp"

using namespace ratewall;

namespace {

using escaped = path_options::escaped_slash;
using backslash = path_options::backslash;
using semicolon = path_options::semicolon;

/// The canonical path and query, or "400" when refused.
std::string canon(std::string_view target, const path_options& opts = {}) {
  canonical_target t;
  if (!canonicalize_target(target, opts, t)) {
    CHECK_FALSE(t.error.empty());
    return "400";
  }
  return t.path + t.query;
}

}  // namespace

TEST_CASE("paths that mean the same are one canonical path") {
  struct row {
    const char* sent;
    const char* canonical;
  };
  const row rows[] = {
      {"/", "/"},
      {"/api/search?q=1", "/api/search?q=1"},
      {"/api//search", "/api/search"},
      {"//api/search", "/api/search"},
      {"/a//b///", "/a/b/"},
      {"/a/./b/../c", "/a/c"},
      {"/a/b/..", "/a/"},
      {"/a/b/.", "/a/b/"},
      {"/..", "/"},
      {"/../../api/search", "/api/search"},
      {"/x/..%2Fapi/search", "400"},  // an escaped slash cannot climb
      {"/api/%73earch", "/api/search"},
      {"/api/%2e%2e/api/search", "/api/search"},
      {"/api/%2E/search", "/api/search"},
      {"/%7euser/%41", "/~user/A"},
      {"/a%3bb/%c3%a9", "/a%3Bb/%C3%A9"},  // reserved and non-ASCII stay encoded, hex upper-cased
      {"/.well-known/x", "/.well-known/x"},
      {"/q?a=/../b&c=%2F", "/q?a=/../b&c=%2F"},  // the query is kept as sent
      {"/p?", "/p?"},
      {"http://h.example/a/../b?q", "/b?q"},
      {"HTTP://h.example", "/"},
      {"https://h.example:8443?x=1", "/?x=1"},
  };
  for (const auto& r : rows) {
    CAPTURE(r.sent);
    CHECK(canon(r.sent) == r.canonical);
  }
}

TEST_CASE("bytes outside RFC 3986 are refused") {
  const char* rows[] = {
      "/a b",
      "/a\"b",
      "/a<b",
      "/a>b",
      "/a\\b",
      "/a^b",
      "/a`b",
      "/a{b",
      "/a|b",
      "/a}b",
      "/a\x01",
      "/a\x7f",
      "/a#frag",
      "/caf\xc3\xa9",
      "/%zz",
      "/%4",
      "/a%",
      "/q?x=a b",
      "/q?x=|",
      "/a[b]",
      "*",
      "a/b",
      "",
      "ftp://h/x",
      "http:/x",
      "http://u@h/x",
      "http://h:x/",
      "http:///x",
      "http://[::1/x",
  };
  for (const char* sent : rows) {
    CAPTURE(sent);
    CHECK(canon(sent) == "400");
  }
  CHECK(canon("http://[::1]:8080/x") == "/x");
}

TEST_CASE("server.paths closes each way around a route") {
  SUBCASE("escaped slashes: reject, keep, decode") {
    CHECK(canon("/api%2Fsearch") == "400");
    CHECK(canon("/api%5csearch") == "400");
    path_options o;
    o.escaped_slashes = escaped::keep;
    CHECK(canon("/api%2fsearch", o) == "/api%2Fsearch");
    CHECK(canon("/x/..%2Fapi", o) == "/x/..%2Fapi");  // data: not a separator, not a dot segment
    o.escaped_slashes = escaped::decode;
    CHECK(canon("/api%2Fsearch", o) == "/api/search");
    CHECK(canon("/x/..%2Fapi/search", o) == "/api/search");
    CHECK(canon("/api%5Csearch", o) == "400");  // decoded to a backslash, which is refused
  }
  SUBCASE("backslashes: reject, keep") {
    CHECK(canon("/api\\search") == "400");
    path_options o;
    o.backslashes = backslash::keep;
    CHECK(canon("/api\\search", o) == "/api\\search");
  }
  SUBCASE("semicolons: keep, strip_params, reject") {
    CHECK(canon("/api;/search") == "/api;/search");
    path_options o;
    o.semicolons = semicolon::strip_params;
    CHECK(canon("/api;/search", o) == "/api/search");
    CHECK(canon("/api;jsessionid=1/search;v=2?x=;y", o) == "/api/search?x=;y");
    CHECK(canon("/api%3B/search", o) == "/api%3B/search");  // an escaped ';' is data
    // Tomcat's reading of "..;": the dot segment it is once its parameter goes.
    CHECK(canon("/public/..;/admin", o) == "/admin");
    CHECK(canon("/public/..;x=1/admin", o) == "/admin");
    CHECK(canon("/public/..;/admin", {}) == "/public/..;/admin");
    o.semicolons = semicolon::reject;
    CHECK(canon("/api;/search", o) == "400");
  }
  SUBCASE("merge_slashes off keeps empty segments") {
    path_options o;
    o.merge_slashes = false;
    CHECK(canon("/a//b", o) == "/a//b");
    CHECK(canon("/a//../b", o) == "/a/b");
  }
}

TEST_CASE("the authority of an absolute-form target is checked and kept") {
  canonical_target t;
  REQUIRE(canonicalize_target("http://Api.Example.com:8080/x", {}, t));
  CHECK(t.authority == "Api.Example.com:8080");
  REQUIRE(canonicalize_target("/x", {}, t));
  CHECK(t.authority.empty());
  CHECK(valid_authority("a.example"));
  CHECK(valid_authority("a.example:80"));
  CHECK(valid_authority("[::1]:80"));
  CHECK_FALSE(valid_authority(""));
  CHECK_FALSE(valid_authority("a b"));
  CHECK_FALSE(valid_authority("u@a"));
  CHECK_FALSE(valid_authority("a:"));
  CHECK_FALSE(valid_authority("a:123456"));
  CHECK_FALSE(valid_authority("a/b"));
  // One trailing dot is a name's own (routing drops it); an empty label is none (nginx too).
  CHECK(valid_authority("a.example."));
  CHECK(valid_authority("a.example.:80"));
  CHECK_FALSE(valid_authority("a.example.."));
  CHECK_FALSE(valid_authority("a..example"));
  CHECK_FALSE(valid_authority(".."));
  CHECK_FALSE(valid_authority("."));
  CHECK_FALSE(valid_authority(".:80"));
  CHECK_FALSE(valid_authority(".a.example"));
  CHECK_FALSE(valid_authority(".a.example.:80"));
}

TEST_CASE("configuration paths are made canonical without refusal") {
  CHECK(canonical_config_path("/a//b/./c", {}) == "/a/b/c");
  CHECK(canonical_config_path("/api/", {}) == "/api/");
  CHECK(canonical_config_path("/%7e", {}) == "/~");
}
