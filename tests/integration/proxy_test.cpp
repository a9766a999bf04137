// The gateway end to end: real sockets on 127.0.0.1, a real upstream, the real server.

#include <doctest/doctest.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "ratewall/admin/metrics.hpp"

#include "support/eventually.hpp"
#include "support/gateway_harness.hpp"
#include "support/http_client.hpp"
#include "support/raw_upstream.hpp"
#include "support/refusing_port.hpp"
#include "support/temp_dir.hpp"
#include "support/test_upstream.hpp"
#include "support/time_scale.hpp"

using namespace ratewall::testing;
using namespace std::chrono_literals;

namespace {

// Timeouts are short so the tests that wait for them stay quick.
const std::string k_config = R"(
server:
  threads: 2
  max_header_bytes: 2048
  max_body_bytes: 1024
  header_timeout: 300ms
  body_timeout: 300ms
  idle_timeout: 5s
identity:
  trusted_proxies: [10.0.0.0/8]
  unknown_api_key: allow
upstreams:
  api:
    targets: [${UPSTREAM}]
    connect_timeout: 300ms
    response_timeout: 400ms
routes:
  - name: limited
    match: { path_prefix: /limited }
    upstream: api
    identify_by: [api_key, ip]
    limits:
      - name: burst
        algorithm: token_bucket
        rate: 1/m
        burst: 3
  - name: open
    match: { path_prefix: / }
    upstream: api
    limits:
      - name: roomy
        rate: 1000/s
        burst: 1000
)";

nlohmann::json echo_of(const http_reply& r) {
  return nlohmann::json::parse(r.body);
}

}  // namespace

TEST_CASE("an allowed request reaches the upstream with forwarding headers") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());

  auto r = client.get("/hello?x=1", {{"Connection", "keep-alive, X-Hop"},
                                     {"X-Hop", "secret"},
                                     {"X-Forwarded-For", "6.6.6.6"},
                                     {"X_Forwarded_For", "6.6.6.7"},
                                     {"Forwarded", "for=6.6.6.8"},
                                     {"X-Real-IP", "6.6.6.9"},
                                     {"X-User-ID", "admin"},
                                     {"SCRIPT_NAME", "/hello"},
                                     {"X-Original-URI", "/admin"}});
  REQUIRE(r.status == 200);
  auto echo = echo_of(r);
  CHECK(echo["target"] == "/hello?x=1");
  // The peer is not a trusted proxy: its own X-Forwarded-For claim is replaced, not extended.
  CHECK(echo["headers"]["x-forwarded-for"] == "127.0.0.1");
  // Nor under another spelling, or another name for the same claim.
  CHECK_FALSE(echo["headers"].contains("x_forwarded_for"));
  CHECK_FALSE(echo["headers"].contains("forwarded"));
  CHECK_FALSE(echo["headers"].contains("x-real-ip"));
  // Nor a claim of who the client is, which the gateway believes from trusted proxies alone.
  CHECK_FALSE(echo["headers"].contains("x-user-id"));
  // Nor what an application would serve in place of the path the gateway routed and priced
  // (Gunicorn cuts SCRIPT_NAME off the front of it; nginx's X-Original-URI).
  CHECK_FALSE(echo["headers"].contains("script_name"));
  CHECK_FALSE(echo["headers"].contains("x-original-uri"));
  CHECK(echo["headers"]["x-forwarded-proto"] == "http");
  CHECK(echo["headers"]["x-forwarded-host"] == "localhost");
  CHECK(echo["headers"]["x-request-id"].get<std::string>().size() == 32);
  CHECK_FALSE(echo["headers"].contains("x-hop"));  // named by Connection: hop-by-hop
  CHECK(r.header("x-request-id") == echo["headers"]["x-request-id"]);
  CHECK(r.header("x-ratelimit-limit") == "1000");
  CHECK(r.keep_alive);
}

TEST_CASE(
    "a trusted proxy's user header and address claims reach the upstream; anyone else's do not") {
  test_upstream upstream;
  std::string trusting = k_config;
  const std::string from = "trusted_proxies: [10.0.0.0/8]";
  trusting.replace(trusting.find(from), from.size(), "trusted_proxies: [127.0.0.0/8]");
  gateway_harness gw(trusting, upstream.port());
  http_client client(gw.port());
  auto r = client.get("/hello", {{"X-User-ID", "alice"}, {"X-Real-IP", "6.6.6.9"}});
  REQUIRE(r.status == 200);
  auto echo = echo_of(r);
  CHECK(echo["headers"]["x-user-id"] == "alice");
  CHECK(echo["headers"]["x-real-ip"] == "6.6.6.9");
}

