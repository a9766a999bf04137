// Routes whose cost the upstream reports (routes[].cost_from_response), end to end: a real
// gateway, a raw upstream that answers with X-Tokens-Used or a JSON usage field, the memory
// store and a real redis-server. Requests are admitted while room is left; the reported costs
// are charged when responses end, and once they have used the budget the route answers 429.

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "ratewall/proxy/gateway.hpp"
#include "support/eventually.hpp"
#include "support/gateway_harness.hpp"
#include "support/h2_client.hpp"
#include "support/http_client.hpp"
#include "support/raw_upstream.hpp"
#include "support/redis_server.hpp"
#include "support/time_scale.hpp"

using namespace ratewall;
using namespace ratewall::testing;
using namespace std::chrono_literals;

namespace {

// Route 0 reads a header, route 1 a JSON field; 100 units each, the same client key header.
const std::string k_routes = R"(
upstreams:
  api:
    targets: [${UPSTREAM}]
    connect_timeout: 1s
    response_timeout: 2s
    read_timeout: 300ms
routes:
  - name: header
    match: { path_prefix: /h/ }
    upstream: api
    identify_by: [header:X-Client]
    cost_from_response: { header: X-Tokens-Used, default: 5, max: 1000 }
    limits:
      - { name: tokens, rate: 100/m, burst: 100 }
  - name: json
    match: { path_prefix: /j/ }
    upstream: api
    identify_by: [header:X-Client]
    cost_from_response: { json: usage.total_tokens, default: 5, max: 1000 }
    limits:
      - { name: tokens, algorithm: fixed_window, limit: 100, window: 1h }
)";

const std::string k_memory =
    "server: { threads: 1, header_timeout: 2s, idle_timeout: 5s }\n" + k_routes;

std::string gateway_redis_config(const redis_server& redis) {
  return "server: { threads: 1, header_timeout: 2s, idle_timeout: 5s }\n"
         "store:\n"
         "  type: redis\n"
         "  redis: { url: \"" +
         redis.url() + "\", timeout: 2s, on_error: deny }\n" + k_routes;
}

// What the upstream answers, by the target after its first segment ("/h/tokens/40" ->
// "tokens/40"). Counts the requests it received.
struct cost_upstream {
  std::atomic<int> requests{0};
  std::atomic<bool> go{false};  // /stream: send the rest of the body

