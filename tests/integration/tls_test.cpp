// TLS termination (DESIGN §2): real clients (curl, Python's ssl, openssl s_client, Asio's
// ssl::stream) against the TLS listener, with certificates from a test CA made for each test.
// SNI picks the certificate; a reload (and a SIGHUP to the real binary) changes it for new
// handshakes only; a handshake is bounded by header_timeout.

#include <doctest/doctest.h>

#include <csignal>
#include <fstream>
#include <future>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ratewall/admin/metrics.hpp"
#include "support/bounded.hpp"
#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/gateway_harness.hpp"
#include "support/http_client.hpp"
#include "support/raw_upstream.hpp"
#include "support/redis_server.hpp"
#include "support/test_pki.hpp"
#include "support/test_upstream.hpp"
#include "support/time_scale.hpp"
#include "support/websocket_upstream.hpp"

using namespace ratewall::testing;
using namespace std::chrono_literals;
namespace asio = boost::asio;
namespace ssl = asio::ssl;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

namespace {

// The handshake's bound (header_timeout), times the sanitizer stage's slowdown.
const auto k_header_timeout = scaled(400ms);

/// The config of a TLS listener beside the plain one, with `certificates` (YAML list items).
std::string tls_config(const std::string& certificates, const std::string& extra_tls = "") {
  return R"(
server:
  threads: 2
  header_timeout: )" +
         std::to_string(std::chrono::milliseconds(k_header_timeout).count()) +
         R"(ms
  tls:
    certificates:
)" + certificates +
         extra_tls + R"(
identity:
  unknown_api_key: allow
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
  - name: all
    match: { path_prefix: / }
    upstream: api
)";
}

std::string certificate_item(const test_pki::issued& c) {
  return "      - { cert: \"" + c.cert + "\", key: \"" + c.key + "\" }\n";
}

/// Runs a program to its end (at most 20 s); its exit code and everything it printed.
struct program_result {
  int exit_code = -1;
  std::string output;
};
program_result run(std::vector<std::string> argv) {
  REQUIRE(have_program(argv[0]));
  // stdin from /dev/null: openssl s_client reads it, and must see its end at once.
  std::string line;
  for (const auto& a : argv) {
    line += "'" + a + "' ";
  }
  child_process p({"/bin/sh", "-c", line + "</dev/null"});
  program_result r;
  r.exit_code = p.wait_exit(20s);
  r.output = p.output();
  return r;
}

/// curl with the test CA, the name resolved to 127.0.0.1: body, then a line "status version".
program_result curl(const test_pki& pki, const std::string& name, std::uint16_t port,
                    const std::string& path, std::vector<std::string> extra = {}) {
  std::vector<std::string> argv{"curl",
                                "-sS",
                                "--max-time",
                                "10",
                                "--cacert",
                                pki.ca_cert(),
                                "--resolve",
                                name + ":" + std::to_string(port) + ":127.0.0.1",
                                "-w",
                                "\\n%{http_code} %{http_version}",
                                "https://" + name + ":" + std::to_string(port) + path};
  argv.insert(argv.end() - 1, extra.begin(), extra.end());
  return run(argv);
}

/// ratewall_tls_handshakes_total{result="ok"} of the process (its gateways' listeners).
std::uint64_t handshakes_ok() {
  const std::string text = ratewall::process_metrics().render();
  const std::string name = "ratewall_tls_handshakes_total{result=\"ok\"} ";
  const auto at = text.find(name);
  REQUIRE(at != std::string::npos);
  return std::stoull(text.substr(at + name.size()));
}

/// The certificate subject the server presents for `server_name` ("" for no SNI).
std::string subject_for(std::uint16_t port, const std::string& server_name) {
  std::vector<std::string> argv{"openssl", "s_client", "-connect",
                                "127.0.0.1:" + std::to_string(port)};
  if (server_name.empty()) {
    argv.push_back("-noservername");
  } else {
    argv.push_back("-servername");
    argv.push_back(server_name);
  }
  const program_result r = run(argv);
  const auto at = r.output.find("subject=");
  if (at == std::string::npos) {
    return "(no certificate)";
  }
  return r.output.substr(at, r.output.find('\n', at) - at);
}

