#include <doctest/doctest.h>

#include <boost/beast/http.hpp>

#include "head_fixtures.hpp"
#include "ratewall/proxy/http_head.hpp"

using namespace ratewall;
using ratewall::testing::parse_head;
namespace http = boost::beast::http;

namespace {

http::request<http::empty_body, ratewall::fields> request_with(
    std::initializer_list<std::pair<const char*, const char*>> fields) {
  http::request<http::empty_body, ratewall::fields> req{http::verb::post, "/v1/items?x=1", 10};
  for (auto [name, value] : fields) {
    req.insert(name, value);
  }
  return req;
}

}  // namespace

TEST_CASE("the upstream request: HTTP/1.1, hop-by-hop fields out, forwarding fields in") {
  auto req = request_with({{"Host", "api.example"},
                           {"Connection", "keep-alive, X-Secret"},
                           {"X-Secret", "hop"},
                           {"Keep-Alive", "timeout=5"},
                           {"Proxy-Connection", "keep-alive"},
                           {"Proxy-Authorization", "Basic Zm9v"},
                           {"TE", "trailers"},
                           {"Upgrade", "websocket"},
                           {"Expect", "100-continue"},
                           {"X-Forwarded-For", "6.6.6.6"},
                           {"X-Request-Id", "theirs"},
                           {"Transfer-Encoding", "chunked"},
                           {"Accept", "*/*"}});
  std::string out;
  write_upstream_request_head(
      req.base(), body_framing::chunked, 0,
      {"/v1/items?x=1", "api.example", "10.0.0.1", "https", "api.example", "rid-1", ""}, out);
  CHECK(out ==
        "POST /v1/items?x=1 HTTP/1.1\r\n"
        "Host: api.example\r\n"
        "Accept: */*\r\n"
        "X-Forwarded-For: 10.0.0.1\r\n"
        "X-Forwarded-Proto: https\r\n"
        "X-Forwarded-Host: api.example\r\n"
        "X-Request-Id: rid-1\r\n"
        "Transfer-Encoding: chunked\r\n"
        "\r\n");
}

