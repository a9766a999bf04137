// Every algorithm through the real gateway: 429 with headers once the limit is reached, and
// concurrency slots that come back however a request ends.

#include <doctest/doctest.h>

#include <atomic>

#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "ratewall/proxy/gateway.hpp"
#include "support/eventually.hpp"
#include "support/gateway_harness.hpp"
#include "support/http_client.hpp"
#include "support/raw_upstream.hpp"
#include "support/test_upstream.hpp"
#include "support/time_scale.hpp"

using namespace ratewall::testing;
using namespace std::chrono_literals;

namespace {

const std::string k_config = R"(
server: { threads: 2 }
upstreams:
  api: { targets: [${UPSTREAM}], response_timeout: 5s }
routes:
  - name: tb
    match: { path_prefix: /tb }
    upstream: api
    limits: [{ name: l, algorithm: token_bucket, rate: 1/h, burst: 2 }]
  - name: lb
    match: { path_prefix: /lb }
    upstream: api
    limits: [{ name: l, algorithm: leaky_bucket, rate: 1/h, burst: 1 }]
  - name: fw
    match: { path_prefix: /fw }
    upstream: api
    limits: [{ name: l, algorithm: fixed_window, limit: 2, window: 1d }]
  - name: swl
    match: { path_prefix: /swl }
    upstream: api
    limits: [{ name: l, algorithm: sliding_window_log, limit: 2, window: 1h }]
  - name: swc
    match: { path_prefix: /swc }
    upstream: api
    limits: [{ name: l, algorithm: sliding_window_counter, limit: 2, window: 1h }]
  - name: conc_streamed
    match: { path_prefix: /conc/streamed }
    upstream: api
    request_buffering: false
    limits: [{ name: l, algorithm: concurrency, limit: 1 }]
  - name: conc
    match: { path_prefix: /conc }
    upstream: api
    limits: [{ name: l, algorithm: concurrency, limit: 1 }]
  - name: delayed
    match: { path_prefix: /delayed }
    upstream: api
    limits: [{ name: l, algorithm: leaky_bucket, rate: 5/s, burst: 2, delay: true }]
  - name: patient
    match: { path_prefix: /patient }
    upstream: api
    limits: [{ name: l, algorithm: leaky_bucket, rate: 1/m, burst: 2, delay: true }]
  - name: paced
    match: { path_prefix: /paced }
    upstream: api
    limits: [{ name: l, algorithm: leaky_bucket, rate: 1/s, burst: 2, delay: true }]
  - name: costly
    match: { path_prefix: /costly }
    upstream: api
    cost: { default: 1, POST: 3 }
    limits: [{ name: l, rate: 1/h, burst: 4 }]
)";

}  // namespace

TEST_CASE("each algorithm admits its limit, then answers 429 with headers") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());
  for (const char* route : {"/tb", "/lb", "/fw", "/swl", "/swc"}) {
    CAPTURE(route);
    for (int i = 0; i < 2; ++i) {
      auto r = client.get(route);
      REQUIRE(r.status == 200);
      CHECK(r.header("x-ratelimit-limit") == "2");
      CHECK(r.header("x-ratelimit-remaining") == std::to_string(1 - i));
    }
    auto denied = client.get(route);
    CHECK(denied.status == 429);
    CHECK(denied.header("x-ratelimit-remaining") == "0");
    CHECK(std::stoi(denied.header("retry-after")) >= 1);
    CHECK(std::stoi(denied.header("x-ratelimit-reset")) >= 1);
    CHECK(upstream.count("GET", route) == 2);
  }
}

TEST_CASE("cost per method: a POST takes 3 of 4, a second one is denied, a GET still fits") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());
  auto post = client.request("POST", "/costly", {}, "x");
  CHECK(post.status == 200);
  CHECK(post.header("x-ratelimit-remaining") == "1");
  CHECK(client.request("POST", "/costly", {}, "x").status == 429);
  CHECK(client.get("/costly").status == 200);
}