TEST_CASE("a field value with bytes past ASCII (obs-text) reaches the upstream unchanged") {
  // RFC 9110 §5.5: a recipient keeps obs-text as opaque data. Latin-1 names and cookies
  // still arrive from old clients.
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());
  auto r = client.get("/latin", {{"X-Note", "caf\xE9"},
                                 {"Cookie",
                                  "a=\xA0"
                                  "b"}});
  REQUIRE(r.status == 200);
  const auto seen = upstream.requests();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].header("x-note") == "caf\xE9");
  CHECK(seen[0].header("cookie") ==
        "a=\xA0"
        "b");
}

TEST_CASE("burst + 1 requests: the last one gets 429 with every header") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());

  for (int i = 0; i < 3; ++i) {
    auto r = client.get("/limited", {{"X-API-Key", "alice"}});
    REQUIRE(r.status == 200);
    CHECK(r.header("x-ratelimit-limit") == "3");
    CHECK(r.header("x-ratelimit-remaining") == std::to_string(2 - i));
    CHECK_FALSE(r.has("retry-after"));
  }
  auto denied = client.get("/limited", {{"X-API-Key", "alice"}});
  CHECK(denied.status == 429);
  CHECK(denied.header("x-ratelimit-limit") == "3");
  CHECK(denied.header("x-ratelimit-remaining") == "0");
  // One token a minute: the next one comes in at most 60 s (a little less has passed).
  int retry = std::stoi(denied.header("retry-after"));
  CHECK(retry >= 59);
  CHECK(retry <= 60);
  CHECK(std::stoi(denied.header("x-ratelimit-reset")) >= 179);
  CHECK(denied.header("content-type") == "application/problem+json");
  auto body = nlohmann::json::parse(denied.body);
  CHECK(body["status"] == 429);
  CHECK(body["route"] == "limited");
  CHECK(body["policy"] == "burst");
  CHECK(body["retry_after"] == retry);
  CHECK(denied.keep_alive);
  // The connection survives a 429, and the upstream never saw the denied request.
  CHECK(client.get("/other").status == 200);
  CHECK(upstream.count("GET", "/limited") == 3);
}

TEST_CASE("two clients have independent limits") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());
  for (int i = 0; i < 3; ++i) {
    REQUIRE(client.get("/limited", {{"X-API-Key", "alice"}}).status == 200);
  }
  CHECK(client.get("/limited", {{"X-API-Key", "alice"}}).status == 429);
  auto bob = client.get("/limited", {{"X-API-Key", "bob"}});
  CHECK(bob.status == 200);
  CHECK(bob.header("x-ratelimit-remaining") == "2");
}

TEST_CASE("keep-alive requests share one upstream connection") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());
  for (int i = 0; i < 20; ++i) {
    auto r = client.get("/n/" + std::to_string(i));
    REQUIRE(r.status == 200);
    CHECK(echo_of(r)["request"] == i + 1);  // in order, on the same upstream connection
  }
  CHECK(upstream.connections_accepted() == 1);
}

TEST_CASE("upstream down: 502") {
  const refusing_port dead;
  gateway_harness gw(k_config, dead.port());
  http_client client(gw.port());
  auto r = client.get("/x");
  CHECK(r.status == 502);
  CHECK(r.header("content-type") == "application/problem+json");
  // The client connection stays usable.
  CHECK(client.get("/y").status == 502);
}

TEST_CASE("upstream slow: 504") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());
  auto r = client.get("/slow?ms=2000");
  CHECK(r.status == 504);
  // The late connection is not reused: the next request is answered normally.
  http_client again(gw.port());
  CHECK(again.get("/fast").status == 200);
}