  bool answer(raw_upstream::connection& c, const raw_request& r) {
    ++requests;
    const std::string what = r.target.substr(r.target.find('/', 1) + 1);
    const std::string json = "Content-Type: application/json\r\n";
    auto number = [&](std::string_view prefix) { return what.substr(prefix.size()); };
    if (what.starts_with("tokens/")) {
      return c.write(raw_response("ok", "X-Tokens-Used: " + number("tokens/") + "\r\n"));
    }
    if (what == "none") {
      return c.write(raw_response("ok"));
    }
    if (what == "garbage") {
      return c.write(raw_response("ok", "X-Tokens-Used: lots\r\n"));
    }
    if (what == "negative") {
      return c.write(raw_response("ok", "X-Tokens-Used: -50\r\n"));
    }
    if (what == "huge") {
      return c.write(raw_response("ok", "X-Tokens-Used: 99999999999999999999999999\r\n"));
    }
    if (what == "twice") {
      return c.write(raw_response("ok", "X-Tokens-Used: 10\r\nX-Tokens-Used: 30\r\n"));
    }
    if (what == "error") {
      return c.write("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n");
    }
    if (what.starts_with("json/")) {
      return c.write(
          raw_response(R"({"id":"x","usage":{"total_tokens":)" + number("json/") + "}}", json));
    }
    if (what == "encoded") {
      // Said to be gzip: the gateway does not decode bodies, so it cannot read this one.
      return c.write(
          raw_response(R"({"usage":{"total_tokens":50}})", json + "Content-Encoding: gzip\r\n"));
    }
    if (what == "encoding") {
      // What a server that compresses when asked would do: gzip for a client that accepts it.
      const bool identity =
          r.header("accept-encoding") == "identity" && r.head.find("gzip") == std::string::npos;
      return c.write(
          raw_response(R"({"usage":{"total_tokens":)" + std::string(identity ? "40" : "1") + "}}",
                       json + (identity ? "" : "Content-Encoding: gzip\r\n")));
    }
    if (what == "notjson") {
      return c.write(raw_response(R"({"usage":{"total_tokens":50)", json));
    }
    if (what == "stream") {
      // A streamed (chunked) JSON body: relayed as it comes, never read for a cost.
      c.write("HTTP/1.1 200 OK\r\n" + json +
              "Transfer-Encoding: chunked\r\n\r\n9\r\n{\"usage\":\r\n");
      for (int i = 0; i < 500 && !go; ++i) {
        std::this_thread::sleep_for(10ms);
      }
      return c.write("14\r\n{\"total_tokens\":50}}\r\n0\r\n\r\n");
    }
    if (what.starts_with("big/")) {
      // 64 KiB: an HTTP/2 stream's outbound high-water mark, reached by the body's last piece.
      return c.write(
          raw_response(std::string(64 * 1024, 'b'), "X-Tokens-Used: " + number("big/") + "\r\n"));
    }
    if (what.starts_with("slow/")) {
      // The upstream works on until `go`, whoever is still waiting, then reports the cost.
      for (int i = 0; i < 500 && !go; ++i) {
        std::this_thread::sleep_for(10ms);
      }
      return c.write(raw_response("ok", "X-Tokens-Used: " + number("slow/") + "\r\n"));
    }
    if (what.starts_with("cut/")) {
      // The head (with its cost), a little of the body, then nothing until the gateway leaves.
      c.write("HTTP/1.1 200 OK\r\nX-Tokens-Used: " + number("cut/") +
              "\r\nContent-Length: 100000\r\n\r\n0123456789");
      c.read_until("never sent", 3s);
      return false;
    }
    return c.write(raw_response("unknown"));
  }

  raw_upstream::script script() {
    return [this](raw_upstream::connection& c) {
      for (;;) {
        raw_request r = c.read_request();
        if (!r.ok || !answer(c, r)) {
          return;
        }
      }
    };
  }
};

// The route's cost counters since the test began: route metrics are process-wide and kept
// for the route's name from gateway to gateway, so each test counts from its own start.
class cost_counters {
 public:
  cost_counters(const gateway_harness& gw, std::size_t route)
      : metrics_(gw.current()->metrics(route)),
        units_(metrics_.response_cost_units()),
        reported_(metrics_.response_costs(true)),
        defaulted_(metrics_.response_costs(false)) {}

  std::uint64_t response_cost_units() const { return metrics_.response_cost_units() - units_; }
  std::uint64_t response_costs(bool reported) const {
    return metrics_.response_costs(reported) - (reported ? reported_ : defaulted_);
  }

 private:
  const route_metrics& metrics_;
  std::uint64_t units_;
  std::uint64_t reported_;
  std::uint64_t defaulted_;
};

int retry_after(const http_reply& r) {
  return r.has("retry-after") ? std::stoi(r.header("retry-after")) : -1;
}

// The same sequence on either store: 40 + 40 + 40 reported; the third is admitted with 20
// left, and leaves the client 20 in debt, so the fourth is denied.
void budget_used_by_reported_costs(gateway_harness& gw, cost_upstream& up) {
  const cost_counters header(gw, 0);
  http_client client(gw.port());
  const header_pairs alice{{"X-Client", "alice"}};
  for (int i = 0; i < 3; ++i) {
    const http_reply r = client.get("/h/tokens/40", alice);
    REQUIRE(r.status == 200);
  }
  const http_reply denied = client.get("/h/tokens/40", alice);
  CHECK(denied.status == 429);
  // 120 units at 600 ms each: the bucket is back to one free unit 72.6 - 60 s from the start.
  CHECK(retry_after(denied) >= 12);
  CHECK(retry_after(denied) <= 13);
  CHECK(denied.header("x-ratelimit-remaining") == "0");
  CHECK(up.requests == 3);  // the denied request never reached the upstream
  CHECK(eventually([&] { return header.response_cost_units() == 120; }));
  CHECK(header.response_costs(true) == 3);
  // Another client was never charged.
  http_client other(gw.port());
  const http_reply bob = other.get("/h/tokens/1", {{"X-Client", "bob"}});
  CHECK(bob.status == 200);
  CHECK(bob.header("x-ratelimit-remaining") == "99");
}