TEST_CASE("leaky bucket with delay: excess requests wait their turn instead of failing") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  // Four clients at once against rate 5/s, burst 2: three are served (at 0, 0.2 and 0.4 s),
  // the fourth finds the queue full.
  std::vector<std::thread> threads;
  std::vector<unsigned> statuses(4);
  std::vector<std::chrono::milliseconds> took(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      http_client client(gw.port());
      auto start = std::chrono::steady_clock::now();
      statuses[i] = client.get("/delayed").status;
      took[i] = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - start);
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  int ok = 0;
  auto slowest = 0ms;
  for (int i = 0; i < 4; ++i) {
    if (statuses[i] == 200) {
      ++ok;
      slowest = std::max(slowest, took[i]);
    } else {
      CHECK(statuses[i] == 429);
    }
  }
  CHECK(ok == 3);
  CHECK(slowest >= 350ms);  // the third was held about 0.4 s
}

TEST_CASE(
    "concurrency: a body refused mid-upload ends its upstream request before the unit goes back") {
  // The upstream keeps the connections whose request it has not answered. When a head arrives
  // while another of them is still open on the gateway's side, two requests overlapped. The
  // check reads the socket's state, not when a thread got round to noticing the close.
  std::mutex mutex;
  std::set<raw_upstream::connection*> unanswered;
  std::atomic<bool> overlapped{false};
  std::atomic<int> heads{0};
  raw_upstream up([&](raw_upstream::connection& c) {
    for (;;) {
      const raw_request r = c.read_head();
      if (!r.ok) {
        break;
      }
      {
        const std::lock_guard lock(mutex);
        for (const auto* other : unanswered) {
          if (!other->peer_closed()) {
            overlapped = true;
          }
        }
        unanswered.insert(&c);
      }
      ++heads;
      const bool whole = r.header("transfer-encoding") != "chunked" || c.read_until("0\r\n\r\n");
      if (!whole || !c.write(raw_response("ok"))) {
        break;
      }
      const std::lock_guard lock(mutex);
      unanswered.erase(&c);
    }
    const std::lock_guard lock(mutex);
    unanswered.erase(&c);
  });
  gateway_harness gw(k_config, up.port());
  http_client uploader(gw.port());
  uploader.send_raw(
      "POST /conc/streamed/up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n");
  REQUIRE(eventually([&] { return heads.load() == 1; }));  // forwarded, its body under way
  uploader.send_raw("zz-not-hex\r\n");
  CHECK(uploader.read_some().find("400 Bad Request") != std::string::npos);
  // The uploader's connection lingers; the upstream connection that carried half its request
  // is closed before its unit is free for the next request.
  http_client next(gw.port());
  CHECK(next.get("/conc/streamed/next").status == 200);
  CHECK(heads.load() == 2);
  CHECK_FALSE(overlapped.load());
}

TEST_CASE("concurrency: the slot comes back when the request ends, however it ends") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());

  SUBCASE("a second request while one is in flight is denied, then admitted after it") {
    std::thread slow([&] {
      http_client client(gw.port());
      CHECK(client.get("/conc/slow?ms=600").status == 200);
    });
    std::this_thread::sleep_for(200ms);
    http_client other(gw.port());
    auto denied = other.get("/conc/fast");
    CHECK(denied.status == 429);
    CHECK(denied.header("x-ratelimit-limit") == "1");
    slow.join();
    // The slot came back when the upstream's answer was read whole, before it was written: the
    // client that read it finds the slot free at once.
    CHECK(other.get("/conc/fast").status == 200);
  }
  SUBCASE("the client hangs up while the upstream is still working") {
    {
      http_client quitter(gw.port());
      quitter.send_raw("GET /conc/slow?ms=3000 HTTP/1.1\r\nHost: x\r\n\r\n");
      std::this_thread::sleep_for(200ms);
    }  // closed here, long before the upstream answers
    std::this_thread::sleep_for(200ms);
    http_client next(gw.port());
    auto start = std::chrono::steady_clock::now();
    CHECK(next.get("/conc/fast").status == 200);
    CHECK(std::chrono::steady_clock::now() - start < 2s);
  }
  SUBCASE("the client sends its next request, then hangs up, while the upstream works") {
    {
      http_client quitter(gw.port());
      quitter.send_raw("GET /conc/slow?ms=3000 HTTP/1.1\r\nHost: x\r\n\r\n");
      std::this_thread::sleep_for(200ms);
      quitter.send_raw("GET /conc/fast HTTP/1.1\r\nHost: x\r\n\r\n");
      std::this_thread::sleep_for(100ms);
    }  // its FIN comes after bytes the gateway has not read for a request yet
    std::this_thread::sleep_for(200ms);
    http_client next(gw.port());
    auto start = std::chrono::steady_clock::now();
    CHECK(next.get("/conc/fast").status == 200);
    CHECK(std::chrono::steady_clock::now() - start < 2s);
  }
  SUBCASE("a request pipelined while the upstream works is served after it") {
    http_client client(gw.port());
    client.send_raw("GET /conc/slow?ms=400 HTTP/1.1\r\nHost: x\r\n\r\n");
    std::this_thread::sleep_for(150ms);
    client.send_raw("GET /conc/fast/second HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(client.read_reply().status == 200);
    CHECK(client.read_reply().status == 200);
    CHECK(upstream.count("GET", "/conc/fast/second") == 1);
  }
  SUBCASE("the upstream fails") {
    http_client client(gw.port());
    CHECK(client.get("/conc/crash").status == 502);
    CHECK(client.get("/conc/fast").status == 200);
    CHECK(client.get("/conc/fast").status == 200);
  }
  SUBCASE("the upstream times out") {
    test_upstream slow_upstream;
    gateway_harness short_gw(
        replace_all(k_config, "response_timeout: 5s", "response_timeout: 300ms"),
        slow_upstream.port());
    http_client client(short_gw.port());
    CHECK(client.get("/conc/slow?ms=1000").status == 504);
    CHECK(client.get("/conc/fast").status == 200);
  }
}