TEST_CASE("bad requests get a clear status and the connection is closed") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());

  SUBCASE("a head over max_header_bytes: 431") {
    http_client client(gw.port());
    auto r = client.get("/", {{"X-Big", std::string(4096, 'a')}});
    CHECK(r.status == 431);
    CHECK(client.closed_by_peer());
  }
  SUBCASE("a body over max_body_bytes: 413") {
    http_client client(gw.port());
    auto r = client.request("POST", "/", {}, std::string(2000, 'b'));
    CHECK(r.status == 413);
    CHECK(client.closed_by_peer());
  }
  SUBCASE("a chunked body that grows over max_body_bytes: 413, or a closed connection") {
    http_client client(gw.port());
    auto r = client.request("POST", "/", {}, std::string(2000, 'b'), true);
    CHECK(r.status == 413);
  }
  SUBCASE("malformed: 400") {
    http_client client(gw.port());
    client.send_raw("GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n");
    auto r = client.read_reply();
    CHECK(r.status == 400);
    CHECK(client.closed_by_peer());
  }
  SUBCASE("not HTTP at all: 400") {
    http_client client(gw.port());
    client.send_raw("\x16\x03\x01 hello\r\n\r\n");
    CHECK(client.read_reply().status == 400);
  }
  SUBCASE("a head that never ends: 408") {
    http_client client(gw.port());
    client.send_raw("GET / HTTP/1.1\r\nHost: x\r\n");
    auto r = client.read_reply();
    CHECK(r.status == 408);
    CHECK(client.closed_by_peer());
  }
  SUBCASE("a body that stops coming: 408") {
    http_client client(gw.port());
    client.send_raw("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly a part");
    auto r = client.read_reply();
    CHECK(r.status == 408);
    CHECK(r.body.find("request body not received in time") != std::string::npos);
  }
  SUBCASE("no route: 404, and the connection stays") {
    test_upstream other;
    gateway_harness narrow(R"(
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
  - name: only
    match: { path_exact: /only, methods: [GET] }
    upstream: api
)",
                           other.port());
    http_client client(narrow.port());
    CHECK(client.get("/else").status == 404);
    CHECK(client.request("POST", "/only").status == 404);
    CHECK(client.get("/only").status == 200);
  }
  // Nothing above reached the upstream.
  CHECK(upstream.requests().empty());
}

