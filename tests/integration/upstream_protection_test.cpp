// What clients can make the gateway hold towards the upstream (DESIGN §5a): a slow request body
// is read whole before an upstream connection is taken, and upstreams.*.max_connections bounds
// the connections in use across the process, with a bounded queue and then a 503.

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "support/eventually.hpp"
#include "support/gateway_harness.hpp"
#include "support/http_client.hpp"
#include "support/raw_upstream.hpp"

using namespace ratewall::testing;
using namespace std::chrono_literals;

namespace {

/// Records every request and answers each with 200 "ok"; requests to /hold wait until
/// release() (at most 5 s). Counts the requests being answered at once.
class holding_upstream {
 public:
  holding_upstream()
      : upstream_([this](raw_upstream::connection& c) {
          for (;;) {
            raw_request r = c.read_request();
            if (!r.ok) {
              return;
            }
            const int now = ++active_;
            int seen = peak_.load();
            while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
            }
            if (r.target == "/hold") {
              std::unique_lock lock(mutex_);
              ++holding_;
              changed_.notify_all();
              changed_.wait_for(lock, 5s, [this] { return released_; });
            }
            {
              std::lock_guard lock(mutex_);
              received_.push_back(r);
            }
            --active_;
            if (!c.write(raw_response("ok"))) {
              return;
            }
          }
        }) {}

  std::uint16_t port() const { return upstream_.port(); }
  std::uint64_t connections() const { return upstream_.connections_accepted(); }
  int peak() const { return peak_.load(); }
  std::vector<raw_request> received() {
    std::lock_guard lock(mutex_);
    return received_;
  }
  /// Waits (at most 5 s) until `n` requests are held at /hold.
  bool wait_holding(int n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, 5s, [&] { return holding_ >= n; });
  }
  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }

 private:
  std::atomic<int> active_{0};
  std::atomic<int> peak_{0};
  std::mutex mutex_;
  std::condition_variable changed_;
  int holding_ = 0;
  bool released_ = false;
  std::vector<raw_request> received_;
  raw_upstream upstream_;  // last: its threads stop before the members above go
};

const std::string k_buffering = R"(
server:
  threads: 2
  body_timeout: 5s
  request_buffer_bytes: 64
identity:
  unknown_api_key: allow
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
  - name: streamed
    match: { path_prefix: /stream }
    upstream: api
    request_buffering: false
  - name: open
    match: { path_prefix: / }
    upstream: api
)";

std::string post_head(const std::string& target, std::size_t length) {
  return "POST " + target + " HTTP/1.1\r\nHost: a\r\nContent-Length: " + std::to_string(length) +
         "\r\n\r\n";
}

/// Sends `bytes` (one request) through a gateway on k_buffering; the request as the upstream
/// received it, after a 200.
raw_request forwarded_alone(const std::string& bytes) {
  holding_upstream upstream;
  gateway_harness gw(k_buffering, upstream.port());
  http_client client(gw.port(), 5s);
  client.send_raw(bytes);
  CHECK(client.read_reply().status == 200);
  auto received = upstream.received();
  REQUIRE(received.size() == 1);
  return received[0];
}

}  // namespace

TEST_CASE("50 slow request bodies open no upstream connection until they are complete") {
  holding_upstream upstream;
  gateway_harness gw(k_buffering, upstream.port());

  std::vector<std::unique_ptr<http_client>> clients;
  for (int i = 0; i < 50; ++i) {
    clients.push_back(std::make_unique<http_client>(gw.port(), 5s));
    clients.back()->send_raw(post_head("/upload/" + std::to_string(i), 10) + "hello");
  }
  // Every head is in and half of every body: a gateway that forwards on the head would have
  // connected by now (a request on each client connection proves the gateway read the heads).
  http_client probe(gw.port(), 5s);
  CHECK(probe.get("/probe").status == 200);
  std::this_thread::sleep_for(200ms);
  CHECK(upstream.connections() == 1);  // the probe's only
  CHECK(upstream.received().size() == 1);

  for (auto& c : clients) {
    c->send_raw("world");
  }
  for (auto& c : clients) {
    CHECK(c->read_reply().status == 200);
  }
  auto received = upstream.received();
  REQUIRE(received.size() == 51);
  for (const auto& r : received) {
    if (r.target != "/probe") {
      CHECK(r.body == "helloworld");
      CHECK(r.header("content-length") == "10");
    }
  }
}