/// An HTTP/2 client that lets no DATA through asks for an answer that reports 150 units (the
/// whole budget, and 30 s of refill beyond it) with a 64 KiB body: the gateway reads it whole from
/// the upstream and waits for a window that never opens. The charge is made all the same, before
/// the answer's last bytes go out: another client, on another connection, is refused at once.
void charged_before_the_client_reads(const std::string& config, std::uint16_t upstream_port) {
  gateway_harness gw(
      replace_all(config, "idle_timeout: 5s }", "idle_timeout: 5s, http2: { enabled: true } }"),
      upstream_port);
  const cost_counters header(gw, 0);
  h2_client stalled(gw.port(), {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0}});
  const std::int32_t id = stalled.submit("GET", "/h/big/150", {{"x-client", "reader"}});
  CHECK_FALSE(stalled.run(scaled(300ms)));
  CHECK(stalled.reply(id).status == 200);  // the head is out; the body cannot follow
  CHECK(header.response_cost_units() == 150);
  http_client other(gw.port());
  CHECK(other.get("/h/tokens/1", {{"X-Client", "reader"}}).status == 429);
}

}  // namespace

TEST_CASE("memory store: a response-cost route denies once the reported costs used the budget") {
  cost_upstream up;
  raw_upstream upstream(up.script());
  gateway_harness gw(k_memory, upstream.port());
  budget_used_by_reported_costs(gw, up);
}

TEST_CASE("a response that reports nothing usable is charged the default; max bounds the rest") {
  cost_upstream up;
  raw_upstream upstream(up.script());
  gateway_harness gw(k_memory, upstream.port());
  const cost_counters header(gw, 0);
  http_client client(gw.port());
  std::uint64_t expected = 0;
  // Each row: the answer's kind and what it costs (default 5, max 1000).
  const std::pair<const char*, std::uint64_t> rows[] = {
      {"/h/none", 5},     {"/h/garbage", 5},
      {"/h/negative", 5}, {"/h/twice", 30},  // the field twice: the larger
      {"/h/error", 5},                       // a 500 without the field
      {"/h/huge", 1000},
  };
  for (const auto& [target, cost] : rows) {
    CAPTURE(target);
    const http_reply r = client.get(target, {{"X-Client", std::string("c-") + target}});
    REQUIRE(r.status != 0);
    expected += cost;
    CHECK(eventually([&] { return header.response_cost_units() == expected; }));
  }
  CHECK(header.response_costs(false) == 4);
  CHECK(header.response_costs(true) == 2);
  // A subject charged the huge value (1000 of a 100 bucket) waits 16 minutes or so.
  const http_reply after = client.get("/h/tokens/1", {{"X-Client", "c-/h/huge"}});
  CHECK(after.status == 429);
  CHECK(retry_after(after) > 500);
}

TEST_CASE("an upstream that fails is charged the default") {
  cost_upstream up;
  raw_upstream upstream(up.script());
  std::string cfg = replace_all(k_memory, "targets: [${UPSTREAM}]", "targets: [127.0.0.1:1]");
  gateway_harness gw(cfg, upstream.port());
  const cost_counters header(gw, 0);
  http_client client(gw.port());
  CHECK(client.get("/h/tokens/40", {{"X-Client", "a"}}).status == 502);
  CHECK(eventually([&] { return header.response_cost_units() == 5; }));
}