TEST_CASE("empty lines before a request line are ignored (RFC 9112 §2.2)") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  SUBCASE("before the first request, CRLF, LF and CR alike") {
    http_client client(gw.port());
    client.send_raw("\r\n\n\r\r\nGET /first HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(client.read_reply().status == 200);
  }
  SUBCASE("a CRLF after a POST body, before the next request on the connection") {
    http_client client(gw.port());
    client.send_raw("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi\r\n");
    CHECK(client.read_reply().status == 200);
    client.send_raw("GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(client.read_reply().status == 200);
    const auto seen = upstream.requests();
    REQUIRE(seen.size() == 2);
    CHECK(seen[0].body == "hi");
    CHECK(seen[1].target == "/b");
  }
  SUBCASE("empty lines alone: the header timeout's 408, as for a client that sent nothing") {
    http_client client(gw.port());
    client.send_raw("\r\n\r\n");
    std::this_thread::sleep_for(50ms);
    client.send_raw("\r\n");
    CHECK(client.read_reply().status == 408);
    CHECK(upstream.requests().empty());
  }
}

TEST_CASE("a request line's version: HTTP/1.x above 1.1 is served as 1.1, another major 505") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  SUBCASE("HTTP/1.2 and HTTP/1.9 are served as HTTP/1.1: kept alive (RFC 9110 §6.2)") {
    http_client client(gw.port());
    client.send_raw("GET /a HTTP/1.2\r\nHost: x\r\n\r\n");
    const auto first = client.read_reply();
    CHECK(first.status == 200);
    CHECK(first.keep_alive);
    client.send_raw("GET /b HTTP/1.9\r\nHost: x\r\n\r\n");
    CHECK(client.read_reply().status == 200);
    const auto seen = upstream.requests();
    REQUIRE(seen.size() == 2);
    CHECK(seen[1].target == "/b");
    CHECK(seen[0].connection == seen[1].connection);
  }
  SUBCASE("the version arrives apart from the CRLF after it (Beast judges it at once)") {
    http_client client(gw.port());
    for (const std::string first : {"GET /c HTTP/1.2", "GET /d HTTP/1.2\r"}) {
      CAPTURE(first);
      client.send_raw(first);
      std::this_thread::sleep_for(50ms);
      client.send_raw(std::string(first.ends_with('\r') ? "" : "\r") + "\nHost: x\r\n\r\n");
      CHECK(client.read_reply().status == 200);
    }
    http_client later_major(gw.port());
    later_major.send_raw("GET / HTTP/2.0");
    std::this_thread::sleep_for(50ms);
    later_major.send_raw("\r\nHost: x\r\n\r\n");
    CHECK(later_major.read_reply().status == 505);
    http_client not_a_version(gw.port());
    not_a_version.send_raw("GET / HTTP/2.0");
    std::this_thread::sleep_for(50ms);
    not_a_version.send_raw("0\r\nHost: x\r\n\r\n");
    CHECK(not_a_version.read_reply().status == 400);
  }
  SUBCASE("HTTP/2.0, HTTP/3.0 and HTTP/0.9 request lines: 505, and the connection is closed") {
    for (const std::string version : {"HTTP/2.0", "HTTP/3.0", "HTTP/0.9"}) {
      CAPTURE(version);
      http_client client(gw.port());
      client.send_raw("GET / " + version + "\r\nHost: x\r\n\r\n");
      const auto r = client.read_reply();
      CHECK(r.status == 505);
      CHECK(r.body.find("HTTP version not supported") != std::string::npos);
      CHECK(client.closed_by_peer());
    }
    CHECK(upstream.requests().empty());
  }
  SUBCASE("a HEAD refused for its version, or its head, gets the head alone") {
    const std::pair<std::string, std::string> cases[] = {
        {"HEAD / HTTP/2.0\r\nHost: x\r\n\r\n", "HTTP/1.1 505 "},
        {"HEAD / HTTP/1.1\r\nHost: x\r\nBad Field\r\n\r\n", "HTTP/1.1 400 "}};
    for (const auto& [request, status_line] : cases) {
      CAPTURE(request);
      http_client client(gw.port());
      client.send_raw(request);
      const std::string received = client.read_until_closed();
      CHECK(received.starts_with(status_line));
      CHECK(received.ends_with("\r\n\r\n"));  // no body after the head
    }
  }
  SUBCASE("a version outside HTTP's grammar (one digit each side of the dot): 400") {
    for (const std::string version :
         {"HTTP/1.10", "HTTP/10.1", "HTTP/1.1x", "HTTP/1", "http/1.2", "HTTP/1.2 ", "HTTP/2"}) {
      CAPTURE(version);
      http_client client(gw.port());
      client.send_raw("GET / " + version + "\r\nHost: x\r\n\r\n");
      CHECK(client.read_reply().status == 400);
    }
    CHECK(upstream.requests().empty());
  }
}

TEST_CASE("a chunked request body arrives intact, a chunked response is relayed") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());
  std::string body = "the quick brown fox jumps over the lazy dog, chunk by chunk";
  auto r = client.request("POST", "/upload", {{"Content-Type", "text/plain"}}, body, true);
  REQUIRE(r.status == 200);
  CHECK(echo_of(r)["body"] == body);

  auto c = client.get("/chunked");
  CHECK(c.status == 200);
  CHECK(c.body == "part-0;part-1;part-2;part-3;part-4;");
  CHECK(c.header("transfer-encoding") == "chunked");
}

TEST_CASE("HTTP/1.0 clients get a framed, closed response") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());
  client.send_raw("GET /chunked HTTP/1.0\r\nHost: x\r\n\r\n");
  auto r = client.read_reply();
  CHECK(r.status == 200);
  CHECK(r.body == "part-0;part-1;part-2;part-3;part-4;");
  CHECK_FALSE(r.has("transfer-encoding"));
  // In HTTP/1.1's status line, the highest version within the request's major (RFC 9110 §6.2,
  // as nginx answers), which then says the close; a kept-alive one says keep-alive.
  http_client raw(gw.port());
  raw.send_raw("GET /chunked HTTP/1.0\r\nHost: x\r\n\r\n");
  const std::string bytes = raw.read_until_closed();
  CHECK(bytes.starts_with("HTTP/1.1 200 "));
  CHECK(bytes.find("\r\nConnection: close\r\n") != std::string::npos);
  http_client kept(gw.port());
  kept.send_raw("GET /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n");
  const std::string first = kept.read_some();
  CHECK(first.starts_with("HTTP/1.1 200 "));
  CHECK(first.find("\r\nConnection: keep-alive\r\n") != std::string::npos);
  kept.send_raw("GET /b HTTP/1.0\r\nHost: x\r\n\r\n");
  CHECK(kept.read_reply().status == 200);
}

