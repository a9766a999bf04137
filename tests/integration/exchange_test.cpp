// The exchange against upstreams that misbehave, byte for byte: interim responses, bytes no
// request asked for, streams, and a close or a stall in the middle of a body. Each upstream is
// a raw_upstream whose script writes exactly what the test says, when it says.

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "ratewall/proxy/gateway.hpp"
#include "support/gateway_harness.hpp"
#include "support/http_client.hpp"
#include "support/raw_upstream.hpp"

using namespace ratewall::testing;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

// One worker thread: every request of a test shares one pooled upstream connection, as the
// clients of one busy route do.
const std::string k_config = R"(
server:
  threads: 1
  header_timeout: 2s
  body_timeout: 5s
  idle_timeout: 5s
identity:
  unknown_api_key: allow
upstreams:
  api:
    targets: [${UPSTREAM}]
    connect_timeout: 1s
    response_timeout: 1s
    read_timeout: 400ms
routes:
  - name: open
    match: { path_prefix: / }
    upstream: api
    limits:
      - name: roomy
        rate: 1000/s
        burst: 1000
)";

/// Answers each request with a body naming its target, so a reply handed to the wrong client
/// shows; `special` may answer some targets otherwise and returns false to close.
raw_upstream::script answering(
    std::function<bool(raw_upstream::connection&, const raw_request&)> special = {}) {
  return [special](raw_upstream::connection& c) {
    for (;;) {
      raw_request r = c.read_request();
      if (!r.ok) {
        return;
      }
      if (special && special(c, r)) {
        continue;
      }
      if (!c.write(raw_response("answer to " + r.target))) {
        return;
      }
    }
  };
}

std::uint64_t aborted(const gateway_harness& gw) {
  return gw.current()->metrics(0).upstream_aborts();
}

}  // namespace

