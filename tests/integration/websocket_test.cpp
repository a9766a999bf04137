// WebSocket, and any Upgrade, through the gateway (DESIGN §7): Boost.Beast's WebSocket client
// and server on either side of a real gateway. Admission happens before any upgrade; on the
// upstream's 101 the two connections are spliced both ways; a concurrency slot is held for the
// life of the tunnel.

#include <doctest/doctest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "ratewall/admin/metrics.hpp"
#include "support/bounded.hpp"
#include "support/eventually.hpp"
#include "support/gateway_harness.hpp"
#include "support/http_client.hpp"
#include "support/raw_upstream.hpp"
#include "support/test_upstream.hpp"
#include "support/time_scale.hpp"
#include "support/websocket_upstream.hpp"

using namespace ratewall::testing;
using namespace std::chrono_literals;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

namespace {

// The idle timeout, and a gap of traffic well inside it, times the sanitizer stage's slowdown.
const auto k_idle_timeout = scaled(600ms);
const auto k_traffic_gap = scaled(300ms);

std::string millis(std::chrono::nanoseconds d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + "ms";
}

const std::string k_config = R"(
server:
  threads: 2
  tunnel_idle_timeout: )" + millis(k_idle_timeout) +
                             R"(
identity:
  unknown_api_key: allow
upstreams:
  ws: { targets: [${UPSTREAM}] }
routes:
  - name: bursty
    match: { path_prefix: /burst }
    upstream: ws
    limits: [{ name: handshakes, rate: 1/h, burst: 2 }]
  - name: single
    match: { path_prefix: /single }
    upstream: ws
    limits: [{ name: open, algorithm: concurrency, limit: 1 }]
  - name: open
    match: { path_prefix: / }
    upstream: ws
)";

/// A WebSocket client whose every operation is bounded (10 s): a test can fail, never hang.
struct ws_client {
  asio::io_context ioc;
  websocket::stream<tcp::socket> ws{ioc};
  websocket::response_type response;

  /// The handshake; its error (upgrade_declined for a non-101 answer, which is in `response`).
  beast::error_code open(std::uint16_t port, const std::string& target) {
    beast::error_code ec;
    ws.next_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
    if (ec) {
      return ec;
    }
    ws.read_message_max(16 * 1024 * 1024);
    return bounded([&](auto done) { ws.async_handshake(response, "127.0.0.1", target, done); });
  }

  beast::error_code read(beast::flat_buffer& in) {
    return bounded([&](auto done) { ws.async_read(in, done); });
  }

  /// The close handshake: our close frame, the peer's, then the end of the connection.
  beast::error_code close() {
    return bounded([&](auto done) { ws.async_close(websocket::close_code::normal, done); });
  }

  /// Sends `message` (text or binary) and returns the echo, with its type.
  std::pair<std::string, bool> echo(const std::string& message, bool text) {
    ws.text(text);
    if (bounded([&](auto done) { ws.async_write(asio::buffer(message), done); })) {
      return {"(write failed)", false};
    }
    beast::flat_buffer in;
    if (read(in)) {
      return {"(read failed)", false};
    }
    return {beast::buffers_to_string(in.data()), ws.got_text()};
  }

 private:
  /// Runs the operation `start` begins for at most 10 s; past that the connection is closed.
  template <class Start>
  beast::error_code bounded(Start start) {
    return ratewall::testing::bounded(ioc, start, [this] {
      beast::error_code ignored;
      ws.next_layer().close(ignored);
    });
  }
};

}  // namespace