TEST_CASE("shadow mode counts and reports, never denies") {
  test_upstream upstream;
  gateway_harness gw(R"(
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
  - name: shadowed
    match: { path_prefix: /shadow }
    upstream: api
    shadow: true
    limits: [{ name: l, rate: 1/h, burst: 2 }]
  - name: half
    match: { path_prefix: /half }
    upstream: api
    limits:
      - { name: enforced, rate: 1/h, burst: 5 }
      - { name: trial, rate: 1/h, burst: 1, shadow: true }
)",
                     upstream.port());
  http_client client(gw.port());
  for (int i = 0; i < 5; ++i) {
    CHECK(client.get("/shadow").status == 200);
  }
  CHECK(upstream.count("GET", "/shadow") == 5);
  // Only the enforced limit speaks: the shadow one would have denied from the second request.
  for (int i = 0; i < 5; ++i) {
    auto r = client.get("/half");
    CHECK(r.status == 200);
    CHECK(r.header("x-ratelimit-limit") == "5");
  }
  CHECK(client.get("/half").status == 429);
  // Counted under the shadow limit that would have denied (route "shadowed", limit "l").
  const ratewall::decision_counters& shadowed = *gw.current()->decisions(0, "")[1];
  CHECK(shadowed.requests(ratewall::request_decision::shadow_denied) >= 3);
  CHECK(shadowed.requests(ratewall::request_decision::denied) == 0);
}

TEST_CASE("header options and a custom denial, per route") {
  test_upstream upstream;
  gateway_harness gw(R"(
headers: { ietf_draft: true }
plans: { premium: {} }
api_keys: [{ key: premium-key, plan: premium }]
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
  - name: hidden
    match: { path_prefix: /hidden }
    upstream: api
    headers: { enabled: false }
    limits: [{ name: l, rate: 1/h, burst: 1 }]
  - name: epoch
    match: { path_prefix: /epoch }
    upstream: api
    headers: { reset: epoch, ietf_draft: false }
    deny: { status: 503, body: "slow down", content_type: text/plain }
    limits: [{ name: burst, rate: 1/h, burst: 1 }]
  - name: draft
    match: { path_prefix: /draft }
    upstream: api
    limits:
      - { name: burst, rate: 10/s, burst: 20, plans: { premium: { rate: 100/s, burst: 400 } } }
)",
                     upstream.port());
  http_client client(gw.port());

  auto hidden = client.get("/hidden");
  CHECK(hidden.status == 200);
  CHECK_FALSE(hidden.has("x-ratelimit-limit"));
  auto hidden_denied = client.get("/hidden");
  CHECK(hidden_denied.status == 429);
  CHECK(hidden_denied.has("retry-after"));  // the one header a denial always carries

  auto epoch = client.get("/epoch");
  auto now = std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
  CHECK(std::stoll(epoch.header("x-ratelimit-reset")) >= now);
  CHECK_FALSE(epoch.has("ratelimit-policy"));
  auto custom = client.get("/epoch");
  CHECK(custom.status == 503);
  CHECK(custom.body == "slow down");
  CHECK(custom.header("content-type") == "text/plain");
  CHECK(custom.has("retry-after"));

  auto draft = client.get("/draft");
  CHECK(draft.header("ratelimit-policy") == "\"burst\";q=20;w=2");
  CHECK(draft.header("ratelimit") == "\"burst\";r=19;t=1");
  // A plan's own values: its quota and its window (400 at 100/s: 4 s).
  auto premium = client.get("/draft", {{"X-API-Key", "premium-key"}});
  CHECK(premium.header("ratelimit-policy") == "\"burst\";q=400;w=4");
}