/// A TLS client whose every operation is bounded (10 s): a test can fail, never hang.
struct tls_client {
  asio::io_context ioc;
  ssl::context ctx{ssl::context::tls_client};
  ssl::stream<tcp::socket> stream{ioc, ctx};
  beast::flat_buffer buffer;

  tls_client(const test_pki& pki, std::uint16_t port, const std::string& name) {
    ctx.load_verify_file(pki.ca_cert());
    stream.set_verify_mode(ssl::verify_peer);
    stream.set_verify_callback(ssl::host_name_verification(name));
    SSL_set_tlsext_host_name(stream.native_handle(), name.c_str());
    stream.next_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }

  beast::error_code handshake() {
    return bounded([&](auto done) { stream.async_handshake(ssl::stream_base::client, done); });
  }

  /// The common name of the certificate the server presented.
  std::string peer_name() {
    X509* cert = SSL_get1_peer_certificate(stream.native_handle());
    if (cert == nullptr) {
      return "";
    }
    char name[256] = {};
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, name, sizeof name);
    X509_free(cert);
    return name;
  }

  beast::error_code write(const std::string& bytes) {
    return bounded([&](auto done) { asio::async_write(stream, asio::buffer(bytes), done); });
  }

  /// Reads until the server ends its side, into `into`; eof means it sent close_notify.
  beast::error_code read_to_end(std::string& into) {
    return bounded([&](auto done) { asio::async_read(stream, asio::dynamic_buffer(into), done); });
  }

  http::response<http::string_body> get(const std::string& target) {
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, "a.test");
    if (bounded([&](auto done) { http::async_write(stream, req, done); })) {
      return {};
    }
    return read_response();
  }

  http::response<http::string_body> read_response() {
    http::response<http::string_body> res;
    bounded([&](auto done) { http::async_read(stream, buffer, res, done); });
    return res;
  }

  /// Sends close_notify without waiting for the server's; the socket stays open.
  void send_close_notify() {
    stream.async_shutdown([](beast::error_code) {});
    ioc.run_for(std::chrono::milliseconds(100));  // long enough to write it, not to hear back
  }
  /// close_notify, then the TCP close.
  void close_notify_and_close() {
    send_close_notify();
    beast::error_code ignored;
    stream.next_layer().close(ignored);
  }

 private:
  template <class Start>
  beast::error_code bounded(Start start) {
    return ratewall::testing::bounded(ioc, start, [this] {
      beast::error_code ignored;
      stream.next_layer().close(ignored);
    });
  }
};

}  // namespace

TEST_CASE("TLS: curl and Python's ssl are served; the upstream is told https") {
  test_pki pki;
  const auto cert = pki.issue("a.test", {"a.test"});
  test_upstream upstream;
  gateway_harness gw(tls_config(certificate_item(cert)), upstream.port());
  const std::uint64_t handshakes_before = handshakes_ok();

  const program_result by_curl = curl(pki, "a.test", gw.tls_port(), "/from-curl");
  CHECK(by_curl.exit_code == 0);
  CHECK(by_curl.output.find("\n200 1.1") != std::string::npos);

  // Python: verification against the test CA, ALPN, and a second connection that resumes the
  // first one's session (from its TLS 1.3 ticket).
  const std::string script =
      "import socket, ssl, sys\n"
      "ctx = ssl.create_default_context(cafile=sys.argv[1])\n"
      "ctx.set_alpn_protocols(['h2', 'http/1.1'])\n"
      "def get(session=None):\n"
      "    raw = socket.create_connection(('127.0.0.1', int(sys.argv[2])), timeout=10)\n"
      "    s = ctx.wrap_socket(raw, server_hostname='a.test', session=session)\n"
      "    s.sendall(b'GET /from-python HTTP/1.1\\r\\nHost: a.test\\r\\n"
      "Connection: close\\r\\n\\r\\n')\n"
      "    data = b''\n"
      "    while True:\n"
      "        chunk = s.recv(65536)\n"
      "        if not chunk: break\n"
      "        data += chunk\n"
      "    return s, data\n"
      "s, data = get()\n"
      "again, _ = get(s.session)\n"
      "print(data.split(b'\\r\\n')[0].decode(), s.version(), s.selected_alpn_protocol(),\n"
      "      'reused' if again.session_reused else 'not-reused')\n";
  const program_result by_python = run({"python3", pki.write_file("client.py", script),
                                        pki.ca_cert(), std::to_string(gw.tls_port())});
  CHECK(by_python.exit_code == 0);
  CHECK(by_python.output == "HTTP/1.1 200 OK TLSv1.3 http/1.1 reused\n");

  const auto requests = upstream.requests();
  REQUIRE(requests.size() == 3);
  for (const auto& r : requests) {
    CHECK(r.header("x-forwarded-proto") == "https");
  }
  // The plain listener is still there, and says http.
  http_client plain(gw.port());
  CHECK(plain.get("/plain").status == 200);
  CHECK(upstream.requests().back().header("x-forwarded-proto") == "http");
  // curl's and Python's three connections; the plain one is no handshake.
  CHECK(handshakes_ok() - handshakes_before == 3);
}

