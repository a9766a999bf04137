// HTTPS upstreams (DESIGN §7): https:// targets behind the gateway, a real TLS server (Python's
// ssl module) with certificates from a test CA made for each test. Verification is on by default
// (chain and name); failures are 502 (504 for a handshake that does not finish in time) and a log
// line saying why; connections are pooled and reused.

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>

#include "support/child_process.hpp"
#include "support/gateway_harness.hpp"
#include "support/http_client.hpp"
#include "support/raw_upstream.hpp"
#include "support/redis_server.hpp"
#include "support/test_pki.hpp"
#include "support/time_scale.hpp"

using namespace ratewall::testing;
using namespace std::chrono_literals;

namespace {

// The upstream's connect_timeout (the handshake's bound), times the sanitizer stage's slowdown.
const auto k_connect_timeout = scaled(500ms);

/// A TLS server on 127.0.0.1: a Python script, given the certificate and key (and `more`
/// arguments), that prints "port N" once it listens.
class python_tls_upstream {
 public:
  python_tls_upstream(const test_pki& pki, const char* file, const std::string& script,
                      const test_pki::issued& cert, const std::string& more = "")
      : process_({"python3", pki.write_file(file, script), cert.cert, cert.key, more}) {
    REQUIRE(process_.wait_for_output("port ", 10s));
    const std::string out = process_.output();
    port_ = static_cast<std::uint16_t>(std::stoi(out.substr(out.find("port ") + 5)));
  }
  std::uint16_t port() const { return port_; }

 private:
  child_process process_;
  std::uint16_t port_ = 0;
};

/// The end of a script that defines serve(sock, n): accepts connections on 127.0.0.1 and serves
/// each (the n-th) on a thread of its own.
constexpr const char* k_serve_each_connection = R"(
listener = socket.socket()
listener.bind(('127.0.0.1', 0))
listener.listen(16)
print('port %d' % listener.getsockname()[1], flush=True)
n = 0
while True:
    conn, _ = listener.accept()
    n += 1
    threading.Thread(target=serve, args=(conn, n), daemon=True).start()
)";

/// An HTTPS server on 127.0.0.1 (Python's http.server and ssl), answering every GET with the
/// client port of its connection (so reuse shows) and the CN of the client certificate, if any.
/// With `client_ca`, a client certificate from that CA is required.
class https_upstream : public python_tls_upstream {
 public:
  https_upstream(const test_pki& pki, const test_pki::issued& cert,
                 const std::string& client_ca = "")
      : python_tls_upstream(pki, "https_upstream.py", k_script, cert, client_ca) {}

 private:
  static constexpr const char* k_script = R"(import http.server, ssl, sys
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def do_GET(self):
        peer = self.connection.getpeercert() or {}
        cn = dict(x[0] for x in peer.get('subject', ())).get('commonName', '-')
        body = ('%d %s' % (self.client_address[1], cn)).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
if sys.argv[3]:
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(sys.argv[3])
server.socket = ctx.wrap_socket(server.socket, server_side=True)
print('port %d' % server.server_address[1], flush=True)
server.serve_forever()
)";
};

/// A gateway config with one https upstream: `target` (host:port) and its `tls` settings.
std::string config_for(const std::string& target, const std::string& tls) {
  return R"(
server: { threads: 1 }
identity: { unknown_api_key: allow }
upstreams:
  api:
    targets: [https://)" +
         target + R"(]
    connect_timeout: )" +
         std::to_string(std::chrono::milliseconds(k_connect_timeout).count()) + R"(ms
)" + (tls.empty() ? "" : "    tls: " + tls + "\n") +
         R"(
routes:
  - name: all
    match: { path_prefix: / }
    upstream: api
)";
}

std::string port_of(const https_upstream& u) {
  return std::to_string(u.port());
}

}  // namespace

TEST_CASE("HTTPS upstream verified against a test CA: 200, and the connection is reused") {
  REQUIRE(have_program("python3"));
  test_pki pki;
  https_upstream upstream(pki, pki.issue("upstream", {"api.internal"}, {"127.0.0.1"}));

  SUBCASE("by its IP address") {
    gateway_harness gw(
        config_for("127.0.0.1:" + port_of(upstream), "{ ca_file: \"" + pki.ca_cert() + "\" }"), 0);
    http_client client(gw.port());
    const http_reply first = client.get("/a");
    CHECK(first.status == 200);
    const http_reply second = client.get("/b");
    CHECK(second.status == 200);
    // Same upstream connection (the client port the upstream saw): the TLS connection was pooled.
    CHECK(first.body == second.body);
  }
  SUBCASE("by server_name") {
    gateway_harness gw(
        config_for("127.0.0.1:" + port_of(upstream),
                   "{ ca_file: \"" + pki.ca_cert() + "\", server_name: api.internal }"),
        0);
    http_client client(gw.port());
    CHECK(client.get("/a").status == 200);
  }
}