TEST_CASE("an HTTP/1.0 request without Host goes upstream with the target's authority as Host") {
  // The upstream gets HTTP/1.1, where a Host is required (RFC 9112 §3.2): nginx sends
  // $proxy_host the same way.
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());
  client.send_raw("GET /no-host HTTP/1.0\r\n\r\n");
  CHECK(client.read_reply().status == 200);
  http_client named(gw.port());
  named.send_raw("GET /named HTTP/1.0\r\nHost: api.example\r\n\r\n");
  CHECK(named.read_reply().status == 200);
  REQUIRE(upstream.requests().size() == 2);
  CHECK(upstream.requests()[0].header("host") == "127.0.0.1:" + std::to_string(upstream.port()));
  CHECK(upstream.requests()[1].header("host") == "api.example");
}

TEST_CASE("a failed pooled connection: GET is retried once, POST is never replayed") {
  test_upstream upstream;
  gateway_harness gw(R"(
server: { threads: 1 }
upstreams:
  api: { targets: [${UPSTREAM}], response_timeout: 2s }
routes:
  - name: all
    match: { path_prefix: / }
    upstream: api
)",
                     upstream.port());
  http_client client(gw.port());
  // Warm the pool so the next request goes out on a reused connection.
  REQUIRE(client.get("/warm").status == 200);

  SUBCASE("GET") {
    auto r = client.get("/crash");
    CHECK(r.status == 502);
    CHECK(upstream.count("GET", "/crash") == 2);  // the first try and one retry, no more
  }
  SUBCASE("POST") {
    auto r = client.request("POST", "/crash", {}, "pay once");
    CHECK(r.status == 502);
    CHECK(upstream.count("POST", "/crash") == 1);
  }
}

TEST_CASE("many clients at once are all answered") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      http_client client(gw.port());
      for (int i = 0; i < 50; ++i) {
        if (client.get("/c/" + std::to_string(t)).status == 200) {
          ++ok;
        }
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  CHECK(ok == 400);
}

TEST_CASE("targets are used round robin, and a refusing target is skipped") {
  test_upstream a;
  test_upstream b;
  const refusing_port dead;
  std::string yaml = R"(
server: { threads: 1 }
upstreams:
  api:
    targets: [127.0.0.1:A, 127.0.0.1:B, 127.0.0.1:D]
    max_idle: 0
routes:
  - name: all
    upstream: api
)";
  yaml = replace_all(yaml, ":A", ":" + std::to_string(a.port()));
  yaml = replace_all(yaml, ":B", ":" + std::to_string(b.port()));
  yaml = replace_all(yaml, ":D", ":" + std::to_string(dead.port()));
  gateway_harness gw(yaml, 0);
  http_client client(gw.port());
  int failed = 0;
  for (int i = 0; i < 30; ++i) {
    if (client.get("/rr").status != 200) {
      ++failed;
    }
  }
  // A refused connection carried no request: the next target is tried, nothing fails.
  CHECK(failed == 0);
  CHECK(a.count("GET", "/rr") + b.count("GET", "/rr") == 30);
  CHECK(a.count("GET", "/rr") >= 14);
  CHECK(b.count("GET", "/rr") >= 14);
}

