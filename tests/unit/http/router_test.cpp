#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "ratewall/http/request_target.hpp"
#include "ratewall/http/router.hpp"

using namespace ratewall;

namespace {

// What the session does: the target made canonical (refused: no route), an absolute-form
// authority in place of Host, then the router.
std::optional<std::size_t> route(const router& r, std::string_view method, std::string_view host,
                                 std::string_view target, const path_options& opts = {}) {
  canonical_target t;
  if (!canonicalize_target(target, opts, t)) {
    return std::nullopt;
  }
  return r.match(method, t.authority.empty() ? host : std::string_view(t.authority), t.path);
}

route_config make_route(std::string name, route_match m) {
  route_config r;
  r.name = std::move(name);
  r.match = std::move(m);
  r.upstream = "api";
  return r;
}

route_match exact(std::string p, std::vector<std::string> methods = {}) {
  route_match m;
  m.path_exact = std::move(p);
  m.methods = std::move(methods);
  return m;
}

route_match prefix(std::string p, std::vector<std::string> methods = {}, std::string host = {}) {
  route_match m;
  m.path_prefix = std::move(p);
  m.methods = std::move(methods);
  m.host = std::move(host);
  return m;
}

route_match regex(std::string p) {
  route_match m;
  m.path_regex = std::move(p);
  return m;
}

// 0 health (exact), 1 search (prefix, GET/HEAD), 2 items (regex), 3 admin host, no catch-all.
config sample_config() {
  config cfg;
  cfg.routes.push_back(make_route("health", exact("/healthz")));
  cfg.routes.push_back(make_route("search", prefix("/api/search", {"GET", "HEAD"})));
  cfg.routes.push_back(make_route("items", regex("/api/items/[0-9]+")));
  cfg.routes.push_back(make_route("admin", prefix("/", {}, "Admin.Example.com")));
  return cfg;
}

}  // namespace

TEST_CASE("routes are tried in file order and the first match wins") {
  config cfg;
  cfg.routes.push_back(make_route("narrow", prefix("/api/search")));
  cfg.routes.push_back(make_route("wide", prefix("/api")));
  cfg.routes.push_back(make_route("catch-all", prefix("/")));
  router r(cfg);
  CHECK(route(r, "GET", "h", "/api/search/x") == 0u);
  CHECK(route(r, "GET", "h", "/api/other") == 1u);
  CHECK(route(r, "GET", "h", "/") == 2u);

  SUBCASE("a wide route first shadows the narrower ones") {
    std::swap(cfg.routes[0], cfg.routes[2]);
    router shadowed(cfg);
    CHECK(route(shadowed, "GET", "h", "/api/search/x") == 0u);
  }
}

TEST_CASE("path_exact matches the whole path only") {
  router r(sample_config());
  CHECK(route(r, "GET", "h", "/healthz") == 0u);
  // One trailing slash is the same resource to most upstreams (Flask, Express, Rails).
  CHECK(route(r, "GET", "h", "/healthz/") == 0u);
  CHECK(route(r, "GET", "h", "/healthz//") == 0u);  // merged first
  CHECK(route(r, "GET", "h", "/healthz/x") == std::nullopt);
  CHECK(route(r, "GET", "h", "/healthzz") == std::nullopt);
  CHECK(route(r, "GET", "h", "/health") == std::nullopt);
}

TEST_CASE("path_prefix is a plain string prefix, like an nginx location") {
  router r(sample_config());
  CHECK(route(r, "GET", "h", "/api/search") == 1u);
  CHECK(route(r, "GET", "h", "/api/search/books") == 1u);
  CHECK(route(r, "GET", "h", "/api/searchable") == 1u);
  CHECK(route(r, "GET", "h", "/api/sear") == std::nullopt);
  CHECK(route(r, "GET", "h", "/API/search") == std::nullopt);  // paths are case-sensitive
}

TEST_CASE("path_regex must match the whole path") {
  router r(sample_config());
  CHECK(route(r, "GET", "h", "/api/items/42") == 2u);
  CHECK(route(r, "DELETE", "h", "/api/items/7") == 2u);
  CHECK(route(r, "GET", "h", "/api/items/42/reviews") == std::nullopt);
  CHECK(route(r, "GET", "h", "/api/items/abc") == std::nullopt);
  CHECK(route(r, "GET", "h", "/v2/api/items/42") == std::nullopt);
}

TEST_CASE("methods restrict a route; empty methods match any") {
  router r(sample_config());
  CHECK(route(r, "GET", "h", "/api/search") == 1u);
  CHECK(route(r, "HEAD", "h", "/api/search") == 1u);
  CHECK(route(r, "POST", "h", "/api/search") == std::nullopt);
  CHECK(route(r, "get", "h", "/api/search") == std::nullopt);  // methods are case-sensitive
  CHECK(route(r, "PATCH", "h", "/healthz") == 0u);
}