TEST_CASE("leaky bucket with delay: a request whose client hung up while it waited is dropped") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  // rate 5/s, burst 2: the first goes at once, the next two wait 0.2 s and 0.4 s.
  http_client first(gw.port());
  CHECK(first.get("/delayed/first").status == 200);
  {
    http_client quitter(gw.port());
    quitter.send_raw("GET /delayed/quitter HTTP/1.1\r\nHost: x\r\n\r\n");
    std::this_thread::sleep_for(50ms);
  }  // hangs up while it waits its turn
  std::this_thread::sleep_for(500ms);
  CHECK(upstream.count("GET", "/delayed/quitter") == 0);
  CHECK(upstream.count("GET", "/delayed/first") == 1);
}

TEST_CASE(
    "leaky bucket with delay: bytes sent while a request waits are kept, and an end after "
    "them is seen") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  http_client first(gw.port());
  CHECK(first.get("/delayed/first").status == 200);

  SUBCASE("the next request, then a hang-up: neither is forwarded") {
    {
      http_client quitter(gw.port());
      quitter.send_raw("GET /delayed/quitter HTTP/1.1\r\nHost: x\r\n\r\n");
      std::this_thread::sleep_for(50ms);
      quitter.send_raw("GET /delayed/after HTTP/1.1\r\nHost: x\r\n\r\n");
      std::this_thread::sleep_for(20ms);
    }  // hangs up while the first waits its turn, after bytes the gateway had not read
    std::this_thread::sleep_for(700ms);
    CHECK(upstream.count("GET", "/delayed/quitter") == 0);
    CHECK(upstream.count("GET", "/delayed/after") == 0);
  }
  SUBCASE("a pipelined request: both are served, in order") {
    http_client client(gw.port());
    client.send_raw("GET /delayed/one HTTP/1.1\r\nHost: x\r\n\r\n");
    std::this_thread::sleep_for(50ms);
    client.send_raw("GET /delayed/two HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(client.read_reply().status == 200);
    CHECK(client.read_reply().status == 200);
    CHECK(upstream.count("GET", "/delayed/one") == 1);
    CHECK(upstream.count("GET", "/delayed/two") == 1);
  }
}

TEST_CASE(
    "leaky bucket with delay: a drain that ends before a request's turn answers it 503 with "
    "Retry-After at once; one whose turn comes first is forwarded") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  // /patient: rate 1/m, burst 2: the first goes at once, the second's turn is a minute away.
  // /paced: rate 1/s: the second waits a second, well inside the drain.
  http_client first(gw.port());
  CHECK(first.get("/patient/first").status == 200);
  CHECK(first.get("/paced/first").status == 200);
  http_client patient(gw.port());
  patient.send_raw("GET /patient/second HTTP/1.1\r\nHost: x\r\n\r\n");
  http_client soon(gw.port(), scaled(10s));
  soon.send_raw("GET /paced/second HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(scaled(100ms));  // both wait their turn

  bool drained = false;
  std::thread draining([&] { drained = gw.drain(scaled(5s)); });
  const auto refused = patient.read_reply();
  CHECK(refused.status == 503);
  const int retry_after = std::atoi(refused.header("retry-after").c_str());
  CHECK(retry_after > 50);
  CHECK(retry_after <= 60);
  CHECK(refused.header("connection") == "close");
  CHECK(soon.read_reply().status == 200);
  draining.join();
  CHECK(drained);  // every connection ended before the drain's time was up: none was cut
  CHECK(upstream.count("GET", "/patient/second") == 0);
  CHECK(upstream.count("GET", "/paced/second") == 1);
}