TEST_CASE("TLS: SNI picks the certificate; no name, or an unknown one, gets the first") {
  test_pki pki;
  const auto fallback = pki.issue("default.test", {"default.test"});
  const auto a = pki.issue("a.test", {"a.test"});
  const auto wild = pki.issue("wild-b", {"*.b.test"});
  test_upstream upstream;
  gateway_harness gw(
      tls_config(certificate_item(fallback) + certificate_item(a) + certificate_item(wild)),
      upstream.port());
  CHECK(subject_for(gw.tls_port(), "a.test") == "subject=CN = a.test");
  CHECK(subject_for(gw.tls_port(), "A.Test") == "subject=CN = a.test");
  CHECK(subject_for(gw.tls_port(), "x.b.test") == "subject=CN = wild-b");
  CHECK(subject_for(gw.tls_port(), "x.y.b.test") == "subject=CN = default.test");
  CHECK(subject_for(gw.tls_port(), "unknown.test") == "subject=CN = default.test");
  CHECK(subject_for(gw.tls_port(), "") == "subject=CN = default.test");
  // And the name verifies: curl checks the certificate it got against the name it asked for.
  CHECK(curl(pki, "x.b.test", gw.tls_port(), "/").output.find("\n200 1.1") != std::string::npos);
}

TEST_CASE("TLS: a reload changes the certificate for new handshakes; open connections go on") {
  test_pki pki;
  const auto before = pki.issue("before.a.test", {"a.test"});
  const auto after = pki.issue("after.a.test", {"a.test"});
  test_upstream upstream;
  gateway_harness gw(tls_config(certificate_item(before)), upstream.port());

  tls_client open(pki, gw.tls_port(), "a.test");
  REQUIRE_FALSE(open.handshake());
  CHECK(open.peer_name() == "before.a.test");
  CHECK(open.get("/1").result_int() == 200);

  gw.reload(tls_config(certificate_item(after)));
  tls_client fresh(pki, gw.tls_port(), "a.test");
  REQUIRE_FALSE(fresh.handshake());
  CHECK(fresh.peer_name() == "after.a.test");
  CHECK(fresh.get("/2").result_int() == 200);
  // The connection made before the reload keeps its session and is served on.
  CHECK(open.get("/3").result_int() == 200);
}

TEST_CASE(
    "TLS: a handshake is bounded by header_timeout; bytes that are not TLS are refused, plain HTTP "
    "told why") {
  test_pki pki;
  const auto cert = pki.issue("a.test", {"a.test"});
  test_upstream upstream;
  gateway_harness gw(tls_config(certificate_item(cert)), upstream.port());
  auto& metrics = ratewall::process_metrics();
  const std::string before = metrics.render();

  {
    http_client silent(gw.tls_port(), 5s);  // connects, then says nothing
    const auto start = std::chrono::steady_clock::now();
    CHECK(silent.closed_by_peer());
    const auto waited = std::chrono::steady_clock::now() - start;
    CHECK(waited >= k_header_timeout - 100ms);
    CHECK(waited < k_header_timeout + scaled(2600ms));
  }
  {
    // A plain HTTP request gets a plain answer that says what went wrong, then the close.
    http_client plain_http(gw.tls_port(), 5s);
    plain_http.send_raw("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n");
    const http_reply r = plain_http.read_reply();
    CHECK(r.status == 400);
    CHECK(r.body.find("plain HTTP request was sent to the TLS port") != std::string::npos);
    CHECK_FALSE(r.keep_alive);
    CHECK(plain_http.closed_by_peer());
  }
  {
    http_client garbage(gw.tls_port(), 5s);  // neither TLS nor HTTP: closed, nothing said
    garbage.send_raw(std::string(64, '\x01'));
    CHECK(garbage.read_some().find("HTTP/1.1") == std::string::npos);
  }
  CHECK(upstream.requests().empty());
  CHECK(metrics.render().find("ratewall_tls_handshakes_total{result=\"failed\"}") !=
        std::string::npos);
}

