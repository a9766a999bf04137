// identify_by descriptors through the gateway (issue 13, item 1): each source names the client
// its route limits, variants the upstream reads as the same value share one budget, and a
// field that names the client sent twice is refused before anything is forwarded.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "support/gateway_harness.hpp"
#include "support/http_client.hpp"
#include "support/test_upstream.hpp"

using namespace ratewall::testing;

namespace {

// Two requests a minute per client on every route; what names the client differs per route.
const std::string k_config = R"(
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
  - name: by-header
    match: { path_prefix: /h }
    upstream: api
    identify_by: [header:X-Tenant, ip]
    limits: [{ name: two, rate: 1/m, burst: 2 }]
  - name: by-query
    match: { path_prefix: /q }
    upstream: api
    identify_by: [query:tenant, ip]
    limits: [{ name: two, rate: 1/m, burst: 2 }]
  - name: by-cookie
    match: { path_prefix: /c }
    upstream: api
    identify_by: [cookie:session, ip]
    limits: [{ name: two, rate: 1/m, burst: 2 }]
  - name: by-path
    match: { path_template: "/tenants/{tenant}/items" }
    upstream: api
    identify_by: [path:tenant]
    limits: [{ name: two, rate: 1/m, burst: 2 }]
  - name: by-composite
    match: { path_prefix: /both }
    upstream: api
    identify_by: [[header:X-Tenant, query:project], ip]
    limits: [{ name: two, rate: 1/m, burst: 2 }]
)";

struct row {
  const char* what;
  std::string first_target;  // the client as first named
  header_pairs first_headers;
  std::string same_target;  // the same client, written differently
  header_pairs same_headers;
  std::string other_target;  // another client
  header_pairs other_headers;
};

}  // namespace

TEST_CASE("each descriptor names the client its limits count; spellings of one value share them") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());

  const std::vector<row> table = {
      {"header",
       "/h",
       {{"X-Tenant", "acme"}},
       "/h",
       {{"x-tenant", " acme"}},
       "/h",
       {{"X-Tenant", "globex"}}},
      {"query", "/q?tenant=acme", {}, "/q?x=1&t%65nant=%61cme", {}, "/q?tenant=globex", {}},
      {"cookie",
       "/c",
       {{"Cookie", "session=s1"}},
       "/c",
       {{"Cookie", "theme=dark; session=s1"}},
       "/c",
       {{"Cookie", "session=s2"}}},
      {"path",
       "/tenants/acme/items",
       {},
       "/tenants/%61cme//items/",
       {},
       "/tenants/globex/items",
       {}},
      {"composite",
       "/both?project=p1",
       {{"X-Tenant", "acme"}},
       "/both?project=p%31",
       {{"X-Tenant", "acme"}},
       "/both?project=p2",
       {{"X-Tenant", "acme"}}},
  };
  for (const row& r : table) {
    CAPTURE(r.what);
    CHECK(client.get(r.first_target, r.first_headers).status == 200);
    CHECK(client.get(r.same_target, r.same_headers).status == 200);
    // The budget of two is spent, however the value was written.
    const http_reply denied = client.get(r.first_target, r.first_headers);
    CHECK(denied.status == 429);
    CHECK(client.get(r.same_target, r.same_headers).status == 429);
    // Another value is another client.
    CHECK(client.get(r.other_target, r.other_headers).status == 200);
  }
  // Where a descriptor is absent, the next source: the IP (one budget for all these requests).
  CHECK(client.get("/h").status == 200);
  CHECK(client.get("/q?tenant=").status == 200);
  CHECK(client.get("/both", {{"X-Tenant", "acme"}}).status == 200);  // no project: by IP
  CHECK(client.get("/both?x=1").status == 200);
  CHECK(client.get("/both", {{"X-Tenant", "globex"}}).status == 429);
}

TEST_CASE("a field or parameter that names the client, sent twice, is refused with 400") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());

  const http_reply twice = client.get("/h", {{"X-Tenant", "acme"}, {"X-Tenant", "globex"}});
  CHECK(twice.status == 400);
  CHECK(twice.body.find("x-tenant header names the client") != std::string::npos);
  CHECK(twice.body.find("globex") == std::string::npos);
  const http_reply query = client.get("/q?tenant=acme&tenant=globex");
  CHECK(query.status == 400);
  CHECK(query.body.find("query parameter tenant") != std::string::npos);
  // Nothing of either reached the upstream, and the connection still serves.
  CHECK(upstream.count("GET", "/") == 0);
  CHECK(client.get("/h", {{"X-Tenant", "acme"}}).status == 200);
  CHECK(upstream.count("GET", "/") == 1);

  // The same for X_Tenant beside X-Tenant (a CGI-style upstream reads both as one), and for a
  // cookie sent with two values.
  CHECK(client.get("/h", {{"X-Tenant", "acme"}, {"X_Tenant", "globex"}}).status == 400);
  CHECK(client.get("/c", {{"Cookie", "session=a; session=b"}}).status == 400);
  // Connection may not name it either: the field would be dropped before the upstream could
  // check it, and every request would bring a fresh value.
  http_client other(gw.port());
  CHECK(other.get("/h", {{"X-Tenant", "fresh"}, {"Connection", "x-tenant"}}).status == 400);
  http_client third(gw.port());
  CHECK(third.get("/c", {{"Cookie", "session=fresh"}, {"Connection", "cookie"}}).status == 400);
  CHECK(upstream.count("GET", "/") == 1);
}

TEST_CASE("the API key's field sent twice is refused with 400, X-API-Key or Authorization") {
  test_upstream upstream;
  gateway_harness gw(R"(
plans: { premium: {} }
api_keys:
  - { key: key-of-acme, plan: premium }
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
  - name: keyed
    upstream: api
    identify_by: [api_key, ip]
    limits: [{ name: two, rate: 1/m, burst: 2 }]
)",
                     upstream.port());
  http_client client(gw.port());
  // A junk key first, the real one second: the gateway would count the client by its address
  // while an upstream that reads the last field serves it as acme.
  const http_reply keys = client.get("/", {{"X-API-Key", "junk"}, {"X-API-Key", "key-of-acme"}});
  CHECK(keys.status == 400);
  CHECK(keys.body.find("x-api-key header names the client") != std::string::npos);
  CHECK(keys.body.find("key-of-acme") == std::string::npos);
  CHECK(client.get("/", {{"Authorization", "Basic eA=="}, {"Authorization", "Bearer key-of-acme"}})
            .status == 400);
  CHECK(upstream.count("GET", "/") == 0);
  CHECK(client.get("/", {{"X-API-Key", "key-of-acme"}}).status == 200);
  CHECK(client.get("/", {{"Authorization", "Bearer key-of-acme"}}).status == 200);
  CHECK(client.get("/", {{"X-API-Key", "key-of-acme"}}).status == 429);
  // X_API_Key is X-API-Key to a CGI-style upstream: the key here too, not a keyless client
  // counted by its address. And a junk header key does not hide a declared bearer key.
  CHECK(client.get("/", {{"X_API_Key", "key-of-acme"}}).status == 429);
  CHECK(client.get("/", {{"X-API-Key", "junk"}, {"Authorization", "Bearer key-of-acme"}}).status ==
        429);
  CHECK(client.get("/", {{"X_API_Key", "junk"}}).status == 200);  // unknown: by address
}