TEST_CASE("a buffered chunked body is forwarded whole with a Content-Length") {
  holding_upstream upstream;
  gateway_harness gw(k_buffering, upstream.port());
  http_client client(gw.port(), 5s);
  client.send_raw(
      "POST /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
  std::this_thread::sleep_for(100ms);
  CHECK(upstream.connections() == 0);
  client.send_raw("6\r\n world\r\n0\r\n\r\n");
  CHECK(client.read_reply().status == 200);
  auto received = upstream.received();
  REQUIRE(received.size() == 1);
  CHECK(received[0].body == "hello world");
  CHECK(received[0].header("content-length") == "11");
  CHECK(received[0].header("transfer-encoding").empty());
}

TEST_CASE("trailers of a buffered chunked body never join the forwarded head") {
  // The client was identified and limited on its head: fields that come after the body (or
  // Connection options among them) must not change what the upstream sees.
  const raw_request r = forwarded_alone(
      "POST /upload HTTP/1.1\r\nHost: a\r\nX-API-Key: AAA\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabc\r\n0\r\nX-API-Key: BBB\r\nX-User-ID: admin\r\nConnection: X-API-Key\r\n\r\n");
  CHECK(r.body == "abc");
  CHECK(r.header("x-api-key") == "AAA");
  CAPTURE(r.head);
  CHECK(r.head.find("BBB") == std::string::npos);
  CHECK(r.head.find("admin") == std::string::npos);
}

TEST_CASE("an empty chunked body is forwarded as Content-Length: 0") {
  const raw_request r = forwarded_alone(
      "POST /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  CHECK(r.header("content-length") == "0");
}

TEST_CASE("a declared Content-Length: 0 is forwarded, as nginx forwards it") {
  // An upstream may answer a POST without a length 411 (RFC 9110 §8.6).
  for (const std::string version : {"HTTP/1.1", "HTTP/1.0"}) {
    CAPTURE(version);
    const raw_request r =
        forwarded_alone("POST /upload " + version + "\r\nHost: a\r\nContent-Length: 0\r\n\r\n");
    CHECK(r.header("content-length") == "0");
    CHECK(r.header("transfer-encoding").empty());
  }
  // None declared, none added.
  const raw_request get = forwarded_alone("GET /upload HTTP/1.1\r\nHost: a\r\n\r\n");
  CHECK(get.head.find("Content-Length") == std::string::npos);
}

TEST_CASE("bodies past request_buffer_bytes, or on a route without buffering, stream") {
  holding_upstream upstream;
  gateway_harness gw(k_buffering, upstream.port());
  const std::string half(40, 'x');

  SUBCASE("a Content-Length past the bound: connected on the head") {
    http_client client(gw.port(), 5s);
    client.send_raw(post_head("/upload", 80) + half);
    CHECK(eventually([&] { return upstream.connections() == 1; }));
    client.send_raw(half);
    CHECK(client.read_reply().status == 200);
    REQUIRE(upstream.received().size() == 1);
    CHECK(upstream.received()[0].body == half + half);
  }
  SUBCASE("a chunked body that outgrows the bound: its start, then the rest, in chunks") {
    http_client client(gw.port(), 5s);
    client.send_raw("POST /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" +
                    std::string("28\r\n") + half + "\r\n28\r\n" + half + "\r\n");
    CHECK(eventually([&] { return upstream.connections() == 1; }));
    client.send_raw("3\r\nend\r\n0\r\n\r\n");
    CHECK(client.read_reply().status == 200);
    REQUIRE(upstream.received().size() == 1);
    CHECK(upstream.received()[0].body == half + half + "end");
    CHECK(upstream.received()[0].header("transfer-encoding") == "chunked");
  }
  SUBCASE("request_buffering: false") {
    http_client client(gw.port(), 5s);
    client.send_raw(post_head("/stream", 10) + "hello");
    CHECK(eventually([&] { return upstream.connections() == 1; }));
    client.send_raw("world");
    CHECK(client.read_reply().status == 200);
  }
}

TEST_CASE("a body that stalls while buffered: 408, and the upstream never hears of it") {
  holding_upstream upstream;
  gateway_harness gw(replace_all(k_buffering, "body_timeout: 5s", "body_timeout: 300ms"),
                     upstream.port());
  http_client client(gw.port(), 5s);
  client.send_raw(post_head("/upload", 10) + "hello");
  CHECK(client.read_reply().status == 408);
  CHECK(client.closed_by_peer());
  CHECK(upstream.connections() == 0);
}

namespace {

const std::string k_bounded = R"(
server:
  threads: 2
identity:
  unknown_api_key: allow
upstreams:
  api:
    targets: [${UPSTREAM}]
    max_connections: 2
    queue_timeout: QUEUE
routes:
  - name: open
    match: { path_prefix: / }
    upstream: api
)";

/// A gateway whose upstream has both of its max_connections taken by requests held at /hold,
/// each on its own client connection (the harness spreads them over its two threads).
struct bound_reached {
  explicit bound_reached(const std::string& queue_timeout)
      : gw(replace_all(k_bounded, "QUEUE", queue_timeout), upstream.port()),
        a(gw.port(), 5s),
        b(gw.port(), 5s) {
    a.send_raw("GET /hold HTTP/1.1\r\nHost: a\r\n\r\n");
    b.send_raw("GET /hold HTTP/1.1\r\nHost: a\r\n\r\n");
    REQUIRE(upstream.wait_holding(2));
  }
  /// Lets the held requests finish; both are answered 200.
  void release() {
    upstream.release();
    CHECK(a.read_reply().status == 200);
    CHECK(b.read_reply().status == 200);
  }

  holding_upstream upstream;
  gateway_harness gw;
  http_client a;
  http_client b;
};

}  // namespace

TEST_CASE("upstream max_connections: the bound holds across threads; then 503 with Retry-After") {
  bound_reached held("200ms");
  http_client c(held.gw.port(), 5s);
  const http_reply busy = c.get("/other");
  CHECK(busy.status == 503);
  CHECK(busy.header("retry-after") == "1");
  CHECK(busy.keep_alive);
  CHECK(held.upstream.connections() == 2);

  held.release();
  CHECK(c.get("/other").status == 200);  // the same client connection, once a unit is free
  CHECK(held.upstream.peak() <= 2);
}

TEST_CASE("upstream max_connections: a queued request gets the first connection given back") {
  bound_reached held("5s");

  std::vector<std::unique_ptr<http_client>> queued;
  for (int i = 0; i < 6; ++i) {
    queued.push_back(std::make_unique<http_client>(held.gw.port(), 5s));
    queued.back()->send_raw("GET /queued HTTP/1.1\r\nHost: a\r\n\r\n");
  }
  std::this_thread::sleep_for(100ms);
  CHECK(held.upstream.received().empty());  // all six wait: no third connection was opened
  held.release();
  for (auto& q : queued) {
    CHECK(q->read_reply().status == 200);
  }
  CHECK(held.upstream.peak() <= 2);
}

TEST_CASE("upstream max_connections: a client that hangs up while queued is never forwarded") {
  bound_reached held("5s");
  {
    http_client gone(held.gw.port(), 5s);
    gone.send_raw("GET /gone HTTP/1.1\r\nHost: a\r\n\r\n");
    std::this_thread::sleep_for(100ms);  // queued
  }
  std::this_thread::sleep_for(100ms);  // the close is seen
  http_client waiting(held.gw.port(), 5s);
  waiting.send_raw("GET /waiting HTTP/1.1\r\nHost: a\r\n\r\n");
  std::this_thread::sleep_for(100ms);
  held.release();
  CHECK(waiting.read_reply().status == 200);
  for (const auto& r : held.upstream.received()) {
    CHECK(r.target != "/gone");
  }
  CHECK(held.upstream.received().size() == 3);
}