TEST_CASE("HTTPS upstream: a wrong CA or a wrong name is a 502; verify: false accepts either") {
  REQUIRE(have_program("python3"));
  test_pki pki;
  test_pki other;
  https_upstream upstream(pki, pki.issue("upstream", {"api.internal"}, {"127.0.0.1"}));
  const std::string target = "127.0.0.1:" + port_of(upstream);
  {
    gateway_harness gw(config_for(target, "{ ca_file: \"" + other.ca_cert() + "\" }"), 0);
    http_client client(gw.port());
    CHECK(client.get("/").status == 502);
  }
  {
    gateway_harness gw(
        config_for(target, "{ ca_file: \"" + pki.ca_cert() + "\", server_name: somewhere.else }"),
        0);
    http_client client(gw.port());
    CHECK(client.get("/").status == 502);
  }
  {
    gateway_harness gw(config_for(target, "{ verify: false }"), 0);
    http_client client(gw.port());
    CHECK(client.get("/").status == 200);
  }
  {
    // No ca_file: the system's CAs, which do not know the test CA.
    gateway_harness gw(config_for(target, ""), 0);
    http_client client(gw.port());
    CHECK(client.get("/").status == 502);
  }
}

TEST_CASE("HTTPS upstream: the client certificate is presented when the upstream asks") {
  REQUIRE(have_program("python3"));
  test_pki pki;
  https_upstream upstream(pki, pki.issue("upstream", {}, {"127.0.0.1"}), pki.ca_cert());
  const std::string target = "127.0.0.1:" + port_of(upstream);
  const auto client_cert = pki.issue("ratewall-client", {"ratewall.internal"});
  {
    gateway_harness gw(
        config_for(target, "{ ca_file: \"" + pki.ca_cert() + "\", client_cert: \"" +
                               client_cert.cert + "\", client_key: \"" + client_cert.key + "\" }"),
        0);
    http_client client(gw.port());
    const http_reply reply = client.get("/");
    CHECK(reply.status == 200);
    CHECK(reply.body.find(" ratewall-client") != std::string::npos);
  }
  {
    gateway_harness gw(config_for(target, "{ ca_file: \"" + pki.ca_cert() + "\" }"), 0);
    http_client client(gw.port());
    CHECK(client.get("/").status == 502);
  }
}

TEST_CASE("HTTPS upstream: a handshake that does not finish within connect_timeout is a 504") {
  test_pki pki;
  // Accepts, then says nothing, for longer than the gateway waits.
  const auto hold = std::chrono::duration_cast<std::chrono::milliseconds>(k_connect_timeout * 6);
  raw_upstream silent([hold](raw_upstream::connection& c) { c.read_until("never", hold); });
  gateway_harness gw(config_for("127.0.0.1:" + std::to_string(silent.port()),
                                "{ ca_file: \"" + pki.ca_cert() + "\" }"),
                     0);
  http_client client(gw.port(), 10s);
  const auto start = std::chrono::steady_clock::now();
  CHECK(client.get("/").status == 504);
  CHECK(std::chrono::steady_clock::now() - start < k_connect_timeout * 5);
}

TEST_CASE("HTTPS upstream: the log says why a handshake failed") {
  REQUIRE(have_program("python3"));
  test_pki pki;
  test_pki other;
  https_upstream upstream(pki, pki.issue("upstream", {}, {"127.0.0.1"}));
  const std::string config_path = other.write_file(
      "ratewall.yaml",
      "server: { listen: 127.0.0.1:0, threads: 1 }\nadmin: { enabled: false }\n" +
          config_for("127.0.0.1:" + port_of(upstream), "{ ca_file: \"" + other.ca_cert() + "\" }")
              .substr(std::string("\nserver: { threads: 1 }\n").size()));
  child_process gw({RATEWALL_BINARY, "--config", config_path}, {"RATEWALL_HASH_KEY=https-test"});
  REQUIRE(gw.wait_for_output("listening on", 10s));
  http_client client(listening_port(gw.output()));
  CHECK(client.get("/").status == 502);
  CHECK(gw.wait_for_output("certificate verify failed", 5s));
  CHECK(gw.output().find("upstream api (127.0.0.1:" + port_of(upstream) + ")") !=
        std::string::npos);
}

