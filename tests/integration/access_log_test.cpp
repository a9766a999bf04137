// The access log through the gateway (issue 13, item 5 in part): every answer has its line,
// the gateway's own too, with host, plan, user agent, upstream and the client's address as
// log.client_address says; nothing in clear that identifies the client.

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/eventually.hpp"
#include "support/gateway_harness.hpp"
#include "support/http_client.hpp"
#include "support/raw_upstream.hpp"
#include "support/test_upstream.hpp"
#include "support/time_scale.hpp"

using namespace ratewall::testing;
using nlohmann::json;

namespace {

const std::string k_config = R"(
server:
  max_header_bytes: 1024
log:
  access: ${LOG}
  client_address: ${CLIENT}
plans: { premium: {} }
api_keys:
  - { key: premium-key, plan: premium }
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
  - name: api
    match: { path_prefix: /api }
    upstream: api
    identify_by: [api_key, header:X-Tenant, ip]
    limits: [{ name: l, rate: 100/s }]
)";

struct log_dir {
  log_dir() {
    char tmpl[] = "/tmp/ratewall-access-it-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~log_dir() { std::filesystem::remove_all(path); }
  std::vector<json> lines() const {
    std::ifstream in(path + "/access.log");
    std::vector<json> out;
    for (std::string line; std::getline(in, line);) {
      out.push_back(json::parse(line));
    }
    return out;
  }
  std::string text() const {
    std::ifstream in(path + "/access.log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::string path;
};

std::string config_for(const log_dir& dir, const std::string& client) {
  std::string yaml = replace_all(k_config, "${LOG}", dir.path + "/access.log");
  return replace_all(yaml, "${CLIENT}", client);
}

}  // namespace

TEST_CASE("every answer has its line, the gateway's own included; the client is hashed") {
  log_dir dir;
  test_upstream upstream;
  gateway_harness gw(config_for(dir, "hashed"), upstream.port());

  http_client client(gw.port());
  REQUIRE(
      client.get("/api/a", {{"X-API-Key", "premium-key"}, {"User-Agent", "probe/1.0"}}).status ==
      200);
  REQUIRE(client.get("/nowhere").status == 404);
  REQUIRE(client.get("/api/b", {{"X-Tenant", "a"}, {"X-Tenant", "b"}}).status == 400);
  http_client big(gw.port());
  REQUIRE(big.get("/api/c", {{"X-Big", std::string(2000, 'x')}}).status == 431);
  http_client garbage(gw.port());
  garbage.send_raw("NOT HTTP\r\n\r\n");
  REQUIRE(garbage.read_reply().status == 400);

  REQUIRE(eventually([&] { return dir.lines().size() >= 5; }));
  const auto lines = dir.lines();
  REQUIRE(lines.size() == 5);
  // Each worker thread writes its own lines: find them by what they say, not by order.
  auto line = [&](int status, bool has_path) {
    for (const json& l : lines) {
      if (l["status"] == status && l["path"].is_null() != has_path) {
        return l;
      }
    }
    FAIL("no line with status " << status);
    return json();
  };
  const json ok = line(200, true);
  CHECK(ok["host"] == "localhost");  // the test client's Host, without port
  CHECK(ok["plan"] == "premium");
  CHECK(ok["user_agent"] == "probe/1.0");
  CHECK(ok["upstream"] == "127.0.0.1:" + std::to_string(upstream.port()));
  CHECK(ok["client"].get<std::string>().size() == 16);
  CHECK(line(404, true)["upstream"].is_null());
  CHECK(line(400, true)["decision"] == "error");
  CHECK(line(400, true)["path"] == "/api/b");
  // Heads the gateway could not read: a line each, without method or path.
  CHECK(line(431, false)["method"].is_null());
  CHECK(line(400, false)["decision"] == "error");
  for (const json& l : lines) {
    CHECK(l["client"] == ok["client"]);  // one client, one hash, on every line
  }
  const std::string text = dir.text();
  CHECK(text.find("premium-key") == std::string::npos);
  CHECK(text.find("\"a\"") == std::string::npos);  // nor the tenant header's values
}

TEST_CASE("log.client_address: raw writes the address, off writes null") {
  for (const std::string mode : {"raw", "off"}) {
    CAPTURE(mode);
    log_dir dir;
    test_upstream upstream;
    gateway_harness gw(config_for(dir, mode), upstream.port());
    http_client client(gw.port());
    REQUIRE(client.get("/api/a").status == 200);
    REQUIRE(eventually([&] { return dir.lines().size() == 1; }));
    const json line = dir.lines().front();
    if (mode == "raw") {
      CHECK(line["client"] == "127.0.0.1");
    } else {
      CHECK(line["client"].is_null());
    }
  }
}

TEST_CASE(
    "a response or tunnel a drain cuts off logs the bytes it carried, not 0, though it never "
    "ends") {
  using namespace std::chrono_literals;
  log_dir dir;
  // /stream: 4000 of a promised 1000000 body bytes, then nothing. /tunnel: a 101, then 500
  // bytes, and whatever the client sends taken in silence.
  raw_upstream upstream([](raw_upstream::connection& c) {
    const raw_request r = c.read_head();
    if (!r.ok) {
      return;
    }
    const bool tunnel = r.target == "/api/tunnel";
    const bool wrote = tunnel ? c.write(
                                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                    "Connection: upgrade\r\n\r\n" +
                                    std::string(500, 't'))
                              : c.write("HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" +
                                        std::string(4000, 's'));
    if (wrote) {
      c.read_until("never sent", 20s);  // holds the connection until the gateway closes it
    }
  });
  std::optional<gateway_harness> gw;
  gw.emplace(config_for(dir, "hashed"), upstream.port());
  http_client streamed(gw->port(), 5s);
  streamed.send_raw("GET /api/stream HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string got;
  while (got.find(std::string(4000, 's')) == std::string::npos) {
    const std::string piece = streamed.read_some();
    REQUIRE(!piece.empty());
    got += piece;
  }
  http_client tunneled(gw->port(), 5s);
  tunneled.send_raw(
      "GET /api/tunnel HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n"
      "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
  got.clear();
  while (got.find(std::string(500, 't')) == std::string::npos) {
    const std::string piece = tunneled.read_some();
    REQUIRE(!piece.empty());
    got += piece;
  }
  tunneled.send_raw(std::string(300, 'c'));
  std::this_thread::sleep_for(scaled(100ms));  // the 300 bytes reach the upstream

  CHECK_FALSE(gw->drain(scaled(300ms)));  // neither ends: both are cut off
  gw.reset();
  const auto lines = dir.lines();
  REQUIRE(lines.size() == 2);
  for (const json& l : lines) {
    CAPTURE(l.dump());
    if (l["path"] == "/api/stream") {
      CHECK(l["bytes_out"] == 4000);
    } else {
      CHECK(l["path"] == "/api/tunnel");
      CHECK(l["status"] == 101);
      CHECK(l["bytes_in"] == 300);
      CHECK(l["bytes_out"] == 500);
    }
  }
}