TEST_CASE("WebSocket through the gateway: text and binary echo, 1 MiB, the close handshake") {
  websocket_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  auto& metrics = ratewall::process_metrics();
  const auto tunnels_before = metrics.open_tunnels();
  {
    ws_client client;
    REQUIRE(client.open(gw.port(), "/chat") == beast::error_code{});
    CHECK(client.response.result_int() == 101);
    CHECK(client.response["X-Request-Id"] != "");
    CHECK(eventually([&] { return metrics.open_tunnels() == tunnels_before + 1; }));

    CHECK(client.echo("hello", true) == std::pair<std::string, bool>{"hello", true});
    const std::string binary("\x00\x01\xff\xfe rest", 9);
    CHECK(client.echo(binary, false) == std::pair<std::string, bool>{binary, false});
    std::string large(1024 * 1024, '\0');
    for (std::size_t i = 0; i < large.size(); ++i) {
      large[i] = static_cast<char>(i * 7 % 251);
    }
    CHECK(client.echo(large, false) == std::pair<std::string, bool>{large, false});

    // The close handshake: Beast sends its close frame, reads until the upstream's, and then
    // waits for the connection to end.
    CHECK_FALSE(client.close());
    CHECK_FALSE(client.ws.is_open());
  }
  CHECK(eventually([&] { return upstream.open_sessions() == 0; }));
  CHECK(eventually([&] { return metrics.open_tunnels() == tunnels_before; }));

  // The upstream got the upgrade asked for, and the gateway's own fields.
  const auto heads = upstream.heads();
  REQUIRE(heads.size() == 1);
  CHECK(heads[0].find("Upgrade: websocket") != std::string::npos);
  CHECK(heads[0].find("Connection: upgrade") != std::string::npos);
  CHECK(heads[0].find("Sec-WebSocket-Key:") != std::string::npos);
  CHECK(heads[0].find("X-Forwarded-For: 127.0.0.1") != std::string::npos);
}

TEST_CASE("WebSocket: admission comes first, the third handshake of a burst-2 client gets 429") {
  websocket_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  ws_client first, second, third;
  CHECK(first.open(gw.port(), "/burst") == beast::error_code{});
  CHECK(second.open(gw.port(), "/burst") == beast::error_code{});
  CHECK(third.open(gw.port(), "/burst") == websocket::error::upgrade_declined);
  CHECK(third.response.result_int() == 429);
  CHECK(third.response["Retry-After"] != "");
  // The upstream counts a handshake after its 101 is written: the client may have it first.
  CHECK(eventually([&] { return upstream.upgraded() == 2; }));
  CHECK(first.echo("still open", true).first == "still open");
}

TEST_CASE("WebSocket: a concurrency slot is held for the life of the tunnel") {
  websocket_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  auto first = std::make_unique<ws_client>();
  REQUIRE(first->open(gw.port(), "/single") == beast::error_code{});
  {
    ws_client refused;
    CHECK(refused.open(gw.port(), "/single") == websocket::error::upgrade_declined);
    CHECK(refused.response.result_int() == 429);
  }
  CHECK_FALSE(first->close());
  first.reset();
  // The slot comes back when the tunnel ends, which may take the gateway a moment to see.
  bool admitted = eventually(
      [&] {
        ws_client next;
        if (next.open(gw.port(), "/single")) {
          return false;
        }
        CHECK(next.echo("second", true).first == "second");
        return true;
      },
      3s);
  CHECK(admitted);
}

TEST_CASE("an upgrade the upstream declines is relayed as a normal response") {
  websocket_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port(), 5s);
  auto reply = client.get("/refuse", {{"Connection", "Upgrade"},
                                      {"Upgrade", "websocket"},
                                      {"Sec-WebSocket-Version", "13"},
                                      {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}});
  CHECK(reply.status == 403);
  CHECK(reply.body == "no upgrade here");
  CHECK(reply.keep_alive);
  // The connection is still plain HTTP, and usable.
  CHECK(client.get("/plain").body == "plain");
}