TEST_CASE("the upstream request: no client claim passes under the gateway's fields' names") {
  // Each row: a field a client sends, and whether it reaches the upstream from a peer that is
  // not a trusted proxy, and from one that is.
  struct row {
    const char* name;
    bool untrusted;
    bool trusted;
  };
  const row rows[] = {
      {"X-Forwarded-For", false, false},  // replaced (session.cpp extends a trusted chain)
      {"X_Forwarded_For", false, false},  // HTTP_X_FORWARDED_FOR to a WSGI or CGI server
      {"x_forwarded_for", false, false},
      {"X-Forwarded_For", false, false},
      {"X_FORWARDED_PROTO", false, false},
      {"X_Forwarded_Host", false, false},
      {"X_Request_Id", false, false},
      {"Content_Length", false, false},  // beside the gateway's own framing, never
      {"transfer_encoding", false, false},
      {"Forwarded", false, true},  // RFC 7239: a claim, from a trusted proxy only
      {"forwarded", false, true},
      {"X-Real-IP", false, true},
      {"X_Real_IP", false, true},
      // An address under the names frameworks and libraries read one (Express's request-ip,
      // PHP's HTTP_CLIENT_IP), how the client reached the proxy, the URL it "really" asked for.
      {"X-Client-IP", false, true},
      {"Client-IP", false, true},
      {"True-Client-IP", false, true},
      {"CF-Connecting-IP", false, true},
      {"Fastly-Client-IP", false, true},
      {"X-Cluster-Client-IP", false, true},
      {"X_Cluster_Client_IP", false, true},
      {"X-Forwarded", false, true},
      {"X-Forwarded-Port", false, true},
      {"X-Forwarded-Prefix", false, true},
      {"X-Forwarded-Server", false, true},
      {"X-Forwarded-Uri", false, true},   // Traefik's: the URL the proxy was asked for
      {"X-Forwarded-Path", false, true},  // Kong's
      {"X-Host", false, true},
      {"X-Forwarded-Protocol", false, true},  // Gunicorn's and Echo's scheme
      {"X-Scheme", false, true},              // Tornado's
      {"X-Proxied-Https", false, true},       // Jetty's
      {"X-AppEngine-Remote-Addr", false, true},
      {"Fly-Client-IP", false, true},
      {"X-Azure-ClientIP", false, true},
      {"X-Azure-SocketIP", false, true},
      // Gunicorn cuts a SCRIPT_NAME field's value off the front of the path the application
      // routes on: /public/admin with SCRIPT_NAME /public runs as /admin.
      {"SCRIPT_NAME", false, true},
      {"Script-Name", false, true},
      {"PATH_INFO", false, true},
      {"Sec-Fetch-Mode", true, true},  // a browser's, not a claim
      {"X-Forwarded-Scheme", false, true},
      {"X-Forwarded-Ssl", false, true},
      {"X-Url-Scheme", false, true},
      {"Front-End-Https", false, true},
      {"Proxy-Client-IP", false, true},
      {"WL-Proxy-Client-IP", false, true},
      {"Forwarded-For", false, true},             // PHP's HTTP_FORWARDED_FOR
      {"X-Original-Forwarded-For", false, true},  // ingress-nginx
      {"X-AppEngine-User-IP", false, true},
      {"CF-Pseudo-IPv4", false, true},
      {"X-ProxyUser-IP", false, true},
      {"X-Envoy-External-Address", false, true},
      // Who the client is (identity.user_header), as a trusted proxy tells it.
      {"X-User-ID", false, true},
      {"x_user_id", false, true},
      {"X-User-IDs", true, true},
      // A URL other than the one routed and priced: from no one, a trusted proxy included.
      {"X-Original-URL", false, false},
      {"x-rewrite-url", false, false},
      {"X-Original-URI", false, false},  // nginx's name for the same
      {"X_Original_URI", false, false},
      {"X-Client", true, true},
      {"X-Forwarded-Fort", true, true},  // another name
      {"X__Forwarded-For", true, true},
      {"X_Api_Key", true, true},  // underscores alone are not refused
  };
  for (const row& r : rows) {
    for (const bool trusted : {false, true}) {
      const std::string_view name = r.name;
      CAPTURE(name);
      CAPTURE(trusted);
      auto req = request_with({{"Host", "api.example"}, {r.name, "6.6.6.6"}});
      std::string out;
      forwarding_headers fwd{"/", "api.example", "10.0.0.1", "http", "", "rid-1", ""};
      fwd.peer_trusted = trusted;
      fwd.user_header = "X-User-ID";
      write_upstream_request_head(req.base(), body_framing::none, 0, fwd, out);
      CHECK((out.find(std::string(r.name) + ": 6.6.6.6") != std::string::npos) ==
            (trusted ? r.trusted : r.untrusted));
      CHECK(out.find("6.6.6.6") == out.rfind("6.6.6.6"));
      CHECK(out.find("X-Forwarded-For: 10.0.0.1\r\n") != std::string::npos);
    }
  }
}

TEST_CASE("every field Connection names stays on its hop, however many it names") {
  // Forty options over two Connection fields, in either case: the 17th onwards once went through.
  auto option = [](int i) { return (i % 2 ? "x-HOP-" : "X-Hop-") + std::to_string(i); };
  std::string first = "keep-alive";
  std::string second = option(21);
  for (int i = 1; i <= 20; ++i) {
    first += ", " + option(i);
    second += ", " + option(21 + i);  // to 41, which no field has
  }
  http::request<http::empty_body, ratewall::fields> req{http::verb::get, "/", 11};
  req.insert(http::field::connection, first);
  req.insert(http::field::connection, second);
  std::string head =
      "HTTP/1.1 200 OK\r\nConnection: " + first + "\r\nConnection: " + second + "\r\n";
  for (int i = 1; i <= 42; ++i) {
    req.insert("X-Hop-" + std::to_string(i), "v");
    head += "X-Hop-" + std::to_string(i) + ": v\r\n";
  }
  head += "Content-Length: 0\r\n\r\n";

  std::string out;
  write_upstream_request_head(req.base(), body_framing::none, 0,
                              {"/", "h", "10.0.0.1", "http", "", "rid", ""}, out);
  CHECK(out.find("X-Hop-1:") == std::string::npos);
  CHECK(out.find("X-Hop-17:") == std::string::npos);
  CHECK(out.find("X-Hop-40:") == std::string::npos);
  CHECK(out.find("X-Hop-42: v\r\n") != std::string::npos);  // named by neither

  upstream_response res;
  parse_head(res, head);
  out.clear();
  write_client_response_head(res, 11, true, body_framing::length, 0, {}, out);
  CHECK(out.find("X-Hop-1:") == std::string::npos);
  CHECK(out.find("X-Hop-17:") == std::string::npos);
  CHECK(out.find("X-Hop-40:") == std::string::npos);
  CHECK(out.find("X-Hop-42: v\r\n") != std::string::npos);
}