TEST_CASE("a request answered locally does not wait for a body the client holds back") {
  test_upstream upstream;
  gateway_harness gw(R"(
server:
  body_timeout: 5s
  max_body_bytes: 1000
identity:
  unknown_api_key: reject
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
  - name: limited
    match: { path_prefix: /limited }
    upstream: api
    identify_by: [api_key, ip]
    limits:
      - { name: once, rate: 1/m, burst: 1 }
)",
                     upstream.port());
  // The client sends Expect: 100-continue and waits for the go-ahead before its body. The answer
  // must come at once, not after body_timeout (5 s; the client gives up after 2 s).
  auto expecting = [&](const std::string& target, const std::string& length,
                       const std::string& extra = "") {
    http_client client(gw.port(), 2s);
    client.send_raw("POST " + target + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + length +
                    "\r\nExpect: 100-continue\r\n" + extra + "\r\n");
    auto r = client.read_reply();
    CHECK_FALSE(r.keep_alive);
    CHECK(client.closed_by_peer());
    return r.status;
  };
  CHECK(expecting("/nowhere", "500") == 404);
  CHECK(expecting("/limited/x", "500", "X-API-Key: made-up\r\n") == 401);
  CHECK(expecting("/limited/x", "5000") == 413);
  http_client first(gw.port());
  CHECK(first.request("POST", "/limited/x", {}, "once").status == 200);
  CHECK(expecting("/limited/x", "500") == 429);
  CHECK(upstream.requests().size() == 1);
}

TEST_CASE("a reload that replaces an upstream's pool closes its idle connections at once") {
  // They stayed open for as long as any request of the old configuration was in flight: one
  // pool's worth per reload, for hours under a WebSocket tunnel.
  std::atomic<int> closed{0};
  raw_upstream upstream([&closed](raw_upstream::connection& c) {
    for (raw_request r = c.read_request(); r.ok; r = c.read_request()) {
      if (r.target == "/slow") {
        std::this_thread::sleep_for(scaled(3000ms));
      }
      if (!c.write(raw_response("ok"))) {
        break;
      }
    }
    ++closed;
  });
  const std::string patient =
      replace_all(k_config, "response_timeout: 400ms", "response_timeout: 30s");
  gateway_harness gw(patient, upstream.port());
  http_client slow(gw.port(), 30s);
  slow.send_raw("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");  // holds the old configuration
  std::this_thread::sleep_for(scaled(200ms));
  http_client quick(gw.port());
  REQUIRE(quick.get("/").status == 200);  // its upstream connection is now idle in the pool
  REQUIRE(upstream.connections_accepted() == 2);
  gw.reload(replace_all(patient, "connect_timeout: 300ms", "connect_timeout: 301ms"));
  CHECK(eventually([&] { return closed.load() == 1; }, scaled(1500ms)));  // /slow still runs
  CHECK(slow.read_reply().status == 200);
  // The connection /slow had comes back to a retired pool: closed, not kept.
  CHECK(eventually([&] { return closed.load() == 2; }));
  // (A new client: `quick` may have outlived idle_timeout while /slow ran under a sanitizer.)
  CHECK(http_client(gw.port()).get("/").status == 200);  // a new connection, in the new pool
  CHECK(upstream.connections_accepted() == 3);
}

TEST_CASE("a reload frees the old configuration; connections carry on with the new one") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());  // max_header_bytes: 2048
  const std::string smaller =
      replace_all(k_config, "max_header_bytes: 2048", "max_header_bytes: 1024");
  const header_pairs padded{{"X-Pad", std::string(1500, 'p')}};

  SUBCASE("an idle keep-alive connection reads its next request with the new bounds") {
    http_client client(gw.port());
    CHECK(client.get("/", padded).status == 200);
    gw.reload(smaller);  // the harness drops its reference: the workers hold the last ones
    std::this_thread::sleep_for(300ms);
    CHECK(client.get("/", padded).status == 431);
  }
  SUBCASE("a request read across a reload that renames its upstream goes to the old one") {
    // The old route names "api"; the new configuration has only "api2".
    const std::string renamed = replace_all(
        replace_all(k_config, "upstream: api", "upstream: api2"), "  api:\n", "  api2:\n");
    http_client client(gw.port());
    client.send_raw("GET /hello HTTP/1.1\r\n");
    std::this_thread::sleep_for(50ms);
    gw.reload(renamed);
    std::this_thread::sleep_for(100ms);
    client.send_raw("Host: x\r\n\r\n");
    auto r = client.read_reply();
    CHECK(r.status == 200);
    CHECK(client.get("/again").status == 200);
  }
  SUBCASE("a request in flight finishes on the configuration it started with") {
    http_client client(gw.port());
    client.send_raw("GET /slow?ms=300 HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(1500, 'p') +
                    "\r\n\r\n");
    std::this_thread::sleep_for(100ms);
    gw.reload(smaller);
    auto r = client.read_reply();
    CHECK(r.status == 200);
    CHECK(r.keep_alive);
    CHECK(client.get("/").status == 200);
  }
  SUBCASE("a request that outlives its configuration ends on it: slot, count and log line") {
    // The request holds the last reference to the old configuration when it ends: its
    // concurrency slot is given back, and its access log line names its route (a view into
    // that configuration), before the configuration is freed. A sanitizer build reports a use
    // after free otherwise.
    temp_dir dir;
    const std::string logged =
        replace_all(k_config, "response_timeout: 400ms", "response_timeout: 10s") +
        "log:\n  access: " + dir.path + "/access.log\n";
    const std::string capped =
        replace_all(logged, "      - name: roomy\n",
                    "      - { name: cap, algorithm: concurrency, limit: 1 }\n"
                    "      - name: roomy\n");
    gw.reload(capped);
    std::this_thread::sleep_for(300ms);
    http_client client(gw.port());
    client.send_raw("GET /slow?ms=2000 HTTP/1.1\r\nHost: x\r\n\r\n");
    std::this_thread::sleep_for(scaled(200ms));
    http_client other(gw.port());
    CHECK(other.get("/").status == 429);  // the slot is taken
    gw.reload(logged);                    // no cap any more
    auto r = client.read_reply();
    CHECK(r.status == 200);
    CHECK(client.get("/").status == 200);
    CHECK(eventually([&] {
      std::ifstream in(dir.path + "/access.log");
      const std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      return text.find(R"("path":"/slow")") != std::string::npos &&
             text.find(R"("route":"open")") != std::string::npos;
    }));
  }
}