TEST_CASE("host is compared case-insensitively and without the port") {
  router r(sample_config());
  CHECK(route(r, "GET", "admin.example.com", "/anything") == 3u);
  CHECK(route(r, "GET", "ADMIN.example.COM:8443", "/anything") == 3u);
  CHECK(route(r, "GET", "admin.example.com.", "/anything") == 3u);
  CHECK(route(r, "GET", "api.example.com", "/anything") == std::nullopt);
  CHECK(route(r, "GET", "", "/anything") == std::nullopt);
  // Routes without a host ignore it.
  CHECK(route(r, "GET", "whatever:1", "/healthz") == 0u);

  SUBCASE("bracketed IPv6 hosts") {
    config cfg;
    cfg.routes.push_back(make_route("v6", prefix("/", {}, "::1")));
    router v6(cfg);
    CHECK(route(v6, "GET", "[::1]:8080", "/") == 0u);
    CHECK(route(v6, "GET", "[::1]", "/") == 0u);
    CHECK(route(v6, "GET", "[::2]:8080", "/") == std::nullopt);
  }

  SUBCASE("an IPv4 host matches in every spelling of its address, not only its text") {
    // Each spelling went to the catch-all below, around the address's limit.
    config cfg;
    cfg.routes.push_back(make_route("v4", prefix("/v4/", {}, "127.0.0.1")));
    cfg.routes.push_back(make_route("rest", prefix("/", {})));
    router v4(cfg);
    for (const char* host :
         {"127.0.0.1", "127.0.0.1:8080", "127.0.0.1.", "127.1", "127.0.1", "2130706433",
          "0x7f.0.0.1", "0X7F000001", "0177.0.0.1", "127.0.0.01", "[::ffff:127.0.0.1]",
          "[::FFFF:7f00:1]:80", "0000000000000000000000000000000000000000000000000177.0.0.1"}) {
      CAPTURE(host);
      CHECK(route(v4, "GET", host, "/v4/x") == 0u);
    }
    for (const char* host : {"127.0.0.2", "127.2", "0x7f.0.0.2", "[::1]", "[::127.0.0.1]",
                             "127.0.0.1.example", "localhost", "1.2.3.4.5", "127.0.0.1 x"}) {
      CAPTURE(host);
      CHECK(route(v4, "GET", host, "/v4/x") == 1u);
    }
  }
}

TEST_CASE("an absolute-form target carries the host, which wins over the Host header") {
  router r(sample_config());
  CHECK(route(r, "GET", "api.example.com", "http://admin.example.com/x?y=1") == 3u);
  CHECK(route(r, "GET", "admin.example.com", "https://api.example.com:443/healthz") == 0u);
  CHECK(route(r, "GET", "admin.example.com", "http://api.example.com") == std::nullopt);
}

TEST_CASE("the query string and fragment are ignored") {
  router r(sample_config());
  CHECK(route(r, "GET", "h", "/healthz?verbose=1") == 0u);
  CHECK(route(r, "GET", "h", "/healthz?") == 0u);
  CHECK(route(r, "GET", "h", "/healthz#top") == std::nullopt);  // refused: 400
  CHECK(route(r, "GET", "h", "/api/items/42?next=/api/items/abc") == 2u);
  CHECK(route(r, "GET", "h", "/api/items/?42") == std::nullopt);
}

TEST_CASE("no route matches: nullopt (404)") {
  router r(sample_config());
  CHECK(route(r, "GET", "h", "/nowhere") == std::nullopt);
  CHECK(route(r, "OPTIONS", "h", "*") == std::nullopt);
  CHECK(route(r, "GET", "h", "") == std::nullopt);
  CHECK(route(router(config{}), "GET", "h", "/") == std::nullopt);
}

TEST_CASE("equivalent spellings of a path reach the same route") {
  router r(sample_config());
  CHECK(route(r, "GET", "h", "/api//search") == 1u);
  CHECK(route(r, "GET", "h", "//api/search") == 1u);
  CHECK(route(r, "GET", "h", "/public/../api/search") == 1u);
  CHECK(route(r, "GET", "h", "/./api/./search") == 1u);
  CHECK(route(r, "GET", "h", "/api/%73earch") == 1u);
  CHECK(route(r, "GET", "h", "/api/%2e%2e/api/search") == 1u);
  CHECK(route(r, "GET", "h", "/../../healthz") == 0u);
  CHECK(route(r, "GET", "h", "/api/items/%34%32") == 2u);
  // "%2F" is refused by default; kept, it is data, not a separator.
  CHECK(route(r, "GET", "h", "/api%2Fsearch") == std::nullopt);
  path_options keep;
  keep.escaped_slashes = path_options::escaped_slash::keep;
  CHECK(route(r, "GET", "h", "/api%2Fsearch", keep) == std::nullopt);
  path_options decode;
  decode.escaped_slashes = path_options::escaped_slash::decode;
  CHECK(route(r, "GET", "h", "/api%2Fsearch", decode) == 1u);
}

TEST_CASE("config paths are normalized like request paths") {
  config cfg;
  cfg.routes.push_back(make_route("odd", exact("/a//b/./c")));
  router r(cfg);
  CHECK(route(r, "GET", "h", "/a/b/c") == 0u);
}