TEST_CASE("TLS: at max_connections, half-open handshakes make room, the oldest first") {
  test_pki pki;
  const auto cert = pki.issue("a.test", {"a.test"});
  test_upstream upstream;
  std::string cfg = replace_all(tls_config(certificate_item(cert)), "  threads: 2\n",
                                "  threads: 1\n  max_connections: 3\n");
  cfg = replace_all(cfg,
                    "header_timeout: " +
                        std::to_string(std::chrono::milliseconds(k_header_timeout).count()) + "ms",
                    "header_timeout: 30s");
  gateway_harness gw(cfg, upstream.port());
  // A ClientHello's record header that announces 255 bytes, and 4 of them: a handshake that
  // waits for the rest until header_timeout. Without room made, the new client is refused.
  const std::string partial_hello("\x16\x03\x01\x00\xff\x01\x00\x00", 8);
  std::vector<std::unique_ptr<http_client>> half_open;
  const auto open_half = [&] {
    half_open.push_back(std::make_unique<http_client>(gw.tls_port(), 500ms));
    half_open.back()->send_raw(partial_hello);
    std::this_thread::sleep_for(20ms);
  };
  open_half();
  open_half();
  // A client done with its handshake that has not sent its first byte yet keeps its place
  // over older half-open handshakes.
  tls_client client(pki, gw.tls_port(), "a.test");
  REQUIRE_FALSE(client.handshake());
  std::this_thread::sleep_for(100ms);
  open_half();
  CHECK(half_open[0]->closed_by_peer());
  CHECK(client.get("/").result_int() == 200);
  CHECK_FALSE(half_open[1]->closed_by_peer());
  CHECK_FALSE(half_open[2]->closed_by_peer());
}

TEST_CASE("TLS: min_version 1.3 refuses a TLS 1.2 client; ALPN without http/1.1 is refused") {
  test_pki pki;
  const auto cert = pki.issue("a.test", {"a.test"});
  test_upstream upstream;
  gateway_harness gw(tls_config(certificate_item(cert), "    min_version: \"1.3\"\n"),
                     upstream.port());
  CHECK(curl(pki, "a.test", gw.tls_port(), "/", {"--tls-max", "1.2"}).exit_code != 0);
  CHECK(curl(pki, "a.test", gw.tls_port(), "/", {"--tlsv1.3"}).output.find("\n200 1.1") !=
        std::string::npos);
  const program_result h2_only = run({"openssl", "s_client", "-connect",
                                      "127.0.0.1:" + std::to_string(gw.tls_port()), "-alpn", "h2"});
  CHECK(h2_only.output.find("no application protocol") != std::string::npos);
  const program_result both =
      run({"openssl", "s_client", "-connect", "127.0.0.1:" + std::to_string(gw.tls_port()), "-alpn",
           "h2,http/1.1"});
  CHECK(both.output.find("ALPN protocol: http/1.1") != std::string::npos);
  CHECK(upstream.requests().size() == 1);
}

TEST_CASE("TLS: WebSocket over TLS (wss) is spliced like any tunnel") {
  test_pki pki;
  const auto cert = pki.issue("a.test", {"a.test"});
  websocket_upstream upstream;
  gateway_harness gw(tls_config(certificate_item(cert)), upstream.port());
  tls_client client(pki, gw.tls_port(), "a.test");
  REQUIRE_FALSE(client.handshake());
  websocket::stream<ssl::stream<tcp::socket>&> ws(client.stream);
  // Synchronous calls: the gateway and the upstream are local and answer at once; a failure
  // here fails the test on the gateway's own timeouts (tunnel_idle_timeout at the latest).
  beast::error_code ec;
  ws.handshake("a.test", "/wss", ec);
  REQUIRE_FALSE(ec);
  ws.text(true);
  const std::string message(100 * 1024, 'w');
  ws.write(asio::buffer(message), ec);
  REQUIRE_FALSE(ec);
  beast::flat_buffer in;
  ws.read(in, ec);
  REQUIRE_FALSE(ec);
  CHECK(beast::buffers_to_string(in.data()) == message);
  ws.close(websocket::close_code::normal, ec);
  CHECK_FALSE(ec);
}