TEST_CASE("a request cut off by a stop still writes its whole log line") {
  // A stop destroys the sessions still suspended with their io_context. The request's trace
  // reads views into its parser (method, target, User-Agent) when it ends, so it must end
  // before the parser does; targets and fields over 512 bytes are on the heap, where a
  // sanitizer build sees a use after free otherwise.
  test_upstream upstream;
  temp_dir dir;
  const std::string agent(300, 'u');
  {
    gateway_harness gw(replace_all(k_config, "response_timeout: 400ms", "response_timeout: 10s") +
                           "log:\n  access: " + dir.path + "/access.log\n",
                       upstream.port());
    http_client client(gw.port());
    client.send_raw("GET /slow?ms=3000&pad=" + std::string(600, 'p') +
                    " HTTP/1.1\r\nHost: x\r\nUser-Agent: " + agent + "\r\n\r\n");
    std::this_thread::sleep_for(scaled(200ms));
  }  // stopped with the request in flight
  std::ifstream in(dir.path + "/access.log");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.find(R"("method":"GET","path":"/slow")") != std::string::npos);
  CHECK(text.find(R"("user_agent":")" + std::string(256, 'u') + "\"") != std::string::npos);
}

TEST_CASE("unknown_api_key: reject: 401s are limited per client address") {
  test_upstream upstream;
  gateway_harness gw(R"(
identity:
  unknown_api_key: reject
  reject_limit: { rate: 1/m, burst: 5 }
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
  - name: all
    match: { path_prefix: / }
    upstream: api
)",
                     upstream.port());
  http_client client(gw.port());
  std::string seen;
  for (int i = 0; i < 8; ++i) {
    auto r = client.get("/x", {{"X-API-Key", "guess-" + std::to_string(i)}});
    seen += (seen.empty() ? "" : " ") + std::to_string(r.status);
    if (r.status == 429) {
      CHECK(r.has("retry-after"));
    }
  }
  CHECK(seen == "401 401 401 401 401 429 429 429");
  CHECK(client.get("/x").status == 200);  // no key at all: the client's own limits
  CHECK(upstream.requests().size() == 1);
}