TEST_CASE("a JSON body field is charged when the body ends") {
  cost_upstream up;
  raw_upstream upstream(up.script());
  gateway_harness gw(k_memory, upstream.port());
  const cost_counters json(gw, 1);
  http_client client(gw.port());
  const header_pairs alice{{"X-Client", "alice"}};

  SUBCASE("its costs use the budget") {
    const http_reply first = client.get("/j/json/60", alice);
    REQUIRE(first.status == 200);
    CHECK(first.body == R"({"id":"x","usage":{"total_tokens":60}})");
    CHECK(client.get("/j/json/60", alice).status == 200);  // 60 left: admitted, 120 used
    const http_reply denied = client.get("/j/json/1", alice);
    CHECK(denied.status == 429);
    CHECK(retry_after(denied) >= 1);
    CHECK(retry_after(denied) <= 3600);  // the hour window's end
    CHECK(json.response_cost_units() == 120);
  }
  SUBCASE(
      "a client asking for gzip cannot make its body unreadable: the upstream is asked for "
      "identity") {
    const http_reply r =
        client.get("/j/encoding", {{"X-Client", "alice"}, {"Accept-Encoding", "gzip, br"}});
    REQUIRE(r.status == 200);
    CHECK(!r.has("content-encoding"));
    CHECK(eventually([&] { return json.response_cost_units() == 40; }));
    CHECK(json.response_costs(true) == 1);
  }
  SUBCASE("a body that is not JSON is charged the default") {
    CHECK(client.get("/j/notjson", alice).status == 200);
    CHECK(eventually([&] { return json.response_cost_units() == 5; }));
    CHECK(json.response_costs(false) == 1);
  }
  SUBCASE("a compressed body is not decoded: the default") {
    CHECK(client.get("/j/encoded", alice).status == 200);
    CHECK(eventually([&] { return json.response_cost_units() == 5; }));
    CHECK(json.response_costs(false) == 1);
  }
  SUBCASE("a streamed body is relayed as it arrives, and charged the default") {
    client.send_raw("GET /j/stream HTTP/1.1\r\nHost: x\r\nX-Client: alice\r\n\r\n");
    // The first chunk reaches the client while the upstream still holds the second.
    std::string got;
    while (got.find("{\"usage\":") == std::string::npos) {
      const std::string more = client.read_some();
      REQUIRE(!more.empty());
      got += more;
    }
    CHECK(got.find("total_tokens") == std::string::npos);
    up.go = true;
    while (got.find("0\r\n\r\n") == std::string::npos) {
      const std::string more = client.read_some();
      REQUIRE(!more.empty());
      got += more;
    }
    CHECK(got.find("{\"total_tokens\":50}}") != std::string::npos);
    CHECK(eventually([&] { return json.response_cost_units() == 5; }));
    CHECK(json.response_costs(false) == 1);
  }
}

TEST_CASE("a client that leaves mid-response is still charged what the head reported") {
  cost_upstream up;
  raw_upstream upstream(up.script());
  gateway_harness gw(k_memory, upstream.port());
  const cost_counters header(gw, 0);
  {
    http_client client(gw.port());
    client.send_raw("GET /h/cut/70 HTTP/1.1\r\nHost: x\r\nX-Client: gone\r\n\r\n");
    const std::string head = client.read_some();
    REQUIRE(head.find("200 OK") != std::string::npos);
  }  // the client hangs up with the body incomplete
  CHECK(eventually([&] { return header.response_cost_units() == 70; }));
  http_client again(gw.port());
  const http_reply r = again.get("/h/tokens/40", {{"X-Client", "gone"}});
  CHECK(r.status == 200);  // 30 or so left: admitted, and 10 in debt after it
  const http_reply denied = again.get("/h/tokens/1", {{"X-Client", "gone"}});
  CHECK(denied.status == 429);
}

TEST_CASE(
    "an HTTP/2 stream reset once forwarded, before the head, is charged max, not the default") {
  // The upstream works on, and nothing says what that cost: a client must not choose its price
  // by leaving. (An HTTP/1.1 client's hang-up is seen only when the answer is written, and
  // then the head has reported its cost.)
  cost_upstream up;
  raw_upstream upstream(up.script());
  {
    gateway_harness gw(
        replace_all(k_memory, "idle_timeout: 5s }", "idle_timeout: 5s, http2: { enabled: true } }"),
        upstream.port());
    const cost_counters header(gw, 0);
    h2_client client(gw.port());
    const std::int32_t id = client.submit("GET", "/h/slow/40", {{"x-client", "leaver"}});
    CHECK_FALSE(client.run(200ms));  // forwarded: the upstream holds it
    REQUIRE(eventually([&] { return up.requests == 1; }));
    client.cancel(id);
    CHECK(client.run(200ms));  // the reset goes out, and the stream is closed
    CHECK(eventually([&] { return header.response_cost_units() == 1000; }));
    CHECK(header.response_costs(false) == 0);
  }
  up.go = true;
}