TEST_CASE("TLS: an upstream's half close reaches the client; the client's later bytes still pass") {
  // The upstream ends its side right after 101; the gateway passes that on as close_notify
  // (and a FIN), and must go on reading the client, whose last bytes the upstream waits for.
  std::promise<std::string> heard;
  raw_upstream upstream([&](raw_upstream::connection& conn) {
    if (!conn.read_head().ok) {
      return;
    }
    conn.write(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: test-proto\r\n\r\n"
        "from upstream");
    conn.shutdown_send();
    heard.set_value(conn.read_until("from client") ? "from client" : "(nothing)");
  });
  test_pki pki;
  const auto cert = pki.issue("a.test", {"a.test"});
  gateway_harness gw(tls_config(certificate_item(cert)), upstream.port());
  tls_client client(pki, gw.tls_port(), "a.test");
  REQUIRE_FALSE(client.handshake());
  REQUIRE_FALSE(client.write(
      "GET /raw HTTP/1.1\r\nHost: a.test\r\nConnection: upgrade\r\nUpgrade: test-proto\r\n\r\n"));
  std::string received;
  CHECK(client.read_to_end(received) == asio::error::eof);  // close_notify, not a cut
  CHECK(received.starts_with("HTTP/1.1 101"));
  CHECK(received.ends_with("\r\n\r\nfrom upstream"));
  REQUIRE_FALSE(client.write("from client"));
  auto result = heard.get_future();
  REQUIRE(result.wait_for(10s) == std::future_status::ready);
  CHECK(result.get() == "from client");
}