TEST_CASE("a long path cannot exhaust the stack in a regex route") {
  config cfg;
  cfg.routes.push_back(make_route("alt", regex("/api/(a|b)*")));
  router r(cfg);
  // The default libstdc++ executor recurses once per character and crashes near 16 KiB here.
  std::string path = "/api/" + std::string(200000, 'a');
  CHECK(route(r, "GET", "h", path) == 0u);
  CHECK(route(r, "GET", "h", path + "c") == std::nullopt);
}

TEST_CASE("an invalid path_regex is an error naming the route") {
  config cfg;
  cfg.routes.push_back(make_route("broken", regex("/api/(")));
  CHECK_THROWS_WITH_AS(router{cfg}, doctest::Contains("(broken): path_regex"),
                       std::invalid_argument);
  CHECK(path_regex_error("/api/(").has_value());
  CHECK_FALSE(path_regex_error("/api/[0-9]+").has_value());
#ifdef __GLIBCXX__
  // Back-references would need the backtracking executor.
  CHECK(path_regex_error("/(a)\\1").has_value());
#endif
}

TEST_CASE("the router keeps its own copy of the routes") {
  std::optional<router> r;
  {
    config cfg = sample_config();
    r.emplace(cfg);
  }
  CHECK(r->size() == 4);
  CHECK(route(*r, "GET", "h", "/api/items/1") == 2u);
  router copy = *r;
  CHECK(route(copy, "GET", "ADMIN.EXAMPLE.COM", "/") == 3u);
}

TEST_CASE("a route that lists GET takes HEAD too") {
  config cfg;
  cfg.routes.push_back(make_route("reads", prefix("/api", {"GET"})));
  cfg.routes.push_back(make_route("rest", prefix("/")));
  router r(cfg);
  CHECK(route(r, "HEAD", "h", "/api/x") == 0u);
  CHECK(route(r, "POST", "h", "/api/x") == 1u);
}

TEST_CASE("case-insensitive paths, per server or per route") {
  config cfg;
  cfg.routes.push_back(make_route("search", prefix("/api/Search")));
  cfg.routes.push_back(make_route("exact", exact("/Health")));
  cfg.routes.push_back(make_route("items", regex("/api/items/[a-z]+")));
  cfg.routes.push_back(make_route("rest", prefix("/")));
  SUBCASE("off: case matters") {
    router r(cfg);
    CHECK(route(r, "GET", "h", "/API/search") == 3u);
    CHECK(route(r, "GET", "h", "/api/Search/x") == 0u);
  }
  SUBCASE("server.paths.case_insensitive") {
    cfg.server.paths.case_insensitive = true;
    router r(cfg);
    CHECK(route(r, "GET", "h", "/API/SEARCH") == 0u);
    CHECK(route(r, "GET", "h", "/health/") == 1u);
    CHECK(route(r, "GET", "h", "/API/ITEMS/ABC") == 2u);
  }
  SUBCASE("match.case_insensitive for one route") {
    cfg.routes[0].match.case_insensitive = true;
    router r(cfg);
    CHECK(route(r, "GET", "h", "/API/SEARCH") == 0u);
    CHECK(route(r, "GET", "h", "/HEALTH") == 3u);
  }
}

TEST_CASE("path_template: the same segments, a {name} any one non-empty segment") {
  config cfg;
  route_match items;
  items.path_template = "/tenants/{tenant}/items";
  route_match folded;
  folded.path_template = "/Teams/{team}";
  folded.case_insensitive = true;
  route_match encoded;
  encoded.path_template = "/a%62c/{x}";  // literal segments are made canonical: /abc/{x}
  cfg.routes = {make_route("items", items), make_route("teams", folded),
                make_route("abc", encoded)};
  router r(cfg);
  CHECK(route(r, "GET", "h", "/tenants/acme/items") == 0u);
  CHECK(route(r, "GET", "h", "/tenants/acme/items/") == 0u);  // one trailing "/", as path_exact
  CHECK(route(r, "GET", "h", "/tenants/acme/items?x=1") == 0u);
  CHECK(route(r, "GET", "h", "/tenants//items") == std::nullopt);  // merged: /tenants/items
  CHECK(route(r, "GET", "h", "/tenants/acme") == std::nullopt);
  CHECK(route(r, "GET", "h", "/tenants/acme/items/more") == std::nullopt);
  CHECK(route(r, "GET", "h", "/tenants/acme/Items") == std::nullopt);
  CHECK(route(r, "GET", "h", "/tenants/a/b/items") == std::nullopt);
  CHECK(route(r, "GET", "h", "/tenants/x/../acme/items") == 0u);  // dot segments resolved first
  CHECK(route(r, "GET", "h", "/tenants/%61cme/items") == 0u);
  CHECK(route(r, "GET", "h", "/teams/red") == 1u);
  CHECK(route(r, "GET", "h", "/TEAMS/red") == 1u);
  CHECK(route(r, "GET", "h", "/abc/1") == 2u);
  CHECK(route(r, "GET", "h", "/a%62c/1") == 2u);
}