TEST_CASE(
    "the reported cost is charged once the answer is read whole, before the client reads it") {
  cost_upstream up;
  raw_upstream upstream(up.script());
  SUBCASE("memory store") {
    charged_before_the_client_reads(k_memory, upstream.port());
  }
  SUBCASE("Redis store") {
    if (!have_program("redis-server")) {
      MESSAGE("redis-server not installed: skipped");
      return;
    }
    redis_server redis;
    charged_before_the_client_reads(gateway_redis_config(redis), upstream.port());
  }
}

TEST_CASE("Redis store: a response-cost route denies once the reported costs used the budget") {
  if (!have_program("redis-server")) {
    MESSAGE("redis-server not installed: skipped");
    return;
  }
  redis_server redis;
  cost_upstream up;
  raw_upstream upstream(up.script());
  gateway_harness gw(gateway_redis_config(redis), upstream.port());
  budget_used_by_reported_costs(gw, up);

  // The key lives as long as the debt: 120 units of 600 ms, 72 s from the first charge.
  const redis::reply keys = redis.call({"KEYS", "rw:*"});
  std::int64_t longest = 0;
  for (const redis::reply& key : keys.elements) {
    longest = std::max(longest, redis.call({"PTTL", key.str}).integer);
  }
  CHECK(longest > 65000);
  CHECK(longest <= 72000);

  SUBCASE("a JSON field, charged in Redis too") {
    http_client client(gw.port());
    const header_pairs carol{{"X-Client", "carol"}};
    CHECK(client.get("/j/json/90", carol).status == 200);
    CHECK(client.get("/j/json/90", carol).status == 200);
    CHECK(client.get("/j/json/1", carol).status == 429);
  }
}

TEST_CASE("Redis Cluster: peeks and forced charges on subjects spread over the nodes") {
  if (!have_program("redis-server") || !have_program("redis-cli")) {
    MESSAGE("redis-server or redis-cli not installed: skipped");
    return;
  }
  redis_cluster cluster(3);
  cost_upstream up;
  raw_upstream upstream(up.script());
  std::string yaml =
      "server: { threads: 1, header_timeout: 2s, idle_timeout: 5s }\n"
      "store:\n"
      "  type: redis\n"
      "  redis:\n"
      "    url: redis://" +
      cluster.node(0).address() +
      "\n"
      "    cluster: true\n"
      "    seeds: [" +
      cluster.node(1).address() + ", " + cluster.node(2).address() +
      "]\n"
      "    timeout: 2s\n"
      "    on_error: deny\n" +
      k_routes;
  gateway_harness gw(yaml, upstream.port());
  std::set<int> nodes;
  for (int s = 0; s < 8; ++s) {
    const std::string subject = "client-" + std::to_string(s);
    CAPTURE(subject);
    http_client client(gw.port());
    const header_pairs who{{"X-Client", subject}};
    for (int i = 0; i < 3; ++i) {
      REQUIRE(client.get("/h/tokens/40", who).status == 200);
    }
    const http_reply denied = client.get("/h/tokens/40", who);
    CHECK(denied.status == 429);
    CHECK(retry_after(denied) >= 12);
  }
  // The subjects' keys are spread over the primaries, and each lives as long as its debt.
  for (int i = 0; i < cluster.size(); ++i) {
    for (const redis::reply& key : cluster.node(i).call({"KEYS", "rw:v1:*"}).elements) {
      nodes.insert(i);
      CHECK(cluster.node(i).call({"PTTL", key.str}).integer > 60000);
    }
  }
  CHECK(nodes.size() >= 2);
}