TEST_CASE("Upgrade: h2c is never forwarded; other protocols are, without it") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  http_client client(gw.port(), 5s);
  auto reply = client.get("/h2c", {{"Connection", "Upgrade, HTTP2-Settings"},
                                   {"Upgrade", "h2c"},
                                   {"HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA"}});
  CHECK(reply.status == 200);
  auto requests = upstream.requests();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0].header("upgrade") == "");
  CHECK(requests[0].header("http2-settings") == "");
  CHECK(requests[0].header("connection") != "upgrade");

  // A request without Connection: upgrade asks for nothing: its Upgrade is not forwarded.
  client.get("/stray", {{"Upgrade", "websocket"}});
  requests = upstream.requests();
  REQUIRE(requests.size() == 2);
  CHECK(requests[1].header("upgrade") == "");
}

TEST_CASE("a drain leaves tunnels open for drain_timeout, then closes them") {
  websocket_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  ws_client client;
  REQUIRE(client.open(gw.port(), "/long") == beast::error_code{});
  const auto drain_timeout = scaled(500ms);
  const auto start = std::chrono::steady_clock::now();
  std::thread draining([&] { CHECK_FALSE(gw.drain(drain_timeout)); });
  std::this_thread::sleep_for(drain_timeout / 5);
  CHECK(client.echo("still served while draining", true).first == "still served while draining");
  beast::flat_buffer in;
  CHECK(client.read(in));  // an error: the drain ended the tunnel
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited >= drain_timeout - 50ms);
  CHECK(waited < drain_timeout + scaled(4500ms));
  draining.join();
}

TEST_CASE("a tunnel with no bytes either way for tunnel_idle_timeout is closed") {
  websocket_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  ws_client client;
  REQUIRE(client.open(gw.port(), "/quiet") == beast::error_code{});
  CHECK(client.echo("one", true).first == "one");
  // Traffic keeps it open past the timeout ...
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(k_traffic_gap);
    CHECK(client.echo("tick", true).first == "tick");
  }
  // ... silence does not.
  const auto start = std::chrono::steady_clock::now();
  beast::flat_buffer in;
  CHECK(client.read(in));  // an error: the gateway closed the tunnel
  CHECK(std::chrono::steady_clock::now() - start < k_idle_timeout + scaled(4400ms));
  CHECK(eventually([&] { return upstream.open_sessions() == 0; }));
}

TEST_CASE("a tunnel write its reader does not take is cut after idle_timeout, however busy") {
  // The upstream pours bytes the client never reads, while the client sends one byte every
  // k_traffic_gap: the tunnel is never idle, but its write to the client is stuck. Each write
  // either way must finish within server.idle_timeout, as a response's must.
  const auto write_timeout = scaled(1s);
  raw_upstream upstream([](raw_upstream::connection& c) {
    if (!c.read_head().ok || !c.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                      "Connection: upgrade\r\n\r\n")) {
      return;
    }
    // Until the gateway stops taking them (it closes, or the test ends and closes it).
    const std::string chunk(64 * 1024, 'x');
    for (int i = 0; i < 4096 && c.write(chunk); ++i) {
    }
  });
  gateway_harness gw(R"(
server:
  threads: 1
  idle_timeout: )" + millis(write_timeout) +
                         R"(
  tunnel_idle_timeout: )" +
                         millis(k_idle_timeout) + R"(
upstreams:
  ws: { targets: [${UPSTREAM}] }
routes:
  - name: open
    match: { path_prefix: / }
    upstream: ws
)",
                     upstream.port());
  auto& metrics = ratewall::process_metrics();
  const auto tunnels_before = metrics.open_tunnels();
  http_client client(gw.port());
  client.send_raw(
      "GET /pour HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n");
  REQUIRE(eventually([&] { return metrics.open_tunnels() == tunnels_before + 1; }));
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  for (int i = 0; i < 40 && !closed; ++i) {
    std::this_thread::sleep_for(k_traffic_gap);
    client.send_raw("x");  // (an error once the gateway has closed: ignored)
    closed = metrics.open_tunnels() == tunnels_before;
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  MESSAGE("tunnel closed after "
          << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count() << " ms");
  CHECK(closed);
  CHECK(waited < write_timeout + scaled(4s));
}