TEST_CASE("connection caps: idle connections make room, busy ones are kept, new ones refused") {
  test_upstream upstream;
  // One worker thread with `cap` connections at most, and heads that may take their time.
  const auto capped = [&](int cap) {
    return replace_all(
        replace_all(k_config, "  threads: 2\n",
                    "  threads: 1\n  max_connections: " + std::to_string(cap) + "\n"),
        "header_timeout: 300ms", "header_timeout: 30s");
  };
  SUBCASE("server.max_connections") {
    gateway_harness gw(
        replace_all(k_config, "  threads: 2\n", "  threads: 1\n  max_connections: 3\n"),
        upstream.port());
    const auto evicted_before = ratewall::process_metrics().connections_refused(false);
    std::vector<std::unique_ptr<http_client>> idle;
    for (int i = 0; i < 3; ++i) {
      idle.push_back(std::make_unique<http_client>(gw.port(), 1s));
      CHECK(idle.back()->get("/").status == 200);
    }
    // At the cap: an idle connection is closed to make room, and the new client is served.
    http_client fourth(gw.port());
    CHECK(fourth.get("/").status == 200);
    int closed = 0;
    for (auto& c : idle) {
      closed += c->closed_by_peer() ? 1 : 0;
    }
    CHECK(closed == 1);
    // Every connection busy: a new one is closed at once, counted.
    std::vector<std::unique_ptr<http_client>> busy;
    for (int i = 0; i < 3; ++i) {
      busy.push_back(std::make_unique<http_client>(gw.port(), 3s));
      busy.back()->send_raw("GET /slow?ms=350 HTTP/1.1\r\nHost: x\r\n\r\n");
    }
    std::this_thread::sleep_for(100ms);  // all three in the upstream (response_timeout: 400ms)
    http_client refused(gw.port(), 2s);
    CHECK(refused.closed_by_peer());
    CHECK(ratewall::process_metrics().connections_refused(false) > evicted_before);
    for (auto& c : busy) {
      CHECK(c->read_reply().status == 200);  // the clients being served are still served
    }
  }
  SUBCASE("server.max_connections: then the head awaited longest, served client or not") {
    gateway_harness gw(capped(3), upstream.port());
    // A served client whose next head never ends (a slowloris that paid for one request), an
    // idle keep-alive connection, then a head that never ends from a new client.
    http_client served(gw.port(), 500ms);
    CHECK(served.get("/").status == 200);
    served.send_raw("GET / HTTP/1.1\r\nHo");
    std::this_thread::sleep_for(20ms);
    http_client idle(gw.port(), 500ms);
    CHECK(idle.get("/").status == 200);
    http_client slow(gw.port(), 500ms);
    slow.send_raw("GET / HTTP/1.1\r\nHo");
    std::this_thread::sleep_for(20ms);
    // At the cap: the idle connection goes first (the fourth stays busy in the upstream)...
    http_client fourth(gw.port(), 2s);
    fourth.send_raw("GET /slow?ms=300 HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(idle.closed_by_peer());
    // ... then the head awaited longest, the served client's.
    http_client fifth(gw.port(), 2s);
    CHECK(fifth.get("/").status == 200);
    CHECK(served.read_some().empty());  // closed, unanswered: no 400 for a head cut short
    CHECK(served.closed_by_peer());
    CHECK_FALSE(slow.closed_by_peer());
    CHECK(fourth.read_reply().status == 200);
  }
  SUBCASE("server.max_connections: a next head already buffered is awaited too") {
    gateway_harness gw(capped(2), upstream.port());
    // A whole request and the start of the next in one write: after the answer, the rest of
    // the next head is awaited from the buffer, never from an idle read.
    http_client pipelined(gw.port(), 500ms);
    pipelined.send_raw("GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHo");
    CHECK(pipelined.read_reply().status == 200);
    std::this_thread::sleep_for(20ms);
    http_client quiet(gw.port(), 500ms);  // connected later, not a byte sent yet
    std::this_thread::sleep_for(20ms);
    http_client third(gw.port(), 2s);
    CHECK(third.get("/").status == 200);
    CHECK(pipelined.closed_by_peer());
    CHECK_FALSE(quiet.closed_by_peer());
  }
  SUBCASE("server.max_connections_per_client") {
    gateway_harness gw(
        replace_all(k_config, "  threads: 2\n", "  threads: 1\n  max_connections_per_client: 2\n"),
        upstream.port());
    http_client a(gw.port()), b(gw.port());
    CHECK(a.get("/").status == 200);
    CHECK(b.get("/").status == 200);
    {
      http_client third(gw.port(), 2s);
      CHECK(third.closed_by_peer());
    }
    a.send_raw("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    CHECK(a.read_reply().status == 200);
    CHECK(a.closed_by_peer());
    std::this_thread::sleep_for(100ms);
    http_client again(gw.port());
    CHECK(again.get("/").status == 200);
  }
}