TEST_CASE("the upstream request carries the body length it was given") {
  auto req = request_with({{"Content-Length", "999"}});
  std::string out;
  write_upstream_request_head(req.base(), body_framing::length, 12,
                              {"/v1/items?x=1", "", "1.2.3.4", "http", "", "r", ""}, out);
  CHECK(out.find("Content-Length: 12\r\n") != std::string::npos);
  CHECK(out.find("999") == std::string::npos);
  CHECK(out.find("X-Forwarded-Host") == std::string::npos);  // none given, none sent
}

TEST_CASE("the client response: gateway headers replace the upstream's, framing is ours") {
  upstream_response res;
  parse_head(res,
             "HTTP/1.1 200 OK\r\n"
             "Content-Type: application/json\r\n"
             "X-RateLimit-Limit: upstream-value\r\n"
             "Connection: X-Internal\r\n"
             "X-Internal: hop\r\n"
             "Transfer-Encoding: chunked\r\n"
             "\r\n");
  header_list extra{{"X-Request-Id", "rid"}, {"X-RateLimit-Limit", "10"}};

  SUBCASE("HTTP/1.1, kept alive, chunked") {
    std::string out;
    write_client_response_head(res, 11, true, body_framing::chunked, 0, extra, out);
    CHECK(out ==
          "HTTP/1.1 200 OK\r\n"
          "Content-Type: application/json\r\n"
          "X-Request-Id: rid\r\n"
          "X-RateLimit-Limit: 10\r\n"
          "Transfer-Encoding: chunked\r\n"
          "\r\n");
  }
  SUBCASE("HTTP/1.1, closing, with a length") {
    std::string out;
    write_client_response_head(res, 11, false, body_framing::length, 42, {}, out);
    CHECK(out.find("Content-Length: 42\r\nConnection: close\r\n\r\n") != std::string::npos);
  }
  SUBCASE("HTTP/1.0 kept alive says so; a body ended by close has no framing field") {
    // The status line says HTTP/1.1 (RFC 9110 §6.2, as nginx), so a close is said too.
    std::string out;
    write_client_response_head(res, 10, true, body_framing::length, 3, {}, out);
    CHECK(out.starts_with("HTTP/1.1 200 OK\r\n"));
    CHECK(out.find("Connection: keep-alive\r\n") != std::string::npos);
    out.clear();
    write_client_response_head(res, 10, false, body_framing::until_close, 0, {}, out);
    CHECK(out.starts_with("HTTP/1.1 200 OK\r\n"));
    CHECK(out.find("Transfer-Encoding") == std::string::npos);
    CHECK(out.find("Content-Length") == std::string::npos);
    CHECK(out.find("Connection: close\r\n") != std::string::npos);
  }
}

TEST_CASE("an upstream's own reason phrase is kept; a missing one is filled in") {
  upstream_response res;
  parse_head(res, "HTTP/1.1 404 Nope\r\nContent-Length: 0\r\n\r\n");
  std::string out;
  write_client_response_head(res, 11, true, body_framing::none, 0, {}, out);
  CHECK(out.starts_with("HTTP/1.1 404 Nope\r\n"));
  upstream_response bare;
  parse_head(bare, "HTTP/1.1 429 \r\nContent-Length: 0\r\n\r\n");
  out.clear();
  write_client_response_head(bare, 11, true, body_framing::none, 0, {}, out);
  CHECK(out.starts_with("HTTP/1.1 429 Too Many Requests\r\n"));
}

TEST_CASE("chunk size lines are hex with CRLF") {
  char line[18];
  CHECK(std::string_view(line, chunk_size_line(0x1a2b, line)) == "1a2b\r\n");
  CHECK(std::string_view(line, chunk_size_line(1, line)) == "1\r\n");
  CHECK(std::string_view(line, chunk_size_line(16384, line)) == "4000\r\n");
}

TEST_CASE("a response of the gateway's own: status, Server, extra fields, type, length") {
  header_list extra{{"X-Request-Id", "rid"}, {"Retry-After", "2"}};
  std::string out;
  write_local_response_head(429, 11, true, "application/problem+json", 57, extra, out);
  CHECK(out ==
        "HTTP/1.1 429 Too Many Requests\r\n"
        "Server: ratewall\r\n"
        "X-Request-Id: rid\r\n"
        "Retry-After: 2\r\n"
        "Content-Type: application/problem+json\r\n"
        "Content-Length: 57\r\n"
        "\r\n");
  out.clear();
  write_local_response_head(400, 10, false, "", 0, {}, out);
  CHECK(out ==
        "HTTP/1.1 400 Bad Request\r\nServer: ratewall\r\nContent-Length: 0\r\nConnection: "
        "close\r\n\r\n");
}