namespace {

/// An HTTPS upstream that answers each connection's first request with "conn N" and, in the same
/// TCP write, a second whole response no request asked for ("stale"). It runs TLS over memory
/// buffers (Python's SSLObject) so both records leave in one send: the gateway's TLS layer then
/// holds the second record after the first response is read, where the socket shows nothing.
class stale_record_upstream : public python_tls_upstream {
 public:
  stale_record_upstream(const test_pki& pki, const test_pki::issued& cert)
      : python_tls_upstream(pki, "stale_record_upstream.py",
                            std::string(k_script) + k_serve_each_connection, cert) {}

 private:
  static constexpr const char* k_script = R"(import socket, ssl, sys, threading
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
def response(body):
    return b'HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s' % (len(body), body)
def serve(sock, n):
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_side=True)
    def flush():
        data = outgoing.read()
        if data:
            sock.sendall(data)
    def receive():
        data = sock.recv(65536)
        if not data:
            raise EOFError()
        incoming.write(data)
    try:
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                flush()
                receive()
        flush()
        request = b''
        while b'\r\n\r\n' not in request:
            try:
                request += tls.read(65536)
            except ssl.SSLWantReadError:
                flush()
                receive()
        tls.write(response(b'conn %d' % n))
        tls.write(response(b'stale'))
        flush()
        while True:
            receive()
    except (EOFError, OSError, ssl.SSLError):
        pass
    sock.close()
)";
};

/// An HTTPS upstream that answers a request 413 as soon as its head is in and then reads
/// nothing more and closes nothing for 30 s, as an application that refuses an upload early
/// may. Its TLS 1.3 session tickets come before: records with no text in them.
class early_refusal_upstream : public python_tls_upstream {
 public:
  early_refusal_upstream(const test_pki& pki, const test_pki::issued& cert)
      : python_tls_upstream(pki, "early_refusal_upstream.py",
                            std::string(k_script) + k_serve_each_connection, cert) {}

 private:
  static constexpr const char* k_script = R"(import socket, ssl, sys, threading, time
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
def serve(sock, n):
    try:
        tls = ctx.wrap_socket(sock, server_side=True)
        head = b''
        while b'\r\n\r\n' not in head:
            data = tls.recv(65536)
            if not data:
                return
            head += data
        tls.sendall(b'HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\n\r\ntoo big\n')
        time.sleep(30)
    except (OSError, ssl.SSLError):
        pass
    sock.close()
)";
};

}  // namespace

TEST_CASE("HTTPS upstream: a record no request asked for is never read as the next answer") {
  REQUIRE(have_program("python3"));
  test_pki pki;
  stale_record_upstream upstream(pki, pki.issue("upstream", {}, {"127.0.0.1"}));
  gateway_harness gw(config_for("127.0.0.1:" + std::to_string(upstream.port()),
                                "{ ca_file: \"" + pki.ca_cert() + "\" }"),
                     0);
  http_client client(gw.port());
  const http_reply first = client.get("/a");
  CHECK(first.status == 200);
  CHECK(first.body == "conn 1");
  // The first connection carried bytes after its response: it is closed, not pooled, and the
  // second request goes out on a new one.
  const http_reply second = client.get("/b");
  CHECK(second.status == 200);
  CHECK(second.body == "conn 2");
}

TEST_CASE("HTTPS upstream: an answer before the upload is read ends the upload, not a timeout") {
  // The upstream neither reads nor closes: only seeing its answer through TLS ends the
  // gateway's write, well before read_timeout (20 s), which bounds it otherwise with a 504.
  // The client gives up after 8 s at most (its 4 s for the upload, 4 s for the answer).
  REQUIRE(have_program("python3"));
  test_pki pki;
  early_refusal_upstream upstream(pki, pki.issue("upstream", {}, {"127.0.0.1"}));
  gateway_harness gw(
      replace_all(config_for("127.0.0.1:" + std::to_string(upstream.port()),
                             "{ ca_file: \"" + pki.ca_cert() + "\" }\n    read_timeout: 20s"),
                  "server: { threads: 1 }", "server: { threads: 1, max_body_bytes: 64MiB }"),
      0);
  http_client client(gw.port(), 4s);
  const std::size_t size = 16 * 1024 * 1024;
  client.send_raw("POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(size) +
                  "\r\n\r\n");
  client.send_raw(std::string(size, 'b'));
  const http_reply r = client.read_reply();
  CHECK(r.status == 413);
  CHECK(r.body == "too big\n");
  CHECK_FALSE(r.keep_alive);
}