TEST_CASE("TLS: SIGHUP reloads certificate files replaced in place; a bad one keeps the old") {
  REQUIRE(have_program("curl"));
  test_pki pki;
  const auto first = pki.issue("first.a.test", {"a.test"});
  const auto second = pki.issue("second.a.test", {"a.test"});
  test_upstream upstream;
  const std::string dir = pki.dir();
  std::filesystem::copy_file(first.cert, dir + "/live.pem");
  std::filesystem::copy_file(first.key, dir + "/live.key");
  const std::string config_path = dir + "/ratewall.yaml";
  std::ofstream(config_path) << R"(
server:
  listen: off
  threads: 1
  tls:
    listen: 127.0.0.1:0
    certificates: [{ cert: live.pem, key: live.key }]
admin: { enabled: false }
identity: { unknown_api_key: allow }
upstreams:
  api: { targets: [127.0.0.1:)"
                             << upstream.port() << R"(] }
routes:
  - name: all
    match: { path_prefix: / }
    upstream: api
)";
  child_process gw({RATEWALL_BINARY, "--config", config_path}, {"RATEWALL_HASH_KEY=tls-test"});
  REQUIRE(gw.wait_for_output("(TLS only)", 10s));
  const std::uint16_t port = listening_port(gw.output());
  REQUIRE(port != 0);
  auto served_by = [&] {
    const program_result r = curl(pki, "a.test", port, "/", {"-v"});
    const auto at = r.output.find("subject: CN=");
    return at == std::string::npos ? std::string("(none)")
                                   : r.output.substr(at + 12, r.output.find('\n', at) - at - 12);
  };
  CHECK(served_by() == "first.a.test");

  // Renewal: new files at the same paths (relative to the config file), then SIGHUP.
  std::filesystem::copy_file(second.cert, dir + "/live.pem",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(second.key, dir + "/live.key",
                             std::filesystem::copy_options::overwrite_existing);
  gw.signal(SIGHUP);
  CHECK(eventually([&] { return served_by() == "second.a.test"; }));

  // A key that does not match: the reload is refused, naming the file; the old certificate stays.
  std::filesystem::copy_file(first.key, dir + "/live.key",
                             std::filesystem::copy_options::overwrite_existing);
  gw.signal(SIGHUP);
  CHECK(gw.wait_for_output("reload refused", 5s));
  CHECK(gw.output().find("live.key") != std::string::npos);
  CHECK(served_by() == "second.a.test");
  gw.signal(SIGTERM);
  CHECK(gw.wait_exit(10s) == 0);
}

TEST_CASE("TLS: a file that drops server.tls reloads without its certificate files") {
  // The listener serves on until the restart, as the warning says. Its files were loaded again
  // from the running settings on each reload: once the operator had moved them away, every
  // reload, whatever else it changed, was refused until the restart.
  REQUIRE(have_program("curl"));
  test_pki pki;
  const auto cert = pki.issue("a.test", {"a.test"});
  test_upstream upstream;
  const std::string dir = pki.dir();
  std::filesystem::copy_file(cert.cert, dir + "/live.pem");
  std::filesystem::copy_file(cert.key, dir + "/live.key");
  const std::string rest = R"(admin: { enabled: false }
identity: { unknown_api_key: allow }
upstreams:
  api: { targets: [127.0.0.1:)" +
                           std::to_string(upstream.port()) +
                           R"(] }
routes:
  - name: all
    match: { path_prefix: / }
    upstream: api
    limits: [{ name: per-client, rate: 2/m }]
)";
  const std::string config_path = dir + "/ratewall.yaml";
  std::ofstream(config_path) << "server:\n  listen: off\n  threads: 1\n  tls:\n"
                                "    listen: 127.0.0.1:0\n"
                                "    certificates: [{ cert: live.pem, key: live.key }]\n"
                             << rest;
  child_process gw({RATEWALL_BINARY, "--config", config_path}, {"RATEWALL_HASH_KEY=tls-test"});
  REQUIRE(gw.wait_for_output("(TLS only)", 10s));
  const std::uint16_t port = listening_port(gw.output());
  REQUIRE(port != 0);
  const auto status = [&] {
    const program_result r = curl(pki, "a.test", port, "/");
    return r.output.substr(r.output.rfind('\n') + 1);
  };
  CHECK(status().starts_with("200 "));

  // The block removed, its files moved away, and a limit changed: the reload takes the limit.
  std::filesystem::remove(dir + "/live.pem");
  std::filesystem::remove(dir + "/live.key");
  std::string next = rest;
  next.replace(next.find("rate: 2/m"), 9, "rate: 9/m");
  // HTTP/2 switched on as well: the listener's ALPN offer is made with its certificates, so
  // that waits for the restart too (loading them again was refused, naming the old file's line).
  std::ofstream(config_path, std::ios::trunc)
      << "server:\n  listen: 127.0.0.1:0\n  threads: 1\n  http2: { enabled: true }\n"
      << next;
  gw.signal(SIGHUP);
  CHECK(gw.wait_for_output("reloaded", scaled(5s)));
  CHECK(gw.output().find("reload refused") == std::string::npos);
  CHECK(gw.output().find("server.http2.enabled takes effect on restart") != std::string::npos);
  CHECK(curl(pki, "a.test", port, "/", {"--http2"}).output.ends_with(" 1.1"));
  // Served over TLS as before, under the new limit: the old one (2/m) had one request left.
  for (int i = 0; i < 4; ++i) {
    CHECK(status().starts_with("200 "));
  }
  gw.signal(SIGTERM);
  CHECK(gw.wait_exit(10s) == 0);
}

TEST_CASE("TLS: with server.http2 on, ALPN picks h2 and the request is served over HTTP/2") {
  test_pki pki;
  const auto cert = pki.issue("a.test", {"a.test"});
  test_upstream upstream;
  gateway_harness gw(replace_all(tls_config(certificate_item(cert)), "  tls:\n",
                                 "  http2: { enabled: true }\n  tls:\n"),
                     upstream.port());
  const program_result h2 = curl(pki, "a.test", gw.tls_port(), "/over-h2", {"--http2"});
  CHECK(h2.output.find("\n200 2") != std::string::npos);
  const program_result h1 = curl(pki, "a.test", gw.tls_port(), "/over-h1", {"--http1.1"});
  CHECK(h1.output.find("\n200 1.1") != std::string::npos);
  const program_result h2_only = run({"openssl", "s_client", "-connect",
                                      "127.0.0.1:" + std::to_string(gw.tls_port()), "-alpn", "h2"});
  CHECK(h2_only.output.find("ALPN protocol: h2") != std::string::npos);
  // A client that picked h2 and then speaks HTTP/1.1 is told so in a GOAWAY (PROTOCOL_ERROR,
  // last stream 0) before the close: nghttp2 cannot go on, so the gateway makes the frame.
  const std::string script =
      "import socket, ssl, sys\n"
      "ctx = ssl.create_default_context(cafile=sys.argv[1])\n"
      "ctx.set_alpn_protocols(['h2'])\n"
      "raw = socket.create_connection(('127.0.0.1', int(sys.argv[2])), timeout=10)\n"
      "s = ctx.wrap_socket(raw, server_hostname='a.test')\n"
      "s.sendall(b'GET /not-h2 HTTP/1.1\\r\\nHost: a.test\\r\\n\\r\\n')\n"
      "data = b''\n"
      "while True:\n"
      "    chunk = s.recv(65536)\n"
      "    if not chunk: break\n"
      "    data += chunk\n"
      "print(data[-17:].hex())\n";
  const program_result not_h2 = run({"python3", pki.write_file("not_h2.py", script), pki.ca_cert(),
                                     std::to_string(gw.tls_port())});
  CHECK(not_h2.exit_code == 0);
  CHECK(not_h2.output == "0000080700000000000000000000000001\n");
  REQUIRE(upstream.requests().size() == 2);
  CHECK(upstream.requests()[0].target == "/over-h2");
  CHECK(upstream.requests()[0].header("x-forwarded-proto") == "https");
}

TEST_CASE(
    "TLS: while a request waits its turn, a close_notify is a hang-up and a next request is "
    "kept") {
  test_pki pki;
  const auto cert = pki.issue("a.test", {"a.test"});
  test_upstream upstream;
  // 300/m (5/s) times the scale, burst 2: after the first, a request waits 0.2 s, the next 0.4 s
  // (times the scale). Every step below, and each handshake, must fit inside the first turn.
  const std::string rate = std::to_string(300 / time_scale()) + "/m";
  gateway_harness gw(replace_all(tls_config(certificate_item(cert)), "routes:\n", R"(routes:
  - name: delayed
    match: { path_prefix: /delayed }
    upstream: api
    limits: [{ name: l, algorithm: leaky_bucket, rate: )" + rate + R"(, burst: 2, delay: true }]
)"),
                     upstream.port());
  tls_client first(pki, gw.tls_port(), "a.test");
  REQUIRE_FALSE(first.handshake());
  tls_client client(pki, gw.tls_port(), "a.test");
  REQUIRE_FALSE(client.handshake());
  CHECK(first.get("/delayed/first").result_int() == 200);
  REQUIRE_FALSE(client.write("GET /delayed/one HTTP/1.1\r\nHost: a.test\r\n\r\n"));
  std::this_thread::sleep_for(scaled(30ms));

  SUBCASE("close_notify, then the TCP close: not forwarded") {
    client.close_notify_and_close();
    std::this_thread::sleep_for(scaled(600ms));
    CHECK(upstream.count("GET", "/delayed/one") == 0);
  }
  SUBCASE("the next request, sent while the first waits: both served, in order") {
    REQUIRE_FALSE(client.write("GET /delayed/two HTTP/1.1\r\nHost: a.test\r\n\r\n"));
    CHECK(client.read_response().result_int() == 200);
    CHECK(client.read_response().result_int() == 200);
    REQUIRE(upstream.requests().size() == 3);
    CHECK(upstream.requests()[1].target == "/delayed/one");
    CHECK(upstream.requests()[2].target == "/delayed/two");
  }
  SUBCASE("the next request, then close_notify: neither is forwarded") {
    REQUIRE_FALSE(client.write("GET /delayed/two HTTP/1.1\r\nHost: a.test\r\n\r\n"));
    std::this_thread::sleep_for(scaled(20ms));
    client.close_notify_and_close();
    std::this_thread::sleep_for(scaled(700ms));
    CHECK(upstream.count("GET", "/delayed/") == 1);  // the first client's only
  }
  SUBCASE("the next request, then close_notify, the socket left open: neither is forwarded") {
    REQUIRE_FALSE(client.write("GET /delayed/two HTTP/1.1\r\nHost: a.test\r\n\r\n"));
    std::this_thread::sleep_for(scaled(20ms));
    client.send_close_notify();
    std::this_thread::sleep_for(scaled(700ms));
    CHECK(upstream.count("GET", "/delayed/") == 1);
  }
}