TEST_CASE("interim responses are relayed or dropped, never taken for the answer") {
  raw_upstream upstream(answering([](raw_upstream::connection& c, const raw_request& r) {
    if (r.target == "/early103") {
      // Early Hints first, the real answer in a later write, as a Flask or Go upstream does.
      c.write("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n");
      std::this_thread::sleep_for(30ms);
      c.write(raw_response("answer to /early103"));
      return true;
    }
    if (r.target == "/continue") {
      c.write("HTTP/1.1 100 Continue\r\n\r\n");
      std::this_thread::sleep_for(30ms);
      c.write(raw_response("answer to /continue"));
      return true;
    }
    return false;
  }));
  gateway_harness gw(k_config, upstream.port());

  SUBCASE("four clients on one pooled connection each get their own answer") {
    http_client a(gw.port()), b(gw.port()), c(gw.port());
    auto hint = a.get("/early103");
    CHECK(hint.status == 103);
    CHECK(hint.header("link") == "</style.css>; rel=preload");
    auto final_a = a.read_reply();
    CHECK(final_a.status == 200);
    CHECK(final_a.body == "answer to /early103");
    CHECK(b.get("/b").body == "answer to /b");
    CHECK(c.get("/c").body == "answer to /c");
    CHECK(a.get("/a-again").body == "answer to /a-again");
    CHECK(upstream.connections_accepted() == 1);
  }
  SUBCASE("an HTTP/1.0 client gets no interim response") {
    http_client a(gw.port());
    a.send_raw("GET /early103 HTTP/1.0\r\nHost: x\r\n\r\n");
    auto r = a.read_reply();
    CHECK(r.status == 200);
    CHECK(r.body == "answer to /early103");
  }
  SUBCASE("an unsolicited 100 Continue is dropped") {
    http_client a(gw.port());
    auto r = a.get("/continue");
    CHECK(r.status == 200);
    CHECK(r.body == "answer to /continue");
    CHECK(a.get("/next").body == "answer to /next");
  }
  SUBCASE("a client that sent Expect gets one 100 Continue, the gateway's") {
    http_client a(gw.port());
    a.send_raw(
        "POST /continue HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
    CHECK(a.read_reply().status == 100);
    a.send_raw("hello");
    auto r = a.read_reply();
    CHECK(r.status == 200);
    CHECK(r.body == "answer to /continue");
    CHECK(a.get("/next").body == "answer to /next");
  }
}

TEST_CASE("an upstream connection is reused only after an exchange that ended cleanly") {
  raw_upstream upstream(answering([](raw_upstream::connection& c, const raw_request& r) {
    if (r.target == "/switch") {
      // 101 without an upgrade asked for, then bytes that must never reach anyone.
      c.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n");
      c.write(raw_response("stolen"));
      return true;
    }
    if (r.target == "/switch-bare" || r.target == "/switch-h2c") {
      // An upgrade was asked for, but this 101 names no protocol, or one nobody offered;
      // what follows it is still HTTP, or HTTP/2.
      c.write(r.target == "/switch-bare"
                  ? "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\n\r\n"
                  : "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n"
                    "Connection: upgrade\r\n\r\n");
      c.write(raw_response("stolen"));
      return true;
    }
    if (r.target == "/extra") {
      c.write(raw_response("ok") + raw_response("stolen"));  // more than the response
      return true;
    }
    if (r.target == "/extra-later") {
      c.write(raw_response("ok"));
      std::this_thread::sleep_for(30ms);
      c.write(raw_response("stolen"));  // unsolicited, while the connection is idle
      return true;
    }
    if (r.target == "/close-later") {
      c.write(raw_response("ok"));
      std::this_thread::sleep_for(30ms);
      c.shutdown_send();  // as an upstream's keep-alive timeout does, while the connection idles
      return true;
    }
    if (r.target == "/processing") {
      for (int i = 0; i < 40; ++i) {
        c.write("HTTP/1.1 102 Processing\r\n\r\n");
      }
      return true;
    }
    return false;
  }));
  gateway_harness gw(k_config, upstream.port());
  http_client a(gw.port()), b(gw.port());

  SUBCASE("a 101 nobody asked for is a 502") {
    const http_reply r = a.get("/switch");
    CHECK(r.status == 502);
    CHECK(r.body.find("no upgrade was asked for") != std::string::npos);
    CHECK(b.get("/b").body == "answer to /b");
    CHECK(upstream.connections_accepted() == 2);
  }
  SUBCASE("a 101 that does not name a protocol the client offered is a 502") {
    for (const std::string target : {"/switch-bare", "/switch-h2c"}) {
      INFO(target);
      http_client c(gw.port());
      c.send_raw(
          "GET " + target +
          " HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n"
          "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
      const http_reply r = c.read_reply();
      CHECK(r.status == 502);
      CHECK(r.body.find("switched to a protocol that was not asked for") != std::string::npos);
      CHECK(r.body.find("stolen") == std::string::npos);
    }
    CHECK(b.get("/b").body == "answer to /b");
    CHECK(upstream.connections_accepted() == 3);  // neither connection went back to the pool
  }
  SUBCASE("bytes after the response close the connection") {
    CHECK(a.get("/extra").body == "ok");
    CHECK(b.get("/b").body == "answer to /b");
    CHECK(upstream.connections_accepted() == 2);
  }
  SUBCASE("bytes sent to an idle connection close it") {
    CHECK(a.get("/extra-later").body == "ok");
    std::this_thread::sleep_for(150ms);
    CHECK(b.get("/b").body == "answer to /b");
    CHECK(upstream.connections_accepted() == 2);
  }
  SUBCASE("an idle connection the upstream closed is not used again, even for a POST") {
    // A POST is never retried: sent on the closed connection, it would get a 502.
    CHECK(a.get("/close-later").body == "ok");
    std::this_thread::sleep_for(150ms);
    const auto r = b.request("POST", "/b", {}, "once");
    CHECK(r.status == 200);
    CHECK(r.body == "answer to /b");
    CHECK(upstream.connections_accepted() == 2);
  }
  SUBCASE("a connection reused again and again is still watched each time it is idle") {
    // The idle watch stays armed while the connection is in use (the response's read queues
    // behind it); each release must arm it anew.
    for (int i = 0; i < 3; ++i) {
      CHECK(a.get("/b").body == "answer to /b");
    }
    CHECK(upstream.connections_accepted() == 1);
    CHECK(a.get("/extra-later").body == "ok");  // on the same connection, reused a fourth time
    CHECK(upstream.connections_accepted() == 1);
    std::this_thread::sleep_for(150ms);
    CHECK(b.get("/b").body == "answer to /b");
    CHECK(upstream.connections_accepted() == 2);
  }
  SUBCASE("interim responses without end are a 502") {
    auto r = a.get("/processing");
    int interim = 0;
    while (r.status >= 100 && r.status < 200 && interim < 100) {
      ++interim;
      r = a.read_reply();
    }
    CHECK(interim > 0);
    CHECK(interim <= 16);
    CHECK(r.status == 502);
    CHECK(r.body.find("more than 16 interim responses") != std::string::npos);
    CHECK(b.get("/b").body == "answer to /b");
  }
}

TEST_CASE("streams reach the client as they are sent") {
  std::mutex mutex;
  std::map<int, steady::time_point> sent;
  raw_upstream upstream([&](raw_upstream::connection& c) {
    raw_request r = c.read_request();
    if (!r.ok) {
      return;
    }
    const bool chunked = r.target == "/sse";
    c.write(std::string("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n") +
            (chunked ? "Transfer-Encoding: chunked\r\n" : "Connection: close\r\n") + "\r\n");
    // 15 events, one every 200 ms: a 3 s stream, longer than response_timeout (1 s).
    for (int i = 0; i < 15; ++i) {
      std::this_thread::sleep_for(200ms);
      std::string event = "data: event " + std::to_string(i) + "\n\n";
      {
        std::lock_guard lock(mutex);
        sent[i] = steady::now();
      }
      if (chunked) {
        char size[16];
        std::snprintf(size, sizeof size, "%zx\r\n", event.size());
        event = size + event + "\r\n";
      }
      c.write(event);
    }
    if (chunked) {
      c.write("0\r\n\r\n");
    }
  });
  gateway_harness gw(k_config, upstream.port());

  for (std::string target : {"/sse", "/sse-until-close"}) {
    CAPTURE(target);
    {
      std::lock_guard lock(mutex);
      sent.clear();
    }
    http_client client(gw.port(), 2s);
    client.send_raw("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string received;
    std::map<int, steady::time_point> arrived;
    const auto give_up = steady::now() + 8s;
    while (received.find("0\r\n\r\n") == std::string::npos && steady::now() < give_up) {
      std::string piece = client.read_some();
      if (piece.empty()) {
        break;
      }
      received += piece;
      for (int i = 0; i < 15; ++i) {
        if (!arrived.count(i) &&
            received.find("data: event " + std::to_string(i) + "\n") != std::string::npos) {
          arrived[i] = steady::now();
        }
      }
    }
    CHECK(received.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    // Until the close upstream, chunked to an HTTP/1.1 client: the end stays visible.
    CHECK(received.find("Transfer-Encoding: chunked\r\n") != std::string::npos);
    CHECK(received.size() >= 5);
    CHECK(received.substr(received.size() - 5) == "0\r\n\r\n");
    REQUIRE(arrived.size() == 15);
    // Each event arrives long before the next is sent (a buffering relay would hold them all
    // until the end, 3 s), and typically within 50 ms. The median, not every event: a loaded
    // 2-core CI machine (sanitizer builds alongside) may stall one delivery for a moment.
    std::lock_guard lock(mutex);
    std::vector<steady::duration> delays;
    for (const auto& [i, when] : arrived) {
      CAPTURE(i);
      CHECK(when - sent[i] < 150ms);
      delays.push_back(when - sent[i]);
    }
    std::sort(delays.begin(), delays.end());
    CHECK(delays[delays.size() / 2] < 50ms);
  }
}

TEST_CASE(
    "a request body streams to the upstream as the client sends it (request_buffering: false)") {
  std::mutex mutex;
  std::map<int, steady::time_point> arrived;
  raw_upstream upstream([&](raw_upstream::connection& c) {
    raw_request r = c.read_head();
    if (!r.ok) {
      return;
    }
    for (int i = 0; i < 5; ++i) {
      if (!c.read_until("piece " + std::to_string(i) + ";")) {
        return;
      }
      std::lock_guard lock(mutex);
      arrived[i] = steady::now();
    }
    c.read_until("0\r\n\r\n");
    c.write(raw_response("got it"));
  });
  // A route that streams bodies (by default one up to 1 MiB is read whole first).
  gateway_harness gw(replace_all(k_config, "    upstream: api\n",
                                 "    upstream: api\n    request_buffering: false\n"),
                     upstream.port());
  http_client client(gw.port());
  client.send_raw("POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  std::map<int, steady::time_point> sent;
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(150ms);
    const std::string piece = "piece " + std::to_string(i) + ";";
    sent[i] = steady::now();
    client.send_raw("8\r\n" + piece + "\r\n");
  }
  client.send_raw("0\r\n\r\n");
  auto r = client.read_reply();
  CHECK(r.status == 200);
  CHECK(r.body == "got it");
  std::lock_guard lock(mutex);
  REQUIRE(arrived.size() == 5);
  std::vector<steady::duration> delays;
  for (const auto& [i, when] : arrived) {
    CAPTURE(i);
    CHECK(when - sent[i] < 120ms);  // before the next piece is sent (150 ms later)
    delays.push_back(when - sent[i]);
  }
  std::sort(delays.begin(), delays.end());
  CHECK(delays[delays.size() / 2] < 50ms);
}

TEST_CASE("a body the upstream reads slowly arrives byte for byte, in any framing") {
  // The upstream waits before it reads: the sockets between fill, and the gateway's sends go
  // out in part (a chunk's size line, its bytes or its CRLF cut anywhere) before the rest
  // waits for room.
  const std::size_t size = 6 * 1024 * 1024 + 12345;
  std::string body(size, '\0');
  for (std::size_t i = 0; i < size; ++i) {
    body[i] = static_cast<char>('a' + (i * 7 + i / 1000) % 26);
  }
  raw_upstream upstream([&body](raw_upstream::connection& c) {
    for (;;) {
      std::this_thread::sleep_for(300ms);
      raw_request r = c.read_request(20s);
      if (!r.ok) {
        return;
      }
      const auto diff = std::mismatch(r.body.begin(), r.body.end(), body.begin(), body.end());
      c.write(raw_response(diff.first == r.body.end() && diff.second == body.end()
                               ? "same"
                               : "differs at " + std::to_string(diff.first - r.body.begin()) +
                                     " of " + std::to_string(r.body.size())));
    }
  });
  // The writes to the upstream are bounded by read_timeout, its answer by response_timeout:
  // both long, for the upstream's pauses and a sanitizer's pace.
  std::string cfg = replace_all(k_config, "    upstream: api\n",
                                "    upstream: api\n    request_buffering: false\n");
  cfg = replace_all(cfg, "body_timeout: 5s", "body_timeout: 20s\n  max_body_bytes: 64MiB");
  cfg = replace_all(replace_all(cfg, "read_timeout: 400ms", "read_timeout: 20s"),
                    "response_timeout: 1s", "response_timeout: 20s");
  gateway_harness gw(cfg, upstream.port());
  http_client client(gw.port(), 30s);
  SUBCASE("Content-Length") {
    client.send_raw("POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(size) +
                    "\r\n\r\n");
    client.send_raw(body);
  }
  SUBCASE("chunked, in chunks of many sizes") {
    client.send_raw("POST /big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    std::string framed;
    for (std::size_t at = 0, n = 1; at < size; at += n, n = n * 3 % 70001 + 1) {
      n = std::min(n, size - at);
      char line[32];
      std::snprintf(line, sizeof line, "%zx\r\n", n);
      framed += line;
      framed.append(body, at, n);
      framed += "\r\n";
    }
    framed += "0\r\n\r\n";
    client.send_raw(framed);
  }
  auto r = client.read_reply();
  CHECK(r.status == 200);
  CHECK(r.body == "same");
}

TEST_CASE("an upstream's transfer coding other than chunked is a 502, never passed on unlabelled") {
  // Transfer-Encoding is the hop's own (RFC 9112 §6.1): the gateway frames the client's leg
  // itself, so a gzip coding under it would reach the client as if it were the content.
  raw_upstream upstream(answering([](raw_upstream::connection& c, const raw_request& r) {
    if (r.target == "/gzip-chunked") {
      c.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
      return true;
    }
    if (r.target == "/gzip-close") {
      c.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nhello");
      c.close();
      return true;
    }
    if (r.target == "/chunked") {
      c.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
      return true;
    }
    // Faulty framing (RFC 9112 §6.1, §6.3): a coding list with nothing in it beside a length,
    // or any coding in an HTTP/1.0 response. Both were read by their length or chunks and the
    // connection reused.
    if (r.target == "/empty-coding") {
      c.write("HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\nContent-Length: 5\r\n\r\nhello");
      return true;
    }
    if (r.target == "/comma-coding") {
      c.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: ,\r\nContent-Length: 5\r\n\r\nhello");
      return true;
    }
    if (r.target == "/http10-chunked") {
      c.write(
          "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
          "5\r\nhello\r\n0\r\n\r\n");
      return true;
    }
    if (r.target == "/head-gzip") {  // a HEAD's answer names the coding a GET would get
      c.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
      return true;
    }
    return false;
  }));
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());
  for (const char* target :
       {"/gzip-chunked", "/gzip-close", "/empty-coding", "/comma-coding", "/http10-chunked"}) {
    CAPTURE(target);
    const http_reply r = client.get(target);
    CHECK(r.status == 502);
    CHECK(r.body.find("transfer coding") != std::string::npos);
    CHECK(r.body.find("hello") == std::string::npos);
    CHECK(client.get("/next").body == "answer to /next");  // the client's connection goes on
  }
  CHECK(client.get("/chunked").body == "hello");
  const http_reply head = client.request("HEAD", "/head-gzip");
  CHECK(head.status == 200);
  CHECK(client.get("/last").body == "answer to /last");
}

TEST_CASE("an upstream's Content-Length past 2^63 - 1 is a 502, not relayed") {
  // Beast's unsigned count takes up to 2^64 - 1; a client's signed one may not.
  raw_upstream upstream(answering([](raw_upstream::connection& c, const raw_request& r) {
    const std::string length = r.target.substr(r.target.find('/', 1) + 1);
    if (r.target.starts_with("/length/")) {
      c.write("HTTP/1.1 200 OK\r\nContent-Length: " + length + "\r\n\r\n" +
              (r.method == "HEAD" ? "" : "hello"));
      if (r.method != "HEAD") {
        c.close();
      }
      return true;
    }
    return false;
  }));
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());
  for (const std::string length : {"9223372036854775808", "18446744073709551615"}) {
    CAPTURE(length);
    for (const char* method : {"GET", "HEAD"}) {
      const http_reply r = client.request(method, "/length/" + length);
      CHECK(r.status == 502);
      CHECK(r.header("content-length") != length);
      CHECK(client.get("/next").body == "answer to /next");  // the client's connection goes on
    }
  }
  const http_reply largest = client.request("HEAD", "/length/9223372036854775807");
  CHECK(largest.status == 200);
  CHECK(largest.header("content-length") == "9223372036854775807");
}

TEST_CASE("an upstream's head over 64 KiB is a 502, however its pieces fall") {
  // Each piece ends just into a field line, so the lines before it are parsed in an earlier
  // read than the one that would end the head: the bound counts them all.
  raw_upstream upstream([](raw_upstream::connection& c) {
    if (!c.read_request().ok) {
      return;
    }
    std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n";
    while (head.size() < 80 * 1024) {
      head += "X-Filler: " + std::string(90, 'f') + "\r\n";
    }
    head += "\r\nok";
    std::size_t at = 0;
    for (int i = 1; i < 8; ++i) {
      const std::size_t cut = head.find("\r\nX-", head.size() * i / 8) + 3;
      if (!c.write(head.substr(at, cut - at))) {
        return;
      }
      at = cut;
      std::this_thread::sleep_for(20ms);
    }
    c.write(head.substr(at));
  });
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port(), 5s);
  auto r = client.request("GET", "/big-head");
  CHECK(r.status == 502);
  CHECK(r.body.find("X-Filler") == std::string::npos);
}

TEST_CASE("an upstream that fails mid-body: the client connection closes short, counted") {
  raw_upstream upstream([](raw_upstream::connection& c) {
    raw_request r = c.read_request();
    if (!r.ok) {
      return;
    }
    if (r.target == "/cut-length") {
      c.write("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
    } else if (r.target == "/cut-chunked") {
      c.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n");
    } else if (r.target == "/stall") {
      c.write("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
      std::this_thread::sleep_for(2s);  // past read_timeout (400 ms)
    } else if (r.target == "/close-before-head") {
      return;
    } else if (r.target == "/stall-before-head") {
      std::this_thread::sleep_for(2s);  // past response_timeout (1 s)
    }
    std::this_thread::sleep_for(50ms);
  });
  gateway_harness gw(k_config, upstream.port());

  for (std::string target : {"/cut-length", "/cut-chunked", "/stall"}) {
    CAPTURE(target);
    const auto before = aborted(gw);
    http_client client(gw.port(), 3s);
    client.send_raw("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string received;
    const auto started = steady::now();
    for (std::string piece; !(piece = client.read_some()).empty();) {
      received += piece;
    }
    CHECK(steady::now() - started < 2500ms);  // closed, not left hanging
    CHECK(received.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    const std::string body = received.substr(received.find("\r\n\r\n") + 4);
    CHECK(body.find("0123456789") != std::string::npos);
    CHECK(body.find("0\r\n\r\n") == std::string::npos);  // never a false end
    CHECK(aborted(gw) == before + 1);
  }
  SUBCASE("before the head: 502 for a close, 504 for a stall") {
    http_client client(gw.port(), 3s);
    auto closed = client.get("/close-before-head");
    CHECK(closed.status == 502);
    CHECK(closed.header("content-type") == "application/problem+json");
    auto stalled = client.get("/stall-before-head");
    CHECK(stalled.status == 504);
    CHECK(aborted(gw) == 3);
  }
}

TEST_CASE("an upstream's chunk line that never ends: cut once 64 KiB of it wait, never held") {
  // All of it comes well within read_timeout (20 s here, which bounds a wait without
  // progress): only the bound on what the parser cannot take ends it. Without one the gateway
  // takes all the upstream sends, 64 MiB.
  constexpr int k_pieces = 1000;
  std::atomic<int> written{0};
  raw_upstream upstream([&written](raw_upstream::connection& c) {
    if (!c.read_request().ok ||
        !c.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;")) {
      return;
    }
    const std::string piece(64 * 1024, 'a');
    for (int i = 0; i < k_pieces && c.write(piece); ++i) {
      ++written;
      std::this_thread::sleep_for(1ms);
    }
  });
  gateway_harness gw(replace_all(k_config, "read_timeout: 400ms", "read_timeout: 20s"),
                     upstream.port());
  const auto before = aborted(gw);  // the route's counters outlive a gateway
  http_client client(gw.port(), 30s);
  client.send_raw("GET /endless HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string received;
  for (std::string piece; !(piece = client.read_some()).empty();) {
    received += piece;
  }
  CHECK(received.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(received.find("0\r\n\r\n") == std::string::npos);  // cut short, never a false end
  CHECK(aborted(gw) == before + 1);
  CHECK(written.load() < k_pieces);  // the gateway closed the connection on the upstream
}

TEST_CASE(
    "an upstream's chunk line or trailer line that ends in a bare LF, or holds a control byte "
    "or an open quoted string in its extension: cut at once, not at read_timeout") {
  // After the last chunk, a trailer line or the empty line that ends the body: Beast waits for
  // all of them before it takes any. A bare LF in a quoted extension ends the line for a
  // client that reads as nginx does; one left open at the CRLF, Beast reads on past the line.
  for (const std::string end :
       {"0\n\n", "0\r\nX-T: 1\n\r\n", "0\r\n\n", "3;a=\"x\ny\"\r\nabc\r\n0\r\n\r\n",
        "3;a=\"x\r\nabc\r\n0\r\n\r\n"}) {
    CAPTURE(end);
    raw_upstream upstream([&end](raw_upstream::connection& c) {
      // The rest after the head has gone on: a bad line read with the head is a 502 instead.
      if (c.read_request().ok &&
          c.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")) {
        std::this_thread::sleep_for(100ms);
        if (c.write(end)) {
          c.read_request();  // holds the connection until the gateway closes it
        }
      }
    });
    gateway_harness gw(
        replace_all(replace_all(k_config, "read_timeout: 400ms", "read_timeout: 20s"),
                    "response_timeout: 1s", "response_timeout: 20s"),
        upstream.port());
    const auto before = aborted(gw);
    http_client client(gw.port(), 5s);  // reads end at the close, or 5 s of nothing
    client.send_raw("GET /bare-lf HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string received;
    for (std::string piece; !(piece = client.read_some()).empty();) {
      received += piece;
    }
    CHECK(received.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(received.find("hello") != std::string::npos);
    CHECK(received.find("0\r\n\r\n") == std::string::npos);  // cut short, never a false end
    CHECK(aborted(gw) == before + 1);  // cut, not still waiting for the end of the line
  }
}

TEST_CASE("an upstream status that is no status code is a 502, never relayed") {
  raw_upstream upstream(answering([](raw_upstream::connection& c, const raw_request& r) {
    if (r.target == "/099" || r.target == "/600") {
      c.write("HTTP/1.1 " + r.target.substr(1) + " Weird\r\nX-A: 1\r\n\r\n");
      c.write(raw_response("after"));
      return true;
    }
    if (r.target == "/204") {
      c.write("HTTP/1.1 204 No Content\r\nContent-Length: 38\r\n\r\n");
      return true;
    }
    return false;
  }));
  gateway_harness gw(k_config, upstream.port());
  for (std::string target : {"/099", "/600"}) {
    CAPTURE(target);
    http_client client(gw.port());
    client.send_raw("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string received = client.read_some();
    CHECK(received.rfind("HTTP/1.1 502 Bad Gateway\r\n", 0) == 0);
    CHECK(received.find("Weird") == std::string::npos);
    CHECK(received.find("upstream sent an invalid status code") != std::string::npos);
  }
  SUBCASE("a 204 goes out without Content-Length") {
    http_client client(gw.port());
    auto r = client.get("/204");
    CHECK(r.status == 204);
    CHECK_FALSE(r.has("content-length"));
    CHECK(client.get("/next").body == "answer to /next");
  }
}

TEST_CASE("empty lines before an upstream's status line are skipped, as HAProxy skips them") {
  // A CRLF an upstream sends late after a body lands in front of the next response on the
  // connection: that answer was a 502.
  raw_upstream upstream(answering([](raw_upstream::connection& c, const raw_request& r) {
    if (r.target == "/crlf-first") {
      c.write("\r\n\n\r");
      c.write("\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    } else if (r.target == "/crlf-then-interim") {
      c.write("\r\nHTTP/1.1 100 Continue\r\n\r\n\r\nHTTP/1.1 201 Created\r\n");
      c.write("Content-Length: 2\r\n\r\nok");
    } else {
      return false;
    }
    return true;
  }));
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());
  const auto first = client.get("/crlf-first");
  CHECK(first.status == 200);
  CHECK(first.body == "ok");
  const auto interim = client.get("/crlf-then-interim");
  CHECK(interim.status == 201);
  CHECK(interim.body == "ok");
  // In step: the next answer is the next request's, on the same connection.
  CHECK(client.get("/next").body == "answer to /next");
  CHECK(upstream.connections_accepted() == 1);
}

TEST_CASE("an upstream's HTTP/1.2 status line is read as HTTP/1.1 (RFC 9110 §6.2), 2.0 a 502") {
  raw_upstream upstream(answering([](raw_upstream::connection& c, const raw_request& r) {
    if (r.target == "/later-minor") {  // kept alive, as an HTTP/1.1 response is
      c.write("HTTP/1.2 200 OK\r\nContent-Length: 2\r\n\r\nok");
    } else if (r.target == "/interim") {
      c.write("HTTP/1.9 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n");
      c.write("HTTP/1.3 201\r\nContent-Length: 2\r\n\r\nok");
    } else if (r.target == "/split") {  // Beast judges the version before the space comes
      c.write("HTTP/1.2");
      std::this_thread::sleep_for(50ms);
      c.write(" 200 OK\r\nContent-Length: 2\r\n\r\nok");
    } else if (r.target == "/other-major") {
      c.write("HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
    } else {
      return false;
    }
    return true;
  }));
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());
  const auto first = client.get("/later-minor");
  CHECK(first.status == 200);
  CHECK(first.body == "ok");
  const auto second = client.get("/later-minor");
  CHECK(second.status == 200);
  CHECK(upstream.connections_accepted() == 1);
  CHECK(client.get("/interim").status == 103);  // relayed, then the answer
  const auto interim = client.read_reply();
  CHECK(interim.status == 201);
  CHECK(interim.body == "ok");
  const auto split = client.get("/split");
  CHECK(split.status == 200);
  CHECK(split.body == "ok");
  CHECK(client.get("/other-major").status == 502);
}

TEST_CASE("an upstream status line without a reason is read as nginx reads it, not a 502") {
  // "HTTP/1.1 200" then CRLF: RFC 9112 wants a space before the (empty) reason; Beast refuses
  // the line without it, nginx and HAProxy take it, and some small servers send it.
  raw_upstream upstream(answering([](raw_upstream::connection& c, const raw_request& r) {
    if (r.target == "/bare") {
      c.write("HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok");
    } else if (r.target == "/pieces") {  // the line arrives in three reads
      c.write("HTTP/1.1 201");
      std::this_thread::sleep_for(50ms);
      c.write("\r");
      std::this_thread::sleep_for(50ms);
      c.write("\nContent-Length: 2\r\n\r\nok");
    } else if (r.target == "/cr-then-lf") {  // a read may end between the CR and the LF
      c.write("HTTP/1.1 202\r");
      std::this_thread::sleep_for(50ms);
      c.write("\nContent-Length: 2\r\n\r\nok");
    } else if (r.target == "/interim-then-cr") {
      c.write("HTTP/1.1 103\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 203\r");
      std::this_thread::sleep_for(50ms);
      c.write("\nContent-Length: 2\r\n\r\nok");
    } else if (r.target == "/interim") {
      c.write("HTTP/1.1 103\r\nLink: </a.css>; rel=preload\r\n\r\n");
      c.write("HTTP/1.0 404\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nno");
    } else if (r.target == "/beyond-beast") {  // codes Beast has no reason for
      c.write("HTTP/1.1 103\r\nLink: </a.css>; rel=preload\r\n\r\n");
      c.write("HTTP/1.1 425\r\nContent-Length: 2\r\n\r\nok");
    } else if (r.target == "/no-reason-known") {
      c.write("HTTP/1.1 299\r\nContent-Length: 2\r\n\r\nok");
    } else if (r.target == "/not-a-status") {
      c.write("HTTP/1.1 2x0\r\nContent-Length: 2\r\n\r\nok");
    } else {
      return false;
    }
    return true;
  }));
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port());
  client.send_raw("GET /bare HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string received = client.read_some();
  CHECK(received.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(received.ends_with("\r\n\r\nok"));
  const http_reply pieces = client.get("/pieces");
  CHECK(pieces.status == 201);
  CHECK(pieces.body == "ok");
  const http_reply cr = client.get("/cr-then-lf");
  CHECK(cr.status == 202);
  CHECK(cr.body == "ok");
  CHECK(client.get("/interim-then-cr").status == 103);
  const http_reply after_interim = client.read_reply();
  CHECK(after_interim.status == 203);
  CHECK(after_interim.body == "ok");
  CHECK(client.get("/interim").status == 103);  // relayed, then the answer
  const http_reply interim = client.read_reply();
  CHECK(interim.status == 404);
  CHECK(interim.body == "no");
  // Not Beast's "<unknown-status>": RFC 8297's and RFC 9110's reasons, else none.
  const auto raw_answer = [&](const std::string& target) {
    client.send_raw("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string received;
    for (int reads = 0; reads < 10 && !received.ends_with("\r\n\r\nok"); ++reads) {
      received += client.read_some();
    }
    return received;
  };
  const std::string beyond = raw_answer("/beyond-beast");
  CHECK(beyond.rfind("HTTP/1.1 103 Early Hints\r\n", 0) == 0);
  CHECK(beyond.find("\r\n\r\nHTTP/1.1 425 Too Early\r\n") != std::string::npos);
  CHECK(raw_answer("/no-reason-known").rfind("HTTP/1.1 299 \r\n", 0) == 0);
  // The upstream connection is still in step: the next answer is the next request's.
  CHECK(client.get("/next").body == "answer to /next");
  CHECK(upstream.connections_accepted() == 1);
  SUBCASE("a line that is still no status line stays a 502") {
    const http_reply bad = client.get("/not-a-status");
    CHECK(bad.status == 502);
    CHECK(bad.body.find("ok") == std::string::npos);
  }
}

TEST_CASE("response_timeout counts from the end of the upload, not its start") {
  raw_upstream upstream(answering());
  gateway_harness gw(k_config, upstream.port());  // response_timeout: 1s
  http_client client(gw.port(), 5s);
  client.send_raw("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n");
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(300ms);  // 1.5 s in all, each gap under read_timeout
    client.send_raw("x");
  }
  auto r = client.read_reply();
  CHECK(r.status == 200);
  CHECK(r.body == "answer to /upload");
}

TEST_CASE("an upstream that answers before reading the body: its answer reaches the client") {
  raw_upstream upstream(answering_early(
      "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\nConnection: close\r\n\r\n"
      "too big\n",
      100ms));
  gateway_harness gw(
      replace_all(k_config, "body_timeout: 5s", "body_timeout: 5s\n  max_body_bytes: 64MiB"),
      upstream.port());
  http_client client(gw.port(), 2s);
  const std::size_t size = 16 * 1024 * 1024;  // more than the sockets between take at once
  client.send_raw("POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(size) +
                  "\r\n\r\n");
  client.send_raw(std::string(size, 'b'));
  auto r = client.read_reply();
  CHECK(r.status == 413);
  CHECK(r.body == "too big\n");
  CHECK_FALSE(r.keep_alive);
}

TEST_CASE("an upstream's refusal reaches a client that paused its upload, not a 408 later") {
  // The client sends part of a streamed body and waits. Only the watch that saw the refusal
  // can end the wait for the rest, well before body_timeout (5 s).
  raw_upstream upstream(answering_early(
      "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\nConnection: close\r\n\r\n"
      "too big\n",
      4s));
  gateway_harness gw(
      replace_all(k_config, "body_timeout: 5s", "body_timeout: 5s\n  max_body_bytes: 64MiB"),
      upstream.port());
  http_client client(gw.port(), 3s);
  client.send_raw("POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                  std::to_string(16 * 1024 * 1024) + "\r\n\r\n" + std::string(1000, 'b'));
  const http_reply r = client.read_reply();
  CHECK(r.status == 413);
  CHECK(r.body == "too big\n");
  CHECK_FALSE(r.keep_alive);
}

TEST_CASE("an upstream that answers early and stops reading ends the upload, not its timeout") {
  // It keeps the connection open and reads nothing more: no close, no reset ends the gateway's
  // write. Only seeing the answer does (RFC 9112 §9.3), well before the 20 s write bound.
  raw_upstream upstream(
      answering_early("HTTP/1.1 401 Unauthorized\r\nContent-Length: 7\r\n\r\nwho?\r\n\n", 4s));
  gateway_harness gw(replace_all(replace_all(k_config, "body_timeout: 5s",
                                             "body_timeout: 5s\n  max_body_bytes: 64MiB"),
                                 "read_timeout: 400ms", "read_timeout: 20s"),
                     upstream.port());
  http_client client(gw.port(), 3s);
  const std::size_t size = 16 * 1024 * 1024;
  const auto start = steady::now();
  client.send_raw("POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(size) +
                  "\r\n\r\n");
  client.send_raw(std::string(size, 'b'));
  auto r = client.read_reply();
  CHECK(r.status == 401);
  CHECK(r.body == "who?\r\n\n");
  CHECK_FALSE(r.keep_alive);
  CHECK(steady::now() - start < 3s);
  // The connection it was cut on is not reused: the next request gets a new one.
  http_client next(gw.port(), 3s);
  next.send_raw("POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi");
  CHECK(next.read_reply().status == 401);
  CHECK(upstream.connections_accepted() == 2);
}

TEST_CASE("while a body goes up, only a refusal ends it: interim answers and a 2xx do not") {
  const std::size_t size = 8 * 1024 * 1024;
  raw_upstream upstream([size](raw_upstream::connection& c) {
    const raw_request r = c.read_head();
    if (!r.ok) {
      return;
    }
    if (r.target == "/interim-in-pieces") {
      // A status line in pieces: "HTT" alone is not an answer yet.
      for (std::string_view piece : {"HTT", "P/1.1 1", "00 Cont", "inue\r\n", "\r\n"}) {
        c.write(piece);
        std::this_thread::sleep_for(30ms);
      }
    } else if (r.target == "/interim-then-refusal") {
      c.write("HTTP/1.1 100 Continue\r\n\r\n");
      std::this_thread::sleep_for(100ms);
      c.write("HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\n\r\ntoo big\n");
      std::this_thread::sleep_for(4s);  // reads nothing more, closes nothing
      return;
    } else if (r.target == "/not-a-status") {
      c.write("HTTP/1.1 1000 X\r\n\r\n");  // not 100: the fourth digit makes it no status
      std::this_thread::sleep_for(4s);
      return;
    } else if (r.target == "/duplex") {
      // Its answer starts at once and ends once it has read the whole body.
      c.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n");
    } else {
      c.write("HTTP/1.1 100 Continue\r\n\r\n");
    }
    std::this_thread::sleep_for(200ms);  // the gateway's writes now wait on a full window
    if (!c.read_until("END", 10s)) {
      return;
    }
    const std::string all = "all " + std::to_string(size) + " bytes";
    if (r.target == "/duplex") {
      char chunk_size[17];
      std::snprintf(chunk_size, sizeof chunk_size, "%zx", all.size());
      c.write(std::string(chunk_size) + "\r\n" + all + "\r\n0\r\n\r\n");
    } else {
      c.write(raw_response(all));
    }
  });
  // The writes' bound (read_timeout) is long: under a sanitizer the upstream may take longer
  // than 400 ms to read a piece, and only the watch may end these uploads early.
  gateway_harness gw(
      replace_all(replace_all(replace_all(k_config, "body_timeout: 5s",
                                          "body_timeout: 5s\n  max_body_bytes: 64MiB"),
                              "response_timeout: 1s", "response_timeout: 20s"),
                  "read_timeout: 400ms", "read_timeout: 20s"),
      upstream.port());
  http_client client(gw.port(), 30s);
  auto upload = [&](const std::string& target) {
    client.send_raw("POST " + target +
                    " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(size) + "\r\n\r\n");
    client.send_raw(std::string(size - 3, 'b') + "END");
    return client.read_reply();
  };
  const std::string all = "all " + std::to_string(size) + " bytes";

  SUBCASE("an interim response") {
    const http_reply r = upload("/interim");
    CHECK(r.status == 200);
    CHECK(r.body == all);
  }
  SUBCASE("an interim response whose status line comes in pieces") {
    const http_reply r = upload("/interim-in-pieces");
    CHECK(r.status == 200);
    CHECK(r.body == all);
  }
  SUBCASE("a 2xx answer streamed while the body is read") {
    const http_reply r = upload("/duplex");
    CHECK(r.status == 200);
    CHECK(r.body == "first" + all);
  }
  SUBCASE("bytes that are no status line end it: 502") {
    const auto start = steady::now();
    CHECK(upload("/not-a-status").status == 502);
    CHECK(steady::now() - start < 3s);
  }
  SUBCASE("a refusal after an interim response ends it") {
    const auto start = steady::now();
    const http_reply r = upload("/interim-then-refusal");
    CHECK(r.status == 413);
    CHECK(r.body == "too big\n");
    CHECK(steady::now() - start < 3s);
  }
}

TEST_CASE("an upstream's chunked trailer ends an HTTP/1.1 client's body, less what may not pass") {
  raw_upstream upstream([](raw_upstream::connection& c) {
    for (raw_request r = c.read_request(); r.ok; r = c.read_request()) {
      c.write(
          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: Server-Timing, X-Sum\r\n"
          "Connection: X-Hop\r\n\r\n5\r\nhello\r\n0\r\nServer-Timing: db;dur=53\r\n"
          "X-Hop: secret\r\nSet-Cookie: late=1\r\nX-Request-Id: forged\r\n"
          "Keep-Alive: timeout=1\r\nX-Sum: 5d41\r\n\r\n");
    }
  });
  gateway_harness gw(k_config, upstream.port());
  auto read_to_end = [](http_client& client) {
    std::string bytes;
    for (int i = 0; i < 50 && bytes.find("\r\n0\r\n") == std::string::npos; ++i) {
      bytes += client.read_some();
    }
    const std::size_t last = bytes.find("\r\n0\r\n");
    for (int i = 0; i < 50 && last != std::string::npos &&
                    bytes.find("\r\n\r\n", last + 2) == std::string::npos;
         ++i) {
      bytes += client.read_some();
    }
    return bytes;
  };

  SUBCASE("HTTP/1.1: the trailer's passing fields follow the last chunk") {
    http_client client(gw.port());
    client.send_raw("GET /t HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string bytes = read_to_end(client);
    const std::size_t last = bytes.find("\r\n0\r\n");
    REQUIRE(last != std::string::npos);
    CHECK(bytes.find("5\r\nhello\r\n") != std::string::npos);
    CHECK(bytes.substr(last + 2) == "0\r\nServer-Timing: db;dur=53\r\nX-Sum: 5d41\r\n\r\n");
    // The connection goes on: the next response is whole.
    client.send_raw("GET /again HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(read_to_end(client).find("X-Sum: 5d41\r\n\r\n") != std::string::npos);
  }
  SUBCASE("HTTP/1.0: a body ended by the close, and no trailer") {
    http_client client(gw.port());
    client.send_raw("GET /t HTTP/1.0\r\nHost: x\r\n\r\n");
    const std::string bytes = client.read_until_closed();
    CHECK(bytes.size() >= 5);
    CHECK(bytes.substr(bytes.size() - 9) == "\r\n\r\nhello");
    CHECK(bytes.find("Server-Timing") == std::string::npos);
  }
}

TEST_CASE("an expectation other than 100-continue: 417 at once") {
  raw_upstream upstream(answering());
  gateway_harness gw(k_config, upstream.port());
  // One field, or 100-continue beside another in a second field (a list: not 100-continue
  // alone, and the upstream would see both).
  for (const std::string expect :
       {"Expect: something\r\n", "Expect: 100-continue\r\nExpect: something\r\n",
        "Expect: 100-continue\r\nExpect: 100-continue\r\n"}) {
    CAPTURE(expect);
    http_client client(gw.port(), 2s);
    client.send_raw("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n" + expect + "\r\n");
    auto r = client.read_reply();
    CHECK(r.status == 417);
    CHECK(client.closed_by_peer());
  }
  CHECK(upstream.connections_accepted() == 0);
}

TEST_CASE("a body unreadable in the head's own read is a 502: nothing had reached the client") {
  raw_upstream upstream(answering([](raw_upstream::connection& c, const raw_request& r) {
    if (r.target == "/bad-chunk") {
      c.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n");
      return true;
    }
    if (r.target == "/bad-trailer") {
      c.write(
          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n"
          "Content-Length: 5\r\n\r\n");
      return true;
    }
    return false;
  }));
  gateway_harness gw(k_config, upstream.port());
  for (std::string target : {"/bad-chunk", "/bad-trailer"}) {
    CAPTURE(target);
    http_client client(gw.port(), 3s);
    const http_reply r = client.get(target);
    CHECK(r.status == 502);
    CHECK(r.header("content-type") == "application/problem+json");
    // The client's connection is still good for its next request.
    CHECK(client.get("/next").body == "answer to /next");
  }
}