TEST_CASE("the upstream request uses the canonical target and host it was given") {
  // An absolute-form target: its authority replaces Host, its path is the canonical one.
  http::request<http::empty_body, ratewall::fields> req{http::verb::get, "http://a.example/x/../y",
                                                        11};
  req.insert("Host", "b.example");
  std::string out;
  write_upstream_request_head(req.base(), body_framing::none, 0,
                              {"/y", "a.example", "1.2.3.4", "http", "a.example", "r", ""}, out);
  CHECK(out.rfind("GET /y HTTP/1.1\r\nHost: a.example\r\n", 0) == 0);
  CHECK(out.find("b.example") == std::string::npos);
}

TEST_CASE("an upgrade: the protocols asked for, never h2c, forwarded with Connection: upgrade") {
  auto http11 = [](auto req) {
    req.version(11);
    return req;
  };
  auto ws = http11(request_with({{"Connection", "keep-alive, Upgrade"}, {"Upgrade", "websocket"}}));
  CHECK(upgrade_protocols(ws.base()) == "websocket");
  auto several =
      http11(request_with({{"Connection", "upgrade"}, {"Upgrade", "h2c, foo/2 ,H2C/1, bar"}}));
  CHECK(upgrade_protocols(several.base()) == "foo/2, bar");
  auto h2c = http11(request_with({{"Connection", "Upgrade"}, {"Upgrade", "h2c"}}));
  CHECK(upgrade_protocols(h2c.base()) == "");
  // Connection must name it: a stray Upgrade field asks for nothing.
  CHECK(upgrade_protocols(http11(request_with({{"Upgrade", "websocket"}})).base()) == "");
  // HTTP/1.0 has no upgrade.
  auto old = request_with({{"Connection", "upgrade"}, {"Upgrade", "websocket"}});
  CHECK(upgrade_protocols(old.base()) == "");

  std::string out;
  write_upstream_request_head(ws.base(), body_framing::none, 0,
                              {"/chat", "a", "1.2.3.4", "http", "", "r", "websocket"}, out);
  CHECK(out.find("\r\nConnection: upgrade\r\nUpgrade: websocket\r\n") != std::string::npos);
  CHECK(out.find("keep-alive") == std::string::npos);
}

TEST_CASE("a 101 switches to what was asked: named, each protocol one the client offered") {
  const auto switches = [](std::string_view upgrade_fields, std::string_view asked) {
    upstream_response res;
    parse_head(res, "HTTP/1.1 101 Switching Protocols\r\n" + std::string(upgrade_fields) +
                        "Connection: upgrade\r\n\r\n");
    return switches_to_asked(res, asked);
  };
  CHECK(switches("Upgrade: websocket\r\n", "websocket"));
  CHECK(switches("Upgrade: WebSocket\r\n", "websocket"));  // names compare in any case
  CHECK(switches("Upgrade: foo/2\r\n", "foo, bar/1"));     // by name: the version aside
  CHECK(switches("Upgrade: bar\r\nUpgrade: foo\r\n", "foo, bar"));
  CHECK_FALSE(switches("", "websocket"));  // no Upgrade: nothing named
  CHECK_FALSE(switches("Upgrade: \r\n", "websocket"));
  CHECK_FALSE(switches("Upgrade: h2c\r\n", "websocket"));  // never offered
  CHECK_FALSE(switches("Upgrade: websocket, h2c\r\n", "websocket"));
  CHECK_FALSE(switches("Upgrade: websocketx\r\n", "websocket"));
}

TEST_CASE("a 101 as the client gets it: the upstream's fields, extra, then the upgrade") {
  upstream_response res;
  parse_head(res,
             "HTTP/1.1 101 Switching Protocols\r\n"
             "Upgrade: websocket\r\n"
             "Connection: Upgrade, X-Hop\r\n"
             "X-Hop: gone\r\n"
             "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
             "X-Request-Id: upstream's\r\n"
             "\r\n");
  std::string out;
  write_switching_response_head(res, {{"X-Request-Id", "rid"}}, out);
  CHECK(out ==
        "HTTP/1.1 101 Switching Protocols\r\n"
        "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
        "X-Request-Id: rid\r\n"
        "Connection: upgrade\r\n"
        "Upgrade: websocket\r\n"
        "\r\n");
}
